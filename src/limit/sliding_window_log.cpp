#include "ratewall/limit/sliding_window_log.hpp"

#include <algorithm>
#include <new>

namespace ratewall {

// Timestamps in arrival order (never decreasing) in a circular buffer allocated in one block
// with its header.
class alignas(8) sliding_window_log::ring {
 public:
  static ring* create(std::uint32_t capacity) {
    void* memory = ::operator new(bytes_for(capacity));
    return new (memory) ring(capacity);
  }

  static void destroy(ring* r) noexcept {
    if (r != nullptr) {
      r->~ring();
      ::operator delete(r);
    }
  }

  static std::size_t bytes_for(std::uint32_t capacity) {
    return sizeof(ring) + std::size_t{capacity} * sizeof(std::int64_t);
  }

  std::uint32_t capacity() const { return capacity_; }
  std::uint32_t size() const { return size_; }
  std::int64_t newest() const { return at(size_ - 1); }

  std::int64_t at(std::uint32_t i) const {
    std::uint32_t slot = head_ + i;
    if (slot >= capacity_) {
      slot -= capacity_;
    }
    return slots()[slot];
  }

  // Index of the first timestamp still inside the window at `now`.
  std::uint32_t first_live(std::int64_t now, std::int64_t window) const {
    std::uint32_t lo = 0;
    std::uint32_t hi = size_;
    while (lo < hi) {
      const std::uint32_t mid = lo + (hi - lo) / 2;
      if (at(mid) + window <= now) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }

  void drop_front(std::uint32_t n) {
    head_ += n;
    if (head_ >= capacity_) {
      head_ -= capacity_;
    }
    size_ -= n;
    if (size_ == 0) {
      head_ = 0;
    }
  }

  void push_back(std::int64_t t, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      std::uint32_t slot = head_ + size_;
      if (slot >= capacity_) {
        slot -= capacity_;
      }
      slots()[slot] = t;
      ++size_;
    }
  }

 private:
  explicit ring(std::uint32_t capacity) : capacity_(capacity) {}

  std::int64_t* slots() { return reinterpret_cast<std::int64_t*>(this + 1); }
  const std::int64_t* slots() const { return reinterpret_cast<const std::int64_t*>(this + 1); }

  std::uint32_t capacity_;
  std::uint32_t head_ = 0;
  std::uint32_t size_ = 0;
  std::uint32_t reserved_ = 0;
};

namespace {

constexpr std::uint32_t k_min_capacity = 1;

}  // namespace

decision sliding_window_log::check(const state& s, nanos now, const policy& p, std::uint64_t cost) {
  const std::int64_t t = now.count();
  const std::int64_t w = p.window.count();
  const ring* r = s.log;
  const std::uint32_t first = r != nullptr ? r->first_live(t, w) : 0;
  const std::uint64_t live = r != nullptr ? r->size() - first : 0;
  const std::int64_t until_empty = live > 0 ? r->newest() + w - t : 0;
  const std::uint64_t free_now = p.limit - std::min(live, p.limit);
  if (cost > p.limit) {
    return detail::impossible(p.limit, free_now, until_empty);
  }
  decision d;
  d.limit = p.limit;
  if (cost <= free_now) {
    d.remaining = free_now - cost;
    // The units of this request are stamped max(now, newest) and leave one window later.
    if (cost > 0) {
      d.reset_after = nanos{std::max(until_empty, w)};
    } else {
      d.reset_after = nanos{until_empty};
    }
    return d;
  }
  // The request fits once the oldest (live + cost − limit) units have left the window.
  const std::uint64_t must_leave = live + cost - p.limit;
  d.allowed = false;
  d.remaining = free_now;
  d.reset_after = nanos{until_empty};
  d.retry_after = nanos{r->at(first + static_cast<std::uint32_t>(must_leave) - 1) + w - t};
  return d;
}

void sliding_window_log::commit(state& s, nanos now, const policy& p, std::uint64_t cost) {
  const std::int64_t t = now.count();
  const std::int64_t w = p.window.count();
  ring* r = s.log;
  std::int64_t stamp = t;
  std::uint64_t live = 0;
  if (r != nullptr) {
    r->drop_front(r->first_live(t, w));
    live = r->size();
    if (live > 0) {
      stamp = std::max(stamp, r->newest());
    }
  }
  if (cost == 0) {
    return;
  }
  // live + cost <= limit <= k_max_log_limit: the check admitted it.
  const auto need = static_cast<std::uint32_t>(live + cost);
  const std::uint32_t capacity = r != nullptr ? r->capacity() : 0;
  const bool grow = need > capacity;
  // Shrink when a quarter full, so that memory follows recent traffic rather than the peak.
  const bool shrink = capacity > 8 && std::uint64_t{need} * 4 < capacity;
  if (grow || shrink) {
    const auto limit = static_cast<std::uint32_t>(p.limit);
    std::uint32_t next = std::max({need, k_min_capacity, grow ? 2 * capacity : need * 2});
    next = std::max(std::min(next, limit), need);
    ring* moved = ring::create(next);
    for (std::uint32_t i = 0; i < live; ++i) {
      moved->push_back(r->at(i), 1);
    }
    ring::destroy(r);
    s.log = r = moved;
  }
  r->push_back(stamp, cost);
}

nanos sliding_window_log::expires_at(const state& s, const policy& p) {
  if (s.log == nullptr || s.log->size() == 0) {
    return nanos{0};
  }
  return nanos{s.log->newest() + p.window.count()};
}

void sliding_window_log::clear(state& s) noexcept {
  ring::destroy(s.log);
  s.log = nullptr;
}

std::size_t sliding_window_log::heap_bytes(const state& s) {
  return s.log != nullptr ? ring::bytes_for(s.log->capacity()) : 0;
}

std::size_t sliding_window_log::size(const state& s) {
  return s.log != nullptr ? s.log->size() : 0;
}

std::int64_t sliding_window_log::at(const state& s, std::size_t i) {
  return s.log->at(static_cast<std::uint32_t>(i));
}

sliding_window_log::state sliding_window_log::from_timestamps(
    std::span<const std::int64_t> stamps) {
  state s;
  if (stamps.empty()) {
    return s;
  }
  s.log = ring::create(static_cast<std::uint32_t>(stamps.size()));
  for (std::int64_t t : stamps) {
    s.log->push_back(t, 1);
  }
  return s;
}

}  // namespace ratewall
