#include "common/status.h"

#include <cstring>

namespace mapfs {

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = msg_;
  s += " (";
  s += std::strerror(code_);
  s += ")";
  return s;
}

}  // namespace mapfs
