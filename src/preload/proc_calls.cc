// Process creation: before any path by which a new image may start with
// mapfs descriptors (exec, posix_spawn, system, popen) the shim hands its
// descriptions off (Shim::Handoff). fork() runs the pthread_atfork handlers
// Shim registers; vfork() becomes fork() (POSIX allows it), since a child
// sharing the parent's memory cannot take its own mount identity.
//
// Programs stored in mapfs can be run: the kernel cannot open them, so a
// script ("#!") is run as its interpreter with the script's mapfs path as
// argument (the interpreter opens it through the shim), and a binary is
// copied into a close-on-exec memfd that the kernel executes by its
// /proc/self/fd name.
#include <spawn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <unistd.h>

#include <sys/mman.h>
#include <sys/stat.h>

#include <cstring>
#include <string>
#include <vector>

#include "common/log.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"
#include "preload/outside.h"
#include "preload/spawn_actions.h"
#include "vm/fault.h"

extern char** environ;

namespace mapfs::preload {
namespace {

void HandoffIfNeeded() {
  if (in_core) return;
  Shim& s = Shim::Get();
  if (s.enabled()) s.Handoff();
  OverlayHandoff();
}

// Around an exec that replaces this image: hands descriptors over and
// marks how its mount ends (Shim::MarkExec: idle when it holds nothing,
// else handing its descriptions to the next image, which confirms it took
// them), so that its death at exec leaves the pool clean. A failed exec
// takes the mark back. Unmarked (another thread runs, or the next image
// never confirms), the pool is left for recovery to count the open files.
class ExecScope {
 public:
  ExecScope() {
    HandoffIfNeeded();
    vm::BeforeExec();  // an ignored SIGSEGV/SIGBUS stays ignored in the new image
    if (in_core) return;
    Shim& s = Shim::Get();
    if (s.enabled()) mark_ = s.MarkExec();
  }
  ~ExecScope() {  // only when the exec failed
    int e = errno;
    vm::AfterFailedExec();
    if (mark_.kind != 0 || mark_.drop_fd >= 0) Shim::Get().UnmarkExec(mark_);
    errno = e;
  }
  ExecScope(const ExecScope&) = delete;
  ExecScope& operator=(const ExecScope&) = delete;

 private:
  Shim::ExecMark mark_;
};

[[noreturn]] void ExitIdle(int status, void (*real)(int)) {
  if (!in_core) {
    Shim& s = Shim::Get();
    if (s.enabled()) s.EndAtExit();
  }
  real(status);
  __builtin_unreachable();
}

// A spawned image (posix_spawn, system, popen) starts in a child that ran
// no fork handler, so the open counts of the descriptions it inherits are
// the parent's: it must add its own (Shim::Adopt reads MAPFS_SPAWNED).
// After fork + exec the child's counts were added at fork, and carry over.
std::vector<char*> SpawnedEnv(char* const envp[]) {
  std::vector<char*> e;
  static char mark[] = "MAPFS_SPAWNED=1";
  for (int i = 0; envp && envp[i]; i++)
    if (std::strncmp(envp[i], "MAPFS_SPAWNED=", 14) != 0) e.push_back(envp[i]);
  e.push_back(mark);
  e.push_back(nullptr);
  return e;
}
struct SpawnMark {  // the same for the calls that pass `environ` on
  SpawnMark() {
    if (!in_core) ::setenv("MAPFS_SPAWNED", "1", 1);
  }
  ~SpawnMark() {
    if (!in_core) ::unsetenv("MAPFS_SPAWNED");
  }
  SpawnMark(const SpawnMark&) = delete;
  SpawnMark& operator=(const SpawnMark&) = delete;
};

std::vector<char*> VarArgs(const char* first, va_list ap, char*** envp) {
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(first));
  while (char* a = va_arg(ap, char*)) argv.push_back(a);
  argv.push_back(nullptr);
  if (envp) *envp = va_arg(ap, char**);
  return argv;
}

// What the kernel should execute instead of a mapfs program.
struct ExecPlan {
  std::string path;
  std::vector<std::string> args;
  int memfd = -1;
  ~ExecPlan() {
    if (memfd >= 0) REAL(close)(memfd);
  }
  std::vector<char*> Argv() {
    std::vector<char*> v;
    for (auto& a : args) v.push_back(a.data());
    v.push_back(nullptr);
    return v;
  }
};

// Fills `plan` for running `path` with `argv`. 0, or -1/errno as execve.
int Plan(const char* path, char* const argv[], ExecPlan* plan, int depth = 0) {
  plan->path = path;
  plan->args.clear();
  for (int i = 0; argv && argv[i]; i++) plan->args.push_back(argv[i]);
  Route r = MapfsPath(AT_FDCWD, path);
  if (!r.mapfs) return 0;
  if (depth > 4) return FailErrno(ELOOP);
  // A pool link whose target leaves the pool (a program in a PATH directory
  // of the pool linked to /usr/bin/python3, as CPython's test_posix makes)
  // is run by the kernel where the path ends; the pool cannot open it.
  if (char* real = ::realpath(path, nullptr)) {  // the shim's: follows out
    bool outside = !MapfsPath(AT_FDCWD, real).mapfs;
    if (outside) plan->path = real;
    std::free(real);
    if (outside) return 0;
  }
  // As execve: search on the path, execute permission on a regular file
  // (EACCES otherwise; root needs one x bit); reading is not required.
  int fd = OpenMapfs(r, O_RDONLY | O_CLOEXEC | fs::kOpenExec, 0);
  if (fd < 0) return -1;
  char head[256];
  ssize_t n = ::pread(fd, head, sizeof head - 1, 0);
  if (n >= 2 && head[0] == '#' && head[1] == '!') {
    ::close(fd);
    head[n] = '\0';
    char* line = head + 2;
    line[std::strcspn(line, "\n")] = '\0';
    while (*line == ' ' || *line == '\t') line++;
    char* end = line + std::strcspn(line, " \t");
    std::string interp(line, end), arg;
    while (*end == ' ' || *end == '\t') end++;
    arg = end;
    while (!arg.empty() && (arg.back() == ' ' || arg.back() == '\t' || arg.back() == '\r')) arg.pop_back();
    if (interp.empty()) return FailErrno(ENOEXEC);
    std::vector<std::string> args = {interp};
    if (!arg.empty()) args.push_back(arg);
    args.push_back(path);
    for (size_t i = 1; i < plan->args.size(); i++) args.push_back(plan->args[i]);
    std::vector<char*> v;
    for (auto& a : args) v.push_back(a.data());
    v.push_back(nullptr);
    // An interpreter in the pool may be reached through a link that leaves
    // it: resolve it here, or execve's FollowOut would take the exit for
    // the script's own path.
    char* real_interp = ::realpath(interp.c_str(), nullptr);
    std::string ip = real_interp ? real_interp : interp;
    std::free(real_interp);
    return Plan(ip.c_str(), v.data(), plan, depth + 1);
  }
  int m = ::memfd_create("mapfs-exec", MFD_CLOEXEC);
  if (m < 0) {
    ::close(fd);
    return -1;
  }
  std::vector<char> buf(1 << 20);
  off_t off = 0;
  for (;;) {
    ssize_t k = ::pread(fd, buf.data(), buf.size(), off);
    if (k < 0 || (k > 0 && REAL(write)(m, buf.data(), static_cast<size_t>(k)) != k)) {
      int e = errno;
      ::close(fd);
      REAL(close)(m);
      return FailErrno(e ? e : EIO);
    }
    if (k == 0) break;
    off += k;
  }
  ::close(fd);
  plan->memfd = m;
  plan->path = "/proc/self/fd/" + std::to_string(m);
  return 0;
}

bool PathHasMapfsDir() {
  const char* p = std::getenv("PATH");
  if (p == nullptr || in_core) return false;
  const std::string& pre = Shim::Get().prefix();
  for (std::string_view v(p); !v.empty();) {
    size_t c = v.find(':');
    std::string_view d = v.substr(0, c);
    if (d.compare(0, pre.size(), pre) == 0 && (d.size() == pre.size() || d[pre.size()] == '/')) return true;
    if ((d.empty() || d[0] != '/') && Shim::Get().CwdIsMapfs()) return true;  // "" and relative entries mean the cwd
    v = c == std::string_view::npos ? std::string_view() : v.substr(c + 1);
  }
  return false;
}

int ExecveAny(const char* path, char* const argv[], char* const envp[]) {
  ExecPlan plan;
  if (Plan(path, argv, &plan) != 0) return -1;
  auto v = plan.Argv();
  return REAL(execve)(plan.path.c_str(), v.data(), envp);
}

// execvpe's search, done here when PATH reaches into mapfs.
int ExecvpeAny(const char* file, char* const argv[], char* const envp[]) {
  if (*file == '\0') return FailErrno(ENOENT);
  if (std::strchr(file, '/')) {
    ExecveAny(file, argv, envp);
    if (errno == ENOEXEC) {
      std::vector<char*> v = {const_cast<char*>("/bin/sh"), const_cast<char*>(file)};
      for (int i = 1; argv[i]; i++) v.push_back(argv[i]);
      v.push_back(nullptr);
      return REAL(execve)("/bin/sh", v.data(), envp);
    }
    return -1;
  }
  const char* p = std::getenv("PATH");
  std::string path = p ? p : "/bin:/usr/bin";
  bool eacces = false;
  for (size_t i = 0; i <= path.size();) {
    size_t c = path.find(':', i);
    if (c == std::string::npos) c = path.size();
    std::string dir = path.substr(i, c - i);
    i = c + 1;
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + file;
    ExecveAny(cand.c_str(), argv, envp);
    if (errno == EACCES) eacces = true;
    else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE) return -1;
  }
  return FailErrno(eacces ? EACCES : ENOENT);
}

// posix_spawnp's search, done here when PATH reaches into mapfs: each
// directory in turn, as glibc's search does (an entry that exists but
// cannot be run is remembered as EACCES and the search goes on; an empty
// entry is the cwd). A candidate is spawned only once it is known to be
// an executable file, so the file actions run once, as in glibc.
int SpawnpAny(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa, const posix_spawnattr_t* attr,
              char* const argv[], char* const envp[]) {
  if (*file == '\0') return ENOENT;
  const char* p = std::getenv("PATH");
  std::string path = p ? p : "/bin:/usr/bin";
  bool eacces = false;
  for (size_t i = 0; i <= path.size();) {
    size_t c = path.find(':', i);
    if (c == std::string::npos) c = path.size();
    std::string dir = path.substr(i, c - i);
    i = c + 1;
    std::string cand = (dir.empty() ? std::string(".") : dir) + "/" + file;
    struct stat st;
    if (::stat(cand.c_str(), &st) != 0) {  // the shim's stat: pool or kernel
      if (errno == EACCES) eacces = true;
      continue;
    }
    if (!S_ISREG(st.st_mode) || ::eaccess(cand.c_str(), X_OK) != 0) {
      eacces = true;
      continue;
    }
    ExecPlan plan;
    if (Plan(cand.c_str(), argv, &plan) != 0) return errno;
    auto v = plan.Argv();
    auto e = SpawnedEnv(envp);
    return REAL(posix_spawn)(pid, plan.path.c_str(), fa, attr, v.data(), e.data());
  }
  return eacces ? EACCES : ENOENT;
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
namespace fs = mapfs::fs;
using mapfs::Status;

MAPFS_EXPORT pid_t vfork(void) { return fork(); }

// _exit skips the destructor that unmounts: a process (typically a fork
// child) that holds nothing ends its mount idle instead.
MAPFS_EXPORT void _exit(int status) { ExitIdle(status, REAL(_exit)); }
MAPFS_EXPORT void _Exit(int status) { ExitIdle(status, REAL(_Exit)); }

MAPFS_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  ExecScope exec;
  if (in_core) return REAL(execve)(path, argv, envp);
  return FollowOut(AT_FDCWD, path, true, [&](int, const char* p) { return ExecveAny(p, argv, envp); });
}
MAPFS_EXPORT int execv(const char* path, char* const argv[]) { return execve(path, argv, environ); }
MAPFS_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  ExecScope exec;
  if (in_core || (!PathHasMapfsDir() && !MapfsPath(AT_FDCWD, file).mapfs))
    return REAL(execvpe)(file, argv, envp);
  return ExecvpeAny(file, argv, envp);
}
MAPFS_EXPORT int execvp(const char* file, char* const argv[]) { return execvpe(file, argv, environ); }
MAPFS_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  ExecScope exec;
  return REAL(fexecve)(fd, argv, envp);
}
MAPFS_EXPORT int execl(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto argv = VarArgs(arg, ap, nullptr);
  va_end(ap);
  return execv(path, argv.data());
}
MAPFS_EXPORT int execlp(const char* file, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  auto argv = VarArgs(arg, ap, nullptr);
  va_end(ap);
  return execvp(file, argv.data());
}
MAPFS_EXPORT int execle(const char* path, const char* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  char** envp = nullptr;
  auto argv = VarArgs(arg, ap, &envp);
  va_end(ap);
  return execve(path, argv.data(), envp);
}

MAPFS_EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* fa,
                             const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  SpawnOpens opens;  // pool files the file actions open (spawn_actions.cc)
  if (!in_core)
    if (int e = opens.Open(fa); e != 0) return e;
  HandoffIfNeeded();
  if (in_core) return REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
  opens.Point();
  ExecPlan plan;
  if (Plan(path, argv, &plan) != 0) return errno;  // posix_spawn returns the error
  auto v = plan.Argv();
  auto e = SpawnedEnv(envp);
  return REAL(posix_spawn)(pid, plan.path.c_str(), fa, attr, v.data(), e.data());
}
MAPFS_EXPORT int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* fa,
                              const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  if (in_core) {
    HandoffIfNeeded();
    return REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
  }
  if (std::strchr(file, '/') != nullptr) return posix_spawn(pid, file, fa, attr, argv, envp);
  SpawnOpens opens;
  if (int e = opens.Open(fa); e != 0) return e;
  HandoffIfNeeded();
  opens.Point();
  if (PathHasMapfsDir()) return SpawnpAny(pid, file, fa, attr, argv, envp);
  auto e = SpawnedEnv(envp);
  return REAL(posix_spawnp)(pid, file, fa, attr, argv, e.data());
}
MAPFS_EXPORT int system(const char* cmd) {
  HandoffIfNeeded();
  SpawnMark mark;
  return REAL(system)(cmd);
}
MAPFS_EXPORT FILE* popen(const char* cmd, const char* mode) {
  HandoffIfNeeded();
  SpawnMark mark;
  return REAL(popen)(cmd, mode);
}
