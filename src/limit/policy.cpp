#include "ratewall/limit/policy.hpp"

#include <cstdio>
#include <stdexcept>
#include <string>
#include <tuple>

namespace ratewall {

namespace {

// Every span the algorithms add to a clock reading stays below this (about 73 years), so
// `now + span` never overflows 64-bit nanoseconds, nor does a sliding window counter's look
// two windows ahead. Loaded configurations are well inside it (limit_bounds.hpp); hand-built
// ones are checked here.
constexpr std::int64_t k_max_span = std::int64_t{1} << 61;

[[noreturn]] void fail(const limit_config& limit, const std::string& what) {
  throw std::invalid_argument("limit '" + limit.name + "': " + what);
}

// Time per unit of a rate, rounded up so that the limiter never admits faster than configured.
std::int64_t interval_of(const limit_config& limit, const rate_spec& rate) {
  if (rate.count == 0 || rate.period.count() <= 0) {
    fail(limit, "rate must be at least 1 per a positive period");
  }
  if (rate.period.count() > k_max_span) {
    fail(limit, "rate period is too long");
  }
  const auto period = static_cast<std::uint64_t>(rate.period.count());
  const std::uint64_t interval = (period + rate.count - 1) / rate.count;
  return static_cast<std::int64_t>(interval);
}

}  // namespace

policy resolve_policy(const limit_config& limit, const limit_override* plan, bool route_shadow,
                      store_failure default_on_store_error) {
  rate_spec rate = limit.rate;
  std::uint64_t burst = limit.burst;
  std::uint64_t count = limit.limit;
  nanos window = limit.window;
  if (plan != nullptr) {
    rate = plan->rate.value_or(rate);
    burst = plan->burst.value_or(burst);
    count = plan->limit.value_or(count);
    window = plan->window.value_or(window);
  }

  policy p;
  p.algo = limit.algo;
  p.delay = limit.delay;
  p.shadow = limit.shadow || route_shadow;
  p.on_store_error = limit.on_store_error.value_or(default_on_store_error);

  switch (limit.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket: {
      const std::int64_t interval = interval_of(limit, rate);
      if (limit.algo == algorithm::token_bucket && burst == 0) {
        burst = rate.count;  // the documented default: one period's worth
      }
      // Leaky bucket: one request in service plus `burst` waiting.
      const std::uint64_t slots = limit.algo == algorithm::leaky_bucket ? burst + 1 : burst;
      if (burst > k_max_limit_count || slots > static_cast<std::uint64_t>(k_max_span / interval)) {
        fail(limit, "burst × (period / count) is too long");
      }
      p.limit = slots;
      p.interval = nanos{interval};
      p.tolerance = nanos{interval * static_cast<std::int64_t>(burst)};
      break;
    }
    case algorithm::fixed_window:
    case algorithm::sliding_window_log:
    case algorithm::sliding_window_counter:
      if (window.count() <= 0) {
        fail(limit, "window must be positive");
      }
      // The counter looks two windows ahead.
      if (window.count() > k_max_span / 2) {
        fail(limit, "window is too long");
      }
      if (count > k_max_limit_count) {
        fail(limit, "limit is too large");
      }
      if (limit.algo == algorithm::sliding_window_log && count > k_max_log_limit) {
        fail(limit, "sliding_window_log keeps one timestamp per request: limit must be at most " +
                        std::to_string(k_max_log_limit) + " (use sliding_window_counter)");
      }
      p.limit = count;
      p.window = window;
      break;
    case algorithm::concurrency:
      if (count > k_max_limit_count) {
        fail(limit, "limit is too large");
      }
      p.limit = count;
      break;
  }
  return p;
}

std::uint64_t max_admission_cost(const route_config& route) {
  if (route.cost_from_response) {
    return 1;
  }
  std::uint64_t most = route.cost;
  for (const auto& [method, cost] : route.method_cost) {
    most = std::max(most, cost);
  }
  return most;
}

std::uint64_t max_cost(const route_config& route) {
  return route.cost_from_response ? std::max(route.cost, route.cost_from_response->max)
                                  : max_admission_cost(route);
}

policy scale_policy(policy p, std::uint64_t num, std::uint64_t den, std::uint64_t least) {
  if (num == 0 || num >= den) {
    return p;
  }
  using wide = unsigned __int128;
  switch (p.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket: {
      const auto interval = static_cast<std::uint64_t>(p.interval.count());
      const std::uint64_t burst = interval == 0 ? 0 : p.tolerance.count() / interval;
      // A slower rate: each unit takes longer, rounded up.
      const wide longer = (wide{interval} * den + num - 1) / num;
      const auto scaled = static_cast<std::uint64_t>(
          std::min<wide>(longer, static_cast<std::uint64_t>(k_max_span)));
      std::uint64_t b = static_cast<std::uint64_t>(wide{burst} * num / den);
      // The units a full bucket holds: the burst (a leaky bucket's burst + 1), at least `least`
      // of them and a token bucket's 1, never more than it held.
      if (p.algo == algorithm::token_bucket) {
        b = std::max({b, std::min(least, burst), std::uint64_t{1}});
      } else if (least > 1) {
        b = std::max(b, std::min(least - 1, burst));
      }
      // Keep the products under the bounds resolve_policy enforces.
      if (scaled > 0) {
        b = std::min<std::uint64_t>(b, static_cast<std::uint64_t>(k_max_span) / scaled);
      }
      p.interval = nanos{static_cast<std::int64_t>(scaled)};
      p.tolerance = nanos{static_cast<std::int64_t>(b * scaled)};
      p.limit = p.algo == algorithm::leaky_bucket ? b + 1 : b;
      break;
    }
    default:
      if (p.limit > 0) {
        p.limit = std::max({static_cast<std::uint64_t>(wide{p.limit} * num / den),
                            std::min(least, p.limit), std::uint64_t{1}});
      }
      break;
  }
  return p;
}

namespace {

auto state_fields(const policy& p) {
  return std::tuple(p.algo, p.limit, p.interval.count(), p.tolerance.count(), p.window.count(),
                    p.delay);
}

}  // namespace

bool same_state_meaning(const policy& a, const policy& b) {
  return state_fields(a) == state_fields(b);
}

std::string limit_identity::key() const {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(signature & 0xffff'ffffu));
  return route + ":" + limit + ":" + hex;
}

void signature_builder::add_word(std::uint64_t v) {
  constexpr std::uint64_t k_prime = 0x100000001b3ull;
  for (int i = 0; i < 8; ++i) {
    hash_ ^= (v >> (8 * i)) & 0xff;
    hash_ *= k_prime;
  }
}

void signature_builder::add(const policy& p) {
  // Versioned: a change to what the fields mean must change every signature.
  add_word(1);
  std::apply([this](auto... field) { (add_word(static_cast<std::uint64_t>(field)), ...); },
             state_fields(p));
}

void signature_builder::add(std::string_view s) {
  add_word(s.size());
  for (unsigned char c : s) {
    add_word(c);
  }
}

}  // namespace ratewall
