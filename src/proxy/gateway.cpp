#include "ratewall/proxy/gateway.hpp"

#include <atomic>
#include <cstdio>

#include "ratewall/core/log.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "ratewall/tls/server_tls.hpp"
#include "ratewall/tls/upstream_tls.hpp"

namespace ratewall {

namespace {

bool same_store_settings(const store_config& a, const store_config& b) {
  const redis_config& x = a.redis;
  const redis_config& y = b.redis;
  auto same_seeds = [&] {
    if (x.seeds.size() != y.seeds.size()) {
      return false;
    }
    for (std::size_t i = 0; i < x.seeds.size(); ++i) {
      if (x.seeds[i].host != y.seeds[i].host || x.seeds[i].port != y.seeds[i].port) {
        return false;
      }
    }
    return true;
  };
  if (a.type != b.type || a.max_keys != b.max_keys || a.on_full != b.on_full) {
    return false;
  }
  if (a.type == store_type::memory) {
    return true;
  }
  return x.url == y.url && x.cluster == y.cluster && same_seeds() &&
         x.password_env == y.password_env && x.timeout == y.timeout &&
         x.connect_timeout == y.connect_timeout && x.instances == y.instances &&
         x.breaker_failures == y.breaker_failures && x.breaker_cooldown == y.breaker_cooldown &&
         x.slot_ttl == y.slot_ttl && x.denied_cache == y.denied_cache;
}

// The previous configuration's store when its settings did not change (limits that did not
// change keep their state, see limiter), else a new one of the configured type.
std::shared_ptr<store> make_store(const config& cfg, const std::string& hash_key,
                                  const gateway* previous) {
  if (previous != nullptr && same_store_settings(previous->cfg().store, cfg.store)) {
    if (cfg.store.type == store_type::redis) {
      redis_store::validate(cfg);  // the new limits must fit the kept store's script too
    }
    return previous->limits().shared_store();
  }
  if (cfg.store.type == store_type::redis) {
    return std::make_shared<redis_store>(cfg, hash_key);
  }
  return std::make_shared<memory_store>(cfg);
}

// The store's own numbers on /metrics: tracked rows for the memory store, calls, failures,
// breakers and cache hits for Redis. A store kept across a reload is registered by each
// gateway that uses it; the registry writes a family once, so the numbers appear once.
metrics_provider_handle register_store_metrics(const std::shared_ptr<store>& s) {
  std::weak_ptr<store> weak = s;
  return process_metrics().add_provider([weak](metric_writer& out) {
    auto held = weak.lock();
    if (!held) {
      return;
    }
    if (auto* memory = dynamic_cast<memory_store*>(held.get())) {
      out.gauge("ratewall_tracked_subjects", "Rows of limit state held (subject x limit).",
                static_cast<double>(memory->size()));
      const memory_store::full_counts full = memory->full_stats();
      out.family("ratewall_store_evictions_total",
                 "Rows evicted at store.max_keys to make room for new subjects.",
                 metric_type::counter);
      out.sample(full.evictions);
      out.family("ratewall_store_full_total",
                 "Requests that found the store full with nothing to evict (store.on_full).",
                 metric_type::counter);
      out.sample(full.full);
      return;
    }
    auto* redis = dynamic_cast<redis_store*>(held.get());
    if (redis == nullptr) {
      return;
    }
    const redis_metrics m = redis->metrics();
    auto counter = [&](std::string_view name, std::string_view help, std::uint64_t value) {
      out.family(name, help, metric_type::counter);
      out.sample(value);
    };
    counter("ratewall_store_calls_total", "Redis round trips sent.", m.calls);
    counter("ratewall_store_errors_total", "Limit checks Redis did not answer.", m.errors);
    counter("ratewall_store_timeouts_total", "Redis calls that passed their deadline.", m.timeouts);
    counter("ratewall_store_fallback_decisions_total", "Decisions made by on_store_error.",
            m.fallback_decisions);
    counter("ratewall_store_breaker_opened_total", "Times a Redis circuit breaker opened.",
            m.breaker_opened);
    counter("ratewall_store_cache_hits_total", "Denials answered by the denied-until cache.",
            m.cache_hits);
    counter("ratewall_store_cache_evictions_total",
            "Live denied-until entries evicted to make room (the cache has a fixed capacity).",
            m.cache_evictions);
    out.gauge("ratewall_store_cache_entries", "Entries in the denied-until cache now.",
              static_cast<double>(m.cache_entries));
    counter("ratewall_store_redirects_total", "Cluster MOVED and ASK redirects followed.",
            m.redirects);
    counter("ratewall_store_script_loads_total", "Scripts loaded again after NOSCRIPT.",
            m.script_loads);
    out.gauge("ratewall_store_breakers_open", "Redis nodes whose breaker is open or half-open.",
              static_cast<double>(m.breakers_open));
  });
}

std::shared_ptr<const server_tls> load_server_tls(const config& cfg) {
  if (!cfg.server.tls) {
    return nullptr;
  }
  return server_tls::load(*cfg.server.tls, cfg.server.http2.enabled, cfg.source);
}

std::map<std::string, std::shared_ptr<const upstream_tls>, std::less<>> load_upstream_tls(
    const config& cfg) {
  std::map<std::string, std::shared_ptr<const upstream_tls>, std::less<>> out;
  for (const auto& u : cfg.upstreams) {
    if (u.https) {
      out.emplace(u.name, upstream_tls::load(u, cfg.source));
    }
  }
  return out;
}

std::map<std::string, std::shared_ptr<const std::vector<target_addresses>>, std::less<>>
resolve_upstreams(const config& cfg) {
  std::map<std::string, std::shared_ptr<const std::vector<target_addresses>>, std::less<>> out;
  for (const auto& u : cfg.upstreams) {
    out.emplace(u.name, std::make_shared<const std::vector<target_addresses>>(
                            resolve_targets(u, cfg.source)));
  }
  return out;
}

// A route's upstream exchanges so far, from the counters the exchange keeps: every response
// head, and the 502 and 504 the gateway answered for an upstream that refused, reset, closed or
// timed out (503, the gateway's own max_connections queue, is not the upstream's doing).
upstream_totals totals_of(const route_metrics& m, nanos unanswered) {
  upstream_totals t;
  const std::uint64_t failed = m.upstream_failures(502) + m.upstream_failures(504);
  for (unsigned c = 1; c <= 5; ++c) {
    t.exchanges += m.upstream_responses(c);
  }
  t.exchanges += failed;
  t.errors = m.upstream_responses(5) + failed;
  const latency_histogram& h = m.latency();
  for (std::size_t i = 0; i <= h.bounds().nanos.size(); ++i) {
    t.heads += h.bucket(i);
  }
  t.latency_ns = h.sum_nanos();
  // An exchange the upstream never answered took, for the latency target, as long as the
  // gateway would wait: a latency-only route whose upstream times out or is down must not read
  // as a fast one (its mean was of the few heads that came, or 0).
  t.heads += failed;
  t.latency_ns += failed * static_cast<std::uint64_t>(unanswered.count());
  return t;
}

// How long route `route`'s upstream may take to its response head.
nanos response_timeout_of(const config& cfg, const route_config& route) {
  const upstream_config* u = cfg.find_upstream(route.upstream);
  return u != nullptr ? u->response_timeout : upstream_config{}.response_timeout;
}

// identity.reject_limit: the previous configuration's buckets when its settings are the same.
std::shared_ptr<address_limiter> make_reject_limit(const identity_config& identity,
                                                   const gateway* previous) {
  if (previous != nullptr) {
    const identity_config& before = previous->cfg().identity;
    if (before.reject_rate.count == identity.reject_rate.count &&
        before.reject_rate.period == identity.reject_rate.period &&
        before.reject_burst == identity.reject_burst) {
      return previous->reject_limit_shared();
    }
  }
  return std::make_shared<address_limiter>(identity.reject_rate, identity.reject_burst);
}

// routes[].adaptive by route index: the previous configuration's object for a route of the same
// name that had one (its factor goes on), else a new one whose first window starts now.
std::vector<std::shared_ptr<adaptive_route>> make_adaptive(const config& cfg, const clock& clk,
                                                           const gateway* previous) {
  std::vector<std::shared_ptr<adaptive_route>> out(cfg.routes.size());
  for (std::size_t i = 0; i < cfg.routes.size(); ++i) {
    const route_config& route = cfg.routes[i];
    if (!route.adaptive) {
      continue;
    }
    if (previous != nullptr) {
      const auto& before = previous->cfg().routes;
      for (std::size_t j = 0; j < before.size(); ++j) {
        if (before[j].name == route.name && previous->adaptive(j)) {
          out[i] = previous->adaptive(j);
        }
      }
    }
    if (!out[i]) {
      out[i] = std::make_shared<adaptive_route>(
          route.name, *route.adaptive,
          totals_of(process_metrics().route(route.name), response_timeout_of(cfg, route)),
          clk.now());
    }
  }
  return out;
}

std::vector<std::shared_ptr<const adaptive_route>> read_only(
    const std::vector<std::shared_ptr<adaptive_route>>& routes) {
  return {routes.begin(), routes.end()};
}

// The gateway whose routes /metrics lists as adaptive: the newest one built whole. Gateways of
// older configurations live on while connections accepted under them do, and their routes may
// be gone or no longer adaptive. Only compared, never followed.
std::atomic<const void*> g_newest_adaptive{nullptr};

// ratewall_route_adaptive_factor, one sample per route with routes[].adaptive, written while
// `owner` (the gateway's adaptive_ member) is the newest.
metrics_provider_handle register_adaptive_metrics(
    const std::vector<std::shared_ptr<adaptive_route>>& routes) {
  std::vector<std::shared_ptr<const adaptive_route>> adaptive;
  for (const auto& r : routes) {
    if (r) {
      adaptive.push_back(r);
    }
  }
  if (adaptive.empty()) {
    return {};
  }
  const void* owner = &routes;
  return process_metrics().add_provider(
      [adaptive = std::move(adaptive), owner](metric_writer& out) {
        if (g_newest_adaptive.load(std::memory_order_acquire) != owner) {
          return;
        }
        out.family("ratewall_route_adaptive_factor",
                   "The factor every limit of the route is applied at (routes[].adaptive): 1 while "
                   "its upstream meets the targets, down to min_factor while it does not.",
                   metric_type::gauge);
        for (const auto& r : adaptive) {
          out.sample({{"route", r->route()}}, r->factor());
        }
      });
}

std::string format_ms(nanos d) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f ms", std::chrono::duration<double, std::milli>(d).count());
  return text;
}

std::string format_fraction(double v, const char* format) {
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

}  // namespace

gateway::gateway(config cfg, const clock& clk, std::string hash_key, const gateway* previous,
                 std::shared_ptr<key_registry> keys, std::shared_ptr<const server_tls> kept_tls)
    : cfg_(std::move(cfg)),
      clock_(clk),
      tls_(kept_tls ? std::move(kept_tls) : load_server_tls(cfg_)),
      upstream_tls_(load_upstream_tls(cfg_)),
      addresses_(resolve_upstreams(cfg_)),
      router_(cfg_),
      keys_(keys                  ? std::move(keys)
            : previous != nullptr ? previous->keys_
                                  : std::make_shared<key_registry>(hash_key)),
      identity_(cfg_, hash_key, keys_),
      adaptive_(make_adaptive(cfg_, clk, previous)),
      limiter_(std::make_unique<limiter>(cfg_, clk, make_store(cfg_, hash_key, previous),
                                         read_only(adaptive_))),
      reject_limit_(make_reject_limit(cfg_.identity, previous)),
      store_metrics_(register_store_metrics(limiter_->shared_store())),
      route_metrics_(process_metrics().routes_for(cfg_)),
      adaptive_metrics_(register_adaptive_metrics(adaptive_)),
      decisions_(process_metrics(), cfg_),
      log_(previous != nullptr && keeps_access_log(previous->cfg().log, cfg_.log)
               ? previous->log()
               : std::make_shared<access_log>(cfg_.log, hash_key, cfg_.source)) {
  for (const auto& u : cfg_.upstreams) {
    std::shared_ptr<upstream_budget> budget;
    if (previous != nullptr) {
      if (auto it = previous->budgets_.find(u.name); it != previous->budgets_.end()) {
        budget = it->second;
        budget->set_capacity(u.max_connections);
      }
    }
    budgets_.emplace(
        u.name, budget ? std::move(budget) : std::make_shared<upstream_budget>(u.max_connections));
  }
  // Last, once nothing can refuse the configuration: a store kept from the previous one counts
  // over this configuration's window from now on (a new store already does).
  limiter_->backing_store().set_top_window(cfg_.admin.top_window, clk.now());
  keys_->set_seed(cfg_.api_keys);
  for (std::size_t i = 0; i < adaptive_.size(); ++i) {
    if (adaptive_[i]) {
      // Kept ones take the new settings; new bounds may move the factor at once.
      if (const auto moved = adaptive_[i]->reconfigure(*cfg_.routes[i].adaptive)) {
        log_info("route " + cfg_.routes[i].name + ": adaptive factor " +
                 format_fraction(moved->first, "%.2f") + " -> " +
                 format_fraction(moved->second, "%.2f") + " by the reload's min_factor");
      }
    }
  }
  g_newest_adaptive.store(&adaptive_, std::memory_order_release);
}

void gateway::tick_adaptive() const {
  const nanos now = clock_.now();
  for (std::size_t i = 0; i < adaptive_.size(); ++i) {
    if (!adaptive_[i]) {
      continue;
    }
    const auto c = adaptive_[i]->tick(
        now, totals_of(*route_metrics_[i], response_timeout_of(cfg_, cfg_.routes[i])));
    if (!c) {
      continue;
    }
    const adaptive_config& a = *cfg_.routes[i].adaptive;
    std::string why = "mean upstream latency " + format_ms(c->window.mean_latency);
    if (a.latency_target > nanos{0}) {
      why += " (target " + format_ms(a.latency_target) + ")";
    }
    why += ", error rate " + format_fraction(100 * c->window.error_rate, "%.1f%%");
    if (a.error_rate_target) {
      why += " (target " + format_fraction(100 * *a.error_rate_target, "%.1f%%") + ")";
    }
    log_info("route " + cfg_.routes[i].name + ": adaptive factor " +
             format_fraction(c->from, "%.2f") + " -> " + format_fraction(c->to, "%.2f") +
             ", limits now at " + format_fraction(100 * c->to, "%.0f%%") + " of configured; " +
             why + ", " + std::to_string(c->window.exchanges) + " exchanges in the window");
  }
}

}  // namespace ratewall
