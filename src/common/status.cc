#include "common/status.h"

#include <cstring>

namespace mapfs {

const std::string& Status::Empty() {
  static const std::string* empty = new std::string();  // never destroyed: a Status may outlive statics
  return *empty;
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s = message();
  s += " (";
  s += std::strerror(code_);
  s += ")";
  return s;
}

}  // namespace mapfs
