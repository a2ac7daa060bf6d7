// Unix-domain sockets at pool paths (bind, connect, sendto, sendmsg).
//
// The kernel needs an inode of its own behind a socket's address, which a
// pool file cannot be. So the name lives in the pool as a socket node
// (S_IFSOCK, what mknod makes: ls, stat, readdir, unlink and rename see it
// as on the kernel) and the kernel's socket lives in a shadow directory
// beside the pool's lock files: /dev/shm/mapfs-<pool uuid>.sockets/<inode
// number of the node>. Every process under the shim on the same pool finds
// the same shadow from the same node:
//  - bind() at a pool path makes the node (EADDRINUSE if the name exists,
//    as the kernel), then binds the shadow (a stale one, left by a socket
//    whose node was removed, is replaced);
//  - connect(), sendto() and sendmsg() at a pool path go to the shadow of
//    the node found there: ENOENT if there is none, ECONNREFUSED if it is
//    not a socket (both the kernel's answers).
// Abstract and unnamed addresses, and kernel paths, go to the kernel as is.
// Differences left (README): getsockname/getpeername/accept/recvfrom show
// the shadow path; a program not under the shim (or on the FUSE mount)
// cannot reach a socket bound through the shim.
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>

#include "common/process.h"
#include "medium/pool.h"
#include "preload/calls.h"
#include "preload/overlay_fds.h"

namespace mapfs::preload {
namespace {

// The pool path in `addr` if it is a named Unix address under the mount.
bool PoolSocketPath(const sockaddr* addr, socklen_t len, Route* r) {
  if (addr == nullptr || in_core || len <= offsetof(sockaddr_un, sun_path) || addr->sa_family != AF_UNIX) return false;
  const auto* un = reinterpret_cast<const sockaddr_un*>(addr);
  size_t max = std::min<size_t>(len - offsetof(sockaddr_un, sun_path), sizeof un->sun_path);
  if (un->sun_path[0] == '\0') return false;  // abstract
  std::string path(un->sun_path, strnlen(un->sun_path, max));
  *r = MapfsPath(AT_FDCWD, path.c_str());
  return r->mapfs;
}

// The shadow directory of the pool, made on first use with the pool's owner
// and group, and its owner's rights (plus the group's if the pool grants
// them); an existing one is used only if it is a real directory of the
// pool's owner, this user or root that grants no more than the pool.
bool ShadowDir(fs::FileSystem* f, std::string* dir) {
  const uint8_t* u = f->mount().pool().header().uuid;
  char hex[33];
  for (int i = 0; i < 16; i++) std::snprintf(hex + 2 * i, 3, "%02x", u[i]);
  *dir = std::string("/dev/shm/mapfs-") + hex + ".sockets";
  CoreScope cs;
  struct stat pool {};
  if (::fstat(f->mount().pool().fd(), &pool) != 0) return false;
  mode_t want = S_IRWXU | ((pool.st_mode & S_IWGRP) ? S_IRWXG : 0) | ((pool.st_mode & S_IWOTH) ? S_IRWXO : 0);
  if (::mkdir(dir->c_str(), 0700) == 0) {
    if (::chown(dir->c_str(), pool.st_uid, pool.st_gid) != 0) (void)!::chown(dir->c_str(), static_cast<uid_t>(-1), pool.st_gid);
    (void)::chmod(dir->c_str(), want);
    return true;
  }
  if (errno != EEXIST) return false;
  struct stat st {};
  if (::lstat(dir->c_str(), &st) != 0) return false;
  bool owner_ok = st.st_uid == pool.st_uid || st.st_uid == ::getuid() || st.st_uid == 0;
  if (!S_ISDIR(st.st_mode) || !owner_ok || (st.st_mode & ~want & 0777) != 0) {
    errno = EACCES;
    return false;
  }
  return true;
}

// The kernel address standing for pool socket node `ino`.
bool ShadowAddr(fs::FileSystem* f, uint64_t ino, sockaddr_un* out, socklen_t* len) {
  std::string dir;
  if (!ShadowDir(f, &dir)) return false;
  std::string p = dir + "/" + std::to_string(ino);
  if (p.size() >= sizeof out->sun_path) {
    errno = ENAMETOOLONG;
    return false;
  }
  std::memset(out, 0, sizeof *out);
  out->sun_family = AF_UNIX;
  std::memcpy(out->sun_path, p.c_str(), p.size() + 1);
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + p.size() + 1);
  return true;
}

// The shadow of the socket node at `r` (connect, sendto); -1/errno as the
// kernel's connect would fail.
int PeerAddr(const Route& r, sockaddr_un* out, socklen_t* len) {
  fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  struct stat st {};
  {
    CoreScope cs;
    Status s = f->Stat(r.path, &st, true, r.at);
    if (!s.ok()) return Fail(s);
  }
  if (!S_ISSOCK(st.st_mode)) return FailErrno(ECONNREFUSED);
  return ShadowAddr(f, st.st_ino, out, len) ? 0 : -1;
}

// Before a receive: the buffers the kernel writes for `n` message headers
// laid out `stride` bytes apart from `first` (recvmsg: one; recvmmsg: the
// vector, whose entries also take msg_len) are made writable where they lie
// in tracked maps: each header itself, the address, the control data and
// the data vector. The headers are the program's and may be bad (the kernel
// then answers EFAULT): they are read with process_vm_readv, never
// dereferenced here, and no more of them than the kernel takes.
void PrepareReceive(msghdr* first, unsigned int n, size_t stride) {
  constexpr unsigned int kMaxVector = 1024;  // UIO_MAXIOV: recvmmsg clamps vlen to it
  n = std::min(n, kMaxVector);
  auto* base = reinterpret_cast<char*>(first);
  for (unsigned int i = 0; i < n; i++) {
    auto* where = reinterpret_cast<msghdr*>(base + size_t{i} * stride);
    msghdr h{};
    struct iovec local{&h, sizeof h}, remote{where, sizeof h};
    if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof h)) return;
    OvBeforeKernelStores(where, stride);
    OvBeforeKernelStores(h.msg_name, h.msg_name != nullptr ? h.msg_namelen : 0);
    OvBeforeKernelStores(h.msg_control, h.msg_control != nullptr ? h.msg_controllen : 0);
    if (h.msg_iovlen <= static_cast<size_t>(INT32_MAX)) OvBeforeKernelStores(h.msg_iov, static_cast<int>(h.msg_iovlen));
  }
}

}  // namespace
}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only
using mapfs::Status;

MAPFS_EXPORT int bind(int fd, const sockaddr* addr, socklen_t len) {
  Route r;
  if (!PoolSocketPath(addr, len, &r)) return REAL(bind)(fd, addr, len);
  mapfs::fs::FileSystem* f = FsOrFail();
  if (f == nullptr) return -1;
  struct stat st {};
  {
    CoreScope cs;
    Status s = f->Mknod(r.path, S_IFSOCK | (0777 & ~mapfs::CurrentUmask()), 0, r.at);
    if (!s.ok()) return s.code() == EEXIST ? FailErrno(EADDRINUSE) : Fail(s);
    s = f->Stat(r.path, &st, false, r.at);
    if (!s.ok()) return Fail(s);
  }
  sockaddr_un shadow;
  socklen_t slen;
  int rc = -1;
  if (ShadowAddr(f, st.st_ino, &shadow, &slen)) {
    ::unlink(shadow.sun_path);  // a stale shadow of a removed node with this number
    rc = REAL(bind)(fd, reinterpret_cast<sockaddr*>(&shadow), slen);
  }
  if (rc != 0) {
    int e = errno;
    CoreScope cs;
    (void)f->Unlink(r.path, r.at);
    errno = e;
  }
  return rc;
}

MAPFS_EXPORT int connect(int fd, const sockaddr* addr, socklen_t len) {
  Route r;
  if (!PoolSocketPath(addr, len, &r)) return REAL(connect)(fd, addr, len);
  sockaddr_un peer;
  socklen_t plen;
  if (PeerAddr(r, &peer, &plen) != 0) return -1;
  return REAL(connect)(fd, reinterpret_cast<sockaddr*>(&peer), plen);
}

// Receives store into the program's buffers from the kernel: pages of a
// virtualized file's maps there are made writable first (as read's), for
// every buffer the kernel writes — the data, and the address, its length,
// the control data and the msghdr itself, written after the data left the
// queue. Prepared once, not retried after EFAULT as read is: a datagram
// whose copy faulted is gone, and a retry would take the next one.
MAPFS_EXPORT ssize_t recv(int fd, void* buf, size_t n, int flags) {
  OvBeforeKernelStores(buf, n);
  return REAL(recv)(fd, buf, n, flags);
}
MAPFS_EXPORT ssize_t __recv_chk(int fd, void* buf, size_t n, size_t buflen, int flags) {
  FortifyCheck(n > buflen);
  return recv(fd, buf, n, flags);
}
MAPFS_EXPORT ssize_t recvfrom(int fd, void* buf, size_t n, int flags, sockaddr* addr, socklen_t* len) {
  if (OvHasViews()) {
    OvBeforeKernelStores(buf, n);
    OvBeforeKernelStores(addr, addr != nullptr ? sizeof(sockaddr_storage) : 0);
    OvBeforeKernelStores(len, len != nullptr ? sizeof(socklen_t) : 0);
  }
  return REAL(recvfrom)(fd, buf, n, flags, addr, len);
}
MAPFS_EXPORT ssize_t __recvfrom_chk(int fd, void* buf, size_t n, size_t buflen, int flags, sockaddr* addr,
                                    socklen_t* len) {
  FortifyCheck(n > buflen);
  return recvfrom(fd, buf, n, flags, addr, len);
}
MAPFS_EXPORT ssize_t recvmsg(int fd, msghdr* msg, int flags) {
  if (OvHasViews() && msg != nullptr) PrepareReceive(msg, 1, sizeof *msg);
  return REAL(recvmsg)(fd, msg, flags);
}
// The same for every message of the vector, and each entry's msg_len.
MAPFS_EXPORT int recvmmsg(int fd, mmsghdr* vec, unsigned int vlen, int flags, struct timespec* timeout) {
  if (OvHasViews()) {
    if (vec != nullptr) PrepareReceive(&vec->msg_hdr, vlen, sizeof *vec);
    OvBeforeKernelStores(timeout, timeout != nullptr ? sizeof *timeout : 0);  // the time left, stored last
  }
  return REAL(recvmmsg)(fd, vec, vlen, flags, timeout);
}

MAPFS_EXPORT ssize_t sendto(int fd, const void* buf, size_t n, int flags, const sockaddr* addr, socklen_t len) {
  Route r;
  if (!PoolSocketPath(addr, len, &r)) return REAL(sendto)(fd, buf, n, flags, addr, len);
  sockaddr_un peer;
  socklen_t plen;
  if (PeerAddr(r, &peer, &plen) != 0) return -1;
  return REAL(sendto)(fd, buf, n, flags, reinterpret_cast<sockaddr*>(&peer), plen);
}

MAPFS_EXPORT ssize_t sendmsg(int fd, const msghdr* msg, int flags) {
  Route r;
  if (msg == nullptr || !PoolSocketPath(static_cast<const sockaddr*>(msg->msg_name), msg->msg_namelen, &r))
    return REAL(sendmsg)(fd, msg, flags);
  sockaddr_un peer;
  socklen_t plen;
  if (PeerAddr(r, &peer, &plen) != 0) return -1;
  msghdr m = *msg;
  m.msg_name = &peer;
  m.msg_namelen = plen;
  return REAL(sendmsg)(fd, &m, flags);
}
