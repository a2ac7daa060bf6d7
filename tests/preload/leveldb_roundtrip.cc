// leveldb_roundtrip DIR [N]: builds a LevelDB database of N keys (default
// 20000) in DIR (which must not hold one), with single puts, batches,
// overwrites and deletes, and small write buffers so that memtables are
// flushed and compacted in the background; closes it, reopens it and reads
// every key back (point reads and a full scan), compacts everything, and
// reopens once more. Prints counts and checksums: deterministic, so the
// output can be compared between file systems. Exits 1 on any error.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include <leveldb/db.h>
#include <leveldb/write_batch.h>

namespace {

[[noreturn]] void Die(const char* what, const leveldb::Status& s) {
  std::fprintf(stderr, "leveldb_roundtrip: %s: %s\n", what, s.ToString().c_str());
  std::exit(1);
}

std::string Key(uint64_t i) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "key%08" PRIu64, i);
  return buf;
}

// A value of 20..419 bytes determined by the key and a generation.
std::string Value(uint64_t i, uint64_t gen) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull + gen * 0xBF58476D1CE4E5B9ull + 1;
  std::string v;
  size_t len = 20 + (x >> 7) % 400;
  v.reserve(len);
  while (v.size() < len) {
    x ^= x >> 31;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 29;
    v.push_back(static_cast<char>('a' + x % 26));
  }
  return v;
}

void Fnv(uint64_t& h, const std::string& s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001B3ull;
  }
  h ^= 0xFF;  // separator
  h *= 0x100000001B3ull;
}

std::unique_ptr<leveldb::DB> Open(const std::string& dir, bool create) {
  leveldb::Options o;
  o.create_if_missing = create;
  o.error_if_exists = create;
  o.paranoid_checks = true;
  o.write_buffer_size = 128 << 10;  // many flushes and compactions
  o.max_file_size = 256 << 10;
  leveldb::DB* db = nullptr;
  leveldb::Status s = leveldb::DB::Open(o, dir, &db);
  if (!s.ok()) Die(create ? "create" : "reopen", s);
  return std::unique_ptr<leveldb::DB>(db);
}

// The generation of key i's final value, or 0 if it ends up deleted.
uint64_t FinalGen(uint64_t i) {
  if (i % 10 == 3) return 0;
  return i % 4 == 1 ? 2 : 1;
}

// Point reads of every key and a full scan; prints one line.
void Verify(leveldb::DB* db, uint64_t n, const char* when) {
  leveldb::ReadOptions ro;
  ro.verify_checksums = true;
  uint64_t present = 0, absent = 0, h = 0xCBF29CE484222325ull;
  std::string v;
  for (uint64_t i = 0; i < n; i++) {
    leveldb::Status s = db->Get(ro, Key(i), &v);
    uint64_t gen = FinalGen(i);
    if (s.IsNotFound()) {
      if (gen != 0) {
        std::fprintf(stderr, "leveldb_roundtrip: %s: %s is missing\n", when, Key(i).c_str());
        std::exit(1);
      }
      absent++;
      continue;
    }
    if (!s.ok()) Die("get", s);
    if (gen == 0 || v != Value(i, gen)) {
      std::fprintf(stderr, "leveldb_roundtrip: %s: %s has a wrong value\n", when, Key(i).c_str());
      std::exit(1);
    }
    present++;
    Fnv(h, Key(i));
    Fnv(h, v);
  }
  uint64_t scanned = 0, hs = 0xCBF29CE484222325ull;
  std::unique_ptr<leveldb::Iterator> it(db->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    scanned++;
    Fnv(hs, it->key().ToString());
    Fnv(hs, it->value().ToString());
  }
  if (!it->status().ok()) Die("scan", it->status());
  std::printf("%s: present %" PRIu64 " deleted %" PRIu64 " scanned %" PRIu64
              " get-checksum %016" PRIx64 " scan-checksum %016" PRIx64 "\n",
              when, present, absent, scanned, h, hs);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: leveldb_roundtrip DIR [N]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const uint64_t n = argc == 3 ? std::strtoull(argv[2], nullptr, 10) : 20000;
  {
    auto db = Open(dir, true);
    leveldb::WriteOptions wo;
    // First generation, in a scattered order: single puts, every 1000th synced.
    for (uint64_t k = 0; k < n; k++) {
      uint64_t i = (k * 7919) % n;
      wo.sync = k % 1000 == 0;
      leveldb::Status s = db->Put(wo, Key(i), Value(i, 1));
      if (!s.ok()) Die("put", s);
    }
    // Overwrites and deletes, in batches of 100.
    wo.sync = false;
    leveldb::WriteBatch b;
    for (uint64_t i = 0; i < n; i++) {
      if (i % 10 == 3) b.Delete(Key(i));
      else if (i % 4 == 1) b.Put(Key(i), Value(i, 2));
      if (i % 100 == 99 || i + 1 == n) {
        leveldb::Status s = db->Write(wo, &b);
        if (!s.ok()) Die("write batch", s);
        b.Clear();
      }
    }
    Verify(db.get(), n, "written");
  }
  {
    auto db = Open(dir, false);
    Verify(db.get(), n, "reopened");
    db->CompactRange(nullptr, nullptr);
    Verify(db.get(), n, "compacted");
  }
  {
    auto db = Open(dir, false);
    Verify(db.get(), n, "reopened after compaction");
  }
  return 0;
}
