#include "ratewall/limit/store.hpp"

#include <algorithm>

namespace ratewall {

void slot_list::push_back(std::uint32_t slot) {
  if (size_ == 0) {
    first_ = slot;
    size_ = 1;
    return;
  }
  // Capacity is the next power of two: grow when full.
  if (size_ == 1 || (size_ & (size_ - 1)) == 0) {
    auto grown = std::make_unique<std::uint32_t[]>(std::size_t{size_} * 2);
    const std::span<const std::uint32_t> now = view();
    std::copy(now.begin(), now.end(), grown.get());
    more_ = std::move(grown);
  }
  more_[size_++] = slot;
}

void lease::give_back() noexcept {
  const std::unique_ptr<units> held = std::move(units_);
  if (!held->slots.empty()) {
    held->owner.release_slots(held->subject, held->slots.view());
    return;
  }
  held->owner.release(held->subject, held->route, held->limits);
}

boost::asio::awaitable<std::size_t> store::reset_limits(std::string_view subject,
                                                        std::uint32_t route,
                                                        std::span<const policy>) {
  co_return co_await reset(subject, route);
}

namespace {

// Whether `d` should replace `current` as the headline.
bool more_restrictive(const decision& d, const decision& current) {
  if (d.allowed != current.allowed) {
    return !d.allowed;
  }
  if (!d.allowed) {
    // The route passes only when its slowest denial clears.
    if (d.retry_after != current.retry_after) {
      return d.retry_after > current.retry_after;
    }
    return d.remaining < current.remaining;
  }
  if (d.remaining != current.remaining) {
    return d.remaining < current.remaining;
  }
  return d.reset_after > current.reset_after;
}

}  // namespace

void decision_fold::add(std::uint32_t index, const decision& d, bool shadow) {
  if (d.allowed) {
    allowed_mask_ |= std::uint64_t{1} << index;
  }
  if (shadow) {
    if (!d.allowed && !shadow_denied_) {
      shadow_denied_ = true;
      shadow_index_ = index;
    }
    return;
  }
  if (d.allowed) {
    delay_ = std::max(delay_, d.delay);
  } else {
    denied_ = true;
  }
  if (!enforced_ || more_restrictive(d, headline_)) {
    headline_ = d;
    headline_index_ = index;
  }
  enforced_ = true;
}

route_decision decision_fold::finish() const {
  route_decision r;
  r.allowed = !denied_;
  r.has_limits = enforced_;
  if (enforced_) {
    r.headline = headline_;
    r.limit_index = headline_index_;
  }
  r.delay = denied_ ? nanos{0} : delay_;
  r.shadow_denied = shadow_denied_;
  r.shadow_limit_index = shadow_index_;
  return r;
}

}  // namespace ratewall
