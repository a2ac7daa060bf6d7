#include "medium/pool_access.h"

#include <fcntl.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mapfs::medium {

namespace {

std::string Parent(const std::string& path) {
  size_t s = path.find_last_of('/');
  if (s == std::string::npos) return ".";
  if (s == 0) return "/";
  return path.substr(0, s);
}

// "uid 1000 (alice)": the owner a refusal names.
std::string Owner(uid_t uid) {
  std::string s = "uid " + std::to_string(uid);
  struct passwd pw {}, *found = nullptr;
  char buf[1024];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found != nullptr) s += std::string(" (") + pw.pw_name + ")";
  return s;
}

bool Trusted(uid_t owner) { return owner == 0 || owner == ::geteuid(); }

std::string Octal(mode_t m) {
  char b[16];
  std::snprintf(b, sizeof b, "%04o", static_cast<unsigned>(m & 07777));
  return b;
}

}  // namespace

Status OpenError(const std::string& what, const std::string& path, int err) {
  if (err == ELOOP)
    return Status::Error(ELOOP, "refusing pool " + path +
                                    ": it is a symbolic link (mapfs does not follow links to a pool; name the file itself)");
  return Status::Error(err, what + " " + path + ": " + std::strerror(err));
}

Status CheckPoolDirectory(const std::string& path, bool* world_writable) {
  struct stat dir {};
  std::string parent = Parent(path);
  if (::stat(parent.c_str(), &dir) != 0) return Status::FromErrno("stat " + parent);
  *world_writable = dir.st_mode & S_IWOTH;
  if (*world_writable && !Trusted(dir.st_uid))
    return Status::Error(EPERM, "refusing pool " + path + ": its directory " + parent + " is writable by everyone (mode " +
                                    Octal(dir.st_mode) + ") and owned by " + Owner(dir.st_uid) +
                                    ", neither you nor root: anyone could replace the pool");
  return Status::Ok();
}

Status CheckPoolLocation(const std::string& path, int fd) {
  struct stat pool {};
  if (::fstat(fd, &pool) != 0) return Status::FromErrno("fstat " + path);
  bool world_writable = false;
  MAPFS_RETURN_IF_ERROR(CheckPoolDirectory(path, &world_writable));
  std::string parent = Parent(path);
  if (world_writable && !Trusted(pool.st_uid))
    return Status::Error(EPERM, "refusing pool " + path + ": it is owned by " + Owner(pool.st_uid) +
                                    ", neither you nor root, in the world-writable directory " + parent +
                                    ": anyone could have put it there (remove it, or use a pool of your own)");
  return Status::Ok();
}

void ShareLikePool(int fd, const struct stat& pool) {
  // Owner first: fchmod after fchown, since a change of owner by a
  // non-root caller can clear set-id bits (there are none here) and the
  // mode must end up the pool's whatever happened to the owner.
  if (::fchown(fd, pool.st_uid, pool.st_gid) != 0) (void)::fchown(fd, static_cast<uid_t>(-1), pool.st_gid);
  (void)::fchmod(fd, pool.st_mode & 0666);
}

Status CheckSharedObject(const std::string& name, int fd, const struct stat& pool) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return Status::FromErrno("fstat " + name);
  bool owner_ok = st.st_uid == pool.st_uid || Trusted(st.st_uid);
  bool mode_ok = (st.st_mode & 0777 & ~(pool.st_mode & 0666)) == 0;
  if (owner_ok && mode_ok) return Status::Ok();
  return Status::Error(EPERM, "refusing " + name + " for this pool: owned by " + Owner(st.st_uid) +
                                  " with mode " + Octal(st.st_mode) + ", but the pool is owned by " + Owner(pool.st_uid) +
                                  " with mode " + Octal(pool.st_mode) +
                                  " (someone else created it; remove it once no mount of the pool is running)");
}

}  // namespace mapfs::medium
