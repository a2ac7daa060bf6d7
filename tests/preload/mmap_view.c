/* Read-only shared maps of read-only descriptions, the kind LevelDB makes
 * of every table it reads: the shim serves them from the pool's read view
 * (src/preload/read_view.h) without a kernel mapping of their own. What a
 * program relies on stays true: the map shows the file and later writes to
 * it; a store through it faults and leaves the file alone; mprotect cannot
 * make it writable; munmap ends it without touching the pool (the file
 * system keeps working, other maps keep their bytes); a program may place
 * its own map over it (MAP_FIXED) and the file's later maps still show the
 * file. And they cost no kernel mapping each. Usage: mmap_view DIR (under
 * the mount). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"

static const long kSize = 64 * KIB;

/* DIR/NAME filled with `fill`, then opened again read-only. */
static int make_file(const char* dir, const char* name, char fill) {
  char path[PATH_BYTES];
  int w = create_in(dir, name, path);
  static char buf[64 * 1024];
  memset(buf, fill, sizeof buf);
  CHECK(write(w, buf, sizeof buf) == (ssize_t)sizeof buf, "write %s", path);
  close(w);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "open %s read-only", path);
  return fd;
}

static char* map_ro(int fd, long len) {
  char* p = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
  CHECK(p != MAP_FAILED, "mmap read-only");
  return p;
}

static void all_are(const char* p, long n, char c, const char* what) {
  for (long i = 0; i < n; i++) CHECK(p[i] == c, "%s: byte %ld is '%c', want '%c'", what, i, p[i], c);
}

/* The map shows the file, and a write through another descriptor. */
static void shows_file(const char* dir) {
  int fd = make_file(dir, "shows", 'a');
  char* p = map_ro(fd, kSize);
  close(fd); /* as LevelDB does: the map keeps the file */
  all_are(p, kSize, 'a', "map after close");
  char path[PATH_BYTES];
  snprintf(path, sizeof path, "%s/shows", dir);
  int w = open(path, O_WRONLY);
  CHECK(w >= 0, "open for writing");
  put(w, 100, "written later");
  expect_mem(p + 100, "map after pwrite", "written later");
  close(w);
  CHECK(munmap(p, kSize) == 0, "munmap");
}

/* A store through it is a SIGSEGV (in a child), and the file is unchanged. */
static void store_faults(const char* dir) {
  int fd = make_file(dir, "store", 's');
  char* p = map_ro(fd, kSize);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    signal(SIGSEGV, SIG_DFL);
    p[10] = 'X';
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGSEGV, "store through a read-only map: status %d, want SIGSEGV",
        status);
  all_are(p, kSize, 's', "map after the child's store");
  char c = 0;
  CHECK(pread(fd, &c, 1, 10) == 1 && c == 's', "file after the child's store: '%c'", c);
  /* mprotect to writable: refused as for any shared map of a read-only
   * description; PROT_READ again is fine. */
  errno = 0;
  CHECK(mprotect(p, kSize, PROT_READ | PROT_WRITE) == -1 && errno == EACCES, "mprotect PROT_WRITE");
  /* pkey_mprotect alike, with no key and with one (where the machine has
   * protection keys): the key does not open a way around the rule. */
  errno = 0;
  CHECK(pkey_mprotect(p, kSize, PROT_READ | PROT_WRITE, -1) == -1 && errno == EACCES, "pkey_mprotect PROT_WRITE");
  int key = pkey_alloc(0, 0);
  if (key >= 0) {
    errno = 0;
    CHECK(pkey_mprotect(p, kSize, PROT_READ | PROT_WRITE, key) == -1 && errno == EACCES,
          "pkey_mprotect PROT_WRITE with key %d", key);
    pkey_free(key);
  }
  CHECK(mprotect(p, kSize, PROT_READ) == 0, "mprotect PROT_READ");
  CHECK(munmap(p, kSize) == 0, "munmap");
  close(fd);
}

/* Maps come and go by the hundred, as a database's table cache makes them;
 * after each munmap the file system and the other maps are untouched. */
static void many_come_and_go(const char* dir) {
  enum { kFiles = 40 };
  int fds[kFiles];
  char* maps[kFiles];
  for (int i = 0; i < kFiles; i++) {
    char name[32];
    snprintf(name, sizeof name, "table%d", i);
    fds[i] = make_file(dir, name, (char)('A' + i % 26));
  }
  /* Served from the read view: no kernel mapping each (the kernel's
   * vm.max_map_count is not spent on them). */
  long before = kernel_maps();
  for (int i = 0; i < kFiles; i++) maps[i] = map_ro(fds[i], kSize);
  long after = kernel_maps();
  CHECK(after - before < kFiles / 2, "%d read-only maps took %ld kernel mappings", kFiles, after - before);
  for (int round = 0; round < 200; round++) {
    int i = round % kFiles;
    CHECK(munmap(maps[i], kSize) == 0, "munmap table%d", i);
    /* A second map of the same file while the first lives: its own pages. */
    char* again = map_ro(fds[i], kSize);
    char* twice = map_ro(fds[i], kSize);
    CHECK(again != twice, "two live maps share an address");
    CHECK(munmap(twice, kSize) == 0, "munmap the second map");
    maps[i] = again;
    for (int j = 0; j < kFiles; j++) all_are(maps[j], kSize, (char)('A' + j % 26), "a live map");
  }
  char path[PATH_BYTES];
  int w = create_in(dir, "after", path);
  put(w, 0, "still works");
  expect_pread(w, 0, "still works");
  close(w);
  for (int i = 0; i < kFiles; i++) {
    CHECK(munmap(maps[i], kSize) == 0, "munmap");
    close(fds[i]);
  }
}

/* The program's own map over a read-only map (MAP_FIXED, anonymous): it
 * gets fresh zeroed, writable memory there; the file and its next maps are
 * untouched; unmapping it twice is harmless. */
static void fixed_over(const char* dir) {
  int fd = make_file(dir, "fixed", 'f');
  char* p = map_ro(fd, kSize);
  char* q = mmap(p, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  CHECK(q == p, "MAP_FIXED over the map");
  all_are(q, kSize, 0, "anonymous map over it");
  memset(q, 'z', kSize);
  char* r = map_ro(fd, kSize);
  all_are(r, kSize, 'f', "a new map of the file");
  CHECK(munmap(q, kSize) == 0, "munmap the anonymous map");
  CHECK(munmap(q, kSize) == 0, "munmap it again");
  char* s = map_ro(fd, kSize);
  all_are(s, kSize, 'f', "a map after the anonymous one went");
  all_are(r, kSize, 'f', "the earlier map");
  munmap(r, kSize);
  munmap(s, kSize);
  char c = 0;
  CHECK(pread(fd, &c, 1, 0) == 1 && c == 'f', "file: '%c'", c);
  close(fd);
}

int main(int argc, char** argv) {
  CHECK(argc == 2, "usage: mmap_view DIR");
  shows_file(argv[1]);
  store_faults(argv[1]);
  many_come_and_go(argv[1]);
  fixed_over(argv[1]);
  printf("mmap_view: ok\n");
  return 0;
}
