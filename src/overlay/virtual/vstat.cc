// ContentSize: a virtualized file's size for stat without attaching it.
//
// An attach maps the whole file, replays the log since the checkpoint into
// a table of the process and fills page tables: 0.05-0.5 ms, too much for
// `ls -l` of a directory. The size needs only the checkpointed size and the
// entries since: the first blocks of the file (meta block and log) are
// mapped read-only, so each log entry is read with one 8-byte load as the
// committing CAS wrote it (never torn, unlike a pread's byte copy), and the
// record blocks of indirect entries are read with pread and checked by
// their checksum. The replay's rules hold here as in VFile::CatchUpLocked:
// the log is read up to the first slot not of its lap; a checkpoint that
// moves meanwhile (its slots and records may be reused) means start over
// from it.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "common/crc32c.h"
#include "medium/persist.h"
#include "overlay/virtual/vfile.h"

namespace mapfs::overlay::vrt {

using namespace pmem;
namespace persist = ::mapfs::medium;

namespace {

// The size after entry `e` (sequence `seq`), checked as ApplyEntry checks
// it. *recycled: a checkpoint passed seq while its record was read.
Status SizeAfter(int fd, const MetaHeader& h, const MetaShared* sh, uint64_t e, uint64_t seq, uint64_t* size,
                 bool* recycled) {
  auto bad = [&](const char* what) {
    return Status::Error(EUCLEAN, "virtual: log entry " + std::to_string(seq) + ": " + what);
  };
  // Against the allocated end now: a writer may have grown the file since
  // the walk began (it publishes the end before committing into it).
  auto phys_ok = [&](uint64_t first, uint64_t n) {
    uint64_t pe = std::min<uint64_t>(persist::Load64(&sh->phys_end), h.pblocks_max);
    return first >= h.data_start && first + n <= pe;
  };
  if (EntryType(e) == kInline) {
    uint64_t v = EntryVblock(e), p = EntryPhys(e), n = EntryBlocks(e);
    if (v + n > h.vblocks_max) return bad("virtual blocks out of range");
    if (!phys_ok(p, n)) return bad("blocks outside the data region");
    *size = std::max(*size, (v + n) * kBlockSize);
    return Status::Ok();
  }
  if (EntryType(e) != kIndirect || ((e >> 24) & 0xffffffff) != 0) return bad("bad entry type");
  if (!phys_ok(EntryPhys(e), 1)) return bad("record block outside the data region");
  alignas(64) char rec[kBlockSize];
  if (pread(fd, rec, sizeof(rec), static_cast<off_t>(uint64_t{EntryPhys(e)} * kBlockSize)) !=
      static_cast<ssize_t>(sizeof(rec)))
    return Status::FromErrno("virtual: read a record block");
  // Records are freed only after a checkpoint passes their entry.
  if (persist::Load64(&sh->ckpt_seq) > seq) {
    *recycled = true;
    return Status::Ok();
  }
  RecordHeader rh;
  std::memcpy(&rh, rec, sizeof(rh));
  if (rh.magic != kRecordMagic || rh.nruns > kMaxRuns || (rh.size_op != kSizeExtend && rh.size_op != kSizeSet) ||
      rh.size > uint64_t{h.vblocks_max} * kBlockSize)
    return bad("bad record block");
  reinterpret_cast<RecordHeader*>(rec)->crc = 0;
  if (rh.crc != Crc32c(rec, sizeof(RecordHeader) + rh.nruns * sizeof(Run))) return bad("record block: bad checksum");
  const Run* runs = reinterpret_cast<const Run*>(rec + sizeof(RecordHeader));
  for (uint32_t i = 0; i < rh.nruns; i++) {
    if (uint64_t{runs[i].vblock} + runs[i].nblocks > h.vblocks_max) return bad("record run out of range");
    if (runs[i].phys != 0 && !phys_ok(runs[i].phys, runs[i].nblocks)) return bad("record run outside the data region");
  }
  *size = rh.size_op == kSizeSet ? rh.size : std::max(*size, rh.size);
  return Status::Ok();
}

}  // namespace

Result<uint64_t> ContentSize(int fd) {
  auto hr = ReadHeader(fd);
  if (!hr.ok()) return hr.status();
  const MetaHeader& h = *hr;
  // ReadHeader checked that the file holds its metadata region, of which
  // the meta block and the log are the first log_start + log blocks.
  const size_t len = (uint64_t{h.log_start} * kBlockSize) + uint64_t{h.log_slots} * 8;
  void* m = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) return Status::FromErrno("virtual: map the log");
  const char* base = static_cast<const char*>(m);
  const MetaShared* sh = reinterpret_cast<const MetaShared*>(base + kSharedOffset);
  const uint64_t* log = reinterpret_cast<const uint64_t*>(base + uint64_t{h.log_start} * kBlockSize);
  auto load = [](const uint64_t& w) { return persist::Load64(&w); };
  Result<uint64_t> out = Status::Error(EAGAIN, "virtual: log replay cannot keep up");
  for (int restarts = 0; restarts < 1000; restarts++) {
    uint64_t ck = load(sh->ckpt_seq);
    uint64_t size = load(sh->ckpt_size);
    uint64_t pe = load(sh->phys_end);
    if (load(sh->ckpt_seq) != ck) continue;
    // The allocated end is published after the fallocate that covers it:
    // a size read after it covers it (as Attach checks).
    struct stat st {};
    if (fstat(fd, &st) != 0) {
      out = Status::FromErrno("virtual: fstat");
      break;
    }
    if (pe < h.data_start || pe > h.pblocks_max || pe * kBlockSize > static_cast<uint64_t>(st.st_size)) {
      out = Status::Error(EUCLEAN, "virtual: meta block: allocated end " + std::to_string(pe) + " outside the file");
      break;
    }
    if (size > uint64_t{h.vblocks_max} * kBlockSize) {
      out = Status::Error(EUCLEAN, "virtual: meta block: checkpointed size too large");
      break;
    }
    uint64_t s = ck;
    bool recycled = false;
    Status st_entry = Status::Ok();
    for (;;) {
      uint64_t e = load(log[s & (h.log_slots - 1)]);
      if (e == 0 || EntryLap(e) != LapOf(s, h.log_slots)) break;
      st_entry = SizeAfter(fd, h, sh, e, s, &size, &recycled);
      if (!st_entry.ok() || recycled) break;
      if (++s - ck > h.log_slots) {
        recycled = true;  // more than a log's worth: the ring moved on
        break;
      }
    }
    // A damaged entry is damage only if no checkpoint passed it meanwhile
    // (its slot or record may have been reused under the read).
    if (load(sh->ckpt_seq) != ck) continue;
    if (!st_entry.ok()) {
      out = st_entry;
      break;
    }
    if (!recycled) {
      out = size;
      break;
    }
  }
  munmap(m, len);
  return out;
}

}  // namespace mapfs::overlay::vrt
