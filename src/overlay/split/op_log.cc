#include "overlay/split/op_log.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstring>
#include <random>

#include "common/crc32c.h"
#include "medium/persist.h"

namespace mapfs::overlay::split {

const char* ToString(RelinkMethod m) {
  switch (m) {
    case RelinkMethod::kCopy: return "copy";
    case RelinkMethod::kMoveExtents: return "ext4-move-extents";
    case RelinkMethod::kClone: return "reflink";
  }
  return "?";
}

OpLog::~OpLog() {
  if (map_ != nullptr) munmap(map_, kLogBytes);
  if (fd_ >= 0) close(fd_);  // drops the flock: the log is a dead one from now on
}

Status OpLog::Create(int dir_fd) {
  std::random_device rd;
  // Another process starting at the same moment may run its recovery
  // between our create and our lock: it finds the new log unlocked and
  // empty, takes it for a dead one and removes it (our flock then fails,
  // or succeeds on the removed file). A new name then, a few times.
  for (int tries = 0;; tries++) {
    char name[64];
    snprintf(name, sizeof name, "%d-%08x", static_cast<int>(getpid()), static_cast<unsigned>(rd()));
    tag_ = name;
    std::string file = "log-" + tag_;
    fd_ = openat(dir_fd, file.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd_ < 0) return Status::FromErrno("overlay log " + file);
    // Locked before it has any content: recovery never takes a log it
    // finds locked, or one with content, for a new one.
    struct stat sb{};
    if (flock(fd_, LOCK_EX | LOCK_NB) == 0 && fstat(fd_, &sb) == 0 && sb.st_nlink > 0) break;
    int err = errno;
    close(fd_);
    fd_ = -1;
    if (tries == 7) return Status::Error(err ? err : EAGAIN, "overlay log lock");
  }
  if (ftruncate(fd_, static_cast<off_t>(kLogBytes)) != 0) return Status::FromErrno("overlay log size");
  void* p = mmap(nullptr, kLogBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno("overlay log map");
  map_ = static_cast<LogEntry*>(p);
  used_.assign(kLogPairs, false);
  return Status::Ok();
}

int OpLog::AllocPair() {
  std::lock_guard<std::mutex> g(mu_);
  for (uint32_t i = 0; i < kLogPairs; i++)
    if (!used_[i]) {
      used_[i] = true;
      return static_cast<int>(i);
    }
  return -1;
}

void OpLog::FreePair(int pair) {
  std::lock_guard<std::mutex> g(mu_);
  if (pair >= 0 && static_cast<uint32_t>(pair) < kLogPairs) used_[static_cast<size_t>(pair)] = false;
}

uint32_t OpLog::Checksum(const LogEntry& e) { return Crc32c(&e, offsetof(LogEntry, crc)); }

bool OpLog::Valid(const LogEntry& e) {
  return e.magic == kLogMagic && e.pair < kLogPairs && Checksum(e) == e.crc &&
         (e.kind == static_cast<uint16_t>(EntryKind::kCommit) || e.kind == static_cast<uint16_t>(EntryKind::kDone));
}

Status OpLog::Append(LogEntry e) {
  if (map_ == nullptr || e.pair >= kLogPairs) return Status::Error(EINVAL, "overlay log: no such pair");
  LogEntry* slot;
  {
    std::lock_guard<std::mutex> g(mu_);
    e.seq = ++seq_;
    LogEntry* a = &map_[e.pair * 2];
    LogEntry* b = a + 1;
    // The older (or invalid) slot takes the new entry; the newer stays in
    // force until this one is whole.
    bool a_ok = Valid(*a), b_ok = Valid(*b);
    slot = !a_ok ? a : !b_ok ? b : (a->seq < b->seq ? a : b);
  }
  e.magic = kLogMagic;
  e.reserved = 0;
  e.crc = Checksum(e);
  medium::CopyNt(slot, &e, sizeof e);
  medium::Fence();
  // The log page lives in the page cache of a kernel file: msync takes it
  // to the medium (a page of 4 KiB holds 64 entries).
  auto page = reinterpret_cast<uintptr_t>(slot) & ~uintptr_t{4095};
  if (msync(reinterpret_cast<void*>(page), 4096, MS_SYNC) != 0) return Status::FromErrno("overlay log msync");
  return Status::Ok();
}

std::vector<LogEntry> OpLog::Pending(const void* log, size_t bytes) {
  std::vector<LogEntry> out;
  const auto* e = static_cast<const LogEntry*>(log);
  size_t n = bytes / sizeof(LogEntry);
  for (size_t i = 0; i + 1 < n; i += 2) {
    LogEntry a, b;
    std::memcpy(&a, &e[i], sizeof a);
    std::memcpy(&b, &e[i + 1], sizeof b);
    bool a_ok = Valid(a) && a.pair == i / 2, b_ok = Valid(b) && b.pair == i / 2;
    if (!a_ok && !b_ok) continue;
    out.push_back(!b_ok || (a_ok && a.seq > b.seq) ? a : b);
  }
  return out;
}

}  // namespace mapfs::overlay::split
