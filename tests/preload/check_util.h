/* Helpers of the shim's C test programs (mmap_grow.c, mmap_many.c,
 * fault_app.c): a failed CHECK prints where and why, with errno, and exits
 * 1; the map helpers check every call they make. */
#ifndef MAPFS_TESTS_PRELOAD_CHECK_UTIL_H
#define MAPFS_TESTS_PRELOAD_CHECK_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define KIB 1024L
#define MIB (1024L * KIB)
#define CHECK(c, ...)                                      \
  do {                                                     \
    if (!(c)) {                                            \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                        \
      fprintf(stderr, " (errno %s)\n", strerror(errno));   \
      exit(1);                                             \
    }                                                      \
  } while (0)

/* A shared, writable map of [off, off+len) of fd. */
static inline char* map(int fd, long off, long len) {
  char* p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, off);
  CHECK(p != MAP_FAILED, "mmap off %ld len %ld", off, len);
  return p;
}

static inline void put(int fd, long off, const char* s) {
  CHECK(pwrite(fd, s, strlen(s), off) == (ssize_t)strlen(s), "pwrite at %ld", off);
}

static inline void expect_pread(int fd, long off, const char* s) {
  char buf[64] = {0};
  size_t n = strlen(s);
  CHECK(pread(fd, buf, n, off) == (ssize_t)n, "pread at %ld", off);
  CHECK(memcmp(buf, s, n) == 0, "pread at %ld: '%.*s', want '%s'", off, (int)n, buf, s);
}

static inline void expect_mem(const char* p, const char* what, const char* s) {
  CHECK(memcmp(p, s, strlen(s)) == 0, "%s: '%.*s', want '%s'", what, (int)strlen(s), p, s);
}

#endif
