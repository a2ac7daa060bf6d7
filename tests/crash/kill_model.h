// What a killed writer (kill_workload.h) may leave behind: the parent's
// model of the files, built from the writer's reports, and the check of a
// recovered pool against it.
//
// Each file has a list of candidate contents. In sync and strict modes a
// write is durable when it returns, so a file has one candidate. In posix
// mode writes are durable at fsync: every write since the last fsync adds a
// candidate, and after a crash each byte may come from any of them (the size
// must be one of theirs). The operation in flight at the kill (begun, not
// acknowledged) may be done or not: a namespace operation (create, rename,
// unlink) atomically; a write or truncate per byte in posix and sync mode
// (old or new bytes, the size old or new), as a whole in strict mode.
#pragma once

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kill_workload.h"

namespace mapfs::crash {

struct Op {
  char kind = 0;  // W C R U T F
  std::string a, b;
  uint64_t off = 0, len = 0, tag = 0;
  std::string text;
};

inline Op ParseOp(const std::string& s) {
  Op o;
  o.text = s;
  std::istringstream in(s);
  in >> o.kind;
  switch (o.kind) {
    case 'W': in >> o.a >> o.off >> o.len >> o.tag; break;
    case 'R': in >> o.a >> o.b; break;
    case 'T': in >> o.a >> o.len; break;
    default: in >> o.a; break;
  }
  return o;
}

struct FileM {
  std::vector<std::string> cand;  // cand.back() is the latest content
};
using Model = std::map<std::string, FileM>;

inline void ApplyOp(Model* m, const Op& o, bool posix) {
  switch (o.kind) {
    case 'W': {
      std::string c = (*m)[o.a].cand.back();
      if (c.size() < o.off + o.len) c.resize(o.off + o.len, '\0');
      c.replace(o.off, o.len, Pattern(o.tag, o.off, o.len));
      auto& v = (*m)[o.a].cand;
      if (posix) v.push_back(c);
      else v = {c};
      break;
    }
    case 'C': (*m)[o.a].cand = {""}; break;
    case 'R': {
      FileM f = (*m)[o.a];
      m->erase(o.a);
      (*m)[o.b] = f;
      break;
    }
    case 'U': m->erase(o.a); break;
    case 'T':
      for (auto& c : (*m)[o.a].cand) c.resize(o.len, '\0');
      if (!posix) (*m)[o.a].cand = {(*m)[o.a].cand.back()};
      break;
    case 'F': (*m)[o.a].cand = {(*m)[o.a].cand.back()}; break;
  }
}

// The writer's reports, parsed.
struct Progress {
  std::vector<Op> done;  // acknowledged, in order
  bool in_flight = false;
  Op flight;             // begun, not acknowledged
  std::string error;     // an X line
  long last_seq = -1;    // highest sequence number begun
};

inline Progress ParseReports(const std::string& text) {
  Progress p;
  std::istringstream in(text);
  std::string line;
  long begun = -1;
  Op cur;
  while (std::getline(in, line)) {
    if (line.size() < 2) continue;
    if (line[0] == 'B') {
      size_t sp = line.find(' ', 2);
      if (sp == std::string::npos) continue;  // cut off by the kill
      begun = std::stol(line.substr(2, sp - 2));
      cur = ParseOp(line.substr(sp + 1));
      p.in_flight = true;
      p.flight = cur;
      p.last_seq = begun;
    } else if (line[0] == 'E' && begun >= 0 && std::stol(line.substr(2)) == begun) {
      p.done.push_back(cur);
      p.in_flight = false;
    } else if (line[0] == 'X') {
      p.error = line;
    }
  }
  return p;
}

// "" when `got` may be what is left of a file whose candidates are `cand`
// (exact: it must equal one of them; else per byte).
inline std::string CheckContent(const std::vector<std::string>& cand, const std::string& got, bool exact) {
  for (auto& c : cand)
    if (c == got) return "";
  if (exact || cand.size() < 2) {
    const std::string& c = cand.back();
    size_t i = 0;
    while (i < got.size() && i < c.size() && got[i] == c[i]) i++;
    return "size " + std::to_string(got.size()) + " (expected " + std::to_string(c.size()) +
           (cand.size() > 1 ? " or an older one" : "") + "), first difference at byte " + std::to_string(i);
  }
  bool size_ok = false;
  for (auto& c : cand) size_ok |= c.size() == got.size();
  if (!size_ok) return "size " + std::to_string(got.size()) + " is no candidate's size";
  for (size_t i = 0; i < got.size(); i++) {
    bool ok = false;
    for (auto& c : cand) ok |= (i < c.size() ? c[i] : '\0') == got[i];
    if (!ok) return "byte " + std::to_string(i) + " is in no candidate (size " + std::to_string(got.size()) + ")";
  }
  return "";
}

// Compares a recovered tree (path -> content) with the model and the op in
// flight; returns the violations ("" if none).
inline std::string CheckState(const Model& m, const Progress& p, bool posix, bool strict,
                              const std::map<std::string, std::string>& got) {
  auto names = [](const auto& x) {
    std::set<std::string> s;
    for (auto& [k, v] : x) s.insert(k);
    return s;
  };
  Model ref = m;
  std::string target;  // the file an in-flight write or truncate touches
  if (p.in_flight) {
    Model after = m;
    ApplyOp(&after, p.flight, posix);
    char k = p.flight.kind;
    if (k == 'C' || k == 'R' || k == 'U') {
      if (names(got) == names(after)) ref = after;
      else if (names(got) != names(m))
        return "in-flight '" + p.flight.text + "' left the names in neither the state before nor after it";
    } else if (k == 'W' || k == 'T') {
      target = p.flight.a;
      ref[target].cand.push_back(after[target].cand.back());
    }
  }
  std::string err;
  if (names(got) != names(ref)) {
    for (auto& n : names(ref))
      if (!got.count(n)) err += n + " is missing; ";
    for (auto& [n, c] : got)
      if (!ref.count(n)) err += n + " should not exist; ";
    return err;
  }
  for (auto& [n, c] : got) {
    bool exact = strict && n == target;
    std::string e = CheckContent(ref.at(n).cand, c, exact);
    if (!e.empty()) err += n + ": " + e + (n == target ? " (in flight: " + p.flight.text + ")" : "") + "; ";
  }
  return err;
}

}  // namespace mapfs::crash
