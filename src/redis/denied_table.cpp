#include "ratewall/redis/denied_table.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>

namespace ratewall::redis {

denied_table::denied_table(std::size_t capacity)
    : sets_(std::bit_ceil(std::max<std::size_t>((capacity + k_ways - 1) / k_ways, 1))) {}

std::uint64_t denied_table::hash_of(std::string_view subject, std::uint64_t limits) {
  // Fibonacci hashing: the high bits, which pick the set, depend on every bit of both parts
  // (the store picks the shard by the low bits of the subject's hash).
  return (std::hash<std::string_view>{}(subject) ^ limits) * 0x9e3779b97f4a7c15ull;
}

const denied_entry* denied_table::find(std::string_view subject, std::uint64_t limits,
                                       std::int64_t now, std::uint64_t epoch) {
  if (size_ == 0 || subject.size() > k_max_subject) {
    return nullptr;
  }
  const std::uint64_t h = hash_of(subject, limits);
  way* set = set_of(h);
  for (std::size_t i = 0; i < k_ways; ++i) {
    ++probes_;
    way& w = set[i];
    if (!w.holds(h, subject, limits)) {
      continue;
    }
    if (w.entry.epoch != epoch || now >= w.entry.until) {
      drop(w);
      return nullptr;
    }
    w.hit = true;
    return &w.entry;
  }
  return nullptr;
}

bool denied_table::remember(std::string_view subject, std::uint64_t limits, const denied_entry& e) {
  if (subject.size() > k_max_subject) {
    return false;
  }
  if (ways_.empty()) {
    ways_.resize(sets_ * k_ways);
  }
  const std::uint64_t h = hash_of(subject, limits);
  way* set = set_of(h);
  way* free = nullptr;    // empty, expired or stale
  way* victim = nullptr;  // else the live way to evict: not hit, then the first to expire
  for (std::size_t i = 0; i < k_ways; ++i) {
    ++probes_;
    way& w = set[i];
    if (w.holds(h, subject, limits)) {
      const denied_entry& old = w.entry;
      if (old.epoch != e.epoch || old.cost > e.cost || old.until < e.until) {
        w.entry = e;
      }
      return true;
    }
    if (!w.used || w.entry.until <= e.at || w.entry.epoch != e.epoch) {
      free = free != nullptr ? free : &w;
    } else if (victim == nullptr || w.hit < victim->hit ||
               (w.hit == victim->hit && w.entry.until < victim->entry.until)) {
      victim = &w;
    }
  }
  way* w = free;
  if (w == nullptr) {
    w = victim;
    ++evictions_;
    // Second chance: the ways hit since the last eviction here were spared this one; to be
    // spared the next, they must be hit again.
    for (std::size_t i = 0; i < k_ways; ++i) {
      set[i].hit = false;
    }
  }
  if (!w->used) {
    ++size_;
  }
  w->used = true;
  w->hit = false;
  w->hash = h;
  w->limits = limits;
  w->entry = e;
  w->length = static_cast<std::uint8_t>(subject.size());
  std::memcpy(w->subject, subject.data(), subject.size());
  return true;
}

std::size_t denied_table::prune(std::int64_t now, std::uint64_t epoch) {
  if (size_ == 0) {
    return 0;
  }
  std::size_t dropped = 0;
  for (way& w : ways_) {
    if (w.used && (w.entry.until <= now || w.entry.epoch != epoch)) {
      drop(w);
      ++dropped;
    }
  }
  return dropped;
}

}  // namespace ratewall::redis
