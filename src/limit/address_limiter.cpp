#include "ratewall/limit/address_limiter.hpp"

#include <algorithm>
#include <functional>

namespace ratewall {

address_limiter::address_limiter(rate_spec rate, std::uint64_t burst, std::size_t max_addresses)
    : interval_(std::max<std::int64_t>(
          1, (rate.period.count() + static_cast<std::int64_t>(rate.count) - 1) /
                 static_cast<std::int64_t>(std::max<std::uint64_t>(rate.count, 1)))),
      tolerance_(interval_ * static_cast<std::int64_t>(std::max<std::uint64_t>(burst, 1))),
      burst_(std::max<std::uint64_t>(burst, 1)),
      max_per_shard_(std::max<std::size_t>(max_addresses / k_shards, 1)) {}

bool address_limiter::spent(std::string_view address, nanos now) {
  const std::uint64_t h = std::hash<std::string_view>{}(address);
  shard& s = shards_[h % k_shards];
  const std::int64_t t = now.count();
  std::lock_guard lock(s.mutex);
  auto it = s.tat.find(h);
  return it != s.tat.end() && std::max(it->second, t) + interval_ - t > tolerance_;
}

decision address_limiter::take(std::string_view address, nanos now) {
  const std::uint64_t h = std::hash<std::string_view>{}(address);
  shard& s = shards_[h % k_shards];
  const std::int64_t t = now.count();
  std::lock_guard lock(s.mutex);
  if (s.tat.size() >= max_per_shard_ && !s.tat.contains(h)) {
    std::erase_if(s.tat, [t](const auto& entry) { return entry.second <= t; });
    if (s.tat.size() >= max_per_shard_) {
      // Every bucket is in use: a flood of addresses. Forget half rather than grow.
      std::size_t drop = s.tat.size() / 2;
      for (auto it = s.tat.begin(); it != s.tat.end() && drop > 0; --drop) {
        it = s.tat.erase(it);
      }
    }
  }
  std::int64_t& tat = s.tat[h];
  const std::int64_t base = std::max(tat, t);
  const std::int64_t used = base + interval_ - t;
  decision d;
  d.limit = burst_;
  if (used <= tolerance_) {
    tat = base + interval_;
    d.remaining = static_cast<std::uint64_t>((tolerance_ - used) / interval_);
    d.reset_after = nanos{used};
    return d;
  }
  d.allowed = false;
  d.reset_after = nanos{base - t};
  d.retry_after = nanos{used - tolerance_};
  return d;
}

}  // namespace ratewall
