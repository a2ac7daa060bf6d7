/* Many shared maps of a fragmented file (issue 14): a block-mapped file
 * (hashfs scatters its blocks) mapped thousands of times without unmapping,
 * as fsx does, stays within a bounded number of kernel mappings (the shim
 * maps such files through a per-process mirror, fs/map_mirror.h), and the
 * maps stay coherent with each other, with read/write/truncate/fallocate,
 * with a fork child, and (after msync or munmap) with another process.
 * Usage: mmap_many DIR              (every case; DIR under the mount)
 *        mmap_many DIR child FILE   (the second process; internal) */
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

static int open_new(const char* dir, const char* name, long size) {
  char path[PATH_BYTES];
  int fd = create_in(dir, name, path);
  /* Written block by block with another file's blocks in between, so that
   * no design gives it one contiguous run. */
  char other_path[4200];
  snprintf(other_path, sizeof other_path, "%s.other", path);
  int o = open(other_path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(o >= 0, "open %s", other_path);
  static char block[4096];
  for (long off = 0; off < size; off += 4096) {
    memset(block, 'a' + (int)(off / 4096 % 26), sizeof block);
    CHECK(pwrite(fd, block, sizeof block, off) == (ssize_t)sizeof block, "pwrite");
    CHECK(pwrite(o, block, sizeof block, off) == (ssize_t)sizeof block, "pwrite other");
  }
  close(o);
  return fd;
}

/* 256 KiB (64 blocks) mapped 3,000 times, never unmapped: one kernel
 * mapping per map at most, far below vm.max_map_count (65,530), where one
 * mapping per block would need 192,000. */
static void many_maps(const char* dir) {
  const long size = 256 * KIB, count = 3000;
  int fd = open_new(dir, "many", size);
  long before = kernel_maps();
  char* first = map(fd, 0, size);
  for (long i = 1; i < count; i++) {
    char* p = map(fd, 0, size);
    CHECK(p[i % size] == first[i % size], "map %ld differs from the first", i);
  }
  long added = kernel_maps() - before;
  CHECK(added <= count + 64, "%ld maps took %ld kernel mappings", count, added);
  memcpy(first + 5000, "first-map", 9);
  expect_pread(fd, 5000, "first-map");
  close(fd);
  printf("ok %ld maps of a 64-block file: %ld kernel mappings\n", count, added);
}

/* A small map (few runs: the pool's pages) and a large one of the same
 * file: one content, with each other and with the calls. */
static void coherence(const char* dir) {
  const long size = 512 * KIB;
  int fd = open_new(dir, "coherent", size);
  char* small = map(fd, 0, 8 * KIB);
  memcpy(small + 100, "small-before", 12);
  char* large = map(fd, 0, size);
  expect_mem(large + 100, "large map of a small map's store", "small-before");
  memcpy(large + 200, "large-store", 11);
  expect_mem(small + 200, "small map of a large map's store", "large-store");
  expect_pread(fd, 200, "large-store");
  put(fd, 300, "pwrite-seen");
  expect_mem(small + 300, "small map after pwrite", "pwrite-seen");
  expect_mem(large + 300, "large map after pwrite", "pwrite-seen");
  memcpy(large + 300 * KIB, "far-store", 9);
  expect_pread(fd, 300 * KIB, "far-store");
  /* A write through write() with stores elsewhere in the same page kept. */
  memcpy(large + 400 * KIB + 10, "kept", 4);
  put(fd, 400 * KIB + 100, "written");
  expect_pread(fd, 400 * KIB + 10, "kept");
  expect_mem(large + 400 * KIB + 100, "large map after a write in a stored page", "written");
  CHECK(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 300 * KIB, 4096) == 0, "punch");
  CHECK(large[300 * KIB] == 0, "large map after a punched hole");
  CHECK(ftruncate(fd, 10000) == 0, "ftruncate down");
  CHECK(large[9999] != 0 && small[8191] != 0 && large[10000] == 0, "maps after truncation");
  CHECK(ftruncate(fd, size) == 0, "ftruncate up");
  CHECK(large[20000] == 0 && large[400 * KIB + 100] == 0, "maps after truncation up");
  memcpy(large + 20000, "after-regrow", 12);
  expect_pread(fd, 20000, "after-regrow");
  CHECK(fsync(fd) == 0, "fsync");
  CHECK(munmap(small, 8 * KIB) == 0 && munmap(large, size) == 0, "munmap");
  expect_pread(fd, 20000, "after-regrow");
  close(fd);
  printf("ok coherence of small and large maps\n");
}

/* A fork child shares the maps: each sees the other's stores; what the
 * child wrote is in the file once it exited. */
static void forked(const char* dir) {
  const long size = 256 * KIB;
  int fd = open_new(dir, "forked", size);
  char* m = map(fd, 0, size);
  memcpy(m + 100, "parent-store", 12);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    if (memcmp(m + 100, "parent-store", 12) != 0) _exit(2);
    memcpy(m + 200 * KIB, "child-store", 11);
    if (pwrite(fd, "child-pwrite", 12, 300) != 12) _exit(3);
    if (memcmp(m + 300, "child-pwrite", 12) != 0) _exit(4);
    exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed (status %d)", status);
  expect_mem(m + 200 * KIB, "parent's map after the child's store", "child-store");
  expect_pread(fd, 200 * KIB, "child-store");
  expect_mem(m + 300, "parent's map after the child's pwrite", "child-pwrite");
  CHECK(munmap(m, size) == 0, "munmap");
  close(fd);
  printf("ok fork\n");
}

/* Another process (its own mount) reads what msync and munmap wrote back. */
static int child(const char* path) {
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "child: open %s", path);
  expect_pread(fd, 1000, "synced-store");
  expect_pread(fd, 2000, "unmapped-store");
  return 0;
}

static void other_process(const char* self, const char* dir) {
  const long size = 256 * KIB;
  int fd = open_new(dir, "other", size);
  char* m = map(fd, 0, size);
  memcpy(m + 1000, "synced-store", 12);
  CHECK(msync(m, size, MS_SYNC) == 0, "msync");
  memcpy(m + 2000, "unmapped-store", 14);
  CHECK(munmap(m, size) == 0, "munmap");
  char path[4096];
  snprintf(path, sizeof path, "%s/other", dir);
  char* args[] = {(char*)self, (char*)dir, "child", path, NULL};
  await_child(spawn(args), "child");
  close(fd);
  printf("ok another process\n");
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[2], "child") == 0) return child(argv[3]);
  CHECK(argc == 2, "usage: mmap_many DIR");
  many_maps(argv[1]);
  coherence(argv[1]);
  forked(argv[1]);
  other_process(argv[0], argv[1]);
  return 0;
}
