// The split engine's reuse across opens (split_engine.h): idle files keep
// their region maps past their last close, spare staging files keep their
// faulted-in pages past the file that used them. Both exist for speed only:
// dropping either at any time changes no byte a program sees.
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "overlay/split/file_state.h"
#include "overlay/split/split_engine.h"

namespace mapfs::overlay::split {

void SplitEngine::Shut(FileState& st) {
  CloseHeld(st);
  UnmapRegions(st);
  if (st.rfd >= 0) close(st.rfd);
  if (st.wfd >= 0 && st.wfd != st.rfd) close(st.wfd);
  st.rfd = st.wfd = -1;
  st.maps_writable = false;  // Adopt reopens the descriptors
}

void SplitEngine::Unidle(FileState& st) {
  if (!st.idle) return;
  for (auto it = idle_.begin(); it != idle_.end(); ++it)
    if (it->get() == &st) {
      idle_.erase(it);
      break;
    }
  idle_regions_ -= st.idle_regions;
  st.idle = false;
  st.idle_regions = 0;
}

void SplitEngine::Revive(FileState& st, uint64_t ksize) {
  // Nothing is staged once the last file closed (Release dropped it); the
  // kernel's size is the truth now, whoever changed it meanwhile. Regions
  // wholly past it go (a shrink); a partial one stays, and only its bytes
  // below ksize are ever touched.
  st.ksize = ksize;
  st.sbase = st.send = st.salign = ksize;
  st.no_staging = false;  // a full log then need not be full now
  UnmapRegionsFrom(st, ksize);
}

void SplitEngine::Release(const std::shared_ptr<FileState>& st) {
  std::vector<std::shared_ptr<FileState>> drop;
  bool keep;
  {
    // Under mu_ throughout (st->mu nested: no path takes them the other
    // way round), so no Adopt finds the state half released.
    std::lock_guard<std::mutex> g(mu_);
    if (--st->refs > 0) return;
    size_t regions;
    {
      std::lock_guard<std::mutex> gs(st->mu);
      DropStaging(*st, true);
      st->sbase = st->send = st->ksize;  // a relink that failed at close: the staged bytes are lost
      CloseHeld(*st);  // the program's last descriptor of the file closes too
      keep = !st->lru.empty() && st->rfd >= 0;
      if (!keep) Shut(*st);
      regions = st->lru.size();
    }
    if (!keep) {
      files_.erase({st->dev, st->ino});
    } else {
      st->idle = true;
      st->idle_regions = regions;
      idle_.push_front(st);
      idle_regions_ += regions;
      while (idle_.size() > kMaxIdleFiles || (idle_regions_ > kMaxIdleRegions && idle_.size() > 1)) {
        std::shared_ptr<FileState> old = idle_.back();
        Unidle(*old);
        files_.erase({old->dev, old->ino});
        drop.push_back(std::move(old));
      }
    }
  }
  for (auto& d : drop) {
    std::lock_guard<std::mutex> g(d->mu);
    Shut(*d);
  }
  if (keep) SweepUnlinked();
}

void SplitEngine::SweepUnlinked() {
  std::vector<std::shared_ptr<FileState>> idle;
  {
    std::lock_guard<std::mutex> g(mu_);
    idle.assign(idle_.begin(), idle_.end());
  }
  for (auto& st : idle) {
    bool gone;
    {
      std::lock_guard<std::mutex> g(st->mu);
      struct stat sb{};
      gone = st->rfd >= 0 && fstat(st->rfd, &sb) == 0 && sb.st_nlink == 0;
    }
    if (!gone) continue;
    {
      std::lock_guard<std::mutex> g(mu_);
      // Reopened meanwhile (it has a name again, or a file holds it): kept.
      if (st->refs > 0 || !st->idle) continue;
      Unidle(*st);
      auto it = files_.find({st->dev, st->ino});
      if (it != files_.end() && it->second == st) files_.erase(it);
    }
    std::lock_guard<std::mutex> g(st->mu);
    Shut(*st);
  }
}

bool SplitEngine::TakeSpare(FileState& st) {
  if (st.pair < 0 || static_cast<uint32_t>(st.pair) >= kSpareStaging) return false;
  std::lock_guard<std::mutex> g(spare_mu_);
  Spare& s = spares_[st.pair];
  if (s.fd < 0) return false;
  st.sfd = s.fd;
  st.smap = s.map;
  st.sfaulted = s.faulted;
  s = Spare{};
  return true;
}

bool SplitEngine::ParkSpare(FileState& st) {
  if (static_cast<uint32_t>(st.pair) >= kSpareStaging || st.smap == nullptr) return false;
  std::lock_guard<std::mutex> g(spare_mu_);
  Spare& s = spares_[st.pair];
  if (s.fd >= 0) return false;
  s.fd = st.sfd;
  s.map = st.smap;
  s.faulted = st.sfaulted;
  return true;
}

void SplitEngine::DropSpares() {
  std::lock_guard<std::mutex> g(spare_mu_);
  for (uint32_t i = 0; i < kSpareStaging; i++) {
    Spare& s = spares_[i];
    if (s.fd < 0) continue;
    munmap(s.map, kStagingBytes);
    close(s.fd);
    unlinkat(dir_fd_, Name("s", log_.tag(), static_cast<int>(i)).c_str(), 0);
    s = Spare{};
  }
}

}  // namespace mapfs::overlay::split
