// NameCache: a process-local memo of the directories a path walk passes
// through ("/m0" in "/m0/f1"), so that a walk does not look the same leading
// components up in their directories' blocks on every call.
//
// Exactness. An entry says "name `name` in directory `dir` named directory
// `ino`" as of epoch E, where the epoch is FsShared::names_removed: a counter
// in the pool's shared memory that every process bumps, while it holds the
// directory's write lock and before its transaction commits, whenever it
// removes or replaces an entry (unlink, rmdir, rename, repair). Adding a name
// never changes what an existing name names, so creates, links and mkdirs
// leave it alone. An entry is used only while the epoch is still E, and E is
// read before the lookup that filled it, so:
//   - a removal that committed before the fill's lookup bumped the epoch
//     before that lookup began (E is already the new value, the lookup saw
//     the change) or is concurrent with it;
//   - a removal after the fill bumps the epoch and the entry is dead from
//     then on, in every process, before the removing call returns.
// A walk that uses an entry still checks the directory it names (a
// directory, search permission) from its inode, as it would after a lookup.
// Permissions and attributes are never cached.
//
// Only intermediate components that name directories are cached (the last
// component is looked up every time: open pins it, and its EntryLoc is a
// hint for later checks); names longer than kMaxName are not cached.
// Entries are seqlocked words: any thread may read or fill any entry, a
// torn read is a miss.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/bytes.h"

namespace mapfs::fs {

class NameCache {
 public:
  static constexpr int kEntries = 256;  // direct-mapped
  static constexpr size_t kMaxName = 24;

  // `epoch` is the pool's shared removal counter (FsShared::names_removed).
  void Attach(std::atomic<uint64_t>* epoch) { epoch_ = epoch; }

  // The epoch to check against (Find) or tag a fill with (Put: read it
  // before the lookup whose answer is stored).
  uint64_t Epoch() const { return epoch_->load(std::memory_order_seq_cst); }

  bool Find(uint64_t dir, std::string_view name, uint64_t epoch, uint64_t* ino) const {
    if (name.size() > kMaxName) return false;
    uint64_t w[kNameWords];
    Pack(name, w);
    const Entry& e = entries_[Index(dir, w, name.size())];
    uint64_t s1 = e.seq.load(std::memory_order_acquire);
    if (s1 & 1) return false;
    // Acquire loads of words the filler stores with release (no fences:
    // ThreadSanitizer does not model them; on x86 both are plain moves):
    // a word from a fill that began after s1 brings that fill's odd seq
    // with it, so the second read of seq differs.
    constexpr auto acq = std::memory_order_acquire;
    bool match = e.epoch.load(acq) == epoch && e.dir.load(acq) == dir && e.len.load(acq) == name.size();
    for (int i = 0; i < kNameWords; i++) match = match && e.name[i].load(acq) == w[i];
    uint64_t v = e.ino.load(acq);
    if (!match || e.seq.load(std::memory_order_relaxed) != s1) return false;
    *ino = v;
    return true;
  }

  void Put(uint64_t dir, std::string_view name, uint64_t epoch, uint64_t ino) {
    if (name.size() > kMaxName) return;
    uint64_t w[kNameWords];
    Pack(name, w);
    Entry& e = entries_[Index(dir, w, name.size())];
    uint64_t s = e.seq.load(std::memory_order_relaxed);
    // Another thread filling it: let it win (a cache, not a record).
    if ((s & 1) || !e.seq.compare_exchange_strong(s, s + 1, std::memory_order_acq_rel)) return;
    constexpr auto rel = std::memory_order_release;
    e.epoch.store(epoch, rel);
    e.dir.store(dir, rel);
    e.len.store(name.size(), rel);
    for (int i = 0; i < kNameWords; i++) e.name[i].store(w[i], rel);
    e.ino.store(ino, rel);
    e.seq.store(s + 2, rel);
  }

 private:
  static constexpr int kNameWords = static_cast<int>(kMaxName / 8);
  struct Entry {
    std::atomic<uint64_t> seq{0};  // odd while a thread fills it
    std::atomic<uint64_t> epoch{~uint64_t{0}}, dir{0}, ino{0}, len{0};
    std::atomic<uint64_t> name[kNameWords] = {};
  };
  // The name in kNameWords words, zero-padded (name.size() <= kMaxName).
  // Word by word, without memset and a variable-sized memcpy (two calls).
  static void Pack(std::string_view name, uint64_t* w) {
    const char* p = name.data();
    size_t n = name.size();
    for (int i = 0; i < kNameWords; i++, p += 8) {
      if (n >= 8) {
        std::memcpy(&w[i], p, 8);
        n -= 8;
      } else {
        w[i] = LoadTail(p, n);
        n = 0;
      }
    }
  }
  static int Index(uint64_t dir, const uint64_t* w, size_t len) {
    uint64_t h = dir * 0x9e3779b97f4a7c15ull ^ len;
    for (int i = 0; i < kNameWords; i++) h = (h ^ w[i]) * 0xff51afd7ed558ccdull;
    return static_cast<int>((h >> 40) % kEntries);
  }

  std::atomic<uint64_t>* epoch_ = nullptr;
  Entry entries_[kEntries];
};

}  // namespace mapfs::fs
