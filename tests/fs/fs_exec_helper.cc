// Helper of fs_fork_test: a program that mounts a pool and then replaces its
// own image with execve, leaving the mount behind as the LD_PRELOAD shim's
// programs do. Exit code 0 = what it was asked to check held; otherwise a
// message on stderr.
//
//   chain POOL N TOTAL    mount, create /chain-N, exec itself with N-1
//                         without unmounting; at N = 0 check that
//                         /chain-0../chain-TOTAL all exist and unmount.
//   lock POOL PATH w|r FD mount, hold PATH's inode lock (write or read),
//                         write one byte to FD, exec /bin/sleep 60.
//   adopt POOL PATH SIZE  mount, open PATH, unlink it, exec itself as
//   adopted POOL INO SIZE   which mounts, Adopt()s the inode (counted),
//                         checks its SIZE pattern bytes, closes it and
//                         checks that it is gone (ESTALE).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fs/file_system.h"
#include "meta/inode_locks.h"

namespace {

using mapfs::fs::FileSystem;

int Fail(int code, const std::string& msg) {
  std::fprintf(stderr, "fs_exec_helper[%d]: %s\n", static_cast<int>(::getpid()), msg.c_str());
  return code;
}

uint8_t Pattern(uint64_t i) { return static_cast<uint8_t>((i * 131) ^ (i >> 9)); }

std::unique_ptr<FileSystem> MountOrDie(const std::string& pool) {
  auto fs = FileSystem::Mount(pool);
  if (!fs.ok()) {
    Fail(2, "mount: " + fs.status().ToString());
    std::_Exit(2);
  }
  return std::move(*fs);
}

// Replaces the image; the mount is left behind (the pool fd is O_CLOEXEC).
int ExecSelf(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  std::string self = "fs_exec_helper";
  argv.push_back(self.data());
  for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  return Fail(3, "execv: " + std::string(strerror(errno)));
}

int Chain(const std::string& pool, long n, long total) {
  auto fs = MountOrDie(pool);
  std::string name = "/chain-" + std::to_string(n);
  auto f = fs->Open(name, O_CREAT | O_EXCL | O_WRONLY, 0644);
  if (!f.ok()) return Fail(4, "create " + name + ": " + f.status().ToString());
  (void)fs->Close(**f);
  if (n > 0) {
    (void)fs.release();  // vanish with the image, as an exec'ing program does
    return ExecSelf({"chain", pool, std::to_string(n - 1), std::to_string(total)});
  }
  for (long k = 0; k <= total; k++) {
    struct stat st {};
    mapfs::Status s = fs->Stat("/chain-" + std::to_string(k), &st);
    if (!s.ok()) return Fail(5, "/chain-" + std::to_string(k) + ": " + s.ToString());
  }
  mapfs::Status s = fs->Unmount();
  if (!s.ok()) return Fail(6, "unmount: " + s.ToString());
  return 0;
}

int Lock(const std::string& pool, const std::string& path, bool write, int fd) {
  auto fs = MountOrDie(pool);
  auto ino = fs->Lookup(path);
  if (!ino.ok()) return Fail(4, "lookup: " + ino.status().ToString());
  // Another handle on the same mount's locks: held as this mount.
  auto* locks = new mapfs::meta::InodeLocks(&fs->mount().pool());
  uint32_t stripe = mapfs::meta::InodeLocks::StripeOf(*ino);
  write ? locks->WriteLock(stripe) : locks->ReadLock(stripe);
  char c = 1;
  if (::write(fd, &c, 1) != 1) return Fail(5, "signal the test");
  ::close(fd);
  (void)fs.release();
  ::execl("/bin/sleep", "sleep", "60", static_cast<char*>(nullptr));
  return Fail(3, "exec sleep: " + std::string(strerror(errno)));
}

int Adopt(const std::string& pool, const std::string& path, uint64_t size) {
  auto fs = MountOrDie(pool);
  auto f = fs->Open(path, O_RDONLY, 0);
  if (!f.ok()) return Fail(4, "open: " + f.status().ToString());
  mapfs::Status s = fs->Unlink(path);
  if (!s.ok()) return Fail(5, "unlink: " + s.ToString());
  uint64_t ino = (*f)->ino;
  (void)fs.release();
  return ExecSelf({"adopted", pool, std::to_string(ino), std::to_string(size)});
}

int Adopted(const std::string& pool, uint64_t ino, uint64_t size) {
  auto fs = MountOrDie(pool);
  auto f = fs->Adopt(ino, O_RDONLY, true);
  if (!f.ok()) return Fail(4, "adopt: " + f.status().ToString());
  std::vector<uint8_t> buf(size + 1);
  auto n = fs->Read(**f, buf.data(), buf.size(), 0);
  if (!n.ok() || *n != size) return Fail(5, "read: " + (n.ok() ? std::to_string(*n) + " bytes" : n.status().ToString()));
  for (uint64_t i = 0; i < size; i++)
    if (buf[i] != Pattern(i)) return Fail(6, "wrong byte at " + std::to_string(i));
  mapfs::Status s = fs->Close(**f);
  if (!s.ok()) return Fail(7, "close: " + s.ToString());
  // The count the old image held was taken over, not added to: the last
  // close freed the unlinked inode.
  auto again = fs->Adopt(ino, O_RDONLY, false);
  if (again.ok() || again.status().code() != ESTALE)
    return Fail(8, "the inode outlived its last close: " + (again.ok() ? std::string("adopted") : again.status().ToString()));
  s = fs->Unmount();
  if (!s.ok()) return Fail(9, "unmount: " + s.ToString());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> a(argv + 1, argv + argc);
  if (a.size() == 4 && a[0] == "chain") return Chain(a[1], std::stol(a[2]), std::stol(a[3]));
  if (a.size() == 5 && a[0] == "lock") return Lock(a[1], a[2], a[3] == "w", std::stoi(a[4]));
  if (a.size() == 4 && a[0] == "adopt") return Adopt(a[1], a[2], std::stoull(a[3]));
  if (a.size() == 4 && a[0] == "adopted") return Adopted(a[1], std::stoull(a[2]), std::stoull(a[3]));
  return Fail(1, "usage: chain|lock|adopt|adopted ...");
}
