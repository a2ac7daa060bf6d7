// `mapfs mount POOL DIR [--mode M] [-f] [--no-default-permissions] [--options OPTS]` and `mapfs umount DIR`:
// the FUSE front (src/fuse).
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/parse.h"
#ifdef MAPFS_HAVE_FUSE
#include "fuse/daemon.h"
#endif

namespace mapfs::cli {

int Mount(const std::vector<std::string>& args) {
  Parsed p = Parse(args, {"--mode", "--options"}, {"--foreground", "--no-default-permissions"}, "f");
  if (!p.error.empty() || p.pos.size() != 2) {
    if (!p.error.empty()) std::fprintf(stderr, "mapfs mount: %s\n", p.error.c_str());
    std::fprintf(stderr, "usage: mapfs mount POOL DIR [--mode posix|sync|strict] [-f] [--no-default-permissions]\n"
                 "                   [--options FUSE-OPTIONS]\n");
    return 2;
  }
#ifdef MAPFS_HAVE_FUSE
  fuse::MountOptions o;
  o.pool = p.pos[0];
  o.dir = p.pos[1];
  o.foreground = p.Has("-f") || p.Has("--foreground");
  o.default_permissions = !p.Has("--no-default-permissions");
  if (const std::string* m = p.Get("--mode")) {
    if (*m == "posix") o.mode = 0;
    else if (*m == "sync") o.mode = 1;
    else if (*m == "strict") o.mode = 2;
    else {
      std::fprintf(stderr, "mapfs mount: --mode must be posix, sync or strict\n");
      return 2;
    }
  }
  if (const std::string* fo = p.Get("--options")) o.fuse_opts = *fo;
  return fuse::MountMain(o);
#else
  std::fprintf(stderr, "mapfs mount: this mapfs was built without libfuse3 (install libfuse3-dev and fuse3, run cmake again)\n");
  return 1;
#endif
}

int Umount(const std::vector<std::string>& args) {
  if (args.size() != 1) {
    std::fprintf(stderr, "usage: mapfs umount DIR\n");
    return 2;
  }
#ifdef MAPFS_HAVE_FUSE
  return fuse::UmountMain(args[0]);
#else
  std::fprintf(stderr, "mapfs umount: this mapfs was built without libfuse3\n");
  return 1;
#endif
}

}  // namespace mapfs::cli
