#include "app_bench.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "bench_util.h"
#include "mapfs/mapfs.h"

namespace mapfs::bench {

bool AppFixture::Setup(const std::string& suite, const AppBenchOptions& o, uint64_t bytes) {
  std::string tag = suite + "-" + std::to_string(::getpid());
  pool_ = o.dir + "/mapfs-bench-" + tag + ".pool";
  tmpfs_dir_ = o.dir + "/mapfs-bench-" + tag + "-tmpfs";
  struct mapfs_mkfs_options mk {};
  mk.size = std::max<uint64_t>(2 * bytes, 1ull << 30);
  mk.page_size = 4096;
  mk.mode = o.mode == "posix" ? MAPFS_MODE_POSIX : o.mode == "strict" ? MAPFS_MODE_STRICT : MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool_.c_str(), &mk) != 0) {
    std::fprintf(stderr, "mapfs bench %s: mkfs %s: %s\n", suite.c_str(), pool_.c_str(), mapfs_last_error());
    pool_.clear();
    return false;
  }
  ::mkdir(tmpfs_dir_.c_str(), 0700);
  fs_.push_back({"tmpfs", "-", tmpfs_dir_, ""});
  if (MountExt4OrSay(ext4_, std::max<uint64_t>(bytes + bytes / 2, 512ull << 20), 0, o.dir))
    fs_.push_back({"ext4", "-", ext4_.dir(), ""});
  std::string mount = "/mapfs-bench-" + suite;
  fs_.push_back({"mapfs-preload", o.mode, mount,
                 ShellQuote(BinDir() + "/mapfs") + " run --pool " + ShellQuote(pool_) + " --mount " + mount +
                     " --mode " + o.mode + " -- "});
  return true;
}

AppFixture::~AppFixture() {
  if (!pool_.empty()) ::unlink(pool_.c_str());
  if (!tmpfs_dir_.empty() && std::system(("rm -rf " + ShellQuote(tmpfs_dir_)).c_str()) != 0)
    std::fprintf(stderr, "mapfs bench: cannot remove %s\n", tmpfs_dir_.c_str());
}

}  // namespace mapfs::bench
