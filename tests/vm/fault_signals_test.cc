// The program's view of SIGSEGV and SIGBUS (vm/fault_signals.cc): what the
// LD_PRELOAD shim's sigaction wrappers record. mapfs's own region faults
// never reach the program's handler; every other fault reaches it as the
// kernel would deliver it (flags, mask, SA_RESETHAND, SIG_DFL, SIG_IGN);
// the view survives fork; changing it while other threads fault is safe.
// Each case runs in a child: it changes process-wide signal state.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <thread>
#include <vector>

#include "test_util.h"
#include "vm/fault.h"
#include "vm_test_util.h"

namespace mapfs {
namespace {

using testing::InChild;
using testing::TempPool;
using vm::KernelSigaction;

constexpr uint64_t Bit(int sig) { return uint64_t{1} << (sig - 1); }
constexpr uint64_t F(int f) { return static_cast<uint32_t>(f); }

KernelSigaction Act(void (*h)(int, siginfo_t*, void*), uint64_t flags, uint64_t mask = 0) {
  return KernelSigaction{reinterpret_cast<uintptr_t>(h), flags | F(SA_SIGINFO), 0, mask};
}
KernelSigaction Disp(sighandler_t h) { return KernelSigaction{reinterpret_cast<uintptr_t>(h), 0, 0, 0}; }

int Set(int sig, const KernelSigaction& a) { return vm::ProgramSigaction(sig, &a, nullptr, false); }
KernelSigaction Get(int sig) {
  KernelSigaction o{};
  EXPECT_EQ(vm::ProgramSigaction(sig, nullptr, &o, false), 0);
  return o;
}

volatile char* BadPage() {
  void* p = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<volatile char*>(p) + 64;
}

// What the program's handler saw.
sigjmp_buf jump;
std::atomic<int> hits{0};
std::atomic<int> last_sig{0}, last_code{0};
std::atomic<void*> last_addr{nullptr};
std::atomic<bool> segv_blocked{false}, usr1_blocked{false};

void Record(int sig, siginfo_t* info, void*) {
  hits++;
  last_sig = sig;
  last_code = info->si_code;
  last_addr = info->si_addr;
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  segv_blocked = sigismember(&now, SIGSEGV);
  usr1_blocked = sigismember(&now, SIGUSR1);
  siglongjmp(jump, 1);
}

void Plain(int sig) {
  hits++;
  last_sig = sig;
  siglongjmp(jump, 1);
}

void Aborting(int, siginfo_t*, void*) { std::abort(); }
void Other(int, siginfo_t*, void*) { std::abort(); }

// Stores to `p`; true if a handler escaped from the store.
bool Store(volatile char* p) {
  if (sigsetjmp(jump, 1) == 0) {
    *p = 1;
    return false;
  }
  return true;
}

// Touches `n` fresh 2 MiB chunks of the region: n faults mapfs serves.
void TouchRegion(vm::Vm& v, uint64_t first, int n) {
  for (int i = 0; i < n; i++) *reinterpret_cast<volatile char*>(v.at((first + i) * 2 * MiB + 100)) = 'r';
}

TEST(FaultSignals, TheViewIsWhatTheKernelHeldAndNeverMapfsHandler) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  EXPECT_EQ(InChild([&] {
              struct sigaction before {};
              sigaction(SIGSEGV, nullptr, &before);  // SIG_DFL, or a sanitizer's handler
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              KernelSigaction v = Get(SIGSEGV);
              if (v.handler != reinterpret_cast<uintptr_t>(before.sa_handler)) return 11;
              if (v.flags != static_cast<uint32_t>(before.sa_flags)) return 12;
              // The program's view changes; the kernel keeps mapfs's handler.
              if (Set(SIGSEGV, Act(Aborting, F(SA_ONSTACK), Bit(SIGUSR1) | Bit(SIGKILL))) != 0) return 13;
              v = Get(SIGSEGV);
              if (v.handler != reinterpret_cast<uintptr_t>(Aborting)) return 14;
              if (v.flags != (F(SA_SIGINFO) | F(SA_ONSTACK))) return 15;
              if (v.mask != Bit(SIGUSR1)) return 16;  // SIGKILL dropped, as the kernel does
              struct sigaction kernel {};
              sigaction(SIGSEGV, nullptr, &kernel);
              if (kernel.sa_sigaction == Aborting) return 17;
              // Flags the kernel does not know are dropped.
              if (Set(SIGBUS, Act(Aborting, 0x400)) != 0 || Get(SIGBUS).flags != F(SA_SIGINFO)) return 18;
              if (vm::ProgramSigaction(SIGUSR1, nullptr, &v, false) != EINVAL) return 19;
              return 0;
            }),
            0);
}

TEST(FaultSignals, RegionFaultsNeverReachTheProgramOthersDo) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              // Installed after the mount, as a program does.
              if (Set(SIGSEGV, Act(Aborting, 0)) != 0 || Set(SIGBUS, Act(Aborting, 0)) != 0) return 11;
              uint64_t before = (*m)->vm().Stats().faults;
              TouchRegion((*m)->vm(), 10, 24);
              if ((*m)->vm().Stats().faults < before + 24) return 12;
              // A fault that is not mapfs's: the program's handler, with its address.
              if (Set(SIGSEGV, Act(Record, 0, Bit(SIGUSR1))) != 0) return 13;
              volatile char* bad = BadPage();
              if (!Store(bad) || hits != 1 || last_sig != SIGSEGV || last_code != SEGV_ACCERR) return 14;
              if (last_addr != static_cast<void*>(const_cast<char*>(bad))) return 15;
              // The kernel's mask for a handler: its mask, and the signal itself.
              if (!usr1_blocked || !segv_blocked) return 16;
              // SA_NODEFER: the signal stays deliverable in the handler.
              if (Set(SIGSEGV, Act(Record, F(SA_NODEFER))) != 0 || !Store(bad) || segv_blocked || usr1_blocked) return 17;
              // A plain handler (no SA_SIGINFO) is called with the signal only.
              KernelSigaction plain{reinterpret_cast<uintptr_t>(Plain), 0, 0, 0};
              if (Set(SIGSEGV, plain) != 0 || !Store(bad) || hits != 3 || last_sig != SIGSEGV) return 18;
              return 0;
            }),
            0);
}

TEST(FaultSignals, ResetHandRunsTheHandlerOnceThenTheDefaultKills) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              if (Set(SIGSEGV, Act(Record, F(SA_RESETHAND))) != 0) return 11;
              volatile char* bad = BadPage();
              if (!Store(bad) || hits != 1) return 12;
              KernelSigaction v = Get(SIGSEGV);
              if (v.handler != 0 || !(v.flags & F(SA_RESETHAND))) return 13;  // the handler only is reset
              TouchRegion((*m)->vm(), 40, 4);  // mapfs's faults still served
              *bad = 1;  // now the default action
              return 14;
            }),
            128 + SIGSEGV);
}

TEST(FaultSignals, DefaultAndIgnoredFaultsKillWithTheSignal) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  for (sighandler_t disp : {SIG_DFL, SIG_IGN}) {
    EXPECT_EQ(InChild([&] {
                auto m = testing::VmMount::Open(pool.path());
                if (!m.ok()) return 10;
                if (Set(SIGSEGV, Disp(disp)) != 0) return 11;
                TouchRegion((*m)->vm(), 50, 4);
                if (disp == SIG_IGN) raise(SIGSEGV);  // a sent signal is ignored...
                *BadPage() = 1;                        // ...a fault never is
                return 12;
              }),
              128 + SIGSEGV)
        << (disp == SIG_DFL ? "SIG_DFL" : "SIG_IGN");
  }
  // A sent SIGSEGV with SIG_DFL kills too.
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              if (Set(SIGSEGV, Disp(SIG_DFL)) != 0) return 11;  // (a sanitizer's handler was the view)
              raise(SIGSEGV);
              return 12;
            }),
            128 + SIGSEGV);
}

TEST(FaultSignals, SigbusReachesTheProgram) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  std::string file = pool.path() + ".short";
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              // A map past the end of a file: SIGBUS on touch.
              int fd = open(file.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
              if (fd < 0) return 11;
              void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
              if (p == MAP_FAILED) return 12;
              if (Set(SIGBUS, Act(Record, 0)) != 0) return 13;
              if (!Store(static_cast<volatile char*>(p)) || last_sig != SIGBUS || last_addr != p) return 14;
              if (Set(SIGBUS, Disp(SIG_DFL)) != 0) return 15;
              *static_cast<volatile char*>(p) = 1;
              return 16;
            }),
            128 + SIGBUS);
  unlink(file.c_str());
}

TEST(FaultSignals, AForkedChildKeepsTheView) {
  TempPool pool;
  ASSERT_TRUE(pool.status().ok());
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              if (Set(SIGSEGV, Act(Record, 0, Bit(SIGUSR1))) != 0) return 11;
              return InChild([&] {
                KernelSigaction v = Get(SIGSEGV);
                if (v.handler != reinterpret_cast<uintptr_t>(Record) || v.mask != Bit(SIGUSR1)) return 20;
                TouchRegion((*m)->vm(), 60, 4);
                if (hits != 0) return 21;
                return Store(BadPage()) && hits == 1 ? 0 : 22;
              });
            }),
            0);
}

// The view changes under threads that keep taking mapfs's faults: none of
// them ever reaches a program handler (TSan checks the seqlock).
TEST(FaultSignals, ChangingTheViewWhileThreadsFault) {
  TempPool pool{512 * MiB};
  ASSERT_TRUE(pool.status().ok());
  EXPECT_EQ(InChild([&] {
              auto m = testing::VmMount::Open(pool.path());
              if (!m.ok()) return 10;
              std::atomic<bool> stop{false};
              std::vector<std::thread> threads;
              for (int t = 0; t < 3; t++)
                threads.emplace_back([&, t] {
                  for (int i = 0; i < 40 && !stop; i++) {
                    TouchRegion((*m)->vm(), 100 + t * 40 + i, 1);
                    (*m)->vm().DropMappings((100 + t * 40 + i) * 2 * MiB, 2 * MiB);  // faults again next time
                    TouchRegion((*m)->vm(), 100 + t * 40 + i, 1);
                  }
                });
              for (int i = 0; i < 2000; i++) Set(SIGSEGV, Act(i % 2 ? Aborting : Other, i % 3 ? F(SA_NODEFER) : 0));
              stop = true;
              for (auto& t : threads) t.join();
              return Get(SIGSEGV).handler == reinterpret_cast<uintptr_t>(Aborting) ? 0 : 11;
            }),
            0);
}

}  // namespace
}  // namespace mapfs
