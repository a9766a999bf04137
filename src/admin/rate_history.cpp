#include "ratewall/admin/rate_history.hpp"

#include <stdexcept>
#include <utility>

namespace ratewall {

namespace {

// The route's totals in a sample: where the previous lookup found them first (the registry
// lists routes in the same order each time), else by a search.
const route_totals* find(const std::vector<route_totals>& totals, std::string_view route,
                         std::size_t& hint) {
  if (hint < totals.size() && totals[hint].route == route) {
    return &totals[hint];
  }
  for (std::size_t i = 0; i < totals.size(); ++i) {
    if (totals[i].route == route) {
      hint = i;
      return &totals[i];
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
  if (edges_.empty() || edges_.back().bucket != bucket) {
    edges_.push_back(sample{bucket, now, totals});
  }
  latest_ = sample{bucket, now, std::move(totals)};
  index_.clear();
  for (std::size_t i = 0; i < latest_.totals.size(); ++i) {
    index_.emplace(latest_.totals[i].route, i);
  }
  // The oldest edge still needed is the last one at or before the window's first bucket.
  const auto first_kept = bucket - static_cast<std::int64_t>(buckets_) + 1;
  while (edges_.size() > 1 && edges_[1].bucket <= first_kept) {
    edges_.pop_front();
  }
}

nanos rate_history::filling() const {
  return edges_.empty() ? nanos{0} : latest_.time - edges_.back().time;
}

std::vector<bucket_counts> rate_history::counts(std::string_view route) const {
  std::vector<bucket_counts> out(buckets_);
  if (edges_.empty()) {
    return out;
  }
  const auto first = latest_.bucket - static_cast<std::int64_t>(buckets_) + 1;
  const auto known = index_.find(route);
  std::size_t hint = known != index_.end() ? known->second : 0;
  const route_totals* before = find(edges_.front().totals, route, hint);
  // Between two edges: the bucket before the later one.
  for (std::size_t i = 1; i < edges_.size(); ++i) {
    const route_totals* now = find(edges_[i].totals, route, hint);
    const std::int64_t bucket = edges_[i].bucket - 1;
    if (bucket >= first) {
      out[static_cast<std::size_t>(bucket - first)] = difference(now, before);
    }
    if (now != nullptr) {
      before = now;
    }
  }
  out.back() = difference(find(latest_.totals, route, hint), before);
  return out;
}

}  // namespace ratewall
