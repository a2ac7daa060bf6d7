#include "common/units.h"

#include <cstdio>

namespace mapfs {

Result<uint64_t> ParseSize(const std::string& s) {
  if (s.empty()) return Status::Error(EINVAL, "empty size");
  uint64_t v = 0;
  size_t i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; i++) {
    uint64_t d = static_cast<uint64_t>(s[i] - '0');
    if (v > (UINT64_MAX - d) / 10) return Status::Error(ERANGE, "size too large: " + s);
    v = v * 10 + d;
  }
  if (i == 0) return Status::Error(EINVAL, "not a size: " + s);
  uint64_t mult = 1;
  if (i < s.size()) {
    switch (s[i]) {
      case 'k': case 'K': mult = KiB; break;
      case 'm': case 'M': mult = MiB; break;
      case 'g': case 'G': mult = GiB; break;
      case 't': case 'T': mult = TiB; break;
      default: return Status::Error(EINVAL, "unknown size suffix in: " + s);
    }
    i++;
    if (i < s.size() && (s[i] == 'i' || s[i] == 'I')) i++;
    if (i < s.size() && (s[i] == 'b' || s[i] == 'B')) i++;
    if (i != s.size()) return Status::Error(EINVAL, "trailing characters in size: " + s);
  }
  if (v != 0 && mult > UINT64_MAX / v) return Status::Error(ERANGE, "size too large: " + s);
  return v * mult;
}

std::string FormatSize(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    u++;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace mapfs
