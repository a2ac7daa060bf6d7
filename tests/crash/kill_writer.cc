// kill_writer: an ordinary program (libc calls only, no mapfs code) that
// kill_test.cc runs under the LD_PRELOAD shim with `mapfs run` and kills.
//
//   kill_writer write ROOT OUT_FD SEED SEQ0 N NAME...
//       runs the operation stream of kill_workload.h on ROOT/NAME... and
//       reports on OUT_FD (N < 0: until killed);
//   kill_writer lock ROOT OUT_FD KIND
//       takes a lock on ROOT/k/locked (KIND flock or fcntl), says "L", then
//       writes the file over and over, saying "W <n>" after each write;
//   kill_writer trylock ROOT OUT_FD KIND
//       says "BUSY" while the lock is taken elsewhere (non-blocking tries),
//       then "GOT" once it has it, writes, reads back and says "OK".
#include <sys/file.h>
#include <sys/types.h>

#include <cstdlib>
#include <ctime>

#include "kill_workload.h"

namespace {

using mapfs::crash::Say;

class PosixIo : public mapfs::crash::Io {
 public:
  explicit PosixIo(std::string root) : root_(std::move(root)) {}
  int Open(const std::string& p, int flags) override { return ::open(P(p).c_str(), flags | O_CLOEXEC, 0644); }
  ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) override { return ::pwrite(fd, b, n, off); }
  int Fsync(int fd) override { return ::fsync(fd); }
  int Close(int fd) override { return ::close(fd); }
  int Rename(const std::string& a, const std::string& b) override { return ::rename(P(a).c_str(), P(b).c_str()); }
  int Unlink(const std::string& p) override { return ::unlink(P(p).c_str()); }
  int Truncate(const std::string& p, off_t size) override { return ::truncate(P(p).c_str(), size); }

 private:
  std::string P(const std::string& p) const { return root_ + "/" + p; }
  std::string root_;
};

// Takes (blocking = wait) the exclusive lock of `kind` on fd.
int Lock(int fd, const std::string& kind, bool wait) {
  if (kind == "flock") return ::flock(fd, LOCK_EX | (wait ? 0 : LOCK_NB));
  struct flock fl{};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  return ::fcntl(fd, wait ? F_SETLKW : F_SETLK, &fl);
}

int LockHolder(const std::string& root, int out, const std::string& kind) {
  std::string p = root + "/k/locked";
  int fd = ::open(p.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0 || Lock(fd, kind, true) != 0) return Say(out, "X lock " + std::to_string(errno)), 3;
  Say(out, "L");
  std::string buf(64 << 10, 'h');
  for (long n = 0;; n++) {
    if (::pwrite(fd, buf.data(), buf.size(), (n % 4) * 65536) != static_cast<ssize_t>(buf.size()))
      return Say(out, "X pwrite " + std::to_string(errno)), 4;
    Say(out, "W " + std::to_string(n));
  }
}

int TryLock(const std::string& root, int out, const std::string& kind) {
  std::string p = root + "/k/locked";
  int fd = ::open(p.c_str(), O_RDWR);
  if (fd < 0) return Say(out, "X open " + std::to_string(errno)), 3;
  bool said_busy = false;
  for (int i = 0;; i++) {
    if (Lock(fd, kind, false) == 0) break;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EACCES) return Say(out, "X trylock " + std::to_string(errno)), 4;
    if (!said_busy) Say(out, "BUSY");
    said_busy = true;
    struct timespec ts = {0, 2000000};
    ::nanosleep(&ts, nullptr);
  }
  Say(out, "GOT");
  std::string mine = mapfs::crash::Pattern(99, 0, 4096), back(4096, '\0');
  if (::pwrite(fd, mine.data(), mine.size(), 0) != 4096 || ::pread(fd, back.data(), 4096, 0) != 4096 || back != mine)
    return Say(out, "X rw " + std::to_string(errno)), 5;
  Say(out, "OK");
  return ::close(fd) == 0 ? 0 : 6;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: kill_writer write|lock|trylock ROOT OUT_FD ...\n");
    return 2;
  }
  std::string verb = argv[1], root = argv[2];
  int out = std::atoi(argv[3]);
  if (verb == "lock") return LockHolder(root, out, argv[4]);
  if (verb == "trylock") return TryLock(root, out, argv[4]);
  if (verb != "write" || argc < 7) return 2;
  std::vector<std::string> names(argv + 7, argv + argc);
  PosixIo io(root);
  return mapfs::crash::RunWriter(io, out, std::strtoull(argv[4], nullptr, 10), std::strtoull(argv[5], nullptr, 10),
                                 std::strtol(argv[6], nullptr, 10), names);
}
