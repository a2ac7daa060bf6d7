// Helpers for the directory-layer tests: a mounted pool with a Cib, a
// directory, and one-operation transactions.
#pragma once

#include <gtest/gtest.h>

#include <dirent.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dir/cib.h"
#include "meta/meta_tx.h"
#include "mount/mount.h"
#include "test_util.h"

namespace mapfs::testing {

inline std::string Describe(const Status& s) { return s.ok() ? "OK" : s.ToString(); }
template <typename T>
std::string Describe(const Result<T>& r) {
  return Describe(r.status());
}

#define DIR_ASSERT_OK(expr)                                                 \
  do {                                                                      \
    const auto& _r = (expr);                                                \
    ASSERT_TRUE(_r.ok()) << #expr << ": " << ::mapfs::testing::Describe(_r); \
  } while (0)
#define DIR_EXPECT_OK(expr)                                                 \
  do {                                                                      \
    const auto& _r = (expr);                                                \
    EXPECT_TRUE(_r.ok()) << #expr << ": " << ::mapfs::testing::Describe(_r); \
  } while (0)

// A mounted pool and the Cib over it.
struct DirFixture {
  std::unique_ptr<Mount> mount;
  std::unique_ptr<dir::Cib> cib;

  bool Open(const std::string& path) {
    auto m = Mount::Open(path);
    EXPECT_TRUE(m.ok()) << "Mount::Open: " << Describe(m);
    if (!m.ok()) return false;
    mount = std::move(*m);
    cib = std::make_unique<dir::Cib>(dir::Env{&mount->pool(), &mount->vm(), &mount->space()});
    return true;
  }
  void Close() {
    cib.reset();
    if (mount) {
      EXPECT_TRUE(mount->Close().ok());
    }
    mount.reset();
  }
  meta::MetaTx Tx() { return meta::MetaTx(&mount->pool(), &mount->vm()); }

  // One operation, committed on its own.
  Status Insert(uint64_t root, std::string_view name, uint64_t ino, uint8_t type = DT_REG) {
    auto tx = Tx();
    MAPFS_RETURN_IF_ERROR(cib->Insert(root, name, {ino, type}, &tx));
    return tx.Commit();
  }
  Status Remove(uint64_t root, std::string_view name) {
    auto tx = Tx();
    MAPFS_RETURN_IF_ERROR(cib->Remove(root, name, &tx));
    return tx.Commit();
  }
  Status Replace(uint64_t root, std::string_view name, uint64_t ino, uint8_t type = DT_REG) {
    auto tx = Tx();
    MAPFS_RETURN_IF_ERROR(cib->Replace(root, name, {ino, type}, &tx));
    return tx.Commit();
  }

  // Everything List returns from the start, failing the test on a
  // repeated name or cookies out of order.
  std::map<std::string, dir::Entry> ListAll(uint64_t root) {
    std::map<std::string, dir::Entry> out;
    uint64_t last = 0;
    Status st = cib->List(root, 0, [&](uint64_t c, std::string_view name, dir::Entry e) {
      EXPECT_GE(c, 3u);
      EXPECT_GE(c, last) << "cookies out of order";
      last = c;
      EXPECT_TRUE(out.emplace(std::string(name), e).second) << "listed twice: " << name;
      return true;
    });
    EXPECT_TRUE(st.ok()) << Describe(st);
    return out;
  }
  // Check's own list, as a map (fails on damage).
  std::map<std::string, dir::Entry> Checked(uint64_t root) {
    std::vector<std::pair<std::string, dir::Entry>> v;
    Status st = cib->Check(root, &v);
    EXPECT_TRUE(st.ok()) << "Check: " << Describe(st);
    std::map<std::string, dir::Entry> out;
    for (auto& [n, e] : v) EXPECT_TRUE(out.emplace(n, e).second) << "checked twice: " << n;
    return out;
  }
};

// Names of many shapes: short, inline limit, long, maximal.
inline std::string NameFor(uint64_t i, uint64_t shape_seed = 0) {
  std::string base = "f" + std::to_string(i);
  switch ((i * 7 + shape_seed) % 11) {
    case 0:
      return base + "_" + std::string(60, 'L');  // one continuation slot
    case 1:
      return base + std::string(255 - base.size(), 'M');  // maximal
    case 2:
      return base + std::string(42 - base.size(), 'I');  // exactly inline
    default:
      return base;
  }
}

inline bool SameEntries(const std::map<std::string, dir::Entry>& a, const std::map<std::string, dir::Entry>& b) {
  if (a.size() != b.size()) return false;
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib)
    if (ia->first != ib->first || ia->second.ino != ib->second.ino || ia->second.type != ib->second.type) return false;
  return true;
}

}  // namespace mapfs::testing
