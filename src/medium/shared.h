// Volatile state shared by every process that has one pool open: robust
// locks, redo-slot ownership, the list of mounts, and scratch areas the vm
// and space layers lay out themselves. It lives in a POSIX shared-memory
// object named after the pool's UUID (/dev/shm/mapfs-<uuid>), is rebuilt by
// the first process to open the pool, and holds nothing that must survive a
// crash.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace mapfs::medium {

// Locks the core takes across processes. A holder that dies leaves the lock
// "owner dead"; the next taker replays the dead process's redo records first.
// kMap: every change to a block-mapped pool's mapping area (map::Mapper),
// whose own mutexes hold only within a process.
enum class LockId : int { kPpt = 0, kSpace = 1, kRecovery = 2, kInodes = 3, kRename = 4, kMap = 5, kCount = 6 };

constexpr int kMaxRedoSlots = 64;
constexpr int kMaxMounts = 256;
constexpr size_t kVmSharedBytes = 72 * 1024;
constexpr size_t kSpaceSharedBytes = 4 * 1024;
// The meta layer's lock table, open counts and reader holds (meta/shared_fs.h).
// Sparse: only the pages that are touched cost memory.
constexpr size_t kFsSharedBytes = 24 * 1024 * 1024;

// A mount's entry. A live mount also holds an OFD write lock on byte
// kLiveByte + its slot of the pool file (Pool::MountAlive): the lock goes
// away with the mount's open file description, so a mount whose process
// died, or whose process image was replaced by execve (the pool fd is
// O_CLOEXEC), is dead even though its pid may still run.
struct MountEntry {
  std::atomic<uint64_t> token;  // 0 = free; otherwise unique per mount
  // Registering process; negated: ended idle (Pool::MarkIdleExit); with
  // kHandoffBit: ended by an exec that hands `handoff` open descriptions
  // over to the next image (Pool::MarkHandoffExit), dead like any other
  // until that image confirms it took them all (Pool::ConfirmHandoff).
  std::atomic<int64_t> pid;
  std::atomic<uint64_t> handoff;
};
constexpr int64_t kHandoffBit = int64_t{1} << 40;  // far above any pid

// First liveness byte, far past any pool's data (OFD locks beyond the end of
// a file are allowed and cost nothing).
constexpr uint64_t kLiveByte = uint64_t{1} << 62;

struct SharedState {
  uint64_t magic;
  uint64_t layout_version;
  uint8_t uuid[16];
  pthread_mutex_t locks[static_cast<int>(LockId::kCount)];
  std::atomic<uint64_t> redo_owner[kMaxRedoSlots];  // mount token holding each slot
  MountEntry mounts[kMaxMounts];
  std::atomic<uint64_t> next_token;
  // Mounts that vanished without closing and whose entries were reused: the
  // last clean close must leave the pool dirty for them too.
  std::atomic<uint64_t> vanished;
  alignas(64) unsigned char vm[kVmSharedBytes];        // vm::SharedVm
  alignas(64) unsigned char space[kSpaceSharedBytes];  // space layer
  alignas(4096) unsigned char fs[kFsSharedBytes];      // meta layer
};

constexpr uint64_t kSharedMagic = 0x4d415046534d454dull;  // "MAPFSMEM"
// 4: the kMap lock, MountEntry's hand-off state, meta::FsShared::changes.
// 5: meta::FsShared::holds page aligned, a row per mount on pages of its own
// (a process of version 4 would count its readers at other offsets).
// 6: meta::FsShared::names_removed, the epoch of the name caches.
constexpr uint64_t kSharedLayoutVersion = 6;

}  // namespace mapfs::medium
