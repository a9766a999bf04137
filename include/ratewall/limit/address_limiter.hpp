#pragma once

// A token bucket per client address for answers that are no route's limit: the 401s of
// unknown_api_key: reject and of bearer tokens that do not verify (identity.reject_limit), so
// that keys cannot be guessed, nor signatures made to be checked, at line rate.
// Thread-safe (a mutex per shard) and bounded: a full shard first drops the buckets that are
// whole again (equal to no bucket), and only if none is, forgets its oldest half.

#include <array>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/decision.hpp"

namespace ratewall {

class address_limiter {
 public:
  /// `rate` and `burst` as a token bucket's; at most `max_addresses` buckets are kept.
  address_limiter(rate_spec rate, std::uint64_t burst, std::size_t max_addresses = 1 << 16);

  /// Takes one token of `address`'s bucket at `now` (a monotonic time); the decision says
  /// whether there was one and, if not, when there will be.
  decision take(std::string_view address, nanos now);

  /// Whether a take() at `now` would be refused; takes nothing.
  bool spent(std::string_view address, nanos now);

 private:
  static constexpr std::size_t k_shards = 16;
  struct shard {
    std::mutex mutex;
    std::unordered_map<std::uint64_t, std::int64_t> tat;  // address hash -> GCRA state
  };

  std::int64_t interval_;
  std::int64_t tolerance_;
  std::uint64_t burst_;
  std::size_t max_per_shard_;
  std::array<shard, k_shards> shards_;
};

}  // namespace ratewall
