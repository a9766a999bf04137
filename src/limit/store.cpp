#include "ratewall/limit/store.hpp"

#include <algorithm>

namespace ratewall {

lease::lease(lease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)),
      subject_(std::move(other.subject_)),
      route_(other.route_),
      limits_(std::exchange(other.limits_, 0)) {}

lease& lease::operator=(lease&& other) noexcept {
  if (this != &other) {
    release();
    owner_ = std::exchange(other.owner_, nullptr);
    subject_ = std::move(other.subject_);
    route_ = other.route_;
    limits_ = std::exchange(other.limits_, 0);
  }
  return *this;
}

void lease::release() noexcept {
  if (owner_ == nullptr) {
    return;
  }
  std::exchange(owner_, nullptr)->release(subject_, route_, std::exchange(limits_, 0));
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
