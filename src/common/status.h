// Status: the error value every layer returns (LevelDB style, no exceptions).
//
// A Status is either OK or carries a POSIX errno code plus a human-readable
// message naming what failed and where ("pool header: bad checksum at offset
// 0x0"). Fronts turn the code into -1/errno; the CLI prints the message.
#pragma once

#include <cerrno>
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

  bool ok() const { return code_ == 0; }
  int code() const { return code_; }
  const std::string& message() const { return msg_; }
  std::string ToString() const;

 private:
  Status(int code, std::string msg) : code_(code), msg_(std::move(msg)) {}
  int code_ = 0;
  std::string msg_;
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
