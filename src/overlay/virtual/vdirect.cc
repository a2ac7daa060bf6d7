// Direct maps (vdirect.h): the registry, and VFile's side of them (mapper
// and in-place writer slots, hole filling, writes in place).
#include "overlay/virtual/vdirect.h"

#include <emmintrin.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "common/crc32c.h"
#include "medium/persist.h"
#include "overlay/virtual/vtrack.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

namespace {

constexpr size_t kSlots = 16;
constexpr uint64_t kPidBits = 0xffffffff;

// Whether process `pid` still runs (a zombie does not: it maps nothing and
// stores nothing any more).
bool Alive(uint64_t word) {
  const uint64_t pid = word & kPidBits;
  if (pid == 0 || pid > 0x7fffffff) return false;
  if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  char path[48];
  std::snprintf(path, sizeof(path), "/proc/%llu/stat", static_cast<unsigned long long>(pid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return true;  // cannot tell: alive (the safe side)
  char buf[256];
  ssize_t r = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (r <= 0) return true;
  buf[r] = '\0';
  const char* p = std::strrchr(buf, ')');
  return !(p != nullptr && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X'));
}

// This process's word in a slot (the ready bit clear).
uint64_t Self() { return static_cast<uint64_t>(getpid()); }

int ClaimSlot(uint64_t* words, uint64_t me) {
  for (size_t i = 0; i < kSlots; i++) {
    uint64_t z = 0;
    if (std::atomic_ref<uint64_t>(words[i]).compare_exchange_strong(z, me, std::memory_order_seq_cst)) return int(i);
  }
  return -1;
}

void StoreSlot(uint64_t* word, uint64_t v) { std::atomic_ref<uint64_t>(*word).store(v, std::memory_order_seq_cst); }

// The 16 words (two cache lines) ORed by eight 16-byte loads, ~15
// instructions, not 16 atomic loads with a branch each (measured: those
// cost 3 % of the suite's instructions; on every write's path). Each word
// is stored whole (8-byte aligned CAS or store), so a load of it sees the
// old or the new word; the compiler barrier makes the copy a fresh read
// from the file's page. x86 keeps loads in order, and the stores the
// protocol orders them after are locked instructions (vfile.h).
__m128i OrWords(const uint64_t* words) {
  asm volatile("" ::: "memory");
  const __m128i* w = reinterpret_cast<const __m128i*>(words);  // 64-byte aligned
  return _mm_or_si128(_mm_or_si128(_mm_or_si128(_mm_load_si128(w), _mm_load_si128(w + 1)),
                                   _mm_or_si128(_mm_load_si128(w + 2), _mm_load_si128(w + 3))),
                      _mm_or_si128(_mm_or_si128(_mm_load_si128(w + 4), _mm_load_si128(w + 5)),
                                   _mm_or_si128(_mm_load_si128(w + 6), _mm_load_si128(w + 7))));
}

bool NonZero(__m128i v) { return _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_setzero_si128())) != 0xffff; }

}  // namespace

static_assert(sizeof(MetaMappers::mappers) == 8 * sizeof(__m128i));

bool VFile::Mapped() const { return NonZero(OrWords(mappers()->mappers)); }

// The ready bit is bit 63 of a word: the sign bit of its 64-bit lane.
bool VFile::MappedReady() const {
  return _mm_movemask_pd(_mm_castsi128_pd(OrWords(mappers()->mappers))) != 0;
}

uint64_t VFile::DirectEpoch() const { return persist::Load64(direct_epoch()); }

bool VFile::InPlaceBusy() const { return NonZero(OrWords(mappers()->inplace)); }

bool VFile::OthersMapped() const {
  const uint64_t me = Self();
  for (size_t i = 0; i < kSlots; i++) {
    uint64_t w = persist::Load64(&mappers()->mappers[i]);
    if (w != 0 && (w & ~kMapperReady) != me) return true;
  }
  return false;
}

void VFile::ClearDead(uint64_t* words, size_t n) const {
  for (size_t i = 0; i < n; i++) {
    uint64_t w = persist::Load64(&words[i]);
    if (w != 0 && !Alive(w))
      std::atomic_ref<uint64_t>(words[i]).compare_exchange_strong(w, 0, std::memory_order_seq_cst);
  }
}

void VFile::AwaitMappers(unsigned* spins) const {
  if (++*spins % 256 == 0) {
    ClearDead(mappers()->mappers, kSlots);
    ClearDead(mappers()->inplace, kSlots);
  }
  sched_yield();
}

Result<bool> VFile::MovesMapped(uint64_t vlo, uint64_t vhi) const {
  for (uint64_t v = vlo; v < vhi && v < hdr_.vblocks_max; v++) {
    auto m = Lookup(v);
    if (!m.ok()) return m.status();
    if (TablePhys(*m) != 0) return true;
  }
  return false;
}

Status VFile::ExtendSize(uint64_t size) {
  uint32_t rec = 0, rl = 0, rn = 0;
  MAPFS_RETURN_IF_ERROR(Alloc(1, &rec, &rl, &rn, 1));
  alignas(64) char rb[sizeof(RecordHeader)] = {};
  RecordHeader* rh = reinterpret_cast<RecordHeader*>(rb);
  rh->magic = kRecordMagic;
  rh->nruns = 0;
  rh->size = size;
  rh->size_op = kSizeExtend;
  rh->crc = Crc32c(rb, sizeof(rb));
  Touch(rec);
  CopyData(base_ + uint64_t{rec} * kBlockSize, rb, sizeof(rb));
  Status st = Durable(true);
  uint64_t seq = 0;
  bool retry = false;
  if (st.ok()) st = Commit(MakeIndirect(0, rec), &seq, nullptr, 0, nullptr, 0, nullptr, &retry);
  if (!st.ok()) {
    Free(rec, 1);
    return st;
  }
  return CatchUp();
}

Status VFile::FillHole(uint64_t vblock, uint64_t was, Pin* pin) {
  (void)pin;  // no block looked up under it is held across the allocation
  uint32_t z = 0, zl = 0, zn = 0, rec = 0, rl = 0, rn = 0;
  MAPFS_RETURN_IF_ERROR(Alloc(1, &z, &zl, &zn, 1));
  Status st = Alloc(1, &rec, &rl, &rn, 1);
  if (!st.ok()) {
    Free(z, 1);
    return st;
  }
  Touch(z);
  ZeroData(base_ + uint64_t{z} * kBlockSize, kBlockSize);
  alignas(64) char rb[sizeof(RecordHeader) + sizeof(Run)] = {};
  RecordHeader* rh = reinterpret_cast<RecordHeader*>(rb);
  rh->magic = kRecordMagic;
  rh->nruns = 1;
  rh->size = 0;  // max(size, 0): the size does not change
  rh->size_op = kSizeExtend;
  *reinterpret_cast<Run*>(rb + sizeof(RecordHeader)) = Run{static_cast<uint32_t>(vblock), z, 1, 0};
  rh->crc = Crc32c(rb, sizeof(rb));
  Touch(rec);
  CopyData(base_ + uint64_t{rec} * kBlockSize, rb, sizeof(rb));
  st = Durable(true);
  uint64_t seq = 0;
  bool retry = false;
  // Lands only if the block is still the hole it was (head check).
  if (st.ok()) st = Commit(MakeIndirect(0, rec), &seq, &vblock, was, nullptr, 0, nullptr, &retry, vblock, vblock + 1);
  if (!st.ok() || retry) {
    Free(z, 1);
    Free(rec, 1);
    if (!st.ok() && st.code() != kMappedNow) return st;
    return CatchUp();  // filled by another: the caller looks again
  }
  return CatchUp();
}

Status VFile::DirectBegin() {
  if (!writable_) return Status::Error(EACCES, "virtual: a writable shared map needs a writable file");
  std::lock_guard<std::mutex> g(direct_mu_);
  const uint64_t me = Self();
  if (direct_slot_ >= 0 && direct_pid_ == me) {
    direct_maps_++;
    return Status::Ok();
  }
  // None yet in this process (or only a fork parent's, inherited).
  uint64_t* words = mappers()->mappers;
  int slot = ClaimSlot(words, me);
  if (slot < 0) {
    ClearDead(words, kSlots);
    slot = ClaimSlot(words, me);
  }
  if (slot < 0)
    return Status::Error(EAGAIN, "virtual: every mapper slot of the file is held: too many processes map it");
  // Before the slot can be ready: a copy-on-write writer that copied old
  // bytes before this retries its copy (Commit).
  std::atomic_ref<uint64_t>(*direct_epoch()).fetch_add(1, std::memory_order_seq_cst);
  // The barrier: a writer that committed without seeing the slot did so
  // before this entry (it checks the slots after finding its log slot
  // free: Commit), and DirectRuns replays up to here before any lookup.
  // Only then is the slot ready: an in-place writer that sees it ready
  // replays past the barrier before its lookups, so no commit that moves
  // a block it writes into lands after them (a writer that saw the slot
  // merely claimed could look a block up that such a commit then moves).
  Status st = ExtendSize(0);
  if (!st.ok()) {
    StoreSlot(&words[slot], 0);
    return st;
  }
  StoreSlot(&words[slot], me | kMapperReady);
  direct_slot_ = slot;
  direct_pid_ = me;
  direct_maps_++;
  return Status::Ok();
}

// No wait for in-place writers: once the slot is clear a commit may again
// move blocks, but Commit refuses to while any in-place slot is set, and a
// writer claims its in-place slot before it looks for a ready mapper.
void VFile::DirectEnd() {
  std::lock_guard<std::mutex> g(direct_mu_);
  if (direct_maps_ == 0 || --direct_maps_ > 0) return;
  if (direct_slot_ < 0 || direct_pid_ != Self()) return;  // a fork parent's slot
  StoreSlot(&mappers()->mappers[direct_slot_], 0);
  direct_slot_ = -1;
  direct_pid_ = 0;
}

void VFile::DirectReady(bool ready) {
  if (direct_slot_ >= 0 && direct_pid_ == Self())
    StoreSlot(&mappers()->mappers[direct_slot_], Self() | (ready ? kMapperReady : 0));
}

Result<std::vector<VFile::DirectRun>> VFile::DirectRuns(uint64_t off, size_t len) {
  Pin pin(this);
  for (;;) {
    MAPFS_RETURN_IF_ERROR(CatchUp());
    const uint64_t size = size_.load(std::memory_order_acquire);
    std::vector<DirectRun> runs;
    bool again = false;
    for (uint64_t vb = off / kBlockSize; vb < (off + len) / kBlockSize; vb++) {
      uint32_t p = 0;
      if (vb * kBlockSize < size && vb < hdr_.vblocks_max) {
        auto m = Lookup(vb);
        if (!m.ok()) return m.status();
        p = TablePhys(*m);
        if (p == 0) {
          MAPFS_RETURN_IF_ERROR(FillHole(vb, *m, &pin));
          again = true;
          break;
        }
      }
      DirectRun* last = runs.empty() ? nullptr : &runs.back();
      if (last != nullptr && last->vblock + last->n == vb &&
          ((p == 0 && last->phys == 0) || (p != 0 && last->phys != 0 && last->phys + last->n == p)))
        last->n++;
      else
        runs.push_back(DirectRun{vb, p, 1});
    }
    if (!again) return runs;
  }
}

Result<size_t> VFile::WriteInPlace(const char* buf, size_t n, uint64_t off, size_t* cow) {
  *cow = 0;
  uint64_t* ip = mappers()->inplace;
  int slot = -1;
  for (int i = 0; (slot = ClaimSlot(ip, Self())) < 0; i++) {
    if (i % 256 == 255) ClearDead(ip, kSlots);
    sched_yield();
  }
  struct Release {
    uint64_t* w;
    ~Release() { StoreSlot(w, 0); }
  } release{&ip[slot]};
  // Checked after claiming the slot (the CAS is a full fence), while a
  // committer reads the mapper slots, then the in-place ones (Commit): a
  // commit that saw neither this slot nor a mapper lands before a mapper
  // that is seen here became ready, so the replay below sees it; a commit
  // that sees this slot moves no block (kMappedNow). A mapper merely
  // claimed, not yet ready: nothing in place (the caller's copy-on-write
  // commit is refused while it is claimed, and tried again).
  if (!MappedReady()) return size_t{0};
  Pin pin(this);
  MAPFS_RETURN_IF_ERROR(CatchUp());
  const uint64_t size = size_.load(std::memory_order_acquire);
  size_t done = 0;
  while (done < n) {
    const uint64_t pos = off + done, vb = pos / kBlockSize;
    if (vb >= hdr_.vblocks_max) break;
    auto m = Lookup(vb);
    if (!m.ok()) return m.status();
    const uint32_t p = TablePhys(*m);
    if (p == 0) {
      if (done == 0) {
        // Blocks without one from here: copy-on-write, up to the next
        // block that has one (or one commit's worth).
        uint64_t v = vb + 1;
        for (; v * kBlockSize < off + n && v - vb < kMaxRunBlocks && v < hdr_.vblocks_max; v++) {
          auto mv = Lookup(v);
          if (!mv.ok()) return mv.status();
          if (TablePhys(*mv) != 0) break;
        }
        *cow = static_cast<size_t>(std::min<uint64_t>(n, v * kBlockSize - off));
      }
      break;
    }
    const size_t len = static_cast<size_t>(std::min<uint64_t>(n - done, (vb + 1) * kBlockSize - pos));
    Touch(p);
    CopyData(base_ + uint64_t{p} * kBlockSize + pos % kBlockSize, buf + done, len);
    done += len;
  }
  persist::Fence();
  // Past the size only inside the last block (blocks past the end have
  // none): the new size is committed after the bytes are in place.
  if (done > 0 && off + done > size) MAPFS_RETURN_IF_ERROR(ExtendSize(off + done));
  return done;
}

// ---------------------------------------------------------------- registry

DirectMaps::~DirectMaps() = default;

Result<void*> DirectMaps::Map(const std::shared_ptr<VFile>& f, void* addr, size_t len, int prot, int flags,
                              uint64_t off) {
  const size_t page = kBlockSize;
  if (len == 0 || off % page != 0) return Status::Error(EINVAL, "mmap: bad length or offset");
  if (flags & MAP_SYNC) return Status::Error(EOPNOTSUPP, "mmap: MAP_SYNC of a virtualized file");
  const size_t L = (len + page - 1) / page * page;
  MAPFS_RETURN_IF_ERROR(f->DirectBegin());
  auto reg = std::make_shared<Reg>(f);  // DirectEnd when the last piece goes
  auto runs = f->DirectRuns(off, L);
  if (!runs.ok()) return runs.status();
  const int place = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE);
  // The address range first (where the application asked), then each run
  // over it.
  void* b = mmap(addr, L, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | place, -1, 0);
  if (b == MAP_FAILED) return Status::FromErrno("mmap");
  char* base = static_cast<char*>(b);
  const int extra = flags & (MAP_POPULATE | MAP_LOCKED);
  for (const VFile::DirectRun& r : *runs) {
    char* at = base + (r.vblock * page - off);
    size_t n = size_t{r.n} * page;
    void* m = r.phys != 0 ? mmap(at, n, prot, MAP_SHARED | MAP_FIXED | extra, f->map_fd(), off_t(r.phys) * off_t(page))
                          : mmap(at, n, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | extra, -1, 0);
    if (m == MAP_FAILED) {
      Status s = Status::FromErrno("mmap of a run of the file's blocks");
      munmap(base, L);
      return s;
    }
  }
  std::lock_guard<std::mutex> g(mu_);
  by_addr_[reinterpret_cast<uintptr_t>(base)] = Piece{L, off, prot, std::move(reg)};
  n_.store(by_addr_.size(), std::memory_order_release);
  return b;
}

void DirectMaps::Unmap(void* addr, size_t len) {
  if (empty()) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + (len + kBlockSize - 1) / kBlockSize * kBlockSize;
  std::vector<std::shared_ptr<Reg>> gone;  // ended after the lock: DirectEnd may wait
  {
    std::lock_guard<std::mutex> g(mu_);
    auto it = by_addr_.upper_bound(lo);
    if (it != by_addr_.begin()) --it;
    while (it != by_addr_.end() && it->first < hi) {
      const uintptr_t s = it->first, e = s + it->second.len;
      if (e <= lo) {
        ++it;
        continue;
      }
      Piece p = it->second;
      it = by_addr_.erase(it);
      if (s < lo) by_addr_[s] = Piece{lo - s, p.off, p.prot, p.reg};
      if (e > hi) it = by_addr_.emplace(hi, Piece{e - hi, p.off + (hi - s), p.prot, p.reg}).first, ++it;
      gone.push_back(std::move(p.reg));
    }
    n_.store(by_addr_.size(), std::memory_order_release);
  }
}

void DirectMaps::CutPast(const VFile* f, uint64_t end) {
  if (empty()) return;
  const uint64_t from = (end + kBlockSize - 1) / kBlockSize * kBlockSize;
  std::lock_guard<std::mutex> g(mu_);
  for (auto& [addr, p] : by_addr_) {
    if (p.reg->f.get() != f || p.off + p.len <= from) continue;
    const uint64_t cut = std::max(from, p.off);
    char* at = reinterpret_cast<char*>(addr) + (cut - p.off);
    // Anonymous zeros over the cut pages, with the map's protection: no
    // page of it maps the file's blocks any more.
    (void)mmap(at, p.off + p.len - cut, p.prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  }
}

bool DirectMaps::Meets(const void* addr, size_t len) {
  if (empty()) return false;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(addr), hi = lo + len;
  std::lock_guard<std::mutex> g(mu_);
  auto it = by_addr_.upper_bound(lo);
  if (it != by_addr_.begin()) --it;
  for (; it != by_addr_.end() && it->first < hi; ++it)
    if (it->first + it->second.len > lo) return true;
  return false;
}

int DirectMaps::Protect(void* addr, size_t len, int prot, int pkey) { return RawProtect(addr, len, prot, pkey); }

}  // namespace mapfs::overlay::vrt
