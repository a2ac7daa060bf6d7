// Asynchronous I/O on mapfs descriptors: POSIX AIO (aio_read ... lio_listio)
// and the kernel's AIO as libaio and raw syscall() use it (io_submit,
// io_getevents, io_cancel, io_destroy).
//
// Neither can reach the pool by itself: glibc's AIO threads call its
// internal pread/pwrite, which bypass the shim and hit the descriptor's
// kernel placeholder (a read-only /dev/null: reads see EOF, writes EBADF);
// the kernel's AIO acts on that placeholder too. So a request on a mapfs
// descriptor is done at once, in the submitting thread, through the shim's
// own calls (the pool is memory: waiting buys nothing), and completes
// exactly as an asynchronous one would:
//  - POSIX: the aiocb's error and return fields are set (they are what
//    glibc's aio_error, aio_return and aio_suspend read), then its
//    sigevent is delivered (SIGEV_SIGNAL with SI_ASYNCIO, SIGEV_THREAD on
//    a new thread, SIGEV_THREAD_ID);
//  - kernel AIO: an io_event is queued for the context, and io_getevents
//    returns it before (or together with) the kernel's own; an eventfd
//    named by IOCB_FLAG_RESFD is signalled.
// Requests on kernel descriptors go to glibc and the kernel as before.
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/aio_abi.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "preload/calls.h"

namespace mapfs::preload {
namespace {

// ------------------------------------------------------------ POSIX AIO

struct ThreadNote {
  void (*fn)(sigval);
  sigval value;
};

void* RunNote(void* p) {
  ThreadNote n = *static_cast<ThreadNote*>(p);
  delete static_cast<ThreadNote*>(p);
  n.fn(n.value);
  return nullptr;
}

// Delivers a completion's notification as glibc's AIO does.
void Notify(const sigevent& ev) {
  switch (ev.sigev_notify) {
    case SIGEV_SIGNAL:
    case SIGEV_THREAD_ID: {
      siginfo_t si{};
      si.si_signo = ev.sigev_signo;
      si.si_code = SI_ASYNCIO;
      si.si_pid = ::getpid();
      si.si_uid = ::getuid();
      si.si_value = ev.sigev_value;
      if (ev.sigev_notify == SIGEV_SIGNAL)
        REAL(syscall)(SYS_rt_sigqueueinfo, ::getpid(), ev.sigev_signo, &si);
      else
        REAL(syscall)(SYS_rt_tgsigqueueinfo, ::getpid(), ev._sigev_un._tid, ev.sigev_signo, &si);
      break;
    }
    case SIGEV_THREAD: {
      auto* n = new ThreadNote{ev.sigev_notify_function, ev.sigev_value};
      pthread_attr_t own;
      pthread_attr_t* attr = ev.sigev_notify_attributes;
      if (attr == nullptr) {
        pthread_attr_init(&own);
        attr = &own;
      }
      pthread_attr_setdetachstate(attr, PTHREAD_CREATE_DETACHED);
      pthread_t t;
      // The new thread runs the program's function and inherits this
      // thread's PKRU: create it with the pool's rights closed.
      int err;
      {
        medium::protection::Outside closed;
        err = pthread_create(&t, attr, RunNote, n);
      }
      if (err != 0) delete n;
      if (attr == &own) pthread_attr_destroy(&own);
      break;
    }
    default: break;  // SIGEV_NONE
  }
}

// Does one POSIX request (LIO_READ, LIO_WRITE, or O_SYNC/O_DSYNC for
// aio_fsync) on a mapfs descriptor and records its result in the aiocb
// (an invalid request, e.g. a negative offset, completes with its error,
// as glibc's does).
void DoPosix(aiocb* cb, int op, bool fsync_op) {
  ssize_t r;
  if (fsync_op) {
    r = op == O_DSYNC ? ::fdatasync(cb->aio_fildes) : ::fsync(cb->aio_fildes);
  } else if (op == LIO_READ) {
    r = ::pread(cb->aio_fildes, const_cast<void*>(cb->aio_buf), cb->aio_nbytes, cb->aio_offset);
  } else if (::fcntl(cb->aio_fildes, F_GETFL) & O_APPEND) {
    r = ::write(cb->aio_fildes, const_cast<const void*>(cb->aio_buf), cb->aio_nbytes);
  } else {
    r = ::pwrite(cb->aio_fildes, const_cast<const void*>(cb->aio_buf), cb->aio_nbytes, cb->aio_offset);
  }
  cb->__return_value = r < 0 ? -1 : r;
  cb->__error_code = r < 0 ? errno : 0;
}

int Submit(aiocb* cb, int op, bool fsync_op) {
  int saved = errno;
  DoPosix(cb, op, fsync_op);
  errno = saved;
  Notify(cb->aio_sigevent);
  return 0;
}

// ------------------------------------------------------------ kernel AIO

// Completions of mapfs requests per kernel AIO context, not yet reaped.
std::mutex g_events_mu;
std::unordered_map<aio_context_t, std::deque<io_event>>* g_events;  // never freed: used until exit

long RawAio(long n, long a, long b, long c, long d = 0, long e = 0, long f = 0) {
  long r = REAL(syscall)(n, a, b, c, d, e, f);
  return r < 0 ? -errno : r;
}

long DoIocb(const iocb& cb) {
  int fd = static_cast<int>(cb.aio_fildes);
  void* buf = reinterpret_cast<void*>(cb.aio_buf);
  auto* iov = reinterpret_cast<const iovec*>(cb.aio_buf);
  int cnt = static_cast<int>(cb.aio_nbytes);
  ssize_t r;
  switch (cb.aio_lio_opcode) {
    case IOCB_CMD_PREAD: r = ::pread(fd, buf, cb.aio_nbytes, cb.aio_offset); break;
    case IOCB_CMD_PWRITE: r = ::pwrite(fd, buf, cb.aio_nbytes, cb.aio_offset); break;
    case IOCB_CMD_PREADV: r = ::preadv(fd, iov, cnt, cb.aio_offset); break;
    case IOCB_CMD_PWRITEV: r = ::pwritev(fd, iov, cnt, cb.aio_offset); break;
    case IOCB_CMD_FSYNC: r = ::fsync(fd); break;
    case IOCB_CMD_FDSYNC: r = ::fdatasync(fd); break;
    default: return -EINVAL;
  }
  return r < 0 ? -errno : r;
}

}  // namespace

// io_submit: mapfs requests done at once and queued as events; runs of
// kernel requests submitted to the kernel. -errno or the number submitted.
long AioSubmit(unsigned long ctx, long nr, iocb** cbs) {
  if (nr < 0) return -EINVAL;
  bool checked = false;
  long done = 0;
  while (done < nr) {
    iocb* cb = cbs[done];
    if (cb == nullptr) return done > 0 ? done : -EFAULT;
    if (!MapfsFd(static_cast<int>(cb->aio_fildes))) {
      long k = done + 1;
      while (k < nr && cbs[k] != nullptr && !MapfsFd(static_cast<int>(cbs[k]->aio_fildes))) k++;
      long want = k - done;
      long r = RawAio(SYS_io_submit, static_cast<long>(ctx), want, reinterpret_cast<long>(cbs + done));
      if (r < 0) return done > 0 ? done : r;
      done += r;
      if (r < want) return done;  // the kernel took fewer
      continue;
    }
    if (!checked) {  // a context the kernel does not know must not collect events
      long r = RawAio(SYS_io_submit, static_cast<long>(ctx), 0, 0);
      if (r < 0) return done > 0 ? done : r;
      checked = true;
    }
    if (cb->aio_reserved2 != 0 || (cb->aio_flags & ~IOCB_FLAG_RESFD) != 0) return done > 0 ? done : -EINVAL;
    switch (cb->aio_lio_opcode) {
      case IOCB_CMD_PREAD:
      case IOCB_CMD_PWRITE:
      case IOCB_CMD_PREADV:
      case IOCB_CMD_PWRITEV:
      case IOCB_CMD_FSYNC:
      case IOCB_CMD_FDSYNC: break;
      default: return done > 0 ? done : -EINVAL;
    }
    int saved = errno;
    io_event ev{};
    ev.data = cb->aio_data;
    ev.obj = reinterpret_cast<uint64_t>(cb);
    ev.res = DoIocb(*cb);
    errno = saved;
    {
      std::lock_guard<std::mutex> g(g_events_mu);
      if (g_events == nullptr) g_events = new std::unordered_map<aio_context_t, std::deque<io_event>>();
      (*g_events)[ctx].push_back(ev);
    }
    if (cb->aio_flags & IOCB_FLAG_RESFD) {
      uint64_t one = 1;
      (void)!REAL(write)(static_cast<int>(cb->aio_resfd), &one, sizeof one);
    }
    done++;
  }
  return done;
}

// io_getevents / io_pgetevents (sigmask non-null): queued mapfs events first,
// then the kernel's; waits in the kernel only for what is still missing.
long AioGetEvents(unsigned long ctx, long min_nr, long nr, io_event* out, timespec* timeout, const void* sigmask) {
  if (min_nr < 0 || nr < 0 || min_nr > nr) return -EINVAL;
  long got = 0;
  {
    std::lock_guard<std::mutex> g(g_events_mu);
    if (g_events != nullptr) {
      auto it = g_events->find(ctx);
      if (it != g_events->end()) {
        while (got < nr && !it->second.empty()) {
          out[got++] = it->second.front();
          it->second.pop_front();
        }
      }
    }
  }
  if (got == nr) return got;
  timespec zero{0, 0};
  timespec* t = got >= min_nr && got > 0 ? &zero : timeout;
  long want = got >= min_nr ? 0 : min_nr - got;
  long r = RawAio(sigmask != nullptr ? SYS_io_pgetevents : SYS_io_getevents, static_cast<long>(ctx), want, nr - got,
                  reinterpret_cast<long>(out + got), reinterpret_cast<long>(t), reinterpret_cast<long>(sigmask));
  if (r < 0) return got > 0 ? got : r;
  return got + r;
}

// io_destroy: the context's unreaped mapfs events go with it.
long AioDestroy(unsigned long ctx) {
  {
    std::lock_guard<std::mutex> g(g_events_mu);
    if (g_events != nullptr) g_events->erase(ctx);
  }
  return RawAio(SYS_io_destroy, static_cast<long>(ctx), 0, 0);
}

// io_cancel: a mapfs request is complete before io_submit returns, so
// there is nothing to cancel (the kernel's answer for a finished one).
long AioCancel(unsigned long ctx, iocb* cb, io_event* result) {
  if (cb != nullptr && MapfsFd(static_cast<int>(cb->aio_fildes))) return -EINVAL;
  return RawAio(SYS_io_cancel, static_cast<long>(ctx), reinterpret_cast<long>(cb), reinterpret_cast<long>(result));
}

}  // namespace mapfs::preload

using namespace mapfs::preload;  // NOLINT: wrapper files only

// ------------------------------------------------------------ POSIX entry points

MAPFS_EXPORT int aio_read(aiocb* cb) {
  if (MapfsFd(cb->aio_fildes)) return Submit(cb, LIO_READ, false);
  return REAL(aio_read)(cb);
}
MAPFS_EXPORT int aio_write(aiocb* cb) {
  if (MapfsFd(cb->aio_fildes)) return Submit(cb, LIO_WRITE, false);
  return REAL(aio_write)(cb);
}
MAPFS_EXPORT int aio_fsync(int op, aiocb* cb) {
  if (MapfsFd(cb->aio_fildes)) {
    if (op != O_SYNC && op != O_DSYNC) return FailErrno(EINVAL);
    return Submit(cb, op, true);
  }
  return REAL(aio_fsync)(op, cb);
}
// A mapfs request is done when submitted: nothing is left to cancel.
MAPFS_EXPORT int aio_cancel(int fd, aiocb* cb) {
  if (MapfsFd(fd)) {
    if (cb != nullptr && cb->aio_fildes != fd) return FailErrno(EINVAL);
    return AIO_ALLDONE;
  }
  return REAL(aio_cancel)(fd, cb);
}
// lio_listio: the mapfs entries are done first (without their own
// notifications, as glibc's lio_listio), the rest go to glibc with the
// list's mode and sigevent; with no kernel entry the sigevent is
// delivered here.
MAPFS_EXPORT int lio_listio(int mode, aiocb* const list[], int nent, sigevent* sig) {
  bool any = false;
  for (int i = 0; i < nent && !any; i++) any = list[i] != nullptr && MapfsFd(list[i]->aio_fildes);
  if (!any) return REAL(lio_listio)(mode, list, nent, sig);
  if ((mode != LIO_WAIT && mode != LIO_NOWAIT) || nent < 0) return FailErrno(EINVAL);
  int saved = errno;
  std::vector<aiocb*> rest(list, list + nent);
  bool kernel = false, failed = false;
  for (int i = 0; i < nent; i++) {
    aiocb* cb = list[i];
    if (cb == nullptr || cb->aio_lio_opcode == LIO_NOP) {
      rest[i] = nullptr;
      continue;
    }
    if (!MapfsFd(cb->aio_fildes)) {
      kernel = true;
      continue;
    }
    rest[i] = nullptr;
    if (cb->aio_lio_opcode != LIO_READ && cb->aio_lio_opcode != LIO_WRITE) {
      cb->__error_code = EINVAL;
      cb->__return_value = -1;
      failed = true;
      continue;
    }
    DoPosix(cb, cb->aio_lio_opcode, false);
    failed |= cb->__error_code != 0;
  }
  errno = saved;
  if (kernel) {
    if (REAL(lio_listio)(mode, rest.data(), nent, sig) != 0) return -1;
  } else if (mode == LIO_NOWAIT && sig != nullptr) {
    Notify(*sig);
  }
  if (failed && mode == LIO_WAIT) return FailErrno(EIO);
  return 0;
}
// The 64 forms: on LP64 an aiocb64 is an aiocb.
static_assert(sizeof(aiocb64) == sizeof(aiocb), "LP64: aiocb64 is aiocb");
MAPFS_EXPORT int aio_read64(aiocb64* cb) { return aio_read(reinterpret_cast<aiocb*>(cb)); }
MAPFS_EXPORT int aio_write64(aiocb64* cb) { return aio_write(reinterpret_cast<aiocb*>(cb)); }
MAPFS_EXPORT int aio_fsync64(int op, aiocb64* cb) { return aio_fsync(op, reinterpret_cast<aiocb*>(cb)); }
MAPFS_EXPORT int aio_cancel64(int fd, aiocb64* cb) { return aio_cancel(fd, reinterpret_cast<aiocb*>(cb)); }
MAPFS_EXPORT int lio_listio64(int mode, aiocb64* const list[], int nent, sigevent* sig) {
  return lio_listio(mode, reinterpret_cast<aiocb* const*>(list), nent, sig);
}

// ------------------------------------------------------------ libaio entry points
// libaio's functions return -errno (they are bare system calls); a program
// that links libaio finds these first. syscall() numbers come through
// syscall_calls.cc with -1/errno.

MAPFS_EXPORT int io_submit(aio_context_t ctx, long nr, iocb** cbs) { return static_cast<int>(AioSubmit(ctx, nr, cbs)); }
MAPFS_EXPORT int io_getevents(aio_context_t ctx, long min_nr, long nr, io_event* events, timespec* timeout) {
  return static_cast<int>(AioGetEvents(ctx, min_nr, nr, events, timeout, nullptr));
}
MAPFS_EXPORT int io_destroy(aio_context_t ctx) { return static_cast<int>(AioDestroy(ctx)); }
MAPFS_EXPORT int io_cancel(aio_context_t ctx, iocb* cb, io_event* result) {
  return static_cast<int>(AioCancel(ctx, cb, result));
}
