#include "overlay_targets.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>

#include "bench_util.h"
#include "fs_ops.h"

namespace mapfs::bench {

// ---- EngineTarget -------------------------------------------------------

std::unique_ptr<EngineTarget> EngineTarget::Open(const std::string& root, overlay::EngineKind kind, overlay::Mode mode,
                                                 const std::string& name, const std::string& mode_name) {
  overlay::Options o;
  o.dir = root;
  o.engine = kind;
  o.mode = mode;
  auto e = overlay::OpenOverlay(o);
  if (!e.ok()) {
    std::fprintf(stderr, "mapfs bench overlay: %s engine on %s: %s\n", name.c_str(), root.c_str(),
                 e.status().message().c_str());
    return nullptr;
  }
  std::unique_ptr<EngineTarget> t(new EngineTarget);
  t->root_ = root;
  t->virtual_ = kind == overlay::EngineKind::kVirtual;
  t->engine_ = std::move(*e);
  t->name = name;
  t->mode = mode_name;
  return t;
}

// Errors come back as Status; the Target interface speaks errno.
static int Errno(const Status& s) {
  errno = s.code() ? s.code() : EIO;
  return -1;
}

int EngineTarget::Open(const std::string& p, int flags, mode_t m) {
  // The kernel opens (and checks permissions), the engine adopts, as in the
  // shim; close-on-exec so the suite's children do not inherit it. The
  // virtual engine does not adopt write-only descriptors (it maps the file:
  // docs/OVERLAY.md): they are opened read-write.
  if (virtual_ && (flags & O_ACCMODE) == O_WRONLY) flags = (flags & ~O_ACCMODE) | O_RDWR;
  int fd = ::open(P(p).c_str(), flags | O_CLOEXEC, m);
  if (fd < 0) return -1;
  auto f = engine_->Adopt(fd, flags);  // closes fd on error
  if (!f.ok()) return Errno(f.status());
  auto file = std::make_unique<File>();
  file->f = std::move(*f);
  file->append = (flags & O_APPEND) != 0;
  std::unique_lock<std::shared_mutex> g(mu_);
  files_[fd] = std::move(file);
  return fd;
}

EngineTarget::File* EngineTarget::Find(int fd) {
  std::shared_lock<std::shared_mutex> g(mu_);
  auto it = files_.find(fd);
  return it == files_.end() ? nullptr : it->second.get();
}

int EngineTarget::Close(int fd) {
  std::unique_ptr<File> file;
  {
    std::unique_lock<std::shared_mutex> g(mu_);
    auto it = files_.find(fd);
    if (it == files_.end()) return errno = EBADF, -1;
    file = std::move(it->second);
    files_.erase(it);
  }
  Status s = file->f->Close();
  return s.ok() ? 0 : Errno(s);
}

ssize_t EngineTarget::Pwrite(int fd, const void* b, size_t n, off_t o) {
  File* f = Find(fd);
  if (f == nullptr) return errno = EBADF, -1;
  auto r = f->f->Pwrite(b, n, static_cast<uint64_t>(o));
  return r.ok() ? static_cast<ssize_t>(*r) : Errno(r.status());
}

ssize_t EngineTarget::Pread(int fd, void* b, size_t n, off_t o) {
  File* f = Find(fd);
  if (f == nullptr) return errno = EBADF, -1;
  auto r = f->f->Pread(b, n, static_cast<uint64_t>(o));
  return r.ok() ? static_cast<ssize_t>(*r) : Errno(r.status());
}

ssize_t EngineTarget::Write(int fd, const void* b, size_t n) {
  File* f = Find(fd);
  if (f == nullptr) return errno = EBADF, -1;
  if (f->append) {
    auto r = f->f->Append(b, n);
    return r.ok() ? static_cast<ssize_t>(n) : Errno(r.status());
  }
  auto r = f->f->Pwrite(b, n, f->offset);
  if (!r.ok()) return Errno(r.status());
  f->offset += *r;
  return static_cast<ssize_t>(*r);
}

int EngineTarget::Stat(const std::string& p, struct stat* st) {
  if (::stat(P(p).c_str(), st) != 0) return -1;
  Status s = engine_->FixStat(P(p).c_str(), st);
  return s.ok() ? 0 : Errno(s);
}

int EngineTarget::Unlink(const std::string& p) { return ::unlink(P(p).c_str()); }
int EngineTarget::Rename(const std::string& a, const std::string& b) { return ::rename(P(a).c_str(), P(b).c_str()); }
int EngineTarget::Mkdir(const std::string& p) { return ::mkdir(P(p).c_str(), 0755); }
int EngineTarget::Rmdir(const std::string& p) { return ::rmdir(P(p).c_str()); }

// ---- runners ------------------------------------------------------------

void OverlayParams::Prepare() {
  buf.assign(size / 10 + 4096, 'x');
  std::mt19937_64 rng(42);
  offs.resize(size / 4096);
  for (auto& x : offs) x = (rng() % (size / 4096)) * 4096;
}

LocalRunner::LocalRunner(std::unique_ptr<Target> t, const OverlayParams& p, std::string dir_name)
    : t_(std::move(t)), p_(p) {
  fs = t_->name;
  mode = t_->mode;
  dir = std::move(dir_name);
}

double LocalRunner::Micro(const std::string& w) {
  // Reads and overwrites need the file: written once per target.
  if (w != "append" && w != "swe") {
    struct stat st;
    if (t_->Stat("/micro.dat", &st) != 0 || static_cast<uint64_t>(st.st_size) != p_.size)
      if (MicroRun(*t_, "swe", p_.size, const_cast<char*>(p_.buf.data()), p_.offs) < 0) return -1;
  }
  uint64_t c0 = ProcessCpuNs();
  double ns = MicroRun(*t_, w, p_.size, const_cast<char*>(p_.buf.data()), p_.offs);
  last_cpu_ns = static_cast<double>(ProcessCpuNs() - c0);
  return ns;
}

bool LocalRunner::Meta(uint64_t n, double ns[5]) { return MetaRun(*t_, n, ns); }

double LocalRunner::Shared(size_t workload, int threads) {
  const std::vector<ConcurrencyWorkload> ws = ConcurrencyWorkloads();
  if (workload >= ws.size()) return -1;
  ConcurrencyPlans plans = PlanConcurrency(ws[workload], threads, p_.conc_ops, p_.conc_bytes);
  return RunConcurrencyOnce(*t_, ws[workload], threads, p_.conc_ops, p_.conc_bytes, plans, &last_cpu_ns);
}

std::unique_ptr<RemoteRunner> RemoteRunner::Start(const std::string& root, const std::string& engine,
                                                  const std::string& mode, const OverlayParams& p,
                                                  const std::string& dir_name) {
  int to[2], from[2];
  if (::pipe2(to, O_CLOEXEC) != 0) return nullptr;
  if (::pipe2(from, O_CLOEXEC) != 0) return ::close(to[0]), ::close(to[1]), nullptr;
  std::string mapfs = BinDir() + "/mapfs";
  std::vector<std::string> args = {mapfs, "run", "--overlay", root, "--engine", engine, "--mode", mode, "--",
                                   mapfs, "bench", "overlay", "--serve", root,
                                   "--size", std::to_string(p.size), "--ops", std::to_string(p.conc_ops),
                                   "--conc-bytes", std::to_string(p.conc_bytes)};
  pid_t pid = ::fork();
  if (pid == 0) {
    // The child: stdin and stdout are the pipes (dup2 clears close-on-exec).
    ::dup2(to[0], 0);
    ::dup2(from[1], 1);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(to[0]);
  ::close(from[1]);
  std::unique_ptr<RemoteRunner> r(new RemoteRunner);
  r->to_ = to[1];
  r->from_ = from[0];
  r->pid_ = pid;
  r->fs = engine + "-preload";
  r->mode = mode;
  r->dir = dir_name;
  if (pid < 0) return nullptr;
  // The child says "ok" once it is set up under the shim.
  std::vector<double> none;
  if (!r->Ask("hello", &none)) return nullptr;
  return r;
}

RemoteRunner::~RemoteRunner() {
  if (to_ >= 0) ::close(to_);  // end of file: the child exits
  if (from_ >= 0) ::close(from_);
  if (pid_ > 0) {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

bool RemoteRunner::Ask(const std::string& cmd, std::vector<double>* out) {
  std::string line = cmd + "\n";
  // A dead child must fail the call, not kill the suite.
  struct sigaction ign {}, old {};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ign, &old);
  bool sent = ::write(to_, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  ::sigaction(SIGPIPE, &old, nullptr);
  if (!sent) return false;
  std::string answer;
  for (;;) {
    size_t nl = pending_.find('\n');
    if (nl != std::string::npos) {
      answer = pending_.substr(0, nl);
      pending_.erase(0, nl + 1);
      break;
    }
    char b[512];
    ssize_t n = ::read(from_, b, sizeof b);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    pending_.append(b, static_cast<size_t>(n));
  }
  std::istringstream in(answer);
  std::string word;
  in >> word;
  if (word != "ok") return false;
  double v;
  while (in >> v) out->push_back(v);
  return true;
}

double RemoteRunner::Micro(const std::string& w) {
  std::vector<double> v;
  if (!Ask("micro " + w, &v) || v.size() != 2) return -1;
  last_cpu_ns = v[1];
  return v[0];
}

bool RemoteRunner::Meta(uint64_t n, double ns[5]) {
  std::vector<double> v;
  if (!Ask("meta " + std::to_string(n), &v) || v.size() != 5) return false;
  for (int i = 0; i < 5; i++) ns[i] = v[i];
  return true;
}

double RemoteRunner::Shared(size_t workload, int threads) {
  std::vector<double> v;
  if (!Ask("shared " + std::to_string(workload) + " " + std::to_string(threads), &v) || v.size() != 2) return -1;
  last_cpu_ns = v[1];
  return v[0];
}

int ServeOverlayBench(const std::string& root, const OverlayParams& p) {
  LocalRunner r(std::make_unique<SyscallTarget>(root, "shim"), p, "");
  char line[256];
  while (std::fgets(line, sizeof line, stdin) != nullptr) {
    std::istringstream in(line);
    std::string cmd, w;
    in >> cmd;
    std::string answer = "err";
    if (cmd == "hello") {
      answer = "ok";
    } else if (cmd == "micro" && (in >> w)) {
      double ns = r.Micro(w);
      if (ns >= 0) answer = "ok " + std::to_string(ns) + " " + std::to_string(r.last_cpu_ns);
    } else if (cmd == "meta") {
      uint64_t n = 0;
      double ns[5];
      if ((in >> n) && r.Meta(n, ns)) {
        answer = "ok";
        for (double x : ns) answer += " " + std::to_string(x);
      }
    } else if (cmd == "shared") {
      size_t k = 0;
      int threads = 0;
      double ns = (in >> k >> threads) ? r.Shared(k, threads) : -1;
      if (ns >= 0) answer = "ok " + std::to_string(ns) + " " + std::to_string(r.last_cpu_ns);
    }
    std::printf("%s\n", answer.c_str());
    std::fflush(stdout);
  }
  r.target().Unlink("/micro.dat");
  return 0;
}

}  // namespace mapfs::bench
