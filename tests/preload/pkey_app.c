/* Stray stores into mapfs's memory from a program under `mapfs run`
 * (issue 16, protection keys): each must fault with SIGSEGV, si_code
 * SEGV_PKUERR, at the address stored to, and change nothing; the program's
 * own calls keep working before and after.
 *
 * Usage: pkey_app MODE DIR [SELF]     (DIR: a directory under the mount)
 *   scribble  stores to the pool view's header, the shared-memory
 *             segment and a page of the region (a file's data), each in
 *             turn; prints one line per store; exits 0 if all faulted
 *   same      stores to the pool view the byte that is there (harmless);
 *             prints "stored" or "faulted" (MAPFS_PKEYS=0: "stored")
 *   threads   threads doing I/O at once, each then storing (a thread of
 *             the program, created outside any call); and an AIO request
 *             whose SIGEV_THREAD notification (a thread the shim creates
 *             inside its call) stores: every store faults
 *   signal    a SIGALRM handler firing every 100 us: first while the main
 *             thread does I/O, the handler storing each time (it must
 *             fault, also when it interrupted a call); then while the
 *             main thread computes, the handler doing I/O through the
 *             shim (first an lseek, which holds no rights, with the key
 *             as the kernel gives a handler: access-disabled);
 *             afterwards the main thread's store still faults
 *   fork      I/O, then a forked child stores (faults), execs SELF
 *             scribble DIR/sub (which faults in its turn) and the parent
 *             checks both
 * Exit status 0: every expectation held; otherwise a FAIL line on stderr.
 */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef SEGV_PKUERR
#define SEGV_PKUERR 4
#endif

static void Fail(const char* what) {
  fprintf(stderr, "FAIL: %s (errno %s)\n", what, strerror(errno));
  exit(1);
}

/* Writes and reads back a file in DIR through the shim. */
static void Io(const char* dir, const char* name, int salt) {
  char path[PATH_MAX], buf[4096], back[4096];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  memset(buf, 'a' + salt % 26, sizeof buf);
  int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
  if (fd < 0) Fail("open");
  for (int i = 0; i < 4; i++)
    if (pwrite(fd, buf, sizeof buf, i * 4096) != (ssize_t)sizeof buf) Fail("pwrite");
  for (int i = 0; i < 4; i++) {
    if (pread(fd, back, sizeof back, i * 4096) != (ssize_t)sizeof back) Fail("pread");
    if (memcmp(buf, back, sizeof buf) != 0) Fail("read back other bytes");
  }
  /* lseek holds no rights (protection::ReadOnly): it must still read the
   * size, also in a handler, which starts with the key access-disabled. */
  if (lseek(fd, 0, SEEK_END) != 4 * 4096 || lseek(fd, 100, SEEK_SET) != 100 || lseek(fd, 5, SEEK_CUR) != 105)
    Fail("lseek");
  if (close(fd) != 0) Fail("close");
}

/* The program's view of mapfs's memory, from /proc/self/maps: the pool
 * view (the pool file from offset 0, its whole size), a page of the region
 * (any other mapping of the pool file) and the shared-memory segment. */
static char *view, *region, *shared;

static void FindTargets(void) {
  char pool[PATH_MAX];
  if (realpath(getenv("MAPFS_POOL"), pool) == NULL) Fail("realpath MAPFS_POOL");
  struct stat st;
  if (stat(pool, &st) != 0) Fail("stat pool");
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == NULL) Fail("/proc/self/maps");
  char line[PATH_MAX + 256];
  while (fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    char perms[8], path[PATH_MAX] = "";
    if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %4095s", &lo, &hi, perms, &off, path) < 4) continue;
    if (perms[1] != 'w') continue;
    if (strcmp(path, pool) == 0) {
      if (off == 0 && hi - lo == (unsigned long)st.st_size && view == NULL) view = (char*)lo;
      else if (region == NULL) region = (char*)lo;
    } else if (strncmp(path, "/dev/shm/mapfs-", 15) == 0 && strstr(path, ".") == NULL && shared == NULL) {
      shared = (char*)lo;
    }
  }
  fclose(f);
  if (view == NULL || region == NULL || shared == NULL) Fail("did not find the pool view, a region page and the segment");
}

static __thread sigjmp_buf* volatile jump; /* volatile: kept around the probing store */
static __thread volatile int fault_code;
static __thread void* volatile fault_addr;

static void OnSegv(int sig, siginfo_t* si, void* uc) {
  (void)sig;
  (void)uc;
  fault_code = si->si_code;
  fault_addr = si->si_addr;
  if (jump == NULL) _exit(99);
  siglongjmp(*jump, 1);
}

/* Stores 0x5a at p; 1 if that faulted with SEGV_PKUERR at p, 0 if the
 * store went through, -1 for any other fault. */
static int Scribble(char* p) {
  sigjmp_buf b;
  sigjmp_buf* volatile outer = jump;
  jump = &b;
  fault_code = 0;
  int r;
  if (sigsetjmp(b, 1) == 0) {
    *(volatile char*)p = 0x5a;
    r = 0;
  } else {
    r = fault_code == SEGV_PKUERR && fault_addr == p ? 1 : -1;
  }
  jump = outer;
  return r;
}

static void InstallSegv(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  if (sigaction(SIGSEGV, &sa, NULL) != 0) Fail("sigaction SIGSEGV");
}

static void Expect(const char* what, int r) {
  printf("%s: %s\n", what, r == 1 ? "faulted (SEGV_PKUERR)" : r == 0 ? "stored" : "other fault");
  fflush(stdout);
  if (r != 1) {
    fprintf(stderr, "FAIL: a store to %s %s\n", what, r == 0 ? "went through" : "faulted, but not with SEGV_PKUERR at its address");
    exit(1);
  }
}

static const char* dir;

static void* ThreadMain(void* arg) {
  long i = (long)arg;
  char name[32];
  for (int k = 0; k < 20; k++) {
    snprintf(name, sizeof name, "t%ld-%d", i, k);
    Io(dir, name, (int)i + k);
  }
  return (void*)(long)Scribble(view + 64);
}

static volatile int note_result = -2;
static void Note(union sigval v) {
  (void)v;
  note_result = Scribble(view + 64);
}

static void Threads(void) {
  pthread_t t[4];
  for (long i = 0; i < 4; i++)
    if (pthread_create(&t[i], NULL, ThreadMain, (void*)i) != 0) Fail("pthread_create");
  for (int i = 0; i < 4; i++) {
    void* r;
    pthread_join(t[i], &r);
    char what[64];
    snprintf(what, sizeof what, "the view, from thread %d", i);
    Expect(what, (int)(long)r);
  }
  char path[PATH_MAX], buf[512] = "aio";
  snprintf(path, sizeof path, "%s/aio", dir);
  int fd = open(path, O_CREAT | O_RDWR, 0644);
  if (fd < 0) Fail("open aio");
  struct aiocb cb;
  memset(&cb, 0, sizeof cb);
  cb.aio_fildes = fd;
  cb.aio_buf = buf;
  cb.aio_nbytes = sizeof buf;
  cb.aio_sigevent.sigev_notify = SIGEV_THREAD;
  cb.aio_sigevent.sigev_notify_function = Note;
  if (aio_write(&cb) != 0) Fail("aio_write");
  for (int i = 0; i < 5000 && note_result == -2; i++) usleep(1000);
  if (aio_error(&cb) != 0 || aio_return(&cb) != (ssize_t)sizeof buf) Fail("aio_write's result");
  Expect("the view, from an AIO notification thread", note_result);
  close(fd);
}

/* Phase 1: the timer fires while the main thread is in and out of calls;
 * the handler stores, which must fault even when it interrupted a call
 * (whose rights the kernel does not pass to the handler), and the call
 * goes on with its rights when the handler returns. Phase 2: the timer
 * fires while the main thread computes; the handler does I/O through the
 * shim. (A handler calling the shim while it interrupts a call of the
 * shim's is not what this tests: the shim's locks are not reentrant.) */
static volatile sig_atomic_t phase, handled, stores_faulted, stores_other, seeks_wrong;
static int seek_fd = -1; /* a file of 4 pages, for the phase 2 handler's first call */
static void OnAlarm(int sig) {
  (void)sig;
  int saved = errno;
  if (phase == 1) {
    if (Scribble(view + 64) == 1) stores_faulted++;
    else stores_other++;
  } else {
    /* The handler's first call, with the kernel's initial PKRU (the key
     * access-disabled): an lseek, which opens no rights, reads the size. */
    if (lseek(seek_fd, 0, SEEK_END) != 4 * 4096) seeks_wrong++;
    char name[32];
    snprintf(name, sizeof name, "sig-%d", handled % 8);
    Io(dir, name, handled);
  }
  handled++;
  errno = saved;
}

static void Signals(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnAlarm;
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGALRM, &sa, NULL) != 0) Fail("sigaction SIGALRM");
  struct itimerval it = {{0, 100}, {0, 100}}, off = {{0, 0}, {0, 0}};
  phase = 1;
  if (setitimer(ITIMER_REAL, &it, NULL) != 0) Fail("setitimer");
  for (int k = 0; k < 20000 && !(handled >= 200 && k >= 200); k++) Io(dir, "main", k);
  setitimer(ITIMER_REAL, &off, NULL);
  printf("phase 1: %s\n", handled >= 50 ? "the handler ran often" : "the handler ran rarely");
  if (handled < 50) Fail("the timer's handler ran fewer than 50 times");
  if (stores_other != 0) Fail("a store from a handler went through or faulted otherwise");
  Expect("the view, from handlers interrupting calls", stores_faulted == handled ? 1 : -1);
  Io(dir, "seek", 0);
  char seek_path[PATH_MAX];
  snprintf(seek_path, sizeof seek_path, "%s/seek", dir);
  seek_fd = open(seek_path, O_RDONLY);
  if (seek_fd < 0) Fail("open seek");
  phase = 2;
  handled = 0;
  if (setitimer(ITIMER_REAL, &it, NULL) != 0) Fail("setitimer");
  volatile unsigned long spin = 0;
  while (handled < 200) spin++;
  setitimer(ITIMER_REAL, &off, NULL);
  if (seeks_wrong != 0) Fail("an lseek from a handler (its first call) answered wrongly");
  close(seek_fd);
  for (int i = 0; i < 8; i++) {
    char name[32];
    snprintf(name, sizeof name, "sig-%d", i);
    Io(dir, name, i);
  }
  printf("phase 2: the handler's I/O went through the shim\n");
  Expect("the view, after the handlers", Scribble(view + 64));
  Io(dir, "after", 1);
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: pkey_app scribble|same|threads|signal|fork DIR [SELF]\n");
    return 2;
  }
  const char* mode = argv[1];
  dir = argv[2];
  if (mkdir(dir, 0755) != 0 && errno != EEXIST) Fail("mkdir");
  Io(dir, "first", 0); /* mounts the pool, maps a file's pages */
  FindTargets();
  InstallSegv();
  if (strcmp(mode, "same") == 0) {
    sigjmp_buf b;
    jump = &b;
    if (sigsetjmp(b, 1) == 0) {
      volatile char* p = view + 64;
      *p = *p;
      printf("stored\n");
    } else {
      printf("faulted\n");
    }
    Io(dir, "after", 1);
    return 0;
  }
  if (strcmp(mode, "scribble") == 0) {
    Expect("the pool view", Scribble(view));
    Expect("the shared segment", Scribble(shared));
    Expect("a region page", Scribble(region));
    Io(dir, "after", 1);
    Expect("the pool view, after more calls", Scribble(view + 4096));
    return 0;
  }
  if (strcmp(mode, "threads") == 0) {
    Threads();
    return 0;
  }
  if (strcmp(mode, "signal") == 0) {
    Signals();
    return 0;
  }
  if (strcmp(mode, "fork") == 0 && argc == 4) {
    pid_t pid = fork();
    if (pid < 0) Fail("fork");
    if (pid == 0) {
      Io(dir, "child", 2);
      Expect("the view, in a forked child", Scribble(view + 64));
      char sub[PATH_MAX];
      snprintf(sub, sizeof sub, "%s/sub", dir);
      execl(argv[3], argv[3], "scribble", sub, (char*)NULL);
      Fail("exec");
    }
    int status;
    if (waitpid(pid, &status, 0) != pid) Fail("waitpid");
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "FAIL: the child ended with status 0x%x\n", status);
      return 1;
    }
    Expect("the view, in the parent after the fork", Scribble(view + 64));
    Io(dir, "parent", 3);
    return 0;
  }
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
