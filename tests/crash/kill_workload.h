// The writer of the process-kill tests (kill_test.cc): one seeded stream of
// file operations, run either through the C API (a forked child of the
// test) or through plain POSIX calls by kill_writer, a program run under the
// LD_PRELOAD shim (`mapfs run`). Header-only and free of mapfs and gtest, so
// the writer program links nothing but libc.
//
// The writer reports on a pipe, one line per event, each written with one
// write(2) (atomic on a pipe):
//   B <seq> <op>   the operation is about to start
//   E <seq>        it returned successfully (acknowledged)
//   X <seq> <errno> <op>  it failed (the test fails: the stream is valid)
// where <op> is one of
//   W <path> <off> <len> <tag>   pwrite of Pattern(tag) bytes [off, off+len)
//   C <path>                     create (O_CREAT|O_EXCL), empty
//   R <from> <to>                rename (replacing <to> when it exists)
//   U <path>                     unlink
//   T <path> <size>              truncate
//   F <path>                     fsync (in posix mode: acknowledges writes)
// Paths are relative to the writer's root ("k/f3", "k/d/n17").
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace mapfs::crash {

// Byte i of pattern `tag` (i counted from the file's start).
inline uint8_t PatByte(uint64_t tag, uint64_t i) {
  uint64_t x = (tag + 1) * 0x9E3779B97F4A7C15ull ^ (i >> 3) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<uint8_t>(x >> (8 * (i & 7)));
}
inline std::string Pattern(uint64_t tag, uint64_t off, uint64_t len) {
  std::string s(len, '\0');
  for (uint64_t i = 0; i < len; i++) s[i] = static_cast<char>(PatByte(tag, off + i));
  return s;
}

class WRng {
 public:
  explicit WRng(uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull + 7) {}
  uint64_t Next() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  uint64_t Below(uint64_t n) { return Next() % n; }

 private:
  uint64_t s_;
};

// The calls the writer needs, POSIX-shaped (-1 and errno on failure).
class Io {
 public:
  virtual ~Io() = default;
  virtual int Open(const std::string& p, int flags) = 0;
  virtual ssize_t Pwrite(int fd, const void* b, size_t n, off_t off) = 0;
  virtual int Fsync(int fd) = 0;
  virtual int Close(int fd) = 0;
  virtual int Rename(const std::string& a, const std::string& b) = 0;
  virtual int Unlink(const std::string& p) = 0;
  virtual int Truncate(const std::string& p, off_t size) = 0;
};

inline void Say(int fd, const std::string& line) {
  std::string l = line + "\n";
  ssize_t r = ::write(fd, l.data(), l.size());
  (void)r;
}

// Runs operations seq0, seq0+1, ... (forever when n < 0) on the files under
// "k" that the writer is told exist (`names`, paths relative to the root).
// Returns 0 after n operations, 4 when one failed.
inline int RunWriter(Io& io, int out, uint64_t seed, uint64_t seq0, long n, std::vector<std::string> names) {
  WRng rng(seed);
  std::vector<uint64_t> sizes(names.size(), 0);
  auto dir = [&](uint64_t r) { return r % 3 == 0 ? std::string("k/d/") : std::string("k/"); };
  for (uint64_t seq = seq0; n < 0 || static_cast<long>(seq - seq0) < n; seq++) {
    uint64_t r = rng.Below(100);
    if (names.size() < 2) r = 55;                       // create
    if (names.size() >= 12 && r >= 50 && r < 60) r = 72;  // unlink instead
    size_t i = names.empty() ? 0 : rng.Below(names.size());
    std::string op;
    int err = 0;
    if (r < 50) {
      uint64_t off = rng.Below(4) == 0 ? sizes[i] : rng.Below(200000);
      uint64_t len = rng.Below(8) == 0 ? 100000 + rng.Below(200000) : 1 + rng.Below(20000);
      op = "W " + names[i] + " " + std::to_string(off) + " " + std::to_string(len) + " " + std::to_string(seq);
      std::string data = Pattern(seq, off, len);
      Say(out, "B " + std::to_string(seq) + " " + op);
      int fd = io.Open(names[i], O_WRONLY);
      if (fd < 0) {
        err = errno;
      } else {
        size_t done = 0;
        while (done < len) {
          ssize_t w = io.Pwrite(fd, data.data() + done, len - done, static_cast<off_t>(off + done));
          if (w <= 0) {
            err = w < 0 ? errno : EIO;
            break;
          }
          done += static_cast<size_t>(w);
        }
        if (io.Close(fd) != 0 && err == 0) err = errno;
      }
      if (off + len > sizes[i]) sizes[i] = off + len;
    } else if (r < 60) {
      std::string p = dir(rng.Next()) + "n" + std::to_string(seq);
      op = "C " + p;
      Say(out, "B " + std::to_string(seq) + " " + op);
      int fd = io.Open(p, O_CREAT | O_EXCL | O_WRONLY);
      if (fd < 0 || io.Close(fd) != 0) err = errno;
      names.push_back(p);
      sizes.push_back(0);
    } else if (r < 70) {
      // Onto a new name, or over another file.
      bool over = rng.Below(2) == 0;
      size_t j = rng.Below(names.size());
      if (j == i) over = false;
      std::string to = over ? names[j] : dir(rng.Next()) + "r" + std::to_string(seq);
      op = "R " + names[i] + " " + to;
      Say(out, "B " + std::to_string(seq) + " " + op);
      if (io.Rename(names[i], to) != 0) err = errno;
      if (over) {
        sizes[j] = sizes[i];
      } else {
        names.push_back(to);
        sizes.push_back(sizes[i]);
      }
      names.erase(names.begin() + static_cast<long>(i));
      sizes.erase(sizes.begin() + static_cast<long>(i));
    } else if (r < 77) {
      op = "U " + names[i];
      Say(out, "B " + std::to_string(seq) + " " + op);
      if (io.Unlink(names[i]) != 0) err = errno;
      names.erase(names.begin() + static_cast<long>(i));
      sizes.erase(sizes.begin() + static_cast<long>(i));
    } else if (r < 85) {
      uint64_t size = rng.Below(300000);
      op = "T " + names[i] + " " + std::to_string(size);
      Say(out, "B " + std::to_string(seq) + " " + op);
      if (io.Truncate(names[i], static_cast<off_t>(size)) != 0) err = errno;
      sizes[i] = size;
    } else {
      op = "F " + names[i];
      Say(out, "B " + std::to_string(seq) + " " + op);
      int fd = io.Open(names[i], O_RDWR);
      if (fd < 0 || io.Fsync(fd) != 0) err = errno;
      if (fd >= 0 && io.Close(fd) != 0 && err == 0) err = errno;
    }
    if (err != 0) {
      Say(out, "X " + std::to_string(seq) + " " + std::to_string(err) + " " + op);
      return 4;
    }
    Say(out, "E " + std::to_string(seq));
  }
  return 0;
}

}  // namespace mapfs::crash
