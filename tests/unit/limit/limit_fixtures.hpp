#pragma once

// Limits the limiter's unit tests share.

#include <chrono>
#include <cstdint>
#include <string>

#include "ratewall/config/config.hpp"

namespace ratewall::testing {

inline constexpr algorithm k_all[] = {
    algorithm::token_bucket,       algorithm::leaky_bucket,           algorithm::fixed_window,
    algorithm::sliding_window_log, algorithm::sliding_window_counter, algorithm::concurrency};

/// A limit of algorithm `a` that admits exactly `n` requests at one instant and refills slowly
/// (one per hour, or windows of an hour).
inline limit_config admitting(std::string name, algorithm a, std::uint64_t n) {
  limit_config l;
  l.name = std::move(name);
  l.algo = a;
  l.rate = {1, std::chrono::hours(1)};
  l.burst = a == algorithm::leaky_bucket ? n - 1 : n;
  l.limit = n;
  l.window = std::chrono::hours(1);
  return l;
}

/// The same, named after its algorithm.
inline limit_config admitting(algorithm a, std::uint64_t n) {
  return admitting(std::string(to_string(a)), a, n);
}

}  // namespace ratewall::testing
