// The pool's read view: the whole pool file mapped once per process,
// PROT_READ and without the protection key, at pool offset o = base + o.
//
// A read-only shared map of a file opened read-only whose pages are one
// pool run is served from it (mmap_calls.cc, "view maps"): LevelDB maps
// each table it reads this way. Such a map makes no system call and no
// kernel mapping; once the view's page-table entries exist (pool pages are
// resident and reused, so they outlive the files) reading it takes no page
// fault; its munmap tears down no page tables and sends no TLB shootdown to
// the process's other threads. A store through it faults as through any
// read-only map (SIGSEGV), with or without protection keys.
//
// What a view map cannot do, it is never asked to: the shim serves only
// maps nobody can write (PROT_READ of an O_RDONLY description: mprotect to
// PROT_WRITE is refused there as by the kernel), and only where no other
// map of this process lies, so each address of the view belongs to at most
// one program map. The rest of the view is mapfs's: a range the program
// changed outside a live view map (MAP_FIXED over it, munmap after its map
// went, mprotect, madvise, mremap) is "lent" to it for good (mmap_calls.cc
// keeps that list), and maps of the pool pages behind it go the kernel's
// way from then on.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mapfs::medium {
class Pool;
}

namespace mapfs::preload::read_view {

// The view's address of pool offset `pool_off`, for `len` bytes, mapping
// the view on first use; nullptr when it cannot serve the range (the view
// cannot be mapped, or the range lies past the pool).
char* At(const medium::Pool& pool, uint64_t pool_off, uint64_t len);

// Whether [p, p+len) meets the view (false while there is none). Cheap: two
// comparisons, for the wrappers of munmap, mprotect, madvise and mmap.
bool Meets(const void* p, size_t len);

}  // namespace mapfs::preload::read_view
