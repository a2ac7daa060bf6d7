#include "bench_util.h"

#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <limits.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "medium/persist.h"

namespace mapfs::bench {

uint64_t NowNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<uint64_t>(ts.tv_nsec);
}

uint64_t ProcessCpuNs() {
  struct timespec ts {};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
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

static double NsPerOp(const Row& r) { return r.ops ? r.ns.median / static_cast<double>(r.ops) : 0; }

double RatioTo(const std::vector<Row>& rows, const Row& r, const std::string& base_fs) {
  // The baseline of the same page size, else of any (kernel file systems
  // and the floor have one row per workload whatever mapfs's page size).
  for (bool same_page : {true, false})
    for (const Row& b : rows)
      if (b.fs == base_fs && b.workload == r.workload && (!same_page || b.page == r.page) && b.pages == r.pages &&
          b.entries == r.entries && b.threads == r.threads && NsPerOp(r) > 0)
        return NsPerOp(b) / NsPerOp(r);
  return 0;
}

double RatioToKernel(const std::vector<Row>& rows, const Row& r) {
  if (r.dir.empty() || NsPerOp(r) <= 0) return 0;
  for (bool same_mode : {true, false})
    for (const Row& b : rows)
      if (b.dir == r.dir && b.fs == r.dir && b.workload == r.workload && b.pages == r.pages && b.entries == r.entries &&
          b.threads == r.threads && (same_mode ? b.mode == r.mode : b.mode == "posix"))
        return NsPerOp(b) / NsPerOp(r);
  return 0;
}

static std::string Ratio(double x) {
  char b[32];
  if (x <= 0) return "-";
  std::snprintf(b, sizeof b, x >= 100 ? "%.0fx" : "%.2fx", x);
  return b;
}

void PrintRows(const std::vector<Row>& rows) {
  bool overlay = std::any_of(rows.begin(), rows.end(), [](const Row& r) { return !r.dir.empty(); });
  // Suites that measure CPU time (overlay; ycsb: the driver's) show it, and
  // outside overlay its ratio to tmpfs's: load stretches wall time, not it.
  bool cpu_col = overlay || std::any_of(rows.begin(), rows.end(), [](const Row& r) { return r.cpu_ns > 0; });
  std::printf("%-22s %-26s %-4s %8s %10s %10s %12s %8s %23s %8s %8s%s%s\n", "workload", overlay ? "fs/mode@dir" : "fs",
              "page", "n", "ops", "seconds", "ns/op", "GB/s", "min..max ns/op", "x tmpfs", overlay ? "x kernel" : "x floor",
              cpu_col ? "  cpu ns/op" : "", cpu_col && !overlay ? "  cpu x tmpfs" : "");
  for (const Row& r : rows) {
    std::string fs = r.fs + (r.mode == "-" ? "" : "/" + r.mode) + (r.dir.empty() ? "" : "@" + r.dir);
    uint64_t n = r.entries ? r.entries : r.threads ? static_cast<uint64_t>(r.threads) : r.pages;
    double ops = static_cast<double>(r.ops ? r.ops : 1);
    double gbps = r.ns.median > 0 ? static_cast<double>(r.bytes) / r.ns.median : 0;
    char spread[48], nbuf[24] = "-", gb[16] = "-";
    std::snprintf(spread, sizeof spread, "%.0f..%.0f", r.ns.min / ops, r.ns.max / ops);
    if (n) std::snprintf(nbuf, sizeof nbuf, "%llu", static_cast<unsigned long long>(n));
    if (r.bytes) std::snprintf(gb, sizeof gb, "%.2f", gbps);
    double last = overlay ? RatioToKernel(rows, r) : RatioTo(rows, r, "floor");
    char cpu[64] = "";
    if (cpu_col && r.cpu_ns > 0) std::snprintf(cpu, sizeof cpu, "  %9.0f", r.cpu_ns / ops);
    else if (cpu_col) std::snprintf(cpu, sizeof cpu, "  %9s", "-");
    if (cpu_col && !overlay) {
      double base = 0;
      for (const Row& b : rows)
        if (b.fs == "tmpfs" && b.workload == r.workload && b.pages == r.pages && b.entries == r.entries &&
            b.threads == r.threads && b.cpu_ns > 0 && b.ops)
          base = b.cpu_ns / static_cast<double>(b.ops);
      size_t used = std::strlen(cpu);
      std::snprintf(cpu + used, sizeof cpu - used, "  %11s", Ratio(r.cpu_ns > 0 ? base / (r.cpu_ns / ops) : 0).c_str());
    }
    std::printf("%-22s %-26s %-4s %8s %10llu %10.4f %12.0f %8s %23s %8s %8s%s\n", r.workload.c_str(), fs.c_str(),
                r.page.c_str(), nbuf, static_cast<unsigned long long>(r.ops), r.ns.median / 1e9, NsPerOp(r), gb, spread,
                Ratio(RatioTo(rows, r, "tmpfs")).c_str(), Ratio(last).c_str(), cpu);
  }
  std::fflush(stdout);
}

void Progress(const char* fmt, ...) {
  if (!::isatty(2)) return;
  char b[160];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(b, sizeof b, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "\r\033[K%s", b);
}

void ProgressDone() {
  if (::isatty(2)) std::fprintf(stderr, "\r\033[K");
}

std::string BinDir() {
  char exe[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return ".";
  exe[n] = '\0';
  std::string s(exe);
  return s.substr(0, s.rfind('/'));
}

std::string ShellQuote(const std::string& s) {
  std::string o = "'";
  for (char c : s) o += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return o + "'";
}

bool RunCapture(const std::string& cmd, std::string* out) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out->append(buf, n);
  return ::pclose(p) == 0;
}

bool WriteJson(const std::string& path, const std::string& suite, const std::vector<Row>& rows) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f, "{\"suite\": \"%s\", \"machine\": {\"description\": \"%s\"}, \"results\": [\n",
               Escape(suite).c_str(), Escape(MachineDescription()).c_str());
  for (size_t i = 0; i < rows.size(); i++) {
    const Row& r = rows[i];
    double secs = r.ns.median / 1e9;
    double gbps = secs > 0 ? static_cast<double>(r.bytes) / secs / 1e9 : 0;
    // overlay rows: the directory's file system and the ratio to its kernel.
    char extra[160] = "";
    if (!r.dir.empty())
      std::snprintf(extra, sizeof extra, ", \"dir\": \"%s\", \"x_kernel\": %.4f, \"cpu_ns_per_op\": %.1f",
                    Escape(r.dir).c_str(), RatioToKernel(rows, r), r.ops && r.cpu_ns > 0 ? r.cpu_ns / static_cast<double>(r.ops) : 0.0);
    else if (r.ops && r.cpu_ns > 0)  // other suites: the CPU time where it was measured
      std::snprintf(extra, sizeof extra, ", \"cpu_ns_per_op\": %.1f", r.cpu_ns / static_cast<double>(r.ops));
    std::fprintf(f,
                 "  {\"workload\": \"%s\", \"fs\": \"%s\", \"mode\": \"%s\", \"page\": \"%s\", \"pages\": %llu, "
                 "\"entries\": %llu, \"threads\": %d, "
                 "\"ops\": %llu, \"seconds\": %.9f, \"ns_per_op\": %.1f, \"gb_per_s\": %.3f, "
                 "\"min_ns\": %.0f, \"median_ns\": %.0f, \"max_ns\": %.0f, \"x_tmpfs\": %.4f, \"x_floor\": %.4f%s}%s\n",
                 Escape(r.workload).c_str(), Escape(r.fs).c_str(), Escape(r.mode).c_str(), Escape(r.page).c_str(),
                 static_cast<unsigned long long>(r.pages), static_cast<unsigned long long>(r.entries), r.threads,
                 static_cast<unsigned long long>(r.ops), secs, NsPerOp(r), gbps, r.ns.min, r.ns.median, r.ns.max,
                 RatioTo(rows, r, "tmpfs"), RatioTo(rows, r, "floor"), extra, i + 1 < rows.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  return std::fclose(f) == 0;
}

}  // namespace mapfs::bench
