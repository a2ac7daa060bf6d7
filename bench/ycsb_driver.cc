// mapfs-ycsb: a YCSB-style driver over LevelDB (Debian's libleveldb), run by
// `mapfs bench ycsb` once natively on tmpfs and once under `mapfs run`, so
// the same binary measures both. It knows nothing of mapfs.
//
//   mapfs-ycsb DIR RECORDS OPS [PHASE...]
//
// PHASES (default all, in this order): load-a run-a run-b run-c run-f run-d
// load-e run-e. Load phases start from an empty database in DIR. Prints one
// line per phase: "PHASE OPS NANOSECONDS CPU-NANOSECONDS" (wall time, then
// the process's CPU time, all threads: LevelDB compacts in its own).
//
// Workloads as YCSB's core workloads define them, with 1 KiB values:
//   A 50 % read / 50 % update, zipfian     B 95 / 5 read / update, zipfian
//   C 100 % read, zipfian                  D 95 % read / 5 % insert, latest
//   E 95 % scan (1..100 records) / 5 % insert, zipfian start
//   F 50 % read / 50 % read-modify-write, zipfian
// Keys are "user" + a 64-bit FNV hash of the record number (YCSB's hashed
// insert order); the zipfian is YCSB's scrambled zipfian (theta 0.99).
#include <leveldb/db.h>
#include <leveldb/write_batch.h>

#include <time.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace {

long long CpuNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<long long>(ts.tv_sec) * 1'000'000'000ll + ts.tv_nsec;
}

constexpr size_t kValueBytes = 1024;
constexpr double kTheta = 0.99;

uint64_t Fnv64(uint64_t v) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (int i = 0; i < 8; i++) {
    h ^= v & 0xff;
    h *= 0x100000001B3ull;
    v >>= 8;
  }
  return h;
}

std::string Key(uint64_t n) {
  char b[32];
  std::snprintf(b, sizeof b, "user%020llu", static_cast<unsigned long long>(Fnv64(n)));
  return b;
}

// YCSB's ZipfianGenerator (Gray et al.), items [0, n).
class Zipfian {
 public:
  explicit Zipfian(uint64_t n) { Reset(n); }
  void Reset(uint64_t n) {
    n_ = n;
    zeta2_ = Zeta(2);
    zetan_ = Zeta(n);
    alpha_ = 1.0 / (1.0 - kTheta);
    eta_ = (1 - std::pow(2.0 / static_cast<double>(n), 1 - kTheta)) / (1 - zeta2_ / zetan_);
  }
  uint64_t Next(std::mt19937_64& rng) {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    double uz = u * zetan_;
    if (uz < 1.0) return 0;
    if (uz < 1.0 + std::pow(0.5, kTheta)) return 1;
    return static_cast<uint64_t>(static_cast<double>(n_) * std::pow(eta_ * u - eta_ + 1, alpha_)) % n_;
  }

 private:
  static double Zeta(uint64_t n) {
    double s = 0;
    for (uint64_t i = 1; i <= n; i++) s += 1.0 / std::pow(static_cast<double>(i), kTheta);
    return s;
  }
  uint64_t n_ = 1;
  double zeta2_ = 0, zetan_ = 0, alpha_ = 0, eta_ = 0;
};

struct Db {
  std::unique_ptr<leveldb::DB> db;
  std::string value;
  leveldb::ReadOptions ro;
  leveldb::WriteOptions wo;
};

void Die(const char* what, const leveldb::Status& s) {
  std::fprintf(stderr, "mapfs-ycsb: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

std::unique_ptr<leveldb::DB> Open(const std::string& dir, bool fresh) {
  leveldb::Options o;
  o.create_if_missing = true;
  if (fresh) leveldb::DestroyDB(dir, o);
  leveldb::DB* db = nullptr;
  leveldb::Status s = leveldb::DB::Open(o, dir, &db);
  if (!s.ok()) Die("open", s);
  return std::unique_ptr<leveldb::DB>(db);
}

void Fill(std::string* v, std::mt19937_64& rng) {
  for (size_t i = 0; i < v->size(); i += 8) {
    uint64_t r = rng();
    std::memcpy(v->data() + i, &r, std::min<size_t>(8, v->size() - i));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: mapfs-ycsb DIR RECORDS OPS [PHASE...]\n");
    return 2;
  }
  std::string dir = argv[1];
  uint64_t records = std::strtoull(argv[2], nullptr, 10), ops = std::strtoull(argv[3], nullptr, 10);
  if (records < 10 || ops == 0) {
    std::fprintf(stderr, "mapfs-ycsb: RECORDS >= 10 and OPS > 0\n");
    return 2;
  }
  std::vector<std::string> phases;
  for (int i = 4; i < argc; i++) phases.push_back(argv[i]);
  if (phases.empty()) phases = {"load-a", "run-a", "run-b", "run-c", "run-f", "run-d", "load-e", "run-e"};

  std::mt19937_64 rng(12345);
  Db d;
  d.value.resize(kValueBytes);
  uint64_t count = records;  // keys [0, count) exist
  Zipfian zipf(records);
  for (const std::string& ph : phases) {
    auto t0 = std::chrono::steady_clock::now();
    long long c0 = CpuNs();
    uint64_t n = ops;
    if (ph == "load-a" || ph == "load-e") {
      d.db.reset();
      d.db = Open(dir, true);
      count = records;
      zipf.Reset(records);
      n = records;
      t0 = std::chrono::steady_clock::now();
      c0 = CpuNs();
      for (uint64_t i = 0; i < records; i++) {
        Fill(&d.value, rng);
        leveldb::Status s = d.db->Put(d.wo, Key(i), d.value);
        if (!s.ok()) Die("insert", s);
      }
    } else {
      if (!d.db) d.db = Open(dir, false);
      char w = ph.size() == 5 ? ph[4] : '?';
      if (ph.rfind("run-", 0) != 0 || std::strchr("abcdef", w) == nullptr) {
        std::fprintf(stderr, "mapfs-ycsb: unknown phase %s\n", ph.c_str());
        return 2;
      }
      std::string got;
      std::uniform_int_distribution<int> pct(0, 99);
      std::uniform_int_distribution<int> scanlen(1, 100);
      for (uint64_t i = 0; i < n; i++) {
        int p = pct(rng);
        bool read, write = false, insert = false, scan = false;
        switch (w) {
          case 'a': read = p < 50; write = !read; break;
          case 'b': read = p < 95; write = !read; break;
          case 'c': read = true; break;
          case 'd': read = p < 95; insert = !read; break;
          case 'e': scan = p < 95; insert = !scan; read = false; break;
          default: read = true; write = p >= 50; break;  // f: read, then modify-write half the time
        }
        if (insert) {
          Fill(&d.value, rng);
          leveldb::Status s = d.db->Put(d.wo, Key(count++), d.value);
          if (!s.ok()) Die("insert", s);
          continue;
        }
        uint64_t k;
        if (w == 'd') {
          // Latest: the newest records are the likeliest.
          uint64_t z = zipf.Next(rng) % count;
          k = count - 1 - z;
        } else {
          k = Fnv64(zipf.Next(rng)) % count;
        }
        std::string key = Key(k);
        if (scan) {
          std::unique_ptr<leveldb::Iterator> it(d.db->NewIterator(d.ro));
          int len = scanlen(rng);
          for (it->Seek(key); it->Valid() && len > 0; it->Next(), len--) got.assign(it->value().data(), it->value().size());
          continue;
        }
        if (read) {
          leveldb::Status s = d.db->Get(d.ro, key, &got);
          if (!s.ok() && !s.IsNotFound()) Die("read", s);
        }
        if (write) {
          Fill(&d.value, rng);
          leveldb::Status s = d.db->Put(d.wo, key, d.value);
          if (!s.ok()) Die("update", s);
        }
      }
    }
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s %llu %lld %lld\n", ph.c_str(), static_cast<unsigned long long>(n), static_cast<long long>(ns),
                CpuNs() - c0);
    std::fflush(stdout);
  }
  d.db.reset();
  return 0;
}
