// The crash checker's oracle: what a user can see of a file system
// (FsState), and whether a state found after a crash is one the operation's
// promise allows (Judge).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "fs/file_system.h"

namespace mapfs::crash {

// One name in the tree. Timestamps are left out: no mode promises them
// atomic with the change they describe.
struct Node {
  char type = 0;  // 'f' regular, 'd' directory, 'l' symlink
  uint64_t ino = 0;
  mode_t perm = 0;
  nlink_t nlink = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  std::string target;  // symlinks
  bool operator==(const Node&) const = default;
};

struct FsState {
  std::map<std::string, Node> tree;         // absolute path -> node
  std::map<uint64_t, std::string> content;  // regular file inode -> its bytes (size = length)
};

// Walks the whole tree from "/".
Result<FsState> Capture(fs::FileSystem& fs);

// What the operation promises about file data (meta data is atomic in every
// mode: the tree must equal one allowed state's tree exactly).
enum class DataPromise {
  kPerLine,    // posix, sync: each 64-byte line of a file is one allowed version's
               // (past the end of a version: zeros), its size one allowed size
  kWholeFile,  // strict: each file's bytes are exactly one allowed version's
};

// "" when `got` is allowed: its tree is one of `tree_allowed` (the states
// before and after the operation that was running) and each file's bytes
// are versions from `data_allowed` (the same states, or in posix mode every
// state since the file data was last made durable); otherwise what is wrong.
std::string Judge(const FsState& got, const std::vector<const FsState*>& tree_allowed,
                  const std::vector<const FsState*>& data_allowed, DataPromise promise);
inline std::string Judge(const FsState& got, const std::vector<const FsState*>& allowed, DataPromise promise) {
  return Judge(got, allowed, allowed, promise);
}

// Short human summary of a state (for violation reports).
std::string Summary(const FsState& s);

}  // namespace mapfs::crash
