#pragma once

// Per-route request counts over the last minutes, for the dashboard (GET /dashboard). The
// cumulative counters of /metrics (metrics_registry::totals_by_route) are sampled into a ring
// of fixed-width buckets: the request path pays nothing, and the counts are those /metrics
// reports, split by time. The first sample taken in a bucket is its edge: a bucket counts from
// its edge to the next bucket's, and the last one, still filling, from its edge to the latest
// sample. The admin samples just after each bucket starts (a timer on the boundaries), so a
// bucket's count is what came in during those width seconds; a bucket with no edge of its own
// (the admin stalled) counts zero and the bucket before the next edge holds its requests.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string_view>
#include <unordered_map>
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
  /// The time the last bucket's count covers: from its edge to the latest record.
  nanos filling() const;
  /// When the next bucket starts, after `now`.
  nanos next_edge(nanos now) const { return (now / width_ + 1) * width_; }

 private:
  struct sample {
    std::int64_t bucket = 0;  // time / width_
    nanos time{0};
    std::vector<route_totals> totals;
  };

  nanos width_;
  std::size_t buckets_;
  // The first sample of each bucket that has one, oldest first: the oldest is at or before
  // the window's first bucket (the baseline of the others).
  std::deque<sample> edges_;
  sample latest_;
  // Where each route is in latest_.totals: a lookup's first guess in every sample (the
  // registry lists routes in the same order each time), so that reading every route costs
  // time linear in their number, not its square.
  std::unordered_map<std::string_view, std::size_t> index_;
};

}  // namespace ratewall
