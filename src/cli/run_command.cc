// `mapfs run [--pool POOL] [--mount PREFIX] [--overlay DIR [--engine E]]
// [--mode M] -- COMMAND ARGS...`: runs COMMAND with the LD_PRELOAD shim, so
// paths under PREFIX are files of POOL, and files under DIR (a directory of
// a kernel file system) get the overlay engine's data path (src/overlay).
// With --overlay alone no pool is used. Children inherit the environment,
// hence the shim too.
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "medium/pool.h"

namespace mapfs::cli {
namespace {

#ifndef MAPFS_INSTALL_LIBDIR
#define MAPFS_INSTALL_LIBDIR "lib"
#endif

// libmapfs-preload.so relative to bin/mapfs: installed, in LIBDIR/mapfs/
// under the same prefix; in the build tree, in lib/.
std::string ShimPath() {
  if (const char* p = std::getenv("MAPFS_PRELOAD_LIB")) return p;
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return "";
  exe[n] = '\0';
  std::string dir(exe);
  dir = dir.substr(0, dir.rfind('/'));
  std::string prefix = dir.substr(0, dir.rfind('/'));
  for (std::string lib : {prefix + "/" MAPFS_INSTALL_LIBDIR "/mapfs/libmapfs-preload.so", prefix + "/lib/libmapfs-preload.so"}) {
    struct stat st;
    if (::stat(lib.c_str(), &st) == 0) return lib;
  }
  return "";
}

std::string Absolute(const std::string& p) {
  if (!p.empty() && p[0] == '/') return p;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return p;
  return std::string(cwd) + "/" + p;
}

// Why `p` cannot be the shim's prefix, or "" if it can: an absolute,
// normal path below the root (the shim compares paths with it textually).
std::string BadPrefix(const std::string& p) {
  if (p.empty() || p[0] != '/') return "must be an absolute path";
  if (p == "/") return "cannot be / (every path would be the pool's, the program's own files too)";
  if (p.size() >= PATH_MAX) return "is too long";
  if (p.back() == '/') return "must not end with /";
  for (size_t i = 0; i < p.size();) {
    size_t j = p.find('/', i + 1);
    if (j == std::string::npos) j = p.size();
    std::string c = p.substr(i + 1, j - i - 1);
    if (c.empty() || c == "." || c == "..") return "must be a normal path (no //, . or .. components)";
    i = j;
  }
  return "";
}

}  // namespace

int Run(const std::vector<std::string>& args) {
  std::string pool = std::getenv("MAPFS_POOL") ? std::getenv("MAPFS_POOL") : "";
  std::string mount, mode, overlay, engine = "split";
  bool mount_given = false, pool_given = !pool.empty();
  size_t i = 0;
  for (; i < args.size(); i++) {
    const std::string& a = args[i];
    if (a == "--") {
      i++;
      break;
    }
    if (a == "--pool" || a == "--mount" || a == "--mode" || a == "--overlay" || a == "--engine") {
      if (i + 1 >= args.size() || args[i + 1] == "--") {
        std::fprintf(stderr, "mapfs run: %s needs a value\n", a.c_str());
        return 2;
      }
      (a == "--pool" ? pool : a == "--mount" ? mount : a == "--mode" ? mode : a == "--overlay" ? overlay : engine) =
          args[++i];
      mount_given |= a == "--mount";
      pool_given |= a == "--pool";
    } else if (a.rfind("--", 0) == 0) {
      std::fprintf(stderr, "mapfs run: unknown option %s\n", a.c_str());
      return 2;
    } else {
      break;  // the command starts here
    }
  }
  if (i >= args.size()) {
    std::fprintf(stderr,
                 "usage: mapfs run [--pool POOL] [--mount PREFIX] [--overlay DIR [--engine split|virtual]]\n"
                 "                 [--mode posix|sync|strict] -- COMMAND ARGS...\n");
    return 2;
  }
  if (!mode.empty() && mode != "posix" && mode != "sync" && mode != "strict") {
    std::fprintf(stderr, "mapfs run: --mode must be posix, sync or strict\n");
    return 2;
  }
  if (engine != "split" && engine != "virtual") {
    std::fprintf(stderr, "mapfs run: --engine must be split or virtual\n");
    return 2;
  }
  if (!overlay.empty()) {
    char real[PATH_MAX];
    struct stat ost;
    if (::realpath(overlay.c_str(), real) == nullptr || ::stat(real, &ost) != 0 || !S_ISDIR(ost.st_mode)) {
      std::fprintf(stderr, "mapfs run: --overlay %s: %s\n", overlay.c_str(),
                   errno ? std::strerror(errno) : "not a directory");
      return 2;
    }
    if (std::string(real) == "/") {
      std::fprintf(stderr, "mapfs run: --overlay cannot be / (every file would be the overlay's)\n");
      return 2;
    }
    ::setenv("MAPFS_OVERLAY", real, 1);
    ::setenv("MAPFS_OVERLAY_ENGINE", engine.c_str(), 1);
    if (!mode.empty()) ::setenv("MAPFS_OVERLAY_MODE", mode.c_str(), 1);
  }
  // With --overlay alone, no pool: only the overlay is routed.
  bool use_pool = overlay.empty() || pool_given;
  if (pool.empty()) pool = "/dev/shm/mapfs.pool";
  // The prefix the shim will use: --mount, else an inherited MAPFS_MOUNT,
  // else /mapfs. A bad one would route nothing (or everything): refused.
  const char* env_mount = std::getenv("MAPFS_MOUNT");
  if (mount_given || (env_mount != nullptr && *env_mount != '\0')) {
    std::string m = mount_given ? mount : env_mount;
    std::string why = BadPrefix(m);
    if (!why.empty()) {
      std::fprintf(stderr, "mapfs run: %s '%s': %s\n", mount_given ? "--mount" : "MAPFS_MOUNT", m.c_str(), why.c_str());
      return 2;
    }
  }
  struct stat st;
  if (use_pool && ::stat(pool.c_str(), &st) != 0) {
    std::fprintf(stderr, "mapfs run: %s: %s (format one with 'mapfs mkfs')\n", pool.c_str(), std::strerror(errno));
    return 1;
  }
  // Said once, here: the shim inside the program could only fail each
  // call on the prefix.
  if (Status ps = use_pool ? medium::Pool::Probe(pool) : Status::Ok(); !ps.ok()) {
    std::fprintf(stderr, "mapfs run: %s\n", ps.message().c_str());
    return 1;
  }
  std::string shim = ShimPath();
  if (shim.empty()) {
    std::fprintf(stderr, "mapfs run: libmapfs-preload.so not found next to this program (set MAPFS_PRELOAD_LIB)\n");
    return 1;
  }
  if (use_pool) ::setenv("MAPFS_POOL", Absolute(pool).c_str(), 1);
  if (!mount.empty()) ::setenv("MAPFS_MOUNT", mount.c_str(), 1);
  if (!mode.empty()) ::setenv("MAPFS_MODE", mode.c_str(), 1);
  std::string pre = shim;
  if (const char* old = std::getenv("LD_PRELOAD"); old && *old) pre += std::string(":") + old;
  ::setenv("LD_PRELOAD", pre.c_str(), 1);
  std::vector<char*> argv;
  for (size_t k = i; k < args.size(); k++) argv.push_back(const_cast<char*>(args[k].c_str()));
  argv.push_back(nullptr);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "mapfs run: %s: %s\n", argv[0], std::strerror(errno));
  return errno == ENOENT ? 127 : 126;
}

}  // namespace mapfs::cli
