// The mount daemon (see daemon.h).
//
// Order matters: the process forks first (the core must not be mounted in a
// process that forks afterwards), then the child mounts the core and the
// kernel mount and tells the parent over a pipe that it serves. The child
// holds an flock on a lock file named after DIR while it lives, so
// `mapfs umount DIR` can wait for the core's unmount to finish.
#include "fuse/daemon.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuse/follow.h"
#include "fuse/fuse_ops.h"

namespace mapfs::fuse {
namespace {

std::string LockPath(const std::string& absdir) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : absdir) h = (h ^ c) * 1099511628211ull;
  char buf[64];
  std::snprintf(buf, sizeof buf, "/dev/shm/mapfs-mount-%016llx.lock", static_cast<unsigned long long>(h));
  return buf;
}

std::string Absolute(const std::string& p) {
  char buf[PATH_MAX];
  if (::realpath(p.c_str(), buf) == nullptr) return "";
  return buf;
}

// The pool's path made absolute (the daemon leaves its cwd for "/") but
// not resolved: realpath would follow a symbolic link in place of the pool,
// which the core refuses (O_NOFOLLOW, docs/SECURITY.md) on every other
// front. "" + errno when the cwd cannot be read.
std::string AbsolutePool(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return "";
  return std::string(cwd) + "/" + p;
}

// The daemon's lock file, private to the user who mounts: created with
// O_EXCL; one left by an earlier daemon is used only if it is this user's
// (or root's) and no one else may write it, so that no other user can plant
// it (a link, or a file they hold locked to make every mount of DIR fail).
// The fd, -1 + errno, or -2 after printing why a foreign one is refused.
int OpenLockFile(const std::string& lock) {
  int fd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0 || errno != EEXIST) return fd;
  fd = ::open(lock.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP) {
      std::fprintf(stderr, "mapfs mount: refusing lock file %s: it is a symbolic link (someone else put it there)\n",
                   lock.c_str());
      return -2;
    }
    return -1;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return -1;
  }
  if ((st.st_uid != ::geteuid() && st.st_uid != 0) || (st.st_mode & 022) != 0 || !S_ISREG(st.st_mode)) {
    std::fprintf(stderr,
                 "mapfs mount: refusing lock file %s: owned by uid %u with mode %04o, not yours and private "
                 "(someone else created it; remove it)\n",
                 lock.c_str(), static_cast<unsigned>(st.st_uid), static_cast<unsigned>(st.st_mode & 07777));
    ::close(fd);
    return -2;
  }
  return fd;
}

// Serves until unmounted or signalled. ready_fd >= 0: write one byte there
// once the mount serves, then detach from the terminal.
int Serve(const MountOptions& opt, int ready_fd) {
  std::string lock = LockPath(opt.dir);
  int lock_fd = OpenLockFile(lock);
  if (lock_fd == -2) return 1;
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::fprintf(stderr, "mapfs mount: %s: already served by a mapfs daemon (%s)\n", opt.dir.c_str(), lock.c_str());
    return 1;
  }
  fs::FsOptions fo;
  fo.mode = opt.mode;
  auto mounted = fs::FileSystem::Mount(opt.pool, fo);
  if (!mounted.ok()) {
    std::fprintf(stderr, "mapfs mount: %s: %s\n", opt.pool.c_str(), mounted.status().message().c_str());
    ::unlink(lock.c_str());
    return 1;
  }
  // The kernel caches names, attributes and pages; the follower of the
  // pool's change ring invalidates what other processes change (README
  // "The FUSE mount"), so the timeouts only bound what a change nobody
  // publishes (an access time) leaves stale. Absent names are cached for
  // 1 s only: the follower notices another process's create of a name, but
  // when the ring loses changes it invalidates the names it gave the kernel
  // and knows no absent ones, so their timeout bounds what stays stale.
  CachePolicy cache;
  cache.entry_timeout = 5.0;
  cache.negative_timeout = 1.0;
  cache.attr_timeout = 5.0;
  cache.keep_cache = true;
  if (!opt.default_permissions) {
    // Without the kernel's check, only a request reaches the core's: a
    // name the kernel still caches is walked without asking, so another
    // user would pass a directory he may not search. With no entry cache
    // every walk asks for each name (as its caller, who needs search on
    // the directory), and no cached absence answers ENOENT for EACCES.
    cache.entry_timeout = 0;
    cache.negative_timeout = 0;
  }
  MountState* state = NewMountState(std::move(*mounted), cache);

  // default_permissions (unless --no-default-permissions): the kernel
  // checks modes and owners too, on its cached names and attributes (the
  // core checks each request as its caller, fuse_ops.cc AsCaller, so the
  // two agree; docs/SECURITY.md says why both is the default).
  // allow_other for root, so every user sees the mount.
  std::string o = std::string(opt.default_permissions ? "default_permissions," : "") + "fsname=" + opt.pool +
                  ",subtype=mapfs";
  if (::geteuid() == 0) o += ",allow_other";
  if (!opt.fuse_opts.empty()) o += "," + opt.fuse_opts;
  std::vector<std::string> argv_s = {"mapfs", "-o", o};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  int rc = 1;
  struct fuse_session* se = fuse_session_new(&args, &Operations(), sizeof(struct fuse_lowlevel_ops), state);
  if (se == nullptr) {
    std::fprintf(stderr, "mapfs mount: libfuse refused the options (-o %s)\n", o.c_str());
  } else if (fuse_session_mount(se, opt.dir.c_str()) != 0) {
    std::fprintf(stderr,
                 "mapfs mount: the kernel refused to mount %s (is /dev/fuse there and usable? "
                 "is fusermount3 installed?)\n",
                 opt.dir.c_str());
  } else {
    SetSession(state, se);
    // libfuse installs its handlers only where a signal's disposition is
    // SIG_DFL, and a shell starts background jobs (`mapfs mount -f &`) with
    // SIGINT ignored: without this, SIGINT would leave the mount served
    // until a kill. SIGHUP keeps what it was given (nohup stays nohup).
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (fuse_set_signal_handlers(se) != 0) {
      std::fprintf(stderr, "mapfs mount: cannot install signal handlers\n");
    } else {
      if (ready_fd >= 0) {
        char ok = '0';
        (void)!::write(ready_fd, &ok, 1);
        ::close(ready_fd);
        ready_fd = -1;
        int null = ::open("/dev/null", O_RDWR);
        if (null >= 0) {
          ::dup2(null, 0), ::dup2(null, 1), ::dup2(null, 2);
          if (null > 2) ::close(null);
        }
        (void)!::chdir("/");
      }
      struct fuse_loop_config* lc = fuse_loop_cfg_create();
      fuse_loop_cfg_set_clone_fd(lc, 0);
      fuse_loop_cfg_set_max_threads(lc, 16);
      // 0 when unmounted, the signal's number when a signal ended it, -errno
      // on an error.
      int loop;
      {
        Follower follower(state);
        loop = fuse_session_loop_mt(se, lc);
      }
      rc = loop < 0 ? 1 : 0;
      if (loop < 0) std::fprintf(stderr, "mapfs mount: serving %s: %s\n", opt.dir.c_str(), std::strerror(-loop));
      fuse_loop_cfg_destroy(lc);
      fuse_remove_signal_handlers(se);
    }
    SetSession(state, nullptr);
    fuse_session_unmount(se);
  }
  if (se != nullptr) fuse_session_destroy(se);
  fuse_opt_free_args(&args);
  Status st = FinishMountState(state);
  if (!st.ok()) {
    std::fprintf(stderr, "mapfs mount: unmounting %s: %s\n", opt.pool.c_str(), st.message().c_str());
    rc = 1;
  }
  ::unlink(lock.c_str());
  ::close(lock_fd);  // releases the flock: `mapfs umount` returns
  return rc;
}

}  // namespace

int MountMain(const MountOptions& in) {
  MountOptions opt = in;
  opt.pool = AbsolutePool(in.pool);
  opt.dir = Absolute(in.dir);
  if (opt.pool.empty()) {
    std::fprintf(stderr, "mapfs mount: %s: %s\n", in.pool.c_str(), std::strerror(errno));
    return 1;
  }
  if (opt.dir.empty()) {
    std::fprintf(stderr, "mapfs mount: %s: %s\n", in.dir.c_str(), std::strerror(errno));
    return 1;
  }
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    std::fprintf(stderr, "mapfs mount: /dev/fuse: %s (FUSE is not available here)\n", std::strerror(errno));
    return 1;
  }
  if (opt.foreground) return Serve(opt, -1);
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) {
    std::perror("mapfs mount: pipe");
    return 1;
  }
  pid_t pid = ::fork();
  if (pid < 0) {
    std::perror("mapfs mount: fork");
    return 1;
  }
  if (pid == 0) {
    ::close(p[0]);
    ::setsid();
    std::_Exit(Serve(opt, p[1]));
  }
  ::close(p[1]);
  char c = 0;
  ssize_t n;
  do n = ::read(p[0], &c, 1);
  while (n < 0 && errno == EINTR);
  ::close(p[0]);
  if (n == 1) return 0;
  int status = 0;
  ::waitpid(pid, &status, 0);
  return 1;
}

int UmountMain(const std::string& dir) {
  std::string abs = Absolute(dir);
  if (abs.empty() && errno == ENOTCONN) {
    // A mount whose daemon died: the directory cannot be resolved any more.
    char cwd[PATH_MAX];
    abs = !dir.empty() && dir[0] == '/' ? dir : ::getcwd(cwd, sizeof cwd) ? std::string(cwd) + "/" + dir : "";
  }
  if (abs.empty()) {
    std::fprintf(stderr, "mapfs umount: %s: %s\n", dir.c_str(), std::strerror(errno));
    return 1;
  }
  int lock_fd = ::open(LockPath(abs).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  int rc = 0;
  if (::geteuid() == 0) {
    if (::umount2(abs.c_str(), UMOUNT_NOFOLLOW) != 0) {
      std::fprintf(stderr, "mapfs umount: %s: %s\n", abs.c_str(), std::strerror(errno));
      rc = 1;
    }
  } else {
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execlp("fusermount3", "fusermount3", "-u", abs.c_str(), static_cast<char*>(nullptr));
      std::fprintf(stderr, "mapfs umount: fusermount3: %s\n", std::strerror(errno));
      std::_Exit(127);
    }
    int status = 0;
    if (pid < 0 || ::waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) rc = 1;
  }
  if (rc == 0 && lock_fd >= 0) {
    // The daemon holds the lock until the core is unmounted.
    for (int i = 0; i < 6000 && ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0; i++) ::usleep(10000);
    if (::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
      std::fprintf(stderr, "mapfs umount: the daemon serving %s did not finish within 60 s\n", abs.c_str());
      rc = 1;
    }
  }
  if (lock_fd >= 0) ::close(lock_fd);
  return rc;
}

}  // namespace mapfs::fuse
