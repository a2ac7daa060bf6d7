// The `mapfs` command line front.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace {

void Usage(FILE* f) {
  std::fprintf(f,
               "usage: mapfs COMMAND [ARGS]\n"
               "\n"
               "  mkfs POOL --size SIZE [--page 4k|2m] [--mode posix|sync|strict] [--top-level N]\n"
               "                        format POOL (a file, a tmpfs file or a DAX device)\n"
               "  info POOL             format, sizes, space used and free, level occupancy\n"
               "  fsck POOL [--repair]  check every structure; --repair fixes what it can\n"
               "  bench pswap [--json FILE] [--quick] [--repeat N] [--pool PATH]\n"
               "                        pswap against copying (ctFS Fig. 6)\n"
               "  version               library and format version\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    Usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    Usage(stdout);
    return 0;
  }
  if (cmd == "mkfs") return mapfs::cli::Mkfs(args);
  if (cmd == "info") return mapfs::cli::Info(args);
  if (cmd == "fsck") return mapfs::cli::Fsck(args);
  if (cmd == "bench") return mapfs::cli::Bench(args);
  if (cmd == "version") return mapfs::cli::Version(args);
  std::fprintf(stderr, "mapfs: unknown command '%s'\n", cmd.c_str());
  Usage(stderr);
  return 2;
}
