// Linux's path length rules for the shim's routes.
//
// Linux refuses a path argument whose string is PATH_MAX (4096) bytes or
// longer with ENAMETOOLONG, before anything else, and limits nothing else
// by length: a relative path is measured alone, never with the cwd in
// front, so a cwd may be deeper than 4 KiB and `chdir("x")` works at any
// depth. The core applies the same rule to the path it is given
// (FileSystem::Resolve, at depth 0); the shim must therefore hand it a
// path that keeps the caller's verdict, and must never hand it a cwd it
// composed itself in one piece.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fs/file_system.h"
#include "preload/shim.h"

namespace mapfs::preload {

// After Classify: `len` is strlen of the caller's path. A path of PATH_MAX
// bytes or more keeps failing with ENAMETOOLONG: a pool route whose path
// the prefix strip (or a normalisation) made shorter is padded back with
// leading slashes (same meaning, the core's length check then refuses it),
// and a kernel route gets the caller's own string back (not a shorter
// rewrite the kernel would accept).
void KeepLengthVerdict(Route* r, size_t len);

// The inode of an absolute pool path of any length (a cwd the shim keeps
// or inherits): looked up in pieces shorter than PATH_MAX, each from the
// directory the previous one reached. Call inside a CoreScope.
Result<uint64_t> LookupAnyLength(fs::FileSystem* f, std::string_view path);

// The longest path a hand-off record (cwd, descriptor) may carry: records
// are inherited bytes and must be bounded, but a cwd, or the path a file
// was opened by from a cwd, may be longer than PATH_MAX.
constexpr uint32_t kMaxRecordPath = 1u << 24;

}  // namespace mapfs::preload
