// libFuzzer target over mount + fsck (+ repair) + use of a pool image
// (issue 7, part 4). Built only with -DMAPFS_FUZZ=ON and clang
// (tests/crash/fuzz/run.sh); the CI runs it for a minute.
//
// Input: a sparse pool image, a sequence of runs
//     u32 pool offset (LE) | u16 length (LE) | length bytes
// applied in order to a zero-filled 16 MiB file (offsets wrap around the
// pool size). The seed corpus (make_seeds.cc) holds the non-zero runs of
// small real pools, so mutations land on real structures.
//
// Each input: the core mounts the image (recovery runs), checks the page
// table, the partitions and the file system, repairs what it found and
// checks again; then the C API mounts it, reads every file under / (two
// levels deep), writes, reads back and deletes a file. Anything may fail
// with an error; nothing may crash, hang or trip the sanitizers.
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fs/file_system.h"
#include "mapfs/mapfs.h"
#include "mount/mount.h"

namespace {

constexpr uint64_t kPoolSize = 16ull << 20;
std::string g_path;

void DropSegment() {
  uint8_t uuid[16];
  int fd = ::open(g_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  bool ok = ::pread(fd, uuid, 16, 16) == 16;
  ::close(fd);
  if (!ok) return;
  static const char* hex = "0123456789abcdef";
  std::string name = "/mapfs-";
  for (uint8_t b : uuid) {
    name += hex[b >> 4];
    name += hex[b & 15];
  }
  ::shm_unlink(name.c_str());
  for (const char* k : {".locks", ".ofd"}) ::unlink(("/dev/shm" + name + k).c_str());
}

bool WriteImage(const uint8_t* data, size_t size) {
  int fd = ::open(g_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  bool ok = ::ftruncate(fd, static_cast<off_t>(kPoolSize)) == 0;
  size_t i = 0;
  while (ok && i + 6 <= size) {
    uint32_t off;
    uint16_t len;
    std::memcpy(&off, data + i, 4);
    std::memcpy(&len, data + i + 4, 2);
    i += 6;
    len = static_cast<uint16_t>(std::min<size_t>(len, size - i));
    uint64_t o = off % kPoolSize;
    size_t n = std::min<uint64_t>(len, kPoolSize - o);
    ok = ::pwrite(fd, data + i, n, static_cast<off_t>(o)) == static_cast<ssize_t>(n);
    i += len;
  }
  ::close(fd);
  return ok;
}

void CheckAndRepair() {
  auto fs = mapfs::fs::FileSystem::Mount(g_path);
  if (!fs.ok()) return;
  mapfs::Mount& m = (*fs)->mount();
  bool alone = m.pool().exclusive_open();
  bool bad = !m.vm().Check(alone).ok();
  bad |= !m.space().Check().ok();
  mapfs::fs::FsCheckReport r = (*fs)->Check();
  if (bad || !r.problems.empty()) {
    (void)m.vm().Rebuild();
    (void)m.space().Reconcile();
    (void)(*fs)->Repair();
    (void)m.vm().Check(alone);
    (void)m.space().Check();
    (void)(*fs)->Check();
  }
  (void)(*fs)->Unmount();
}

void ReadTree(mapfs_t* fs, const std::string& dir, int depth) {
  mapfs_dir_t* d = mapfs_opendir(fs, dir.c_str());
  if (d == nullptr) return;
  std::vector<std::string> names;
  for (int n = 0; n < 10000; n++) {
    struct dirent* e = mapfs_readdir(d);
    if (e == nullptr) break;
    if (std::strcmp(e->d_name, ".") && std::strcmp(e->d_name, "..")) names.push_back(e->d_name);
  }
  mapfs_closedir(d);
  static char buf[1 << 16];
  for (auto& n : names) {
    std::string p = (dir == "/" ? "" : dir) + "/" + n;
    struct stat st;
    if (mapfs_lstat(fs, p.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (depth > 0) ReadTree(fs, p, depth - 1);
    } else if (S_ISLNK(st.st_mode)) {
      (void)mapfs_readlink(fs, p.c_str(), buf, sizeof buf);
    } else {
      int fd = mapfs_open(fs, p.c_str(), O_RDONLY);
      if (fd < 0) continue;
      for (off_t off = 0; off < (8 << 20); off += sizeof buf)
        if (mapfs_pread(fs, fd, buf, sizeof buf, off) <= 0) break;
      mapfs_close(fs, fd);
    }
  }
}

void Use() {
  mapfs_t* fs = mapfs_mount(g_path.c_str(), nullptr);
  if (fs == nullptr) return;
  ReadTree(fs, "/", 2);
  static char data[20000], back[20000];
  for (size_t i = 0; i < sizeof data; i++) data[i] = static_cast<char>(i * 7);
  int fd = mapfs_open(fs, "/fuzz-usable", O_CREAT | O_RDWR, 0644);
  if (fd >= 0) {
    (void)mapfs_pwrite(fs, fd, data, sizeof data, 0);
    (void)mapfs_pread(fs, fd, back, sizeof back, 0);
    mapfs_close(fs, fd);
    (void)mapfs_unlink(fs, "/fuzz-usable");
  }
  (void)mapfs_unmount(fs);
}

}  // namespace

namespace mapfs::fuzz {
int MakeSeeds(const std::string& dir);
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("MAPFS_FUZZ_MAKE_SEEDS")) std::exit(mapfs::fuzz::MakeSeeds(dir) == 4 ? 0 : 1);
  g_path = "/dev/shm/mapfs-fuzz-" + std::to_string(::getpid()) + ".pool";
  std::atexit([] { ::unlink(g_path.c_str()); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!WriteImage(data, size)) return 0;
  CheckAndRepair();
  Use();
  DropSegment();
  return 0;
}
