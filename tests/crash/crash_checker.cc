#include "crash_checker.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string_view>

#include "common/units.h"
#include "test_util.h"

namespace mapfs::crash {

CrashChecker::CrashChecker(const CrashRecorder& rec, const std::vector<FsState>& states, std::vector<bool> durable,
                           DataPromise promise, Budget budget, fs::FsOptions mount_options)
    : rec_(rec),
      states_(states),
      durable_(std::move(durable)),
      promise_(promise),
      budget_(budget),
      mount_options_(mount_options),
      image_(rec.base()) {
  static std::atomic<int> counter{0};
  path_ = "/dev/shm/mapfs-crash-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".pool";
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd >= 0 && ::ftruncate(fd, static_cast<off_t>(image_.size())) == 0) {
    void* m = ::mmap(nullptr, image_.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) file_ = static_cast<char*>(m);
  }
  if (fd >= 0) ::close(fd);
}

CrashChecker::~CrashChecker() {
  if (file_ != nullptr) ::munmap(file_, image_.size());
  ::unlink(path_.c_str());
}

uint64_t CrashChecker::LineHash(uint64_t line, const char* bytes) const {
  if (std::memcmp(bytes, rec_.base().data() + line * kLine, kLine) == 0) return 0;  // as in the base
  uint64_t h = std::hash<std::string_view>{}(std::string_view(bytes, kLine));
  return h ^ (line * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
}

void CrashChecker::Subsets(size_t m, uint64_t point, std::vector<std::vector<bool>>* out) {
  out->clear();
  if (m <= static_cast<size_t>(budget_.all_subsets_upto)) {
    for (uint64_t mask = 0; mask < (1ull << m); mask++) {
      std::vector<bool> s(m);
      for (size_t i = 0; i < m; i++) s[i] = (mask >> i) & 1;
      out->push_back(std::move(s));
    }
    return;
  }
  out->push_back(std::vector<bool>(m, false));  // nothing in flight arrived
  out->push_back(std::vector<bool>(m, true));   // everything arrived
  // Seeded by position only (never by the bytes, which hold timestamps):
  // a run is repeatable with the same seed.
  testing::Rng rng(budget_.seed * 1000003 + point * 7919 + m * 104729);
  for (int k = 0; k < budget_.samples; k++) {
    std::vector<bool> s(m);
    switch (k % 3) {
      case 0:  // all but one
        s.assign(m, true);
        s[rng.Below(m)] = false;
        break;
      case 1:  // only one
        s[rng.Below(m)] = true;
        break;
      default:  // each line with probability 1/2
        for (size_t i = 0; i < m; i++) s[i] = rng.Next() & 1;
    }
    out->push_back(std::move(s));
  }
}

std::vector<std::string> CrashChecker::Run(CheckCounts* counts) {
  std::vector<std::string> violations;
  const int last_op = static_cast<int>(states_.size()) - 1;
  std::vector<std::vector<bool>> subsets;
  for (const CrashPoint& p : rec_.points()) {
    counts->points++;
    Subsets(p.in_flight.size(), counts->points, &subsets);
    for (const auto& subset : subsets) {
      counts->images++;
      uint64_t key = key_;
      for (size_t i = 0; i < subset.size(); i++) {
        if (!subset[i]) continue;
        const LineValue& v = p.in_flight[i];
        key ^= LineHash(v.line, image_.data() + v.line * kLine) ^ LineHash(v.line, v.bytes.data());
      }
      if (!seen_.insert(key).second) continue;
      counts->judged++;
      std::string saved;
      for (size_t i = 0; i < subset.size(); i++) {
        if (!subset[i]) continue;
        const LineValue& v = p.in_flight[i];
        saved.append(image_.data() + v.line * kLine, kLine);
        std::memcpy(image_.data() + v.line * kLine, v.bytes.data(), kLine);
      }
      std::string why = JudgeImage(p);
      // Back to the durable state (restored in reverse order of application).
      size_t k = saved.size();
      for (size_t i = subset.size(); i-- > 0;) {
        if (!subset[i]) continue;
        k -= kLine;
        std::memcpy(image_.data() + p.in_flight[i].line * kLine, saved.data() + k, kLine);
      }
      if (why.empty()) continue;
      counts->violations++;
      if (violations.size() < 5) {
        std::string lines;
        for (size_t i = 0; i < subset.size() && i < 16; i++)
          lines += (subset[i] ? " +" : " -") + std::to_string(p.in_flight[i].line * kLine);
        if (subset.size() > 16) lines += " ... (" + std::to_string(subset.size() - 16) + " more)";
        violations.push_back("crash during op " + std::to_string(p.op) + " (of " + std::to_string(last_op) +
                             "), in-flight lines (+ arrived, - lost, pool offsets):" + lines + "\n  " + why);
      }
    }
    for (const LineValue& v : p.durable) {
      key_ ^= LineHash(v.line, image_.data() + v.line * kLine) ^ LineHash(v.line, v.bytes.data());
      std::memcpy(image_.data() + v.line * kLine, v.bytes.data(), kLine);
    }
  }
  return violations;
}

std::string CrashChecker::JudgeImage(const CrashPoint& p) {
  if (file_ == nullptr) return "cannot map the image file " + path_;
  // Only the pages the last mount changed (or the image moved) are copied:
  // most of a pool is the same from one image to the next.
  for (uint64_t off = 0; off < image_.size(); off += kPageSize)
    if (std::memcmp(file_ + off, image_.data() + off, kPageSize) != 0)
      std::memcpy(file_ + off, image_.data() + off, kPageSize);

  auto mounted = fs::FileSystem::Mount(path_, mount_options_);
  if (!mounted.ok()) return "mount after the crash failed: " + mounted.status().ToString();
  fs::FileSystem& fs = **mounted;
  std::string why;
  auto fail = [&](const std::string& w) {
    if (why.empty()) why = w;
  };
  if (Status s = fs.mount().vm().Check(true); !s.ok()) fail("fsck page table: " + s.ToString());
  if (Status s = fs.mount().space().Check(); !s.ok()) fail("fsck partitions: " + s.ToString());
  fs::FsCheckReport r = fs.Check();
  if (!r.problems.empty()) fail("fsck file system: " + r.problems[0]);

  if (why.empty()) {
    auto got = Capture(fs);
    if (!got.ok()) {
      fail("reading the tree failed: " + got.status().ToString());
    } else {
      std::vector<const FsState*> allowed, data_allowed;
      const int last = static_cast<int>(states_.size()) - 1;
      const int now = std::min(p.op, last);
      if (p.op >= 1 && p.op <= last) allowed.push_back(&states_[p.op - 1]);
      allowed.push_back(&states_[now]);
      // Data may be as old as the last state whose data was durable.
      int from = p.op <= last ? p.op - 1 : last;
      while (from > 0 && !durable_[from]) from--;
      for (int i = from; i <= now; i++) data_allowed.push_back(&states_[i]);
      std::string j = Judge(*got, allowed, data_allowed, promise_);
      if (!j.empty()) fail(j + "\n  found:\n" + Summary(*got));
    }
  }
  if (why.empty()) {
    // Still a working file system.
    std::string data(10000, 'u');
    auto probe = [&]() -> Status {
      MAPFS_RETURN_IF_ERROR(fs.Mkdir("/.probe", 0755));
      auto f = fs.Open("/.probe/f", O_RDWR | O_CREAT | O_EXCL, 0644);
      if (!f.ok()) return f.status();
      auto w = fs.Write(**f, data.data(), data.size(), 0);
      std::string back(data.size(), 0);
      auto rd = w.ok() ? fs.Read(**f, back.data(), back.size(), 0) : w;
      MAPFS_RETURN_IF_ERROR(fs.Close(**f));
      if (!rd.ok()) return rd.status();
      if (back != data) return Status::Error(EIO, "read back differs");
      MAPFS_RETURN_IF_ERROR(fs.Rename("/.probe/f", "/.probe/g"));
      MAPFS_RETURN_IF_ERROR(fs.Unlink("/.probe/g"));
      return fs.Rmdir("/.probe");
    };
    if (Status s = probe(); !s.ok()) fail("not usable after recovery: " + s.ToString());
  }
  if (Status s = fs.Unmount(); !s.ok()) fail("unmount after recovery failed: " + s.ToString());
  return why;
}

}  // namespace mapfs::crash
