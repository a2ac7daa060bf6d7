// Hash collisions (forced through the test hook) and readdir semantics:
// stable cookies, resumption while the directory changes, groups of equal
// cookies never split across calls.
#include <map>
#include <set>

#include "dir_test_util.h"

namespace mapfs::testing {
namespace {

uint64_t Fnv(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}
uint64_t ConstHash(std::string_view) { return 0x123456789abcdefull; }
uint64_t Mod4Hash(std::string_view s) { return Fnv(s) % 4; }
uint64_t TopHash(std::string_view) { return ~uint64_t{0}; }
// 50 distinct cookies (hash >> 1), both low bits used: groups of equal
// cookies made of two hash values.
uint64_t GroupHash(std::string_view s) { return (Fnv(s) % 100) + 1000; }

struct HashGuard {
  explicit HashGuard(uint64_t (*fn)(std::string_view)) { dir::SetHashForTesting(fn); }
  ~HashGuard() { dir::SetHashForTesting(nullptr); }
};

struct HashCase {
  const char* name;
  uint64_t (*fn)(std::string_view);
};
void PrintTo(const HashCase& c, std::ostream* os) { *os << c.name; }

class dir_collide : public ::testing::TestWithParam<HashCase> {};

TEST_P(dir_collide, ManyNamesOneHash) {
  HashGuard g(GetParam().fn);
  TempPool tp(64 * MiB);
  DirFixture fx;
  ASSERT_TRUE(fx.Open(tp.path()));
  auto root = fx.cib->Create();
  DIR_ASSERT_OK(root);
  const int n = 600;  // ~10 blocks' worth in one hash value
  for (int i = 0; i < n; i++) {
    Status st = fx.Insert(*root, NameFor(i), 1 + i);
    ASSERT_TRUE(st.ok()) << i << ": " << Describe(st);
  }
  EXPECT_EQ(fx.Insert(*root, NameFor(5), 1).code(), EEXIST);
  for (int i = 0; i < n; i++) {
    auto e = fx.cib->Lookup(*root, NameFor(i));
    ASSERT_TRUE(e.ok()) << i;
    EXPECT_EQ(e->ino, 1u + i);
  }
  EXPECT_EQ(fx.cib->Lookup(*root, "absent").status().code(), ENOENT);
  EXPECT_EQ(fx.ListAll(*root).size(), static_cast<size_t>(n));
  EXPECT_EQ(fx.Checked(*root).size(), static_cast<size_t>(n));
  auto s = fx.cib->Stats(*root);
  EXPECT_LT(s->blocks, 40u) << "colliding names must not split forever";
  // Remove every other one, replace some, insert again.
  for (int i = 0; i < n; i += 2) DIR_ASSERT_OK(fx.Remove(*root, NameFor(i)));
  for (int i = 1; i < n; i += 6) DIR_ASSERT_OK(fx.Replace(*root, NameFor(i), 7));
  for (int i = 0; i < n; i += 2) ASSERT_EQ(fx.cib->Lookup(*root, NameFor(i)).status().code(), ENOENT);
  for (int i = 0; i < 100; i++) DIR_ASSERT_OK(fx.Insert(*root, "new" + std::to_string(i), 9));
  auto all = fx.Checked(*root);
  EXPECT_EQ(all.size(), static_cast<size_t>(n / 2 + 100));
  EXPECT_EQ(all[NameFor(1)].ino, 7u);
  EXPECT_EQ(all[NameFor(3)].ino, 4u);
  EXPECT_TRUE(SameEntries(all, fx.ListAll(*root)));
  // One listing stops after the first entry, but all entries share one
  // cookie (or a handful), so each call must still deliver its group whole.
  std::set<std::string> seen;
  uint64_t after = 2;
  for (int calls = 0; calls < 10000; calls++) {
    uint64_t last = after;
    int got = 0;
    DIR_ASSERT_OK(fx.cib->List(*root, after, [&](uint64_t c, std::string_view name, dir::Entry) {
      EXPECT_TRUE(seen.insert(std::string(name)).second) << name;
      last = c;
      got++;
      return false;
    }));
    if (got == 0) break;
    after = last;
  }
  EXPECT_EQ(seen.size(), all.size());
  fx.Close();
}

INSTANTIATE_TEST_SUITE_P(Hashes, dir_collide,
                         ::testing::Values(HashCase{"Constant", &ConstHash}, HashCase{"Mod4", &Mod4Hash},
                                           HashCase{"AllOnes", &TopHash}, HashCase{"Groups", &GroupHash}),
                         [](const auto& i) { return std::string(i.param.name); });

// Resuming from a cookie while other entries come and go and blocks split:
// every entry present throughout appears exactly once, nothing appears
// twice, cookies only grow.
void ListWhileChanging(uint64_t (*hash)(std::string_view), int stable_n, int batch) {
  HashGuard g(hash);
  TempPool tp(128 * MiB);
  DirFixture fx;
  ASSERT_TRUE(fx.Open(tp.path()));
  auto root = fx.cib->Create();
  DIR_ASSERT_OK(root);
  std::set<std::string> stable, transient;
  for (int i = 0; i < stable_n; i++) {
    stable.insert("s" + std::to_string(i));
    DIR_ASSERT_OK(fx.Insert(*root, "s" + std::to_string(i), 1));
  }
  for (int i = 0; i < stable_n / 4; i++) {
    transient.insert("t" + std::to_string(i));
    DIR_ASSERT_OK(fx.Insert(*root, "t" + std::to_string(i), 2));
  }
  auto blocks0 = fx.cib->Stats(*root)->blocks;
  std::map<std::string, int> seen;
  uint64_t after = 2, prev_cookie = 0;
  int next_new = 0, calls = 0;
  Rng rng(7);
  for (;; calls++) {
    ASSERT_LT(calls, 100000);
    int got = 0;
    uint64_t last = after;
    DIR_ASSERT_OK(fx.cib->List(*root, after, [&](uint64_t c, std::string_view name, dir::Entry) {
      EXPECT_GT(c, after);
      EXPECT_GE(c, prev_cookie);
      prev_cookie = c;
      seen[std::string(name)]++;
      last = c;
      return ++got < batch;
    }));
    if (got == 0) break;
    after = last;
    // Between calls: new entries (forcing splits), some transient ones go.
    for (int i = 0; i < 40; i++) {
      std::string n = "n" + std::to_string(next_new++);
      DIR_ASSERT_OK(fx.Insert(*root, n, 3));
      transient.insert(n);
    }
    for (int i = 0; i < 25 && !transient.empty(); i++) {
      auto it = transient.begin();
      std::advance(it, rng.Below(transient.size()));
      DIR_ASSERT_OK(fx.Remove(*root, *it));
      transient.erase(it);
    }
  }
  for (auto& s : stable) EXPECT_EQ(seen[s], 1) << s;
  for (auto& [n, k] : seen) EXPECT_EQ(k, 1) << n;
  EXPECT_GT(fx.cib->Stats(*root)->blocks, blocks0) << "the listing should have run across splits";
  DIR_EXPECT_OK(fx.cib->Check(*root));
  fx.Close();
}

TEST(dir_list, ResumeWhileChanging) { ListWhileChanging(nullptr, 4000, 37); }
TEST(dir_list, ResumeWhileChangingWithCookieGroups) { ListWhileChanging(&GroupHash, 3000, 5); }

TEST(dir_list, CookiesAreStableAndOrdered) {
  TempPool tp(64 * MiB);
  DirFixture fx;
  ASSERT_TRUE(fx.Open(tp.path()));
  auto root = fx.cib->Create();
  DIR_ASSERT_OK(root);
  for (int i = 0; i < 300; i++) DIR_ASSERT_OK(fx.Insert(*root, NameFor(i), i + 1));
  std::map<std::string, uint64_t> cookie;
  DIR_ASSERT_OK(fx.cib->List(*root, 0, [&](uint64_t c, std::string_view n, dir::Entry) {
    cookie[std::string(n)] = c;
    return true;
  }));
  ASSERT_EQ(cookie.size(), 300u);
  // Splits all over the directory; the old entries keep their cookies.
  for (int i = 300; i < 5000; i++) DIR_ASSERT_OK(fx.Insert(*root, NameFor(i), i + 1));
  for (int i = 300; i < 5000; i += 3) DIR_ASSERT_OK(fx.Remove(*root, NameFor(i)));
  int checked = 0;
  DIR_ASSERT_OK(fx.cib->List(*root, 0, [&](uint64_t c, std::string_view n, dir::Entry) {
    auto it = cookie.find(std::string(n));
    if (it != cookie.end()) {
      EXPECT_EQ(it->second, c) << n;
      checked++;
    }
    return true;
  }));
  EXPECT_EQ(checked, 300);
  // Resuming from each old cookie returns exactly the entries above it.
  auto all = fx.ListAll(*root);
  for (auto& [n, c] : cookie) {
    if (checked-- < 290) break;  // a few are enough
    uint64_t first = 0;
    size_t count = 0;
    DIR_ASSERT_OK(fx.cib->List(*root, c, [&](uint64_t cc, std::string_view, dir::Entry) {
      if (!first) first = cc;
      count++;
      return true;
    }));
    EXPECT_TRUE(first == 0 || first > c);
    size_t above = 0;
    DIR_ASSERT_OK(fx.cib->List(*root, 0, [&](uint64_t cc, std::string_view, dir::Entry) {
      above += cc > c;
      return true;
    }));
    EXPECT_EQ(count, above);
  }
  // Past the last cookie: nothing, no error.
  size_t none = 0;
  DIR_ASSERT_OK(fx.cib->List(*root, (uint64_t{1} << 63) - 1, [&](uint64_t, std::string_view, dir::Entry) {
    none++;
    return true;
  }));
  EXPECT_EQ(none, 0u);
  fx.Close();
}

}  // namespace
}  // namespace mapfs::testing
