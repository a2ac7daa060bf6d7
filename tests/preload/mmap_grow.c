/* Shared maps of a mapfs file stay coherent while the file grows past its
 * partition (moved by copy when small, by pswap past 2 MiB): through a map
 * made before the growth, a write is seen by pread and by a new map, and a
 * pwrite is seen through the map; mremap to a larger size maps the file's
 * next bytes; the same across two processes (a child started by exec, with
 * its own mount of the pool); and two unrelated processes sharing a wide
 * map (on a block-mapped pool, one of many runs) see each other's stores
 * at once, with no msync, as a SQLite WAL index needs.
 * Usage: mmap_grow DIR            (runs every case; DIR under the mount)
 *        mmap_grow DIR child FILE (the second process; internal)
 *        mmap_grow DIR wide FILE RFD WFD (the wide case's second process) */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"

/* A 32 KiB file mapped, grown to `grow` bytes with pwrite, the range at
 * `second` mapped: both maps, pread and pwrite agree, both ways. */
static void one_process(const char* dir, const char* name, long grow, long second) {
  char path[PATH_BYTES];
  int fd = create_in(dir, name, path);
  CHECK(ftruncate(fd, 32 * KIB) == 0, "ftruncate");
  char* a = map(fd, 0, 32 * KIB);
  memcpy(a + 100, "before-growth", 13);
  put(fd, 32 * KIB - 20, "tail-pwrite");
  put(fd, grow - 1, "x");  /* the partition move */
  expect_pread(fd, 100, "before-growth");
  expect_pread(fd, 32 * KIB - 20, "tail-pwrite");
  /* old map -> pread, new maps */
  memcpy(a + 200, "old-map-store", 13);
  expect_pread(fd, 200, "old-map-store");
  char* again = map(fd, 0, 32 * KIB);
  expect_mem(again + 200, "new map of the first range", "old-map-store");
  expect_mem(again + 100, "new map of the first range", "before-growth");
  /* pwrite -> old map */
  put(fd, 300, "pwrite-after");
  expect_mem(a + 300, "old map after pwrite", "pwrite-after");
  /* the second range */
  char* b = map(fd, second, 32 * KIB);
  memcpy(b + 10, "second-map", 10);
  expect_pread(fd, second + 10, "second-map");
  put(fd, second + 40, "second-pwrite");
  expect_mem(b + 40, "second map after pwrite", "second-pwrite");
  /* a map seeing another map */
  memcpy(again + 400, "map-to-map", 10);
  expect_mem(a + 400, "old map after a store through another", "map-to-map");
  /* and once more across a second move, with both maps held */
  put(fd, 2 * grow + 5 * MIB - 1, "y");
  memcpy(a + 500, "old-again", 9);
  memcpy(b + 500, "second-again", 12);
  expect_pread(fd, 500, "old-again");
  expect_pread(fd, second + 500, "second-again");
  put(fd, 600, "pwrite-again");
  expect_mem(a + 600, "old map after the second move", "pwrite-again");
  expect_mem(again + 600, "new map after the second move", "pwrite-again");
  CHECK(msync(a, 32 * KIB, MS_SYNC) == 0, "msync");
  CHECK(munmap(a, 32 * KIB) == 0 && munmap(again, 32 * KIB) == 0 && munmap(b, 32 * KIB) == 0, "munmap");
  expect_pread(fd, 200, "old-map-store");
  close(fd);
  printf("ok %s: grown to %ld, second map at %ld\n", name, grow, second);
}

/* The child: the parent has FILE (32 KiB) mapped and wrote through it. */
static int child(const char* path) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0, "child: open %s", path);
  expect_pread(fd, 100, "parent-map");
  put(fd, 64 * KIB - 1, "x");      /* moved by copy if it were not mapped */
  put(fd, 3 * MIB - 1, "x");       /* past 2 MiB: pswap */
  expect_pread(fd, 100, "parent-map");
  put(fd, 200, "child-pwrite");
  char* b = map(fd, 2 * MIB, 32 * KIB);
  memcpy(b, "child-map", 9);
  char* a = map(fd, 0, 32 * KIB);
  expect_mem(a + 100, "child's map of the parent's range", "parent-map");
  memcpy(a + 300, "child-store", 11);
  return 0;
}

static void two_processes(const char* self, const char* dir) {
  char path[PATH_BYTES];
  int fd = create_in(dir, "two", path);
  CHECK(ftruncate(fd, 32 * KIB) == 0, "ftruncate");
  char* a = map(fd, 0, 32 * KIB);
  memcpy(a + 100, "parent-map", 10);
  char* args[] = {(char*)self, (char*)dir, "child", path, NULL};
  await_child(spawn(args), "child");
  expect_mem(a + 200, "parent's map after the child's pwrite", "child-pwrite");
  expect_mem(a + 300, "parent's map after the child's store", "child-store");
  expect_pread(fd, 2 * MIB, "child-map");
  char* b = map(fd, 2 * MIB, 32 * KIB);
  expect_mem(b, "parent's new map of the child's range", "child-map");
  memcpy(a + 400, "parent-late", 11);
  expect_pread(fd, 400, "parent-late");
  close(fd);  /* the maps keep the file */
  expect_mem(a + 400, "map after close", "parent-late");
  printf("ok two processes\n");
}

#define WIDE (256 * KIB) /* 64 blocks: 64 runs on a hashfs pool */

/* The wide case's child: sees the parent's store, stores, says so on WFD,
 * and stays alive (an exit would write back) until the parent has looked. */
static int wide_child(const char* path, int rfd, int wfd) {
  int fd = open(path, O_RDWR);
  CHECK(fd >= 0, "wide child: open %s", path);
  char* m = map(fd, 0, WIDE);
  expect_mem(m + 200 * KIB, "child's map of the parent's store", "wide-parent");
  memcpy(m + 100 * KIB, "wide-child", 10);
  char c = 'x';
  CHECK(write(wfd, &c, 1) == 1, "wide child: write");
  CHECK(read(rfd, &c, 1) == 1, "wide child: read");
  return 0;
}

static void two_processes_wide(const char* self, const char* dir) {
  char path[PATH_BYTES];
  int fd = create_in(dir, "wide", path);
  static char block[4 * KIB];
  /* Written block by block in reverse, so a block-mapped pool scatters it. */
  for (long off = WIDE - 4 * KIB; off >= 0; off -= 4 * KIB)
    CHECK(pwrite(fd, block, sizeof block, off) == (ssize_t)sizeof block, "pwrite at %ld", off);
  char* a = map(fd, 0, WIDE);
  memcpy(a + 200 * KIB, "wide-parent", 11);
  int to_child[2], from_child[2];
  CHECK(pipe(to_child) == 0 && pipe(from_child) == 0, "pipe");
  char r[16], w[16];
  snprintf(r, sizeof r, "%d", to_child[0]);
  snprintf(w, sizeof w, "%d", from_child[1]);
  char* args[] = {(char*)self, (char*)dir, "wide", path, r, w, NULL};
  pid_t pid = spawn(args);
  char c;
  CHECK(read(from_child[0], &c, 1) == 1, "the wide child died before storing");
  expect_mem(a + 100 * KIB, "parent's map while the child lives", "wide-child");
  CHECK(write(to_child[1], &c, 1) == 1, "write");
  await_child(pid, "wide child");
  CHECK(munmap(a, WIDE) == 0, "munmap");
  close(fd);
  printf("ok two processes, a wide map\n");
}

/* A large overwrite (past the strict mode's log: written in place) and a
 * truncation down and up again, with maps held: still one content. */
static void overwrite_and_truncate(const char* dir) {
  char path[PATH_BYTES];
  int fd = create_in(dir, "trunc", path);
  CHECK(ftruncate(fd, 4 * MIB) == 0, "ftruncate");
  char* a = map(fd, 0, 1 * MIB);
  char* b = map(fd, 3 * MIB, 32 * KIB);
  static char big[512 * KIB];
  memset(big, 'A', sizeof big);
  CHECK(pwrite(fd, big, sizeof big, 4 * KIB) == (ssize_t)sizeof big, "large pwrite");
  CHECK(a[4 * KIB] == 'A' && a[4 * KIB + sizeof big - 1] == 'A' && a[4 * KIB - 1] == 0, "map after a large pwrite");
  memset(big, 'B', sizeof big);
  CHECK(pwrite(fd, big, 256 * KIB, 3 * MIB - 128 * KIB) == 256 * KIB, "large pwrite across chunks");
  CHECK(b[0] == 'B' && b[32 * KIB - 1] == 'B', "second map after a large pwrite");
  CHECK(ftruncate(fd, 10000) == 0, "ftruncate down");
  CHECK(a[9999] == 'A' && a[10000] == 0 && a[3 * 4096 - 1] == 0, "map of the last page after truncation");
  CHECK(ftruncate(fd, 4 * MIB) == 0, "ftruncate up");
  CHECK(a[20000] == 0 && b[5] == 0, "maps after truncation up");
  put(fd, 3 * MIB + 5, "after-regrow");
  expect_mem(b + 5, "second map after truncation and pwrite", "after-regrow");
  memcpy(a + 20000, "map-after-regrow", 16);
  expect_pread(fd, 20000, "map-after-regrow");
  close(fd);
  printf("ok overwrite and truncate\n");
}

/* mremap of a shared map to a larger size maps the file's next bytes (not
 * whatever follows in the pool), and stays coherent. */
static void remap(const char* dir) {
  char path[PATH_BYTES];
  int fd = create_in(dir, "remap", path);
  CHECK(ftruncate(fd, 32 * KIB) == 0, "ftruncate");
  char* a = map(fd, 0, 32 * KIB);
  memcpy(a + 10, "first", 5);
  put(fd, 3 * MIB - 1, "x");
  put(fd, 40 * KIB, "next-bytes");
  char* b = mremap(a, 32 * KIB, 64 * KIB, MREMAP_MAYMOVE);
  CHECK(b != MAP_FAILED, "mremap");
  expect_mem(b + 10, "remapped first range", "first");
  expect_mem(b + 40 * KIB, "remapped grown range", "next-bytes");
  memcpy(b + 50 * KIB, "through-remap", 13);
  expect_pread(fd, 50 * KIB, "through-remap");
  CHECK(munmap(b, 64 * KIB) == 0, "munmap");
  close(fd);
  printf("ok mremap\n");
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[2], "child") == 0) return child(argv[3]);
  if (argc == 6 && strcmp(argv[2], "wide") == 0) return wide_child(argv[3], atoi(argv[4]), atoi(argv[5]));
  CHECK(argc == 2, "usage: mmap_grow DIR");
  one_process(argv[1], "small", 64 * KIB, 32 * KIB);      /* L1 -> L2: moved by copy unmapped */
  one_process(argv[1], "large", 4 * MIB, 3 * MIB);         /* past 2 MiB: pswap */
  one_process(argv[1], "huge", 40 * MIB, 33 * MIB);        /* L2 -> L5 in one step */
  overwrite_and_truncate(argv[1]);
  remap(argv[1]);
  two_processes(argv[0], argv[1]);
  two_processes_wide(argv[0], argv[1]);
  return 0;
}
