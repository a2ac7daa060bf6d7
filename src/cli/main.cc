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
               "  mkfs POOL --size SIZE [--page 4k|2m] [--mode posix|sync|strict] [--top-level N] [--reserve]\n"
               "       [--perm OCTAL] [--group GROUP]\n"
               "                        format POOL (a file, a tmpfs file or a DAX device); --reserve\n"
               "                        takes all its memory now, else 2 MiB at a time as it is used;\n"
               "                        the pool file is 0600 unless --perm/--group share it\n"
               "  trim POOL             give the memory of free pages back (freed pages are kept)\n"
               "  info POOL             format, sizes, space used and free, level occupancy\n"
               "  fsck POOL [--repair]  check every structure; --repair fixes what it can\n"
               "\n"
               "  Files in a pool, no kernel mount needed (paths in the pool start at /):\n"
               "  ls [-l] [-a] POOL [PATH...]     list a directory (or name a file)\n"
               "  cat POOL PATH...                write files to stdout\n"
               "  put POOL LOCAL PATH             copy a local file in (LOCAL - = stdin)\n"
               "  get POOL PATH LOCAL             copy a file out (LOCAL - = stdout)\n"
               "  rm [-r] [-f] POOL PATH...       remove files (-r: directory trees)\n"
               "  mkdir [-p] POOL PATH...         make directories (-p: with parents)\n"
               "  mv POOL FROM... TO              rename, or move into directory TO\n"
               "  ln [-s] POOL FROM... TO         hard link, or -s symbolic link to FROM\n"
               "  stat [-L] POOL PATH...          every stat field (-L: follow symlinks)\n"
               "  df POOL                         space and inodes used and free\n"
               "\n"
               "  run [--pool POOL] [--mount PREFIX] [--mode M] -- COMMAND ARGS...\n"
               "                        run COMMAND with paths under PREFIX (default /mapfs) in POOL\n"
               "                        (default /dev/shm/mapfs.pool), through the LD_PRELOAD shim\n"
               "  run --overlay DIR [--engine split|virtual] [--mode M] [--pool POOL] -- COMMAND ARGS...\n"
               "                        files under DIR (a kernel file system) get the overlay's\n"
               "                        user-space data path (docs/OVERLAY.md); without --pool, no pool\n"
               "  mount POOL DIR [--mode M] [-f] [--no-default-permissions] [--options FUSE-OPTS]\n"
               "                        serve POOL at DIR through FUSE, for any program (-f: stay in\n"
               "                        the foreground); SIGINT/SIGTERM unmount cleanly;\n"
               "                        --no-default-permissions: only mapfs checks permissions\n"
               "  umount DIR            unmount DIR and wait for its daemon to finish\n"
               "  overlay cat|import|export|fsck PATH...\n"
               "                        files of the overlay's virtual engine, outside the shim\n"
               "\n"
               "  bench SUITE [--quick] [--json FILE] [--repeat N] [--size S] [--ops N] [--mode M]\n"
               "                        benchmarks against tmpfs, ext4 and the floor (BENCHMARKS.md); SUITE is\n"
               "                        micro|meta|dir|pswap|concurrency|ycsb|rocksdb|sqlite|fio|mapping|overlay|all\n"
               "  bench plot RESULTS.json... --out DIR   PNG charts of results\n"
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
  if (cmd == "trim") return mapfs::cli::Trim(args);
  if (cmd == "fsck") return mapfs::cli::Fsck(args);
  if (cmd == "ls") return mapfs::cli::Ls(args);
  if (cmd == "cat") return mapfs::cli::Cat(args);
  if (cmd == "put") return mapfs::cli::Put(args);
  if (cmd == "get") return mapfs::cli::Get(args);
  if (cmd == "rm") return mapfs::cli::Rm(args);
  if (cmd == "mkdir") return mapfs::cli::Mkdir(args);
  if (cmd == "mv") return mapfs::cli::Mv(args);
  if (cmd == "ln") return mapfs::cli::Ln(args);
  if (cmd == "stat") return mapfs::cli::Stat(args);
  if (cmd == "df") return mapfs::cli::Df(args);
  if (cmd == "bench") return mapfs::cli::Bench(args);
  if (cmd == "run") return mapfs::cli::Run(args);
  if (cmd == "mount") return mapfs::cli::Mount(args);
  if (cmd == "umount") return mapfs::cli::Umount(args);
  if (cmd == "version") return mapfs::cli::Version(args);
  if (cmd == "overlay") return mapfs::cli::Overlay(args);
  std::fprintf(stderr, "mapfs: unknown command '%s'\n", cmd.c_str());
  Usage(stderr);
  return 2;
}
