/* The fortified (_FORTIFY_SOURCE) forms of calls the shim wraps keep the C
 * library's overflow check: asked for more than the buffer the compiler
 * knows of, the program ends (SIGABRT) before any I/O, under the shim as
 * on its own. Usage: fortify_chk CALL FILE, CALL one of read, pread, recv,
 * fread, readlink, getcwd; the process is expected to abort. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  char small[16];
  volatile size_t n = 64; /* unknown to the compiler: the _chk form is called */
  const char* call = argv[1];
  int fd = open(argv[2], O_RDONLY);
  if (fd < 0) return 3;
  if (strcmp(call, "read") == 0) {
    (void)!read(fd, small, n);
  } else if (strcmp(call, "pread") == 0) {
    (void)!pread(fd, small, n, 0);
  } else if (strcmp(call, "recv") == 0) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) return 4;
    (void)!recv(sv[0], small, n, MSG_DONTWAIT);
  } else if (strcmp(call, "fread") == 0) {
    FILE* f = fdopen(fd, "r");
    (void)!fread(small, 1, n, f);
  } else if (strcmp(call, "readlink") == 0) {
    (void)!readlink(argv[2], small, n);
  } else if (strcmp(call, "getcwd") == 0) {
    (void)!getcwd(small, n);
  } else {
    return 2;
  }
  puts("not stopped");
  return 0;
}
