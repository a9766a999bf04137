#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/admin/metrics.hpp"
#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/http/router.hpp"
#include "ratewall/limit/address_limiter.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/proxy/upstream_addresses.hpp"
#include "ratewall/proxy/upstream_budget.hpp"

namespace ratewall {

class server_tls;
class upstream_tls;

/// Everything one configuration means at run time: the config itself, its router, identity
/// resolver and limiter. Built once per load (start-up or reload) and then shared, read-only,
/// by every worker thread; only the limiter's store changes, and it is thread-safe.
class gateway {
 public:
  /// `hash_key` keys the hash that names subjects (see identity_resolver). With `previous`
  /// (a reload), limiter state is carried over where the store settings allow it. Loads the
  /// TLS certificates (server.tls, https upstreams) first, from paths relative to cfg.source;
  /// throws config_error naming the file when one does not load. API keys are those of `keys`
  /// (the runtime's, which holds the run-time changes), else of `previous`, else a registry of
  /// its own; once nothing can refuse the configuration, its api_keys become their seed.
  /// `kept_tls`: the TLS listener's certificates as they are, not loaded again (a reload of a
  /// file that drops server.tls, whose listener serves on until the restart).
  gateway(config cfg, const clock& clk, std::string hash_key, const gateway* previous = nullptr,
          std::shared_ptr<key_registry> keys = nullptr,
          std::shared_ptr<const server_tls> kept_tls = nullptr);

  const config& cfg() const { return cfg_; }
  const router& routes() const { return router_; }
  const identity_resolver& identity() const { return identity_; }
  /// The API keys: the configuration's and those changed at run time (shared across reloads).
  const std::shared_ptr<key_registry>& keys() const { return keys_; }
  /// The 401s of unknown_api_key: reject, per client address (identity.reject_limit).
  address_limiter& reject_limit() const { return *reject_limit_; }
  std::shared_ptr<address_limiter> reject_limit_shared() const { return reject_limit_; }
  limiter& limits() const { return *limiter_; }
  /// routes[].adaptive of route `index`: its factor and controller (null: the route has none).
  /// A reload that keeps the route's name and its adaptive key keeps the object, and so the
  /// factor; new settings apply from the next window.
  const std::shared_ptr<adaptive_route>& adaptive(std::size_t index) const {
    return adaptive_[index];
  }
  /// Ends the adaptive windows that are due, moving the factors by what the routes' upstream
  /// counters showed, and logs each change of more than 10%. The server's housekeeping thread
  /// calls it a few times a second; thread-safe.
  void tick_adaptive() const;
  const clock& time() const { return clock_; }
  /// The metrics of route `index` (the same object for a route name across reloads).
  route_metrics& metrics(std::size_t index) const { return *route_metrics_[index]; }
  /// ratewall_requests_total's counters of route `index` for a client of `plan` (see
  /// decision_metrics::of; the same objects for the same names across reloads).
  std::span<decision_counters* const> decisions(std::size_t index, std::string_view plan) const {
    return decisions_.of(index, plan);
  }
  /// Where access log lines go (its sink may be off).
  const std::shared_ptr<access_log>& log() const { return log_; }
  /// The connections in use towards upstream `name` for the whole process: one object per name
  /// across reloads, so connections taken under the old configuration still count.
  const std::shared_ptr<upstream_budget>& budget(const std::string& name) const {
    return budgets_.at(name);
  }
  /// The TLS listener's certificates; null without server.tls. A connection keeps a copy for
  /// as long as it lives.
  std::shared_ptr<const server_tls> tls() const { return tls_; }
  /// The client TLS context of upstream `name`; null for an http upstream (or an unknown name).
  std::shared_ptr<const upstream_tls> upstream_tls_for(std::string_view name) const {
    auto it = upstream_tls_.find(name);
    return it == upstream_tls_.end() ? nullptr : it->second;
  }
  /// The addresses of upstream `name`'s targets, as this configuration's load found them.
  const std::shared_ptr<const std::vector<target_addresses>>& addresses(
      const std::string& name) const {
    return addresses_.at(name);
  }

 private:
  config cfg_;
  const clock& clock_;
  // Before everything else: a certificate that does not load refuses the configuration before
  // a store or metrics are made for it.
  std::shared_ptr<const server_tls> tls_;
  std::map<std::string, std::shared_ptr<const upstream_tls>, std::less<>> upstream_tls_;
  // And a target name that gives no address.
  std::map<std::string, std::shared_ptr<const std::vector<target_addresses>>, std::less<>>
      addresses_;
  router router_;
  std::shared_ptr<key_registry> keys_;
  identity_resolver identity_;
  std::vector<std::shared_ptr<adaptive_route>> adaptive_;  // by route index; before limiter_
  std::unique_ptr<limiter> limiter_;
  // The previous configuration's when identity.reject_rate and reject_burst did not change: a
  // reload does not give a client guessing keys a fresh budget.
  std::shared_ptr<address_limiter> reject_limit_;
  metrics_provider_handle store_metrics_;
  std::vector<route_metrics*> route_metrics_;
  metrics_provider_handle adaptive_metrics_;
  decision_metrics decisions_;
  std::shared_ptr<access_log> log_;
  std::map<std::string, std::shared_ptr<upstream_budget>, std::less<>> budgets_;
};

}  // namespace ratewall
