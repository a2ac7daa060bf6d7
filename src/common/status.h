// Status: the error value every layer returns (LevelDB style, no exceptions).
//
// A Status is either OK or carries a POSIX errno code plus a human-readable
// message naming what failed and where ("pool header: bad checksum at offset
// 0x0"). Fronts turn the code into -1/errno; the CLI prints the message.
#pragma once

#include <cerrno>
#include <new>
#include <string>
#include <utility>

namespace mapfs {

class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status Error(int code, std::string msg) { return Status(code, std::move(msg)); }
  // Convenience for the most common system-call failure: errno plus context.
  static Status FromErrno(const std::string& what) { return Status(errno ? errno : EIO, what); }

  // The message lives on the heap, only for errors: an OK Status is two
  // words that move by copying them (a std::string member made every move
  // of a Status, and of every Result, a call to memcpy for its inline
  // buffer; a stat returns through a dozen of them).
  Status(const Status& o) : code_(o.code_), msg_(o.msg_ ? new std::string(*o.msg_) : nullptr) {}
  Status(Status&& o) noexcept : code_(o.code_), msg_(o.msg_) {
    o.code_ = 0;
    o.msg_ = nullptr;
  }
  Status& operator=(const Status& o) {
    if (this != &o) *this = Status(o);
    return *this;
  }
  Status& operator=(Status&& o) noexcept {
    if (this != &o) {
      delete msg_;
      code_ = o.code_;
      msg_ = o.msg_;
      o.code_ = 0;
      o.msg_ = nullptr;
    }
    return *this;
  }
  ~Status() { delete msg_; }

  bool ok() const { return code_ == 0; }
  int code() const { return code_; }
  const std::string& message() const { return msg_ ? *msg_ : Empty(); }
  std::string ToString() const;

 private:
  // Without memory for the message the code still says what failed (no
  // exception may leave the library through its C entry points).
  Status(int code, std::string msg) : code_(code), msg_(new (std::nothrow) std::string(std::move(msg))) {}
  static const std::string& Empty();
  int code_ = 0;
  std::string* msg_ = nullptr;  // owned; null for OK
};

// Result<T>: a value or a Status. Small, no exceptions.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}           // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {}   // NOLINT
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() { return value_; }
  const T& value() const { return value_; }
  T& operator*() { return value_; }
  T* operator->() { return &value_; }

 private:
  Status status_;
  T value_{};
};

#define MAPFS_RETURN_IF_ERROR(expr)      \
  do {                                   \
    ::mapfs::Status _st = (expr);        \
    if (!_st.ok()) return _st;           \
  } while (0)

}  // namespace mapfs
