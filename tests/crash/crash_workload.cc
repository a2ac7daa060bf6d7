#include "crash_workload.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/falloc.h>
#include <stdio.h>

#include <cstring>

#include "fs_test_util.h"

namespace mapfs::crash {

using fstest::FillPattern;

Status WriteAt(fs::FileSystem& fs, const std::string& path, uint64_t off, size_t n, uint64_t tag, int extra_flags) {
  auto f = fs.Open(path, O_WRONLY | extra_flags, 0644);
  if (!f.ok()) return f.status();
  std::string buf(n, 0);
  FillPattern(buf.data(), n, tag, off);
  auto w = fs.Write(**f, buf.data(), n, (extra_flags & O_APPEND) ? -1 : static_cast<int64_t>(off));
  Status c = fs.Close(**f);
  if (!w.ok()) return w.status();
  if (*w != n) return Status::Error(ENOSPC, "short write of " + std::to_string(*w) + " bytes");
  return c;
}

Status CreateFile(fs::FileSystem& fs, const std::string& path) {
  auto f = fs.Open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (!f.ok()) return f.status();
  return fs.Close(**f);
}

namespace {

Status Truncate(fs::FileSystem& fs, const std::string& path, int64_t size) { return fs.Truncate(path, size); }

Status Fallocate(fs::FileSystem& fs, const std::string& path, int mode, int64_t off, int64_t len) {
  auto f = fs.Open(path, O_WRONLY, 0);
  if (!f.ok()) return f.status();
  Status s = fs.Fallocate(**f, mode, off, len);
  Status c = fs.Close(**f);
  return s.ok() ? c : s;
}

std::vector<Step> MakeCatalogue() {
  using F = fs::FileSystem;
  return {
      {"create", [](F& fs) { return CreateFile(fs, "/n"); }},
      {"create-existing", [](F& fs) { return CreateFile(fs, "/a"); }},
      {"create-in-dir", [](F& fs) { return CreateFile(fs, "/d/n"); }},
      {"mkdir", [](F& fs) { return fs.Mkdir("/n", 0755); }},
      {"unlink", [](F& fs) { return fs.Unlink("/a"); }},
      {"unlink-linked", [](F& fs) { return fs.Unlink("/b"); }},
      {"unlink-symlink", [](F& fs) { return fs.Unlink("/l"); }},
      {"rmdir", [](F& fs) { return fs.Rmdir("/e"); }},
      {"rmdir-nonempty", [](F& fs) { return fs.Rmdir("/d"); }},
      {"rename", [](F& fs) { return fs.Rename("/a", "/n"); }},
      {"rename-replace", [](F& fs) { return fs.Rename("/a", "/b"); }},
      {"rename-across", [](F& fs) { return fs.Rename("/a", "/d/a"); }},
      {"rename-dir-replace", [](F& fs) { return fs.Rename("/d", "/e"); }},
      {"rename-dir-into", [](F& fs) { return fs.Rename("/e", "/d/e"); }},
      {"rename-exchange", [](F& fs) { return fs.Rename("/a", "/d", RENAME_EXCHANGE); }},
      {"rename-noreplace", [](F& fs) { return fs.Rename("/a", "/b", RENAME_NOREPLACE); }},
      {"link", [](F& fs) { return fs.Link("/a", "/n"); }},
      {"link-into-dir", [](F& fs) { return fs.Link("/a", "/e/a"); }},
      {"symlink", [](F& fs) { return fs.Symlink("some/where", "/n"); }},
      {"chmod", [](F& fs) { return fs.Chmod("/a", 0600); }},
      {"chown", [](F& fs) { return fs.Chown("/a", 1000, 1000); }},
      {"utimens", [](F& fs) { return fs.Utimens("/a", nullptr); }},
      {"truncate-down", [](F& fs) { return Truncate(fs, "/a", 100); }},
      {"truncate-up", [](F& fs) { return Truncate(fs, "/a", 20000); }},
      {"truncate-zero", [](F& fs) { return Truncate(fs, "/a", 0); }},
      {"truncate-downgrade", [](F& fs) { return Truncate(fs, "/big", 1000); }},
      {"open-trunc", [](F& fs) { return WriteAt(fs, "/a", 0, 0, 0, O_TRUNC); }},
      {"write-small", [](F& fs) { return WriteAt(fs, "/a", 10, 100, 21); }},
      {"write-pages", [](F& fs) { return WriteAt(fs, "/a", 1000, 6000, 22); }},
      {"write-big", [](F& fs) { return WriteAt(fs, "/big", 8192, 65536, 23); }},
      {"append", [](F& fs) { return WriteAt(fs, "/a", 0, 3000, 24, O_APPEND); }},
      {"append-upgrade", [](F& fs) { return WriteAt(fs, "/a", 5000, 100 * 1024, 25); }},
      {"write-hole", [](F& fs) { return WriteAt(fs, "/b", 50000, 100, 26); }},
      {"fallocate", [](F& fs) { return Fallocate(fs, "/a", 0, 0, 65536); }},
      {"fallocate-keep-size", [](F& fs) { return Fallocate(fs, "/a", FALLOC_FL_KEEP_SIZE, 0, 65536); }},
  };
}

}  // namespace

Status StandardTree(fs::FileSystem& fs) {
  MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/a"));
  MAPFS_RETURN_IF_ERROR(WriteAt(fs, "/a", 0, 5000, 1));
  MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/b"));
  MAPFS_RETURN_IF_ERROR(WriteAt(fs, "/b", 0, 100, 2));
  MAPFS_RETURN_IF_ERROR(fs.Mkdir("/d", 0755));
  MAPFS_RETURN_IF_ERROR(fs.Link("/b", "/d/h"));
  MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/d/x"));
  MAPFS_RETURN_IF_ERROR(WriteAt(fs, "/d/x", 0, 10, 3));
  MAPFS_RETURN_IF_ERROR(fs.Mkdir("/e", 0755));
  MAPFS_RETURN_IF_ERROR(fs.Symlink("a", "/l"));
  MAPFS_RETURN_IF_ERROR(CreateFile(fs, "/big"));
  return WriteAt(fs, "/big", 0, 200 * 1024, 4);
}

const std::vector<Step>& Catalogue() {
  static const std::vector<Step> c = MakeCatalogue();
  return c;
}

const Step& CatalogueStep(const std::string& name) {
  for (const Step& s : Catalogue())
    if (s.name == name) return s;
  ADD_FAILURE() << "no catalogue step " << name;
  return Catalogue().front();
}

Outcome RunWorkload(const Workload& w, int mode, const Budget& budget) {
  Outcome out;
  fstest::FsPool pool(w.pool_size, 4096, mode);
  if (!pool.error().empty()) {
    ADD_FAILURE() << pool.error();
    return out;
  }
  fs::FsOptions opt;
  opt.mode = mode;
  std::vector<FsState> states;
  std::vector<bool> durable{true};
  {
    auto mounted = fs::FileSystem::Mount(pool.path(), opt);
    if (!mounted.ok()) {
      ADD_FAILURE() << "mount: " << mounted.status().ToString();
      return out;
    }
    fs::FileSystem& fs = **mounted;
    if (w.setup) {
      Status s = w.setup(fs);
      if (!s.ok()) {
        ADD_FAILURE() << w.name << ": set-up failed: " << s.ToString();
        return out;
      }
    }
    auto s0 = Capture(fs);
    if (!s0.ok()) {
      ADD_FAILURE() << "capture: " << s0.status().ToString();
      return out;
    }
    states.push_back(*s0);
    CrashRecorder rec(&fs.mount().pool(), &fs.mount().vm());
    for (size_t i = 0; i < w.steps.size(); i++) {
      rec.BeginOp(static_cast<int>(i) + 1);
      Status s = w.steps[i].run(fs);
      out.step_errors.push_back(s.ok() ? "0" : fstest::ErrName(s.code()));
      auto si = Capture(fs);
      if (!si.ok()) {
        ADD_FAILURE() << "capture after " << w.steps[i].name << ": " << si.status().ToString();
        return out;
      }
      states.push_back(*si);
      durable.push_back(mode != MAPFS_MODE_POSIX || w.steps[i].durable);
    }
    rec.Finish(static_cast<int>(w.steps.size()) + 1);
    for (uint64_t l : rec.untraced_lines())
      if (out.violations.size() < 5)
        out.violations.push_back("untraced store: pool offset " + std::to_string(l * kLine) +
                                 " changed without going through the medium layer");
    if (rec.outside() != 0)
      out.violations.push_back(std::to_string(rec.outside()) + " traced stores outside the pool");
    Status u = fs.Unmount();
    if (!u.ok()) ADD_FAILURE() << "unmount: " << u.ToString();

    const DataPromise promise = mode == MAPFS_MODE_STRICT ? DataPromise::kWholeFile : DataPromise::kPerLine;
    CrashChecker checker(rec, states, durable, promise, budget, opt);
    for (auto& v : checker.Run(&out.counts)) out.violations.push_back(std::move(v));
  }
  return out;
}

}  // namespace mapfs::crash
