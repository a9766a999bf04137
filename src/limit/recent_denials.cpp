#include "ratewall/limit/recent_denials.hpp"

#include <algorithm>
#include <cassert>
#include <limits>
#include <utility>

namespace ratewall {

namespace {

void add_saturating(std::uint32_t& count, std::uint64_t n) {
  count = static_cast<std::uint32_t>(
      std::min<std::uint64_t>(count + n, std::numeric_limits<std::uint32_t>::max()));
}

nanos slice_width(nanos window) {
  return std::max(window / static_cast<std::int64_t>(recent_denials::k_slices), nanos{1});
}

}  // namespace

recent_denials::recent_denials(std::size_t capacity, nanos window)
    : capacity_(std::max<std::size_t>(capacity, 2)), window_(window), width_(slice_width(window)) {
  assert(window >= nanos{k_slices});
}

std::uint64_t recent_denials::slice_of(nanos t) const {
  return static_cast<std::uint64_t>(std::max(t, nanos{0}) / width_);
}

std::uint64_t recent_denials::total(const counts& c, std::uint64_t now_slice) {
  // A denial counted by a thread that read the clock before another's newer one may be older
  // than `latest`; a reader's `now` may be too. Neither makes a slice count twice.
  now_slice = std::max(now_slice, c.latest);
  if (now_slice - c.latest > k_slices) {
    return 0;
  }
  std::uint64_t sum = 0;
  const std::uint64_t first = now_slice >= k_slices ? now_slice - k_slices : 0;
  for (std::uint64_t s = first; s <= c.latest; ++s) {
    sum += c.per_slice[s % k_ring];
  }
  return sum;
}

void recent_denials::add(std::string_view subject, nanos now) {
  const std::uint64_t slice = slice_of(now);
  auto it = subjects_.find(subject);
  if (it == subjects_.end()) {
    if (subjects_.size() >= capacity_) {
      make_room(slice);
    }
    counts c;
    c.latest = slice;
    c.per_slice[slice % k_ring] = 1;
    subjects_.emplace(subject, c);
    return;
  }
  counts& c = it->second;
  if (slice > c.latest) {
    // The slices between the latest denial and this one had none (their places in the ring
    // still hold slices a whole window older).
    const std::uint64_t gap = std::min<std::uint64_t>(slice - c.latest, k_ring);
    for (std::uint64_t i = 1; i <= gap; ++i) {
      c.per_slice[(c.latest + i) % k_ring] = 0;
    }
    c.latest = slice;
  }
  if (c.latest - slice <= k_slices) {
    add_saturating(c.per_slice[slice % k_ring], 1);
  }
}

void recent_denials::make_room(std::uint64_t now_slice) {
  struct rank {
    table::iterator it;
    std::uint64_t denied;
  };
  std::vector<rank> all;
  all.reserve(subjects_.size());
  for (auto it = subjects_.begin(); it != subjects_.end(); ++it) {
    all.push_back({it, total(it->second, now_slice)});
  }
  const auto half = all.begin() + static_cast<std::ptrdiff_t>(all.size() / 2);
  std::nth_element(all.begin(), half, all.end(), [](const rank& a, const rank& b) {
    if (a.denied != b.denied) {
      return a.denied < b.denied;
    }
    return a.it->second.latest < b.it->second.latest;
  });
  for (auto r = all.begin(); r != half; ++r) {
    subjects_.erase(r->it);
  }
}

void recent_denials::collect(nanos now, std::vector<denied_subject>& out) const {
  const std::uint64_t now_slice = slice_of(now);
  for (const auto& [subject, c] : subjects_) {
    if (const std::uint64_t n = total(c, now_slice); n > 0) {
      out.push_back({subject, n});
    }
  }
}

std::size_t recent_denials::prune(nanos now) {
  const std::uint64_t now_slice = slice_of(now);
  return std::erase_if(subjects_, [&](const auto& entry) {
    return now_slice > entry.second.latest && now_slice - entry.second.latest > k_slices;
  });
}

void recent_denials::set_window(nanos window, nanos now) {
  assert(window >= nanos{k_slices});
  if (window == window_) {
    return;
  }
  const std::uint64_t old_now = slice_of(now);
  const nanos old_width = width_;
  window_ = window;
  width_ = slice_width(window);
  const std::uint64_t new_now = slice_of(now);
  for (auto it = subjects_.begin(); it != subjects_.end();) {
    counts& c = it->second;
    const std::uint64_t denied = total(c, old_now);
    // The latest denial was made before its slice ended, and not after now.
    const nanos latest_at = std::min(old_width * static_cast<std::int64_t>(c.latest + 1) - nanos{1},
                                     std::max(now, nanos{0}));
    c = counts{};
    c.latest = slice_of(latest_at);
    add_saturating(c.per_slice[c.latest % k_ring], denied);
    const bool gone = denied == 0 || (new_now > c.latest && new_now - c.latest > k_slices);
    it = gone ? subjects_.erase(it) : std::next(it);
  }
}

std::vector<denied_subject> most_denied(std::vector<denied_subject> all, std::size_t n) {
  const std::size_t keep = std::min(n, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(keep), all.end(),
                    [](const denied_subject& a, const denied_subject& b) {
                      if (a.denied != b.denied) {
                        return a.denied > b.denied;
                      }
                      return a.subject < b.subject;
                    });
  all.resize(keep);
  return all;
}

}  // namespace ratewall
