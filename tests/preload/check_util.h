/* Helpers of the shim's C test programs (mmap_grow.c, mmap_many.c,
 * mmap_view.c, fault_app.c): a failed CHECK prints where and why, with
 * errno, and exits 1; the map helpers check every call they make. */
#ifndef MAPFS_TESTS_PRELOAD_CHECK_UTIL_H
#define MAPFS_TESTS_PRELOAD_CHECK_UTIL_H

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
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

/* Creates (or empties) DIR/NAME for reading and writing; its path goes to
 * path[PATH_BYTES]. */
#define PATH_BYTES 4096
static inline int create_in(const char* dir, const char* name, char* path) {
  snprintf(path, PATH_BYTES, "%s/%s", dir, name);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "open %s", path);
  return fd;
}

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

/* The kernel mappings this process holds (lines of /proc/self/maps). */
static inline long kernel_maps(void) {
  FILE* f = fopen("/proc/self/maps", "r");
  CHECK(f != NULL, "open /proc/self/maps");
  long n = 0;
  for (int c; (c = fgetc(f)) != EOF;) n += c == '\n';
  fclose(f);
  return n;
}

/* Starts argv[0] (this program, for a second process with its own mount of
 * the pool) with `args`; returns its pid. */
static inline pid_t spawn(char* const args[]) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    execv(args[0], args);
    _exit(127);
  }
  return pid;
}

static inline void await_child(pid_t pid, const char* what) {
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s failed (status %d)", what, status);
}

#endif
