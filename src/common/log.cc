#include "common/log.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace mapfs {
namespace {

// -1: not yet decided; otherwise the fd to log to (or -2 for "off").
int log_fd = -1;

int ResolveFd() {
  if (log_fd != -1) return log_fd;
  const char* v = std::getenv("MAPFS_LOG");
  int fd = -2;
  if (v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0) {
    if (v[0] == '/') {
      fd = ::open(v, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (fd < 0) fd = -2;
    } else {
      fd = STDERR_FILENO;
    }
  }
  log_fd = fd;
  return fd;
}

}  // namespace

bool LogEnabled() { return ResolveFd() >= 0; }

void Logf(const char* fmt, ...) {
  int fd = ResolveFd();
  if (fd < 0) return;
  char buf[1024];
  int n = std::snprintf(buf, sizeof buf, "mapfs[%d]: ", static_cast<int>(getpid()));
  va_list ap;
  va_start(ap, fmt);
  int m = std::vsnprintf(buf + n, sizeof buf - n - 1, fmt, ap);
  va_end(ap);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof buf - 2) len = sizeof buf - 2;
  buf[len++] = '\n';
  ssize_t w = ::write(fd, buf, len);
  (void)w;
}

}  // namespace mapfs
