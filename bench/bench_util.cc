#include "bench_util.h"

#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "medium/persist.h"

namespace mapfs::bench {

uint64_t NowNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

Spread SpreadOf(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  s.min = v.front();
  s.max = v.back();
  s.median = v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  return s;
}

static std::string CpuModel() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string MachineDescription() {
  struct utsname u {};
  uname(&u);
  const auto& pc = medium::CurrentPersistConfig();
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s, %ld cores, %.1f GiB RAM, Linux %s, copy %s, flush %s, domain %s",
                CpuModel().c_str(), sysconf(_SC_NPROCESSORS_ONLN),
                static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / (1 << 30), u.release,
                medium::ToString(pc.copy), medium::ToString(pc.flush), medium::ToString(pc.domain));
  return buf;
}

static std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

bool WriteJson(const std::string& path, const std::string& suite, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\"suite\": \"%s\", \"machine\": {\"description\": \"%s\"}, \"results\": [\n",
               Escape(suite).c_str(), Escape(MachineDescription()).c_str());
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    double secs = r.ns.median / 1e9;
    double ns_per_op = r.ops ? r.ns.median / static_cast<double>(r.ops) : 0;
    double gbps = secs > 0 ? static_cast<double>(r.bytes) / secs / 1e9 : 0;
    std::fprintf(f,
                 "  {\"workload\": \"%s\", \"fs\": \"%s\", \"mode\": \"%s\", \"page\": \"%s\", \"pages\": %llu, "
                 "\"ops\": %llu, \"seconds\": %.9f, \"ns_per_op\": %.1f, \"gb_per_s\": %.3f, "
                 "\"min_ns\": %.0f, \"median_ns\": %.0f, \"max_ns\": %.0f}%s\n",
                 Escape(r.workload).c_str(), Escape(r.fs).c_str(), Escape(r.mode).c_str(), Escape(r.page).c_str(),
                 static_cast<unsigned long long>(r.pages), static_cast<unsigned long long>(r.ops), secs,
                 ns_per_op, gbps, r.ns.min, r.ns.median, r.ns.max, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  return std::fclose(f) == 0;
}

}  // namespace mapfs::bench
