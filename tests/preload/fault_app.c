/* A program with its own SIGSEGV/SIGBUS handlers, run under `mapfs run`
 * (and natively, to compare): mapfs's own page faults must never reach
 * those handlers, every other fault must, as the kernel would deliver it.
 *
 * Usage: fault_app MODE DIR    (DIR: a directory under the mount, or a
 *                               kernel directory for the native run)
 *   io      an aborting SA_SIGINFO handler, then heavy I/O in DIR (files
 *           created, written, read back, grown, truncated, renamed,
 *           removed, a directory of many entries, a shared map of a file
 *           touched, a forked child doing the same); exits 0
 *   bad     io, then a store to an unmapped page: the handler must run
 *           with si_addr = that address (prints "handler ran", exits 42)
 *   query   what sigaction(sig, NULL, &old) reports for SIGSEGV and
 *           SIGBUS before and after the program's own sigaction, around
 *           pool I/O, in a forked child, and for each of signal(),
 *           sysv_signal(), sigset() and syscall(SYS_rt_sigaction)
 *           (printed; the test compares with the native run)
 *   dfl     io in a child that then dereferences a bad pointer with
 *           SIG_DFL; prints how the child ended
 *   ign     the same with SIGSEGV ignored (the kernel kills anyway)
 *   exec    SIGSEGV ignored and a SIGBUS handler, pool I/O, then exec of
 *           itself ("show"): prints what the new image starts with (the
 *           ignored disposition inherited, the handler back to SIG_DFL)
 *   signal  signal(SIGSEGV, h): io, then two faults, each escaped by
 *           siglongjmp; then sysv_signal (one-shot): the second fault kills
 *           (run in a child, how it ended printed)
 */
#define _GNU_SOURCE
/* sigset() is deprecated in glibc's headers; programs still call it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check_util.h"

static void say(const char* s) { (void)!write(2, s, strlen(s)); }

/* ------------------------------------------------------------ handlers */

static void aborting(int sig, siginfo_t* info, void* uc) {
  (void)uc;
  char buf[128];
  snprintf(buf, sizeof buf, "FAIL: the program's handler got signal %d at %p during pool I/O\n", sig,
           info->si_addr);
  say(buf);
  abort();
}

static volatile char* expected_addr;
static void reporting(int sig, siginfo_t* info, void* uc) {
  (void)uc;
  if (sig == SIGSEGV && info->si_addr == (void*)expected_addr && info->si_code == SEGV_ACCERR) {
    say("handler ran: SIGSEGV at the bad address\n");
    _exit(42);
  }
  say("FAIL: handler ran with the wrong signal, address or code\n");
  _exit(43);
}

static void install(int sig, void (*h)(int, siginfo_t*, void*), int flags) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = h;
  sa.sa_flags = SA_SIGINFO | flags;
  sigemptyset(&sa.sa_mask);
  CHECK(sigaction(sig, &sa, NULL) == 0, "sigaction %d", sig);
}

/* A page no one may touch. */
static volatile char* bad_page(void) {
  void* p = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(p != MAP_FAILED, "mmap PROT_NONE");
  return (volatile char*)p + 100;
}

/* ------------------------------------------------------------ pool I/O */

static void fill(char* b, long n, long seed) {
  for (long i = 0; i < n; i++) b[i] = (char)((i * 31 + seed * 7) >> 3);
}

static void path_of(char* out, const char* dir, const char* fmt, long i) {
  char name[64];
  snprintf(name, sizeof name, fmt, i);
  CHECK(strlen(dir) + strlen(name) + 2 <= 4096, "path too long");
  strcpy(out, dir);
  strcat(out, "/");
  strcat(out, name);
}

static void write_all(int fd, const char* b, long n) {
  while (n > 0) {
    ssize_t w = write(fd, b, (size_t)n);
    CHECK(w > 0, "write");
    b += w;
    n -= w;
  }
}

static void read_check(const char* path, long size, long chunk, long seed) {
  char* want = malloc((size_t)size + 1);
  char* got = malloc((size_t)chunk);
  CHECK(want && got, "malloc");
  fill(want, size, seed);
  int fd = open(path, O_RDONLY);
  CHECK(fd >= 0, "open %s", path);
  long off = 0;
  for (;;) {
    ssize_t r = read(fd, got, (size_t)chunk);
    CHECK(r >= 0, "read %s", path);
    if (r == 0) break;
    CHECK(off + r <= size && memcmp(got, want + off, (size_t)r) == 0, "content of %s at %ld", path, off);
    off += r;
  }
  CHECK(off == size, "%s: read %ld bytes, want %ld", path, off, size);
  close(fd);
  free(want);
  free(got);
}

/* Many files of many sizes (written in uneven chunks, so files grow past
 * their partitions), a large file, overwrites, a directory of many
 * entries, renames, truncation, removal, a shared map. */
/* How much pool_io does: heavy for io/bad, light where it only has to
 * mount the pool and touch it (the other modes). */
static long n_files = 120, big_mib = 40, n_entries = 1500;

static void pool_io(const char* dir, long round) {
  char path[4096], to[4096], sub[4096];
  char* buf = malloc(4 * MIB);
  CHECK(buf, "malloc");
  snprintf(sub, sizeof sub, "%s/many-%ld", dir, round);
  CHECK(mkdir(sub, 0755) == 0, "mkdir %s", sub);
  for (long i = 0; i < n_files; i++) {
    long size = (i * 37 % 61) * 5 * KIB + i * 13;
    long chunk = 1 + (i % 7) * 3000;
    path_of(path, dir, "f%ld", i + round * 1000);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0, "create %s", path);
    fill(buf, size, i);
    for (long off = 0; off < size; off += chunk) write_all(fd, buf + off, off + chunk > size ? size - off : chunk);
    close(fd);
    read_check(path, size, 4096 + i, i);
  }
  /* big_mib MiB in 1 MiB writes, read back in 3 MiB reads. */
  path_of(path, dir, "big%ld", round);
  int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0, "create %s", path);
  long big_size = big_mib * MIB;
  char* big = malloc((size_t)big_size);
  CHECK(big, "malloc");
  fill(big, big_size, 99);
  for (long off = 0; off < big_size; off += MIB) write_all(fd, big + off, MIB);
  CHECK(fsync(fd) == 0, "fsync");
  for (long off = 0; off < big_size; off += 3 * MIB) {
    long n = off + 3 * MIB > big_size ? big_size - off : 3 * MIB;
    CHECK(pread(fd, buf, (size_t)n, off) == n && memcmp(buf, big + off, (size_t)n) == 0, "pread big at %ld", off);
  }
  /* A shared map: stores through it are read back by pread and the reverse. */
  char* m = mmap(NULL, 8 * MIB, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 4 * MIB);
  CHECK(m != MAP_FAILED, "mmap big");
  CHECK(memcmp(m, big + 4 * MIB, 8 * MIB) == 0, "map content");
  for (long off = 0; off < 8 * MIB; off += 4096) m[off] = 'M';
  CHECK(msync(m, 8 * MIB, MS_SYNC) == 0, "msync");
  CHECK(pread(fd, buf, 1, 4 * MIB + 4096 * 5) == 1 && buf[0] == 'M', "pread after a store through the map");
  CHECK(pwrite(fd, "P", 1, 4 * MIB + 7) == 1 && m[7] == 'P', "map after pwrite");
  CHECK(munmap(m, 8 * MIB) == 0, "munmap");
  CHECK(ftruncate(fd, 5 * MIB + 17) == 0, "ftruncate");
  close(fd);
  free(big);
  /* A directory of many entries, listed, renamed into, emptied. */
  for (long i = 0; i < n_entries; i++) {
    path_of(path, sub, "entry-%ld", i);
    int e = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK(e >= 0, "create %s", path);
    if (i % 3 == 0) write_all(e, "x", 1);
    close(e);
  }
  DIR* d = opendir(sub);
  CHECK(d, "opendir %s", sub);
  long n = 0;
  for (struct dirent* de; (de = readdir(d)) != NULL;) n += de->d_name[0] != '.';
  closedir(d);
  CHECK(n == n_entries, "%ld entries in %s", n, sub);
  for (long i = 0; i < n_entries; i += 2) {
    path_of(path, sub, "entry-%ld", i);
    path_of(to, sub, "moved-%ld", i);
    CHECK(rename(path, to) == 0, "rename %s", path);
  }
  for (long i = 0; i < n_files; i += 2) {
    path_of(path, dir, "f%ld", i + round * 1000);
    CHECK(unlink(path) == 0, "unlink %s", path);
  }
  free(buf);
}

/* pool_io in this process and in a forked child. */
static void heavy_io(const char* dir) {
  pool_io(dir, 0);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    pool_io(dir, 1);
    _exit(0);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child doing pool I/O ended with status %#x", status);
  pool_io(dir, 2);
}

/* ------------------------------------------------------------ query */

static void h_plain(int sig) { (void)sig; }
static void h_info(int sig, siginfo_t* i, void* u) { (void)sig, (void)i, (void)u; }

static const char* name_of(void* h) {
  if (h == (void*)SIG_DFL) return "SIG_DFL";
  if (h == (void*)SIG_IGN) return "SIG_IGN";
  if (h == (void*)h_plain) return "h_plain";
  if (h == (void*)h_info) return "h_info";
  if (h == (void*)aborting) return "aborting";
  return "SOMEONE ELSE'S";
}

static void show(const char* when, int sig) {
  struct sigaction old;
  memset(&old, 0xA5, sizeof old);  /* glibc leaves mask words past the kernel's 64 signals as they were */
  CHECK(sigaction(sig, NULL, &old) == 0, "sigaction query");
  printf("%-34s %-7s %-8s flags %#x mask %s%s%s%s\n", when, sig == SIGSEGV ? "SIGSEGV" : "SIGBUS",
         name_of((void*)old.sa_handler), (unsigned)old.sa_flags, sigismember(&old.sa_mask, SIGUSR1) ? "USR1 " : "",
         sigismember(&old.sa_mask, SIGSEGV) ? "SEGV " : "", sigismember(&old.sa_mask, SIGKILL) ? "KILL " : "",
         sigismember(&old.sa_mask, SIGTERM) ? "TERM" : "");
}

struct kaction {  /* rt_sigaction's struct on x86-64 / arm64 */
  void* handler;
  unsigned long flags;
  void* restorer;
  uint64_t mask;
};

static void query(const char* dir) {
  show("at start", SIGSEGV);
  show("at start", SIGBUS);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = h_info;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  sigaddset(&sa.sa_mask, SIGKILL);  /* dropped by the kernel */
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
  show("after sigaction", SIGSEGV);
  pool_io(dir, 0);  /* mapfs mounts and installs its handler */
  show("after pool I/O", SIGSEGV);
  show("after pool I/O", SIGBUS);
  /* old is reported by the call that replaces it */
  struct sigaction next, prev;
  memset(&next, 0, sizeof next);
  next.sa_handler = h_plain;
  next.sa_flags = SA_RESETHAND | SA_RESTART;
  sigfillset(&next.sa_mask);
  CHECK(sigaction(SIGBUS, &next, &prev) == 0, "sigaction SIGBUS");
  printf("SIGBUS replaced, old was %s flags %#x\n", name_of((void*)prev.sa_handler), (unsigned)prev.sa_flags);
  show("SIGBUS set", SIGBUS);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    show("in a forked child", SIGSEGV);
    show("in a forked child", SIGBUS);
    fflush(stdout);
    _exit(0);
  }
  int st;
  CHECK(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "child");
  void (*was)(int) = signal(SIGSEGV, h_plain);
  printf("signal() returned %s\n", name_of((void*)was));
  show("after signal()", SIGSEGV);
  was = sysv_signal(SIGSEGV, SIG_DFL);
  printf("sysv_signal() returned %s\n", name_of((void*)was));
  was = sysv_signal(SIGSEGV, h_plain);
  show("after sysv_signal()", SIGSEGV);
  was = sigset(SIGSEGV, SIG_IGN);
  printf("sigset() returned %s\n", name_of((void*)was));
  show("after sigset(SIG_IGN)", SIGSEGV);
  struct kaction k = {(void*)h_info, SA_SIGINFO | SA_RESTART, NULL, 1ul << (SIGTERM - 1)}, ko;
  memset(&ko, 0, sizeof ko);
  CHECK(syscall(SYS_rt_sigaction, SIGSEGV, NULL, &ko, 8) == 0, "rt_sigaction query");
  printf("rt_sigaction: %s flags %#lx\n", name_of(ko.handler), ko.flags);
  errno = 0;
  long r = syscall(SYS_rt_sigaction, SIGSEGV, &k, NULL, 4);
  printf("rt_sigaction with a bad size: %ld %s\n", r, strerror(errno));
  /* With SA_RESTORER (as any raw caller on x86-64 must, to return from a handler) */
  struct sigaction libc_view;
  CHECK(sigaction(SIGBUS, NULL, &libc_view) == 0, "query");
  k.flags |= 0x04000000;
  k.restorer = (void*)libc_view.sa_restorer;
  CHECK(syscall(SYS_rt_sigaction, SIGSEGV, &k, NULL, 8) == 0, "rt_sigaction set");
  show("after rt_sigaction", SIGSEGV);
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0, "sigaction");
  show("set again", SIGSEGV);
  pool_io(dir, 1);
  show("after more pool I/O", SIGSEGV);
}

/* ------------------------------------------------------------ deaths */

static void report_child(const char* what, pid_t pid) {
  int st;
  CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
  if (WIFSIGNALED(st))
    printf("%s: killed by signal %d (%s)\n", what, WTERMSIG(st), strsignal(WTERMSIG(st)));
  else
    printf("%s: exited with %d\n", what, WEXITSTATUS(st));
}

static void no_core(void) {
  struct rlimit rl = {0, 0};
  setrlimit(RLIMIT_CORE, &rl);
}

static void die_by_fault(const char* dir, void (*disp)(int), const char* what) {
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    no_core();
    signal(SIGSEGV, disp);
    pool_io(dir, 0);
    *bad_page() = 1;
    _exit(0);
  }
  report_child(what, pid);
}

static sigjmp_buf jump;
static volatile sig_atomic_t hits;
static void escape(int sig) {
  (void)sig;
  hits++;
  siglongjmp(jump, 1);
}

static void signal_form(const char* dir) {
  CHECK(signal(SIGSEGV, escape) == SIG_DFL, "signal() at start");
  pool_io(dir, 0);
  volatile char* p = bad_page();
  for (volatile int i = 0; i < 2; i++)
    if (sigsetjmp(jump, 1) == 0) *p = 1;
  printf("signal(): the handler ran %d times\n", (int)hits);
  CHECK(signal(SIGSEGV, SIG_DFL) == escape, "signal() reports the program's handler");
  pool_io(dir, 1);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork");
  if (pid == 0) {
    no_core();
    sysv_signal(SIGSEGV, escape);
    for (volatile int i = 0; i < 2; i++)
      if (sigsetjmp(jump, 1) == 0) *p = 1;
    _exit(0);
  }
  report_child("sysv_signal(), two faults", pid);
}

int main(int argc, char** argv) {
  CHECK(argc == 3, "usage: fault_app io|bad|query|exec|dfl|ign|signal DIR");
  const char* mode = argv[1];
  const char* dir = argv[2];
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (strcmp(mode, "io") && strcmp(mode, "bad")) n_files = 20, big_mib = 16, n_entries = 300;
  if (!strcmp(mode, "io") || !strcmp(mode, "bad")) {
    /* A first pool access mounts the pool (mapfs's handler is installed
     * then), as a program started with its cwd in the pool does before
     * main; the program's handlers come after it. */
    struct stat st;
    CHECK(stat(dir, &st) == 0, "stat %s", dir);
    install(SIGSEGV, aborting, 0);
    install(SIGBUS, aborting, 0);
    heavy_io(dir);
    printf("pool I/O done\n");
    if (!strcmp(mode, "io")) return 0;
    expected_addr = bad_page();
    install(SIGSEGV, reporting, 0);
    *expected_addr = 1;
    say("FAIL: the store to a bad page went through\n");
    return 1;
  }
  if (!strcmp(mode, "exec")) {
    CHECK(signal(SIGSEGV, SIG_IGN) == SIG_DFL, "signal");
    install(SIGBUS, aborting, 0);
    pool_io(dir, 0);
    show("before exec", SIGSEGV);
    show("before exec", SIGBUS);
    fflush(stdout);
    execl(argv[0], argv[0], "show", dir, (char*)NULL);
    CHECK(0, "exec %s", argv[0]);
  }
  if (!strcmp(mode, "show")) {
    show("after exec", SIGSEGV);
    show("after exec", SIGBUS);
    pool_io(dir, 1);
    show("after exec and pool I/O", SIGSEGV);
    return 0;
  }
  if (!strcmp(mode, "query")) query(dir);
  else if (!strcmp(mode, "dfl")) die_by_fault(dir, SIG_DFL, "SIG_DFL, bad pointer");
  else if (!strcmp(mode, "ign")) die_by_fault(dir, SIG_IGN, "SIG_IGN, bad pointer");
  else if (!strcmp(mode, "signal")) signal_form(dir);
  else CHECK(0, "unknown mode %s", mode);
  return 0;
}
