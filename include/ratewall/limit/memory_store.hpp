#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/store.hpp"

namespace ratewall {

struct memory_store_options {
  /// Cap on tracked (subject, route) entries, enforced per shard (max_keys / shards each).
  std::uint64_t max_keys = 1000000;
  std::size_t shards = 64;  // rounded up to a power of two
  /// A new subject arriving at a full shard, once expired entries are swept out of it:
  ///   allow_untracked: decided as the fresh subject it is and not recorded
  ///                    (route_decision::untracked); tracked subjects keep their limits;
  ///   deny:            429 with retry_after k_full_retry until space frees up.
  enum class full_policy { allow_untracked, deny };
  full_policy when_full = full_policy::allow_untracked;
};

/// retry_after of a request denied because the store is full (full_policy::deny).
inline constexpr nanos k_full_retry = std::chrono::seconds(1);

/// Limit state in this process's memory.
///
/// Sharded by a seeded 64-bit hash of the subject (one mutex per shard, so all limits of a
/// subject are decided under one lock: exact under any number of threads). A shard holds one
/// boost::unordered_flat_map per route, keyed by the subject (16-byte key: up to 15 bytes
/// inline, longer ones on the heap), whose value is a row of 64-bit words: one for when the
/// row expires (to ~1 ms) and the subject's denials (saturating at 2^24 − 1), then each
/// limit's state (token/leaky bucket, concurrency, sliding log pointer: 1 word; fixed window:
/// 2; sliding counter: 3). A token bucket subject is a 32-byte slot.
///
/// A row whose state has expired equals no row: `sweep` drops them (and a full shard sweeps
/// itself before turning a new subject away, at most every k_full_sweep_interval). Rows with
/// concurrency slots in flight are never dropped.
///
/// Never suspends: try_check always answers. Thread-safe.
class memory_store final : public store {
 public:
  /// `routes[r]` lists the algorithms of route r's limits in order; requests for route r must
  /// pass policies of exactly these algorithms. Throws std::invalid_argument when a route has
  /// more than 64 limits or needs more than 16 words of state.
  memory_store(const std::vector<std::vector<algorithm>>& routes, memory_store_options options);
  /// The routes of `cfg`, max_keys from cfg.store.
  explicit memory_store(const config& cfg);
  ~memory_store() override;

  memory_store(const memory_store&) = delete;
  memory_store& operator=(const memory_store&) = delete;

  std::optional<route_decision> try_check(const check_request& req) override;
  boost::asio::awaitable<route_decision> check(const check_request& req) override;
  void release(std::string_view subject, std::uint32_t route,
               std::uint64_t limits) noexcept override;

  boost::asio::awaitable<std::vector<decision>> status(std::string_view subject,
                                                       std::uint32_t route,
                                                       std::span<const policy> limits,
                                                       nanos now) override;
  boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                            std::optional<std::uint32_t> route) override;
  boost::asio::awaitable<std::size_t> reset_all() override;
  boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n) override;
  std::size_t sweep(nanos now) override;

  // The same operations without a coroutine, for callers that are not one.
  route_decision decide(const check_request& req);
  std::vector<decision> status_now(std::string_view subject, std::uint32_t route,
                                   std::span<const policy> limits, nanos now) const;
  std::size_t reset_now(std::string_view subject, std::optional<std::uint32_t> route);
  std::size_t reset_all_now();
  std::vector<denied_subject> top_denied_now(std::size_t n) const;

  struct usage {
    std::size_t entries = 0;      // tracked (subject, route) rows
    std::size_t table_bytes = 0;  // hash table arrays: slots (key + row) and control bytes
    std::size_t heap_bytes = 0;   // subjects longer than 15 bytes, sliding logs
  };
  /// Walks every row: for tests, benchmarks and the admin API, not the request path.
  usage memory_usage() const;
  std::size_t size() const;

 private:
  struct shard;
  struct route_layout;

  shard& shard_for(std::uint64_t hash) const;
  std::size_t sweep_shard(shard& s, nanos now);

  std::vector<route_layout> routes_;
  memory_store_options options_;
  std::uint64_t shard_capacity_ = 0;
  std::uint64_t seed_ = 0;
  std::size_t shard_mask_ = 0;
  std::unique_ptr<shard[]> shards_;
};

/// A full shard sweeps itself for a new subject at most this often.
inline constexpr nanos k_full_sweep_interval = std::chrono::milliseconds(100);

}  // namespace ratewall
