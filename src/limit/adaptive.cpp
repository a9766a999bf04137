#include "ratewall/limit/adaptive.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

namespace ratewall {

adaptive_window adaptive_window::between(const upstream_totals& from, const upstream_totals& to) {
  // Counters only grow; a reading that went back (it cannot) reads as an empty window.
  const auto diff = [](std::uint64_t a, std::uint64_t b) { return b > a ? b - a : 0; };
  adaptive_window w;
  w.exchanges = diff(from.exchanges, to.exchanges);
  w.errors = std::min(diff(from.errors, to.errors), w.exchanges);
  const std::uint64_t heads = diff(from.heads, to.heads);
  if (heads > 0) {
    w.mean_latency = nanos{static_cast<std::int64_t>(diff(from.latency_ns, to.latency_ns) / heads)};
  }
  if (w.exchanges > 0) {
    w.error_rate = static_cast<double>(w.errors) / static_cast<double>(w.exchanges);
  }
  return w;
}

adaptive_controller::adaptive_controller(const adaptive_config& cfg, double factor) : cfg_(cfg) {
  factor_ = std::clamp(factor, cfg_.min_factor, 1.0);
}

adaptive_controller::verdict adaptive_controller::judge(const adaptive_window& w) const {
  if (w.exchanges < k_adaptive_min_samples) {
    return verdict::too_few;
  }
  const bool slow = cfg_.latency_target > nanos{0} && w.mean_latency > cfg_.latency_target;
  const bool failing = cfg_.error_rate_target && w.error_rate > *cfg_.error_rate_target;
  return slow || failing ? verdict::over : verdict::under;
}

double adaptive_controller::update(const adaptive_window& w) {
  switch (judge(w)) {
    case verdict::over:
      factor_ = std::max(factor_ * k_decrease, cfg_.min_factor);
      break;
    case verdict::under:
      // Rounded to a millionth, so that ten steps up from a half land on 1 exactly.
      factor_ = std::min(std::round((factor_ + k_increase) * k_factor_one) / k_factor_one, 1.0);
      break;
    case verdict::too_few:
      break;
  }
  return factor_;
}

void adaptive_controller::reconfigure(const adaptive_config& cfg) {
  cfg_ = cfg;
  factor_ = std::clamp(factor_, cfg_.min_factor, 1.0);
}

adaptive_route::adaptive_route(std::string route, const adaptive_config& cfg,
                               const upstream_totals& totals, nanos now)
    : route_(std::move(route)), controller_(cfg), window_start_(now), start_(totals) {}

void adaptive_route::publish(double factor) {
  const auto ppm = static_cast<std::uint32_t>(std::llround(factor * k_factor_one));
  factor_ppm_.store(std::clamp<std::uint32_t>(ppm, 1, k_factor_one), std::memory_order_relaxed);
}

std::optional<adaptive_route::change> adaptive_route::tick(nanos now,
                                                           const upstream_totals& totals) {
  std::lock_guard lock(mutex_);
  if (now - window_start_ < controller_.config().window) {
    return std::nullopt;
  }
  adaptive_window w = adaptive_window::between(start_, totals);
  if (controller_.judge(w) == adaptive_controller::verdict::too_few) {
    // Too few to tell: the window goes on until it has enough. Else a factor low enough to
    // keep a quiet route under k_adaptive_min_samples a window could never recover; an idle
    // route keeps its factor. A mark a window apart, to judge by the recent exchanges later.
    if (marks_.empty() || now - marks_.back().at >= controller_.config().window) {
      if (marks_.size() == k_adaptive_max_marks) {
        marks_.pop_front();
      }
      marks_.push_back({now, totals});
    }
    return std::nullopt;
  }
  // Extended: judged by the latest stretch that has enough exchanges, not by all of them (a
  // slow response hours ago says nothing of the upstream now).
  for (auto mark = marks_.rbegin(); mark != marks_.rend(); ++mark) {
    const adaptive_window recent = adaptive_window::between(mark->totals, totals);
    if (controller_.judge(recent) != adaptive_controller::verdict::too_few) {
      w = recent;
      break;
    }
  }
  marks_.clear();
  const double factor = controller_.update(w);
  publish(factor);
  window_start_ = now;
  start_ = totals;
  last_ = w;
  ++windows_;
  if (std::abs(factor - reported_) <= 0.1 * reported_) {
    return std::nullopt;
  }
  change c{reported_, factor, w};
  reported_ = factor;
  return c;
}

std::optional<std::pair<double, double>> adaptive_route::reconfigure(const adaptive_config& cfg) {
  std::lock_guard lock(mutex_);
  const double before = controller_.factor();
  controller_.reconfigure(cfg);
  publish(controller_.factor());
  if (controller_.factor() == before) {
    return std::nullopt;
  }
  reported_ = controller_.factor();
  return std::pair{before, controller_.factor()};
}

adaptive_route::status adaptive_route::read() const {
  std::lock_guard lock(mutex_);
  return {controller_.factor(), controller_.config(), last_, windows_};
}

}  // namespace ratewall
