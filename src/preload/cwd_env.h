// MAPFS_CWD, the environment's copy of the cwd inside mapfs (see
// Shim::Chdir), kept without growing memory on every chdir.
#pragma once

#include <string_view>

namespace mapfs::preload {

// Sets MAPFS_CWD to `value`. glibc's setenv never frees a value it
// replaces (a program may still hold the pointer getenv gave it), so one
// setenv per chdir keeps every cwd ever entered: walking 10,000 levels
// down and back costs the square of the depth (hundreds of MiB). Here the
// variable lives in two buffers of the shim's own, written in turn and
// published with putenv, so memory stays at a few times the longest value.
void SetCwdEnv(std::string_view value);

// Removes MAPFS_CWD (the cwd left mapfs).
void ClearCwdEnv();

}  // namespace mapfs::preload
