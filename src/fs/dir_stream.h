// DirStream: the state behind a directory stream (readdir/telldir/seekdir)
// that every front keeps: a batch of entries read ahead and the cookie of
// the last one returned. Cookies are the file system's stable positions, so
// a stream returns each entry once even while the directory changes.
#pragma once

#include <dirent.h>

#include <cstring>
#include <vector>

#include "fs/file_system.h"

namespace mapfs::fs {

class DirStream {
 public:
  // The next entry as a dirent64, or null at the end (*st says why not:
  // OK at the end, else the error). Valid until the next call.
  const struct dirent64* Next(FileSystem& fsys, OpenFile& dir, Status* st) {
    *st = Status::Ok();
    if (pos_ == buf_.size()) {
      if (eof_) return nullptr;
      buf_.clear();
      pos_ = 0;
      *st = fsys.ReadDir(dir, cookie_, [&](const DirEntryOut& e) {
        buf_.push_back(e);
        return buf_.size() < kBatch;
      });
      if (!st->ok()) return nullptr;
      if (buf_.empty()) {
        eof_ = true;
        return nullptr;
      }
    }
    const DirEntryOut& e = buf_[pos_++];
    cookie_ = e.cookie;
    std::memset(&ent_, 0, offsetof(struct dirent64, d_name));
    ent_.d_ino = e.ino;
    ent_.d_off = static_cast<off64_t>(e.cookie);
    ent_.d_type = e.type;
    ent_.d_reclen = sizeof ent_;
    size_t n = std::min(e.name.size(), sizeof ent_.d_name - 1);
    std::memcpy(ent_.d_name, e.name.data(), n);
    ent_.d_name[n] = '\0';
    return &ent_;
  }
  uint64_t Tell() const { return cookie_; }
  void Seek(uint64_t cookie) {
    cookie_ = cookie;
    buf_.clear();
    pos_ = 0;
    eof_ = false;
  }

 private:
  static constexpr size_t kBatch = 128;
  uint64_t cookie_ = 0;  // position after the last entry returned
  std::vector<DirEntryOut> buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  struct dirent64 ent_;
};
static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "64-bit glibc: dirent is dirent64");

}  // namespace mapfs::fs
