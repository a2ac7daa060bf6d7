// medium/protection.h: the rights the scopes give and take, on a page
// tagged with the key, across nesting, signal handlers, threads and fork.
// (The pool's own mappings under the C API and the shim: api_pkey_test,
// preload.pkeys.)
#include "medium/protection.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace mapfs::medium::protection {
namespace {

// volatile: the stores around the probing store must not be moved past it.
thread_local sigjmp_buf* volatile jump = nullptr;
thread_local volatile int fault_code = 0;

void OnSegv(int, siginfo_t* si, void*) {
  fault_code = si->si_code;
  if (jump == nullptr) _exit(99);
  siglongjmp(*jump, 1);
}

// 1: the store faulted with SEGV_PKUERR; 0: it went through; -1: another fault.
// Not instrumented: the store is a probe that faults (TSan would record a
// write that never happens, racing with mapfs's own accesses).
__attribute__((no_sanitize("thread"))) int Store(char* p) {
  sigjmp_buf b;
  sigjmp_buf* volatile outer = jump;
  jump = &b;
  int r;
  if (sigsetjmp(b, 1) == 0) {
    *reinterpret_cast<volatile char*>(p) = 1;
    r = 0;
  } else {
    r = fault_code == SEGV_PKUERR ? 1 : -1;
  }
  jump = outer;
  return r;
}

// The same for a load: 1 if it faulted with SEGV_PKUERR, 0 if it read.
__attribute__((no_sanitize("thread"))) int Load(const char* p) {
  sigjmp_buf b;
  sigjmp_buf* volatile outer = jump;
  jump = &b;
  int r;
  if (sigsetjmp(b, 1) == 0) {
    (void)*reinterpret_cast<const volatile char*>(p);
    r = 0;
  } else {
    r = fault_code == SEGV_PKUERR ? 1 : -1;
  }
  jump = outer;
  return r;
}

class ProtectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Enable() != State::kOn) GTEST_SKIP() << "protection keys: " << Describe(Current());
    struct sigaction sa {};
    sa.sa_sigaction = OnSegv;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    ASSERT_EQ(sigaction(SIGSEGV, &sa, &old_), 0);
    void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    page_ = static_cast<char*>(m);
    ASSERT_TRUE(Tag(page_, 4096, PROT_READ | PROT_WRITE).ok());
    // This thread's rights as a caller outside mapfs holds them.
    { Inside in; }
  }
  void TearDown() override {
    if (page_) munmap(page_, 4096);
    sigaction(SIGSEGV, &old_, nullptr);
  }

 public:
  static char* page_;  // also for the handlers and threads below

 protected:
  struct sigaction old_ {};
};
char* ProtectionTest::page_ = nullptr;

// After a fault escaped by siglongjmp the thread keeps the handler's PKRU
// (the key access-disabled) until its next call: reads come after a scope.
TEST_F(ProtectionTest, StoresFaultOutsideAndGoThroughInside) {
  EXPECT_EQ(page_[0], 0) << "reads stay allowed outside";
  EXPECT_EQ(Store(page_), 1);
  { Inside in; }
  EXPECT_EQ(page_[0], 0) << "the store that faulted changed the page";
  {
    Inside in;
    EXPECT_EQ(Store(page_), 0);
  }
  EXPECT_EQ(page_[0], 1);
  EXPECT_EQ(Store(page_), 1);
}

TEST_F(ProtectionTest, NestedScopesKeepTheRightsUntilTheOutermostEnds) {
  {
    Inside a;
    {
      Inside b;
      EXPECT_EQ(Store(page_), 0);
    }
    EXPECT_EQ(Store(page_), 0) << "the inner scope closed its caller's rights";
    {
      Outside o;
      EXPECT_EQ(Store(page_), 1) << "an Outside scope closes them";
    }
    EXPECT_EQ(Store(page_), 0) << "the end of an Outside scope gives them back";
  }
  EXPECT_EQ(Store(page_), 1);
}

std::atomic<int> handler_before{-2}, handler_inside{-2};
void OnUsr1(int) {
  handler_before = Store(ProtectionTest::page_ + 1);
  Inside in;
  handler_inside = Store(ProtectionTest::page_ + 1);
}

TEST_F(ProtectionTest, AHandlerStartsClosedAndTheInterruptedScopeGetsItsRightsBack) {
#if defined(__SANITIZE_THREAD__)
  // TSan runs a handler later, from its own code, not in the kernel's
  // signal frame: the kernel's PKRU for handlers never reaches it.
  GTEST_SKIP() << "ThreadSanitizer defers signal handlers";
#endif
  struct sigaction sa {}, old {};
  sa.sa_handler = OnUsr1;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  {
    Inside in;
    raise(SIGUSR1);  // delivered here, inside the scope
    EXPECT_EQ(handler_before.load(), 1) << "a handler interrupting a call must not inherit its rights";
    EXPECT_EQ(handler_inside.load(), 0) << "a handler's own call opens them";
    EXPECT_EQ(Store(page_), 0) << "the interrupted call lost its rights";
  }
  EXPECT_EQ(Store(page_), 1);
  handler_before = handler_inside = -2;
  raise(SIGUSR1);  // outside any scope
  EXPECT_EQ(handler_before.load(), 1);
  EXPECT_EQ(handler_inside.load(), 0);
  EXPECT_EQ(Store(page_), 1) << "a handler's call left the rights open";
  sigaction(SIGUSR1, &old, nullptr);
}

struct ThreadResult {
  int first = -2, after_call = -2;
};
void* InheritingThread(void* arg) {
  auto* r = static_cast<ThreadResult*>(arg);
  r->first = Store(ProtectionTest::page_ + 2);
  { Inside in; }  // its first call
  r->after_call = Store(ProtectionTest::page_ + 2);
  return nullptr;
}

TEST_F(ProtectionTest, AThreadCreatedInsideAScopeLosesTheRightsAtItsFirstCall) {
  ThreadResult plain, closed;
  {
    Inside in;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, nullptr, InheritingThread, &plain), 0);
    pthread_join(t, nullptr);
    {
      Outside o;  // how mapfs creates a thread that runs the program's code
      ASSERT_EQ(pthread_create(&t, nullptr, InheritingThread, &closed), 0);
    }
    pthread_join(t, nullptr);
  }
  // The kernel copies the creator's PKRU: the reason for both rules.
  EXPECT_EQ(plain.first, 0);
  EXPECT_EQ(plain.after_call, 1) << "the outermost scope of a thread must close what it inherited";
  EXPECT_EQ(closed.first, 1) << "created in an Outside scope: closed from the start";
  EXPECT_EQ(closed.after_call, 1);
}

TEST_F(ProtectionTest, AForkChildHasTheKeyAndTheForkingScopesRights) {
  pid_t pid;
  {
    Inside in;
    pid = fork();
    if (pid == 0) {
      int in_scope = Store(page_ + 3);
      _exit(in_scope == 0 ? 0 : 10);
    }
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  pid = fork();
  if (pid == 0) {
    int outside = Store(page_ + 3);
    int inside;
    {
      Inside in;
      inside = Store(page_ + 3);
    }
    _exit(outside == 1 && inside == 0 ? 0 : 11);
  }
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
}

// ReadOnly (a call that stores nothing into the pool): reads, no writes,
// and an Inside within it opens the rights for a rare store and closes
// them again.
TEST_F(ProtectionTest, AReadOnlyScopeReadsAndAnInsideWithinItWrites) {
  {
    ReadOnly r;
    EXPECT_EQ(Load(page_), 0);
    EXPECT_EQ(Store(page_), 1) << "a ReadOnly scope opened the rights";
    {
      Inside in;
      EXPECT_EQ(Store(page_), 0) << "an Inside within a ReadOnly scope must open them";
    }
    EXPECT_EQ(Store(page_), 1) << "the Inside within left them open";
  }
  // (The faults escaped by siglongjmp left the key access-disabled: the
  // next call makes it readable.)
  EXPECT_EQ(Load(page_), 1);
  {
    ReadOnly r;
    EXPECT_EQ(page_[0], 1);
  }
}

TEST_F(ProtectionTest, AReadOnlyScopeWithinACallKeepsTheCallsRights) {
  {
    Inside in;
    { ReadOnly r; }
    EXPECT_EQ(Store(page_), 0) << "a nested ReadOnly scope closed its caller's rights";
  }
  EXPECT_EQ(Store(page_), 1);
}

// The kernel's initial PKRU (a handler's, a thread's that escaped one by
// siglongjmp) access-disables the key: a ReadOnly call must still read.
TEST_F(ProtectionTest, AReadOnlyScopeReadsWhereTheThreadCameInAccessDisabled) {
  EXPECT_EQ(Store(page_), 1);  // escaped the handler by siglongjmp: its PKRU stays
  EXPECT_EQ(Load(page_), 1) << "the test's premise: access-disabled now";
  {
    ReadOnly r;
    EXPECT_EQ(Load(page_), 0) << "a ReadOnly scope entered access-disabled cannot read";
  }
  EXPECT_EQ(Load(page_), 0) << "the outermost scope leaves the key write-disabled only";
  EXPECT_EQ(Store(page_), 1);
}

std::atomic<int> ro_handler_load{-2}, ro_handler_store{-2};
void OnUsr1ReadOnly(int) {
  ReadOnly r;
  ro_handler_load = Load(ProtectionTest::page_ + 4);
  ro_handler_store = Store(ProtectionTest::page_ + 4);
}

TEST_F(ProtectionTest, AHandlersReadOnlyCallReadsAndTheInterruptedCallKeepsItsRights) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer defers signal handlers";
#endif
  struct sigaction sa {}, old {};
  sa.sa_handler = OnUsr1ReadOnly;
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  {
    Inside in;
    raise(SIGUSR1);  // interrupts a call: nested, entered access-disabled
    EXPECT_EQ(ro_handler_load.load(), 0) << "a handler's ReadOnly call could not read";
    EXPECT_EQ(ro_handler_store.load(), 1);
    EXPECT_EQ(Store(page_), 0) << "the interrupted call lost its rights";
  }
  ro_handler_load = ro_handler_store = -2;
  {
    ReadOnly r;
    raise(SIGUSR1);  // interrupts a ReadOnly call
    EXPECT_EQ(ro_handler_load.load(), 0);
    EXPECT_EQ(Load(page_), 0) << "the interrupted ReadOnly call cannot read any more";
  }
  ro_handler_load = ro_handler_store = -2;
  raise(SIGUSR1);  // outside any call
  EXPECT_EQ(ro_handler_load.load(), 0);
  EXPECT_EQ(ro_handler_store.load(), 1);
  EXPECT_EQ(Load(page_), 0);
  EXPECT_EQ(Store(page_), 1);
  sigaction(SIGUSR1, &old, nullptr);
}

void* ReadOnlyThread(void* arg) {
  auto* r = static_cast<ThreadResult*>(arg);
  r->first = Store(ProtectionTest::page_ + 5);
  { ReadOnly ro; }  // its first call, a read-only one
  r->after_call = Store(ProtectionTest::page_ + 5);
  return nullptr;
}

TEST_F(ProtectionTest, AThreadCreatedInsideAScopeLosesTheRightsAtItsFirstReadOnlyCall) {
  ThreadResult r;
  {
    Inside in;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, nullptr, ReadOnlyThread, &r), 0);
    pthread_join(t, nullptr);
  }
  EXPECT_EQ(r.first, 0);
  EXPECT_EQ(r.after_call, 1) << "the outermost ReadOnly scope of a thread must close what it inherited";
}

// Enable decides once per process: ctest runs each case in a process of
// its own; a run of the whole binary has decided already.
TEST(ProtectionOff, MapfsPkeysZeroTurnsItOffAndTheScopesCostNothing) {
  if (Current() != State::kUnused) GTEST_SKIP() << "Enable ran before in this process";
  setenv("MAPFS_PKEYS", "0", 1);
  EXPECT_EQ(Enable(), State::kOffByEnv);
  EXPECT_EQ(Key(), -1);
  void* m = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(m, MAP_FAILED);
  EXPECT_TRUE(Tag(m, 4096, PROT_READ | PROT_WRITE).ok());
  static_cast<char*>(m)[0] = 1;  // untagged: no fault
  { Inside in; }
  static_cast<char*>(m)[1] = 1;
  munmap(m, 4096);
  unsetenv("MAPFS_PKEYS");
}

}  // namespace
}  // namespace mapfs::medium::protection
