// The fuzzer's seed corpus: small real pools (16 MiB, the smallest size),
// written in the fuzzer's sparse input format (pool_fuzz.cc): runs of the
// image's non-zero bytes.
//   fresh     a new file system, empty
//   tree      directories with block splits, files of every partition size
//             up to 2 MiB+, symlinks short and long, a hard link
//   dirty     the tree left by a mount that vanished (dirty flag set), with
//             one committed redo record still in its slot to replay
//   huge      a pool with 2 MiB mapping pages, a few files
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>

#include "common/crc32c.h"
#include "mapfs/mapfs.h"
#include "medium/pool_format.h"
#include "medium/redo_log.h"
#include "pool_image.h"

namespace mapfs::fuzz {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Runs of non-zero bytes (gaps under 32 bytes bridged), as the fuzzer reads
// them: u32 offset | u16 length | bytes.
std::string Sparse(const std::string& img) {
  std::string out;
  size_t i = 0;
  while (i < img.size()) {
    if (img[i] == 0) {
      i++;
      continue;
    }
    size_t end = i, zeros = 0;
    while (end < img.size() && end - i < 65535 && zeros < 32) {
      zeros = img[end] == 0 ? zeros + 1 : 0;
      end++;
    }
    end -= zeros;
    uint32_t off = static_cast<uint32_t>(i);
    uint16_t len = static_cast<uint16_t>(end - i);
    out.append(reinterpret_cast<const char*>(&off), 4);
    out.append(reinterpret_cast<const char*>(&len), 2);
    out.append(img, i, len);
    i = end;
  }
  return out;
}

// A file of n bytes with 64 bytes of data at each end (zeros between keep
// the seed small).
bool Put(mapfs_t* fs, const std::string& p, size_t n) {
  char c[64];
  for (size_t i = 0; i < sizeof c; i++) c[i] = static_cast<char>(i * 131 + p.size() + 1);
  int fd = mapfs_open(fs, p.c_str(), O_CREAT | O_WRONLY, 0644);
  if (fd < 0) return false;
  size_t k = std::min(n, sizeof c);
  bool ok = mapfs_pwrite(fs, fd, c, k, 0) == static_cast<ssize_t>(k) &&
            (n <= 128 || mapfs_pwrite(fs, fd, c, 64, static_cast<off_t>(n - 64)) == 64) &&
            mapfs_ftruncate(fs, fd, static_cast<off_t>(n)) == 0;
  return mapfs_close(fs, fd) == 0 && ok;
}

bool Tree(mapfs_t* fs) {
  bool ok = mapfs_mkdir(fs, "/a", 0755) == 0 && mapfs_mkdir(fs, "/a/b", 0700) == 0;
  for (auto [p, n] : {std::pair<const char*, size_t>{"/small", 100}, {"/l1", 20000}, {"/l2", 200000}, {"/big", 2200000}})
    ok = ok && Put(fs, p, n);
  for (int i = 0; i < 80 && ok; i++) ok = Put(fs, "/a/f" + std::to_string(i), static_cast<size_t>(i * 13));
  ok = ok && mapfs_symlink(fs, "/a/f1", "/s") == 0 && mapfs_symlink(fs, std::string(300, 'y').c_str(), "/long") == 0;
  return ok && mapfs_link(fs, "/small", "/a/b/hard") == 0 && mapfs_unlink(fs, "/a/f3") == 0;
}

bool Make(const std::string& pool, unsigned page, bool tree) {
  struct mapfs_mkfs_options o{};
  o.size = 16ull << 20;
  o.page_size = page;
  o.mode = MAPFS_MODE_SYNC;
  if (mapfs_mkfs(pool.c_str(), &o) != 0) return false;
  mapfs_t* fs = mapfs_mount(pool.c_str(), nullptr);
  if (fs == nullptr) return false;
  bool ok = tree ? Tree(fs) : Put(fs, "/one", 5000);
  return mapfs_unmount(fs) == 0 && ok;
}

// Marks the image dirty and leaves one committed record in redo slot 0: the
// size of the inode holding /small (found by walking the image) set to 50.
void Dirty(std::string* img) {
  namespace f = medium::format;
  crash::PoolImage pi(*img);
  uint64_t target = 0;
  for (auto& [ino, p] : pi.Inodes()) {
    if (pi.Get<uint64_t>(p + 24) == 100) target = p + 24;  // Inode::size of /small
  }
  const auto& h = pi.header();
  char* slot = img->data() + h.redo_off;
  uint64_t rec[3] = {target, 8, 50};
  medium::RedoSlotHeader sh{};
  sh.seq = 7;
  sh.bytes = sizeof rec;
  uint32_t crc = Crc32c(&sh.seq, sizeof sh.seq);
  crc = Crc32c(&sh.bytes, sizeof sh.bytes, crc);
  sh.crc = Crc32c(rec, sizeof rec, crc);
  std::memcpy(slot, &sh, sizeof sh);
  std::memcpy(slot + sizeof sh, rec, sizeof rec);
  uint64_t one = 1;
  std::memcpy(img->data() + f::kStateOff + offsetof(f::PoolState, dirty), &one, 8);
}

void DropSegment(const std::string& img) {
  static const char* hex = "0123456789abcdef";
  std::string name = "/mapfs-";
  for (int i = 16; i < 32; i++) {
    name += hex[static_cast<uint8_t>(img[i]) >> 4];
    name += hex[static_cast<uint8_t>(img[i]) & 15];
  }
  ::shm_unlink(name.c_str());
}

}  // namespace

int MakeSeeds(const std::string& dir) {
  std::string pool = "/dev/shm/mapfs-fuzz-seed-" + std::to_string(::getpid()) + ".pool";
  struct Seed {
    const char* name;
    unsigned page;
    bool tree, dirty;
  };
  int made = 0;
  for (Seed s : {Seed{"fresh", 4096, false, false}, Seed{"tree", 4096, true, false}, Seed{"dirty", 4096, true, true},
                 Seed{"huge", 2 << 20, false, false}}) {
    if (!Make(pool, s.page, s.tree)) {
      std::fprintf(stderr, "make_seeds: %s: %s\n", s.name, mapfs_last_error());
      continue;
    }
    std::string img = ReadAll(pool);
    DropSegment(img);
    if (s.dirty) Dirty(&img);
    std::string sparse = Sparse(img);
    std::ofstream out(dir + "/" + s.name, std::ios::binary | std::ios::trunc);
    out.write(sparse.data(), static_cast<std::streamsize>(sparse.size()));
    std::printf("make_seeds: %s/%s: %zu bytes (a %zu-byte pool)\n", dir.c_str(), s.name, sparse.size(), img.size());
    made += out.good();
  }
  ::unlink(pool.c_str());
  return made;
}

}  // namespace mapfs::fuzz
