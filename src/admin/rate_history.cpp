#include "ratewall/admin/rate_history.hpp"

#include <stdexcept>
#include <utility>

namespace ratewall {

namespace {

const route_totals* find(const std::vector<route_totals>& totals, std::string_view route) {
  for (const route_totals& t : totals) {
    if (t.route == route) {
      return &t;
    }
  }
  return nullptr;
}

// Counters only grow, but a route that was not there before counts from zero.
std::uint64_t grown(std::uint64_t now, std::uint64_t before) {
  return now >= before ? now - before : 0;
}

bucket_counts difference(const route_totals* now, const route_totals* before) {
  if (now == nullptr) {
    return {};
  }
  const route_totals zero;
  const route_totals& b = before != nullptr ? *before : zero;
  auto decided = [&](request_decision d) { return grown(now->requests(d), b.requests(d)); };
  return bucket_counts{decided(request_decision::allowed), decided(request_decision::denied),
                       decided(request_decision::shadow_denied),
                       grown(now->upstream_responses, b.upstream_responses),
                       grown(now->upstream_failures, b.upstream_failures)};
}

}  // namespace

rate_history::rate_history(nanos bucket_width, std::size_t buckets)
    : width_(bucket_width), buckets_(buckets) {
  if (width_ <= nanos{0} || buckets_ == 0) {
    throw std::invalid_argument("rate_history: a bucket width and a number of buckets");
  }
}

void rate_history::record(nanos now, std::vector<route_totals> totals) {
  const std::int64_t bucket = now / width_;
  if (!started_) {
    started_ = true;
    baseline_ = totals;
  }
  if (!samples_.empty() && samples_.back().bucket == bucket) {
    samples_.back().totals = std::move(totals);
  } else {
    samples_.push_back(sample{bucket, std::move(totals)});
  }
  // Buckets that fell out of the window become the baseline of the ones left.
  const auto first_kept = bucket - static_cast<std::int64_t>(buckets_) + 1;
  while (samples_.front().bucket < first_kept) {
    baseline_ = std::move(samples_.front().totals);
    samples_.pop_front();
  }
}

std::vector<bucket_counts> rate_history::counts(std::string_view route) const {
  std::vector<bucket_counts> out(buckets_);
  if (samples_.empty()) {
    return out;
  }
  const auto first = samples_.back().bucket - static_cast<std::int64_t>(buckets_) + 1;
  const route_totals* before = find(baseline_, route);
  for (const sample& s : samples_) {
    const route_totals* now = find(s.totals, route);
    out[static_cast<std::size_t>(s.bucket - first)] = difference(now, before);
    if (now != nullptr) {
      before = now;
    }
  }
  return out;
}

}  // namespace ratewall
