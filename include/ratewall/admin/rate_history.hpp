#pragma once

// Per-route request counts over the last minutes, for the dashboard (GET /dashboard). The
// cumulative counters of /metrics (metrics_registry::totals_by_route) are sampled into a ring
// of fixed-width buckets: the request path pays nothing, and the counts are those /metrics
// reports, split by time. A bucket counts what its last sample saw minus what the sample
// before it saw; a bucket with no sample of its own counts zero and its requests land in the
// next one (the admin samples at least once per bucket, so that only happens when it stalls).

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <vector>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/clock.hpp"

namespace ratewall {

/// What one route saw in one bucket.
struct bucket_counts {
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t shadow_denied = 0;
  std::uint64_t upstream_responses = 0;
  std::uint64_t upstream_failures = 0;  // 502, 503 and 504 the gateway answered itself
};

/// Not thread-safe: the admin thread owns it.
class rate_history {
 public:
  /// `buckets` buckets of `bucket_width` each: the history covers buckets x bucket_width.
  rate_history(nanos bucket_width, std::size_t buckets);

  /// Takes the counters as they are at `now` (monotonic, never earlier than a previous call).
  /// The first call is the baseline: counts start from there.
  void record(nanos now, std::vector<route_totals> totals);

  /// The counts of `route` in each bucket, oldest first; the last one is the bucket of the
  /// latest record(), still filling. Always buckets() entries (zeros before the first record
  /// and for a route never seen).
  std::vector<bucket_counts> counts(std::string_view route) const;

  nanos bucket_width() const { return width_; }
  std::size_t buckets() const { return buckets_; }
  /// How far `now` is into its bucket: the time the last bucket has been filling.
  nanos into_bucket(nanos now) const { return now % width_; }

 private:
  struct sample {
    std::int64_t bucket = 0;  // now / width_ when it was taken
    std::vector<route_totals> totals;
  };

  nanos width_;
  std::size_t buckets_;
  bool started_ = false;
  // The counters before the oldest bucket kept, then the last sample of each bucket that has
  // one, oldest first, all within the last buckets_ buckets.
  std::vector<route_totals> baseline_;
  std::deque<sample> samples_;
};

}  // namespace ratewall
