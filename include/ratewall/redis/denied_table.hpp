#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "ratewall/limit/decision.hpp"

namespace ratewall::redis {

/// What the Redis store's denied cache knows of a (subject, limits): denied until `until`.
struct denied_entry {
  std::int64_t until = 0;   // denied before this (the limiter's clock, ns)
  std::int64_t at = 0;      // when the denial was decided
  std::uint64_t cost = 0;   // for requests of at least this cost
  std::uint64_t epoch = 0;  // the store's cache epoch when the check was sent
  std::uint32_t limit_index = 0;
  decision headline;
};

/// One shard of the Redis store's denied cache: a fixed-capacity set-associative table, as a
/// CPU cache is built. A (subject, limits hash) may live only in the k_ways ways of the one set
/// its hash picks, so a lookup or an insertion looks at k_ways entries at most, whatever the
/// table holds, and the table never holds more than capacity() entries: memory is fixed
/// (capacity() × 168 bytes, allocated at the first insertion), without an index or a
/// list to keep consistent with it.
///
/// A full set makes room by evicting, in this order: an empty way, an expired or stale one,
/// then among the live ones the first to expire of those no request has hit since the last
/// eviction in the set (an abusive subject that keeps coming back keeps its entry while a flood
/// of new subjects passes through). Losing an entry is harmless: the subject's next request
/// goes to Redis, which decides it and refills the entry. An entry is found only under its
/// exact subject and limits hash, so it never answers for another.
///
/// Subjects longer than k_max_subject bytes are not cached (subjects are keyed hashes, about
/// 40 bytes). Not thread-safe: the store holds its shard's lock.
class denied_table {
 public:
  static constexpr std::size_t k_ways = 8;
  static constexpr std::size_t k_max_subject = 61;

  /// Room for `capacity` entries, rounded up to a power of two number of sets of k_ways.
  explicit denied_table(std::size_t capacity);

  std::size_t capacity() const { return sets_ * k_ways; }
  /// Entries held, stale and expired ones included until they are dropped.
  std::size_t size() const { return size_; }

  /// The live entry of (subject, limits): not expired at `now` and of `epoch`; nullptr
  /// otherwise, and a stale or expired entry found is dropped. The pointer is valid until the
  /// next call.
  const denied_entry* find(std::string_view subject, std::uint64_t limits, std::int64_t now,
                           std::uint64_t epoch);
  /// Remembers `e` (decided at e.at, in epoch e.epoch) for (subject, limits), unless the entry
  /// there already denies at least as long for the same or more costs, in the same epoch (a
  /// late reply must not shorten a longer denial). False when not stored: a subject too long.
  bool remember(std::string_view subject, std::uint64_t limits, const denied_entry& e);
  /// Drops the entries expired at `now` or of an epoch other than `epoch`; returns how many.
  std::size_t prune(std::int64_t now, std::uint64_t epoch);

  /// Live entries evicted to make room.
  std::uint64_t evictions() const { return evictions_; }
  /// Ways looked at, by every call: a test's proof that no call scans the table.
  std::uint64_t probes() const { return probes_; }

 private:
  struct way {
    std::uint64_t hash = 0;
    std::uint64_t limits = 0;
    denied_entry entry;
    bool used = false;
    bool hit = false;  // a request was answered from it since the last eviction in its set
    std::uint8_t length = 0;
    char subject[k_max_subject];

    std::string_view name() const { return {subject, length}; }
    bool holds(std::uint64_t h, std::string_view s, std::uint64_t l) const {
      return used && hash == h && limits == l && name() == s;
    }
  };

  static std::uint64_t hash_of(std::string_view subject, std::uint64_t limits);
  way* set_of(std::uint64_t hash) { return &ways_[(hash >> 32 & (sets_ - 1)) * k_ways]; }
  void drop(way& w) {
    w.used = false;
    --size_;
  }

  std::size_t sets_;
  std::vector<way> ways_;  // sets_ × k_ways, allocated at the first insertion
  std::size_t size_ = 0;
  std::uint64_t evictions_ = 0;
  std::uint64_t probes_ = 0;
};

}  // namespace ratewall::redis
