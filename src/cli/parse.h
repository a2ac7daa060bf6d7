// Command-line parsing shared by the CLI verbs.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace mapfs::cli {

// Positionals and flags of one verb's arguments. Long flags keep their
// spelling ("--repair"); short ones are stored one letter each ("-r").
struct Parsed {
  std::vector<std::string> pos;
  std::vector<std::pair<std::string, std::string>> flags;
  std::string error;  // non-empty: a usage error, already worded
  const std::string* Get(const std::string& f) const {
    for (auto& [k, v] : flags)
      if (k == f) return &v;
    return nullptr;
  }
  bool Has(const std::string& f) const { return Get(f) != nullptr; }
};

// Splits ARGS into positionals and flags. `with_value` lists the long flags
// that take a value (--f V or --f=V), `switches` the long flags that do not,
// and `short_switches` the letters accepted as short flags, which may be
// combined ("-rf"). A lone "-" is a positional (stdin/stdout) and "--" ends
// the options: everything after it is positional.
Parsed Parse(const std::vector<std::string>& args, const std::vector<std::string>& with_value,
             const std::vector<std::string>& switches, const std::string& short_switches = "");

// A decimal count ("12"); nullopt for anything else (signs, junk, overflow).
std::optional<uint64_t> ParseCount(const std::string& s);

// Prints "mapfs VERB: MESSAGE (strerror)" to stderr; returns exit code 1.
int Fail(const char* verb, const Status& st);
// Prints "mapfs VERB: WHAT: MESSAGE (strerror)" to stderr; returns 1.
int Fail(const char* verb, const std::string& what, const Status& st);
// Prints "usage: mapfs USAGE" (and the parse error, if any); returns 2.
int UsageError(const char* verb, const char* usage, const std::string& error = "");

}  // namespace mapfs::cli
