#include "cli/parse.h"

#include <cstdio>

namespace mapfs::cli {

Parsed Parse(const std::vector<std::string>& args, const std::vector<std::string>& with_value,
             const std::vector<std::string>& switches, const std::string& short_switches) {
  Parsed p;
  bool options_done = false;
  for (size_t i = 0; i < args.size(); i++) {
    const std::string& a = args[i];
    if (options_done || a.size() < 2 || a[0] != '-') {
      p.pos.push_back(a);
      continue;
    }
    if (a == "--") {
      options_done = true;
      continue;
    }
    if (a[1] != '-') {
      for (size_t j = 1; j < a.size(); j++) {
        if (short_switches.find(a[j]) == std::string::npos) {
          p.error = std::string("unknown option -") + a[j];
          return p;
        }
        p.flags.push_back({std::string("-") + a[j], ""});
      }
      continue;
    }
    std::string name = a, value;
    size_t eq = a.find('=');
    if (eq != std::string::npos) {
      name = a.substr(0, eq);
      value = a.substr(eq + 1);
    }
    bool takes = false, known = false;
    for (auto& f : with_value) takes |= f == name;
    for (auto& f : switches) known |= f == name;
    if (!takes && !known) {
      p.error = "unknown option " + name;
      return p;
    }
    if (takes && eq == std::string::npos) {
      if (i + 1 >= args.size()) {
        p.error = name + " needs a value";
        return p;
      }
      value = args[++i];
    }
    p.flags.push_back({name, value});
  }
  return p;
}

int Fail(const char* verb, const Status& st) {
  std::fprintf(stderr, "mapfs %s: %s\n", verb, st.ToString().c_str());
  return 1;
}

int Fail(const char* verb, const std::string& what, const Status& st) {
  std::fprintf(stderr, "mapfs %s: %s: %s\n", verb, what.c_str(), st.ToString().c_str());
  return 1;
}

int UsageError(const char* verb, const char* usage, const std::string& error) {
  std::fprintf(stderr, "usage: mapfs %s\n", usage);
  if (!error.empty()) std::fprintf(stderr, "mapfs %s: %s\n", verb, error.c_str());
  return 2;
}

std::optional<uint64_t> ParseCount(const std::string& s) {
  if (s.empty() || s.size() > 19) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  return v;
}

}  // namespace mapfs::cli
