// The change ring (fs/change_ring.h) that keeps the FUSE mount's kernel
// caches coherent:
//  - ThroughTheCore: every namespace, attribute and data call of the core
//    publishes what it made stale (directory + name, inode, byte range),
//    once a follower is registered, and a follower skips its own mount's.
//  - OverflowIsReported: a follower that fell a ring behind is told so
//    (it must then invalidate everything), and follows again afterwards.
//  - NamesAreCopiedWhole: names up to NAME_MAX come through intact.
#include <fcntl.h>

#include <string>
#include <vector>

#include "fs/file_system.h"
#include "fs_test_util.h"

namespace mapfs::fstest {
namespace {

constexpr uint64_t kNoMount = ~0ull;  // no mount has this token

std::vector<fs::Change> DrainAll(fs::ChangeFollower* f, bool* complete = nullptr) {
  std::vector<fs::Change> out;
  bool ok = f->Drain([&](const fs::Change& c) { out.push_back(c); });
  if (complete) *complete = ok;
  return out;
}

TEST(ChangeRing, ThroughTheCore) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  auto m = fs::FileSystem::Mount(pool.path());
  ASSERT_TRUE(m.ok()) << m.status().message();
  fs::FileSystem& f = **m;
  auto* ring = &meta::FsSharedOf(&f.mount().pool())->changes;
  // A follower of another mount: sees this
  // mount's changes.
  auto other = std::make_unique<fs::ChangeFollower>(ring, kNoMount);
  ASSERT_TRUE(f.Mkdir("/d", 0755).ok());
  auto d = f.Lookup("/d");
  ASSERT_TRUE(d.ok());
  auto h = f.Open("/d/f", O_CREAT | O_RDWR, 0644);
  ASSERT_TRUE(h.ok());
  uint64_t ino = (*h)->ino;
  ASSERT_TRUE(f.Write(**h, "abcdef", 6, 10).ok());
  ASSERT_TRUE(f.Ftruncate(**h, 3).ok());
  ASSERT_TRUE(f.Chmod("/d/f", 0600).ok());
  ASSERT_TRUE(f.Rename("/d/f", "/d/g").ok());
  ASSERT_TRUE(f.Close(**h).ok());
  ASSERT_TRUE(f.Unlink("/d/g").ok());

  bool complete = false;
  auto got = DrainAll(other.get(), &complete);
  EXPECT_TRUE(complete);
  ASSERT_EQ(got.size(), 8u);
  auto name = [](const fs::Change& c, uint64_t dir, const char* n, uint64_t i) {
    return c.kind == fs::ChangeKind::kName && c.a == dir && c.name == n && c.b == i;
  };
  EXPECT_TRUE(name(got[0], meta::format::kRootIno, "d", *d));
  EXPECT_TRUE(name(got[1], *d, "f", ino));
  EXPECT_TRUE(got[2].kind == fs::ChangeKind::kData && got[2].a == ino && got[2].off == 10 && got[2].len == 6);
  EXPECT_TRUE(got[3].kind == fs::ChangeKind::kData && got[3].a == ino && got[3].off == 3 && got[3].len == 0);
  EXPECT_TRUE(got[4].kind == fs::ChangeKind::kAttr && got[4].a == ino);
  EXPECT_TRUE(name(got[5], *d, "f", ino));  // rename: the old name
  EXPECT_TRUE(name(got[6], *d, "g", 0));    // and the new one (it replaced nothing)
  EXPECT_TRUE(name(got[7], *d, "g", ino));  // unlink

  // The mount's own follower skips all of it.
  auto own = f.FollowChanges();
  ASSERT_TRUE(f.Mkdir("/e", 0755).ok());
  EXPECT_TRUE(DrainAll(own.get()).empty());
  EXPECT_EQ(DrainAll(other.get()).size(), 1u);
  own.reset();
  other.reset();  // followers live in the pool's shared memory
  ASSERT_TRUE(f.Unmount().ok());
}

TEST(ChangeRing, OverflowIsReported) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  auto m = fs::FileSystem::Mount(pool.path());
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto ring = std::make_unique<meta::ChangeRing>();
  fs::ChangePublisher pub(ring.get(), &(*m)->mount().pool());
  pub.Attr(7);  // no follower yet: not published
  fs::ChangeFollower fol(ring.get(), kNoMount);
  for (int i = 0; i < meta::kChangeRing + 10; i++) pub.Attr(100 + i);
  bool complete = true;
  auto got = DrainAll(&fol, &complete);
  EXPECT_FALSE(complete);
  pub.Data(5, 0, 4096);
  got = DrainAll(&fol, &complete);
  EXPECT_TRUE(complete);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].a, 5u);
  ASSERT_TRUE((*m)->Unmount().ok());
}

TEST(ChangeRing, NamesAreCopiedWhole) {
  FsPool pool;
  ASSERT_EQ(pool.error(), "");
  auto m = fs::FileSystem::Mount(pool.path());
  ASSERT_TRUE(m.ok()) << m.status().message();
  auto ring = std::make_unique<meta::ChangeRing>();
  fs::ChangePublisher pub(ring.get(), &(*m)->mount().pool());
  fs::ChangeFollower fol(ring.get(), kNoMount);
  std::vector<std::string> names = {"a", "12345678", "123456789", std::string(255, 'z')};
  for (auto& n : names) pub.Name(3, n, 4);
  auto got = DrainAll(&fol);
  ASSERT_EQ(got.size(), names.size());
  for (size_t i = 0; i < names.size(); i++) EXPECT_EQ(got[i].name, names[i]);
  ASSERT_TRUE((*m)->Unmount().ok());
}

}  // namespace
}  // namespace mapfs::fstest
