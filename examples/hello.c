/* A program built against an installed mapfs: mounts the pool named on the
 * command line, writes a file through the C API, reads it back and prints it.
 *   cc hello.c $(pkg-config --cflags --libs mapfs) -o hello && ./hello POOL */
#include <fcntl.h>
#include <mapfs/mapfs.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s POOL\n", argv[0]);
    return 2;
  }
  mapfs_t *fs = mapfs_mount(argv[1], NULL);
  if (fs == NULL) {
    perror("mapfs_mount");
    return 1;
  }
  const char msg[] = "hello from mapfs\n";
  char buf[64] = {0};
  int fd = mapfs_open(fs, "/hello.txt", O_CREAT | O_TRUNC | O_RDWR, 0644);
  if (fd < 0 || mapfs_write(fs, fd, msg, strlen(msg)) != (ssize_t)strlen(msg) ||
      mapfs_pread(fs, fd, buf, sizeof buf - 1, 0) != (ssize_t)strlen(msg) || mapfs_close(fs, fd) != 0) {
    perror("mapfs");
    mapfs_unmount(fs);
    return 1;
  }
  fputs(buf, stdout);
  return mapfs_unmount(fs) == 0 ? 0 : 1;
}
