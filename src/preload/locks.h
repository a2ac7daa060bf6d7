// Advisory locks on mapfs files (fcntl record locks, OFD locks, flock,
// lockf), carried by the kernel on two per-pool lock files in /dev/shm:
// /dev/shm/mapfs-<uuid>.locks for record locks, .ofd for the others. Two
// files, because closing any descriptor of a file drops the process's
// record locks on it, and OFD descriptors come and go with descriptions.
// (So an OFD lock and a record lock on one mapfs file do not conflict,
// where on Linux they would.)
//
// Inode i's byte range [s, s+n) is the lock file's range
// [i * 2^40 + s, i * 2^40 + s + n) (files beyond 1 TiB share the last
// byte); flock on inode i is an OFD lock on byte 2^62 + i, a range no
// record lock reaches, so the two kinds never interact (as on Linux). The
// kernel then gives every rule for free: conflicts between processes,
// blocking, deadlock detection (EDEADLK), l_pid in F_GETLK, release of a
// process's record locks when it dies, of a description's OFD locks and
// flock when its last descriptor closes.
//
// Record locks belong to the process: the process has one descriptor of
// the lock file, and the shim drops the file's range when any descriptor of
// the file is closed (POSIX: closing any descriptor releases them). OFD
// locks and flock belong to the description: each description that uses
// them opens the lock file once (Desc::lock_fd).
#pragma once

#include <fcntl.h>

#include "preload/shim.h"

namespace mapfs::preload {

// fcntl F_GETLK/F_SETLK/F_SETLKW and the F_OFD_ forms.
int RecordLock(Desc& d, int fd, int cmd, struct flock* fl);
// flock(2).
int FileLock(Desc& d, int op);

}  // namespace mapfs::preload
