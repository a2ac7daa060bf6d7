// Helpers for the protection-key suites of the C API (pkey_test.cc,
// pkey_read_test.cc): where the pool view is, a store that reports whether
// it faulted, and a fixture that skips where keys are off.
#pragma once

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/stat.h>

#include <climits>
#include <cstdio>
#include <mutex>

#include "api/api_util.h"
#include "fs/file_system.h"
#include "medium/protection.h"

namespace mapfs::apitest {

// The pool view: the pool file mapped from offset 0, its whole size.
inline char* PoolView(const std::string& pool) {
  char real[PATH_MAX];
  struct stat st {};
  if (realpath(pool.c_str(), real) == nullptr || stat(real, &st) != 0) return nullptr;
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == nullptr) return nullptr;
  char line[PATH_MAX + 256], path[PATH_MAX];
  char* found = nullptr;
  while (found == nullptr && fgets(line, sizeof line, f)) {
    unsigned long lo, hi, off;
    path[0] = '\0';
    if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %4095s", &lo, &hi, &off, path) < 3) continue;
    if (strcmp(path, real) == 0 && off == 0 && hi - lo == static_cast<unsigned long>(st.st_size))
      found = reinterpret_cast<char*>(lo);
  }
  fclose(f);
  return found;
}

// volatile: the stores around the probing store must not be moved past it.
inline thread_local sigjmp_buf* volatile jump = nullptr;
inline thread_local volatile int fault_code = 0;
inline thread_local void* volatile fault_addr = nullptr;
inline void OnSegv(int, siginfo_t* si, void*) {
  fault_code = si->si_code;
  fault_addr = si->si_addr;
  if (jump == nullptr) _exit(99);
  siglongjmp(*jump, 1);
}

// Stores to p with the test's own SIGSEGV handler in place (mapfs's is put
// back after: it serves the region's faults). 1: SEGV_PKUERR at p; 0: the
// store went through; -1: another fault. One thread at a time.
inline std::mutex store_mu;
// Not instrumented: the store is a probe that faults (TSan would record a
// write that never happens, racing with mapfs's own accesses).
__attribute__((no_sanitize("thread"))) inline int Store(char* p) {
  std::lock_guard<std::mutex> g(store_mu);
  struct sigaction sa {}, old {};
  sa.sa_sigaction = OnSegv;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigaction(SIGSEGV, &sa, &old);
  sigjmp_buf b;
  jump = &b;
  int r;
  if (sigsetjmp(b, 1) == 0) {
    *reinterpret_cast<volatile char*>(p) = 0x5a;
    r = 0;
  } else {
    r = fault_code == SEGV_PKUERR && fault_addr == p ? 1 : -1;
  }
  jump = nullptr;
  sigaction(SIGSEGV, &old, nullptr);
  return r;
}

class PkeyTest : public ApiTest {
 protected:
  void SetUp() override {
    ApiTest::SetUp();
    if (medium::protection::Current() != medium::protection::State::kOn)
      GTEST_SKIP() << "protection keys: " << medium::protection::Describe(medium::protection::Current());
    view_ = PoolView(pool_->path());
    ASSERT_NE(view_, nullptr) << "no mapping of the pool view in /proc/self/maps";
  }
  // fsck of the unmounted pool (the core directly: rights of its own).
  void ExpectClean() {
    ASSERT_OK(pool_->Unmount());
    medium::protection::Inside rights;
    auto fs = fs::FileSystem::Mount(pool_->path());
    ASSERT_TRUE(fs.ok()) << fs.status().message();
    EXPECT_FALSE((*fs)->mount().recovered()) << "the pool was not closed cleanly";
    fs::FsCheckReport rep = (*fs)->Check();
    EXPECT_TRUE(rep.problems.empty()) << rep.problems.front();
    EXPECT_TRUE((*fs)->Unmount().ok());
  }
  char* view_ = nullptr;
};

}  // namespace mapfs::apitest
