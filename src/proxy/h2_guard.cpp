#include "ratewall/proxy/h2_guard.hpp"

#include <algorithm>
#include <chrono>

namespace ratewall {

namespace {

// The reset budget as a route's token bucket: resolve_policy rounds the time per reset up (never
// more resets than configured) and refuses a zero rate, as it does for every limit.
policy reset_policy(std::uint32_t per_second) {
  limit_config limit;
  limit.name = "http2 resets";
  limit.algo = algorithm::token_bucket;
  limit.rate = {per_second, std::chrono::seconds(1)};
  limit.burst = per_second;
  return resolve_policy(limit, nullptr, false, store_failure::allow);
}

}  // namespace

h2_guard::h2_guard(h2_guard_limits limits)
    : resets_(reset_policy(limits.resets_per_second)),
      streams_per_read_(2 * std::uint64_t{limits.max_concurrent_streams}),
      max_refusals_(std::max<std::uint64_t>(limits.max_concurrent_streams, k_least_refusals)) {}

bool h2_guard::reset(nanos now) {
  return gcra::decide(reset_bucket_, now, resets_, 1).allowed;
}

bool h2_guard::new_stream() {
  return ++streams_in_read_ <= streams_per_read_;
}

bool h2_guard::refused() {
  return ++refusals_ <= max_refusals_;
}

bool h2_guard::refused_before_settings() {
  return ++early_refusals_ <= 10 * max_refusals_;
}

bool h2_guard::traffic(std::uint64_t bytes_read, std::uint64_t payload) const {
  return bytes_read / 8 <= payload + k_traffic_allowance;
}

}  // namespace ratewall
