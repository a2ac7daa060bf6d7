// The library's only voice. Off unless MAPFS_LOG is set in the environment
// (MAPFS_LOG=1 or =debug logs to stderr; MAPFS_LOG=/path appends to a file).
// A file system linked into other programs never prints on its own.
#pragma once

namespace mapfs {

bool LogEnabled();
void Logf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

#define MAPFS_LOG(...)                              \
  do {                                              \
    if (::mapfs::LogEnabled()) ::mapfs::Logf(__VA_ARGS__); \
  } while (0)

}  // namespace mapfs
