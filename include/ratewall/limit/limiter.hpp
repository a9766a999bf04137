#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/limit/adaptive.hpp"
#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"
#include "ratewall/limit/store.hpp"

namespace ratewall {

/// One request, as the session knows it after routing and identification.
struct limit_request {
  std::size_t route = 0;     // index into config::routes (the router's answer)
  std::string_view subject;  // who is limited (the identity's answer; keyed hash or IP)
  std::string_view plan;     // the subject's plan; empty or without overrides: the limit's own
  std::string_view method;   // the request method, for route_config::method_cost
};

/// The object the session asks. Built once per configuration from `const config&`: every
/// limit is resolved at construction for the default plan and for each plan that overrides
/// it, and bound to its slot in the store, so a request costs no lookups beyond comparing its
/// plan with the few plans that override something on its route. Reads the clock once per
/// request.
///
/// The store may be shared with the limiter of the previous configuration (a reload): limits
/// whose identity (limit_identity: route name, limit name, definition) did not change are bound
/// to the slots they had, so they keep their state, and both limiters decide on the same state
/// while requests on the old configuration finish. Each limiter unbinds its slots when it is
/// destroyed; the store frees those no configuration binds any more.
///
/// Usage (the session):
///   auto r = lim.try_check(req);          // memory store: always answers
///   if (!r) { r = co_await lim.check(req); }  // Redis store: waits for the reply
///   r->has_limits → X-RateLimit-* from r->headline; !r->allowed → 429, Retry-After from
///   r->headline.retry_after (k_never when impossible), or 503 when r->store_full (the store
///   had no room for the subject); r->delay > 0 → wait first;
///   keep r->slot alive until the request is over.
///
/// Thread-safe (the store is). The limiter must outlive the requests it decides; the store
/// must outlive every lease (a lease need not outlive its limiter: it names store slots).
class limiter {
 public:
  /// With a memory store of its own, sized by cfg.store. Throws std::invalid_argument
  /// "route 'r' [(plan 'p') ]limit 'l': ..." for limits that cannot run.
  limiter(const config& cfg, const clock& clk);
  /// With a store of the caller's choosing: Redis, a memory store with its own options, or the
  /// store of the previous configuration's limiter (shared_store()) to keep state on reload.
  /// `adaptive`, by route index (shorter, or null entries: routes without routes[].adaptive):
  /// every limit of the route is applied at its values × the route's factor (scale_policy) in
  /// checks, charges and status; its identity, and so its state, stays that of its values.
  limiter(const config& cfg, const clock& clk, std::shared_ptr<store> backing,
          std::vector<std::shared_ptr<const adaptive_route>> adaptive = {});
  /// Unbinds its slots from the store.
  ~limiter();

  limiter(const limiter&) = delete;
  limiter& operator=(const limiter&) = delete;

  /// The decision, or nullopt when the store must wait (then co_await `check`). Routes
  /// without limits answer {allowed, has_limits = false} without touching the store.
  std::optional<route_decision> try_check(const limit_request& req);
  /// The decision, waiting for the store when it must. `req`'s views must outlive the await.
  boost::asio::awaitable<route_decision> check(const limit_request& req);

  /// The cost of a request on `route`: method_cost[method] if listed (a HEAD's: GET's unless
  /// HEAD is listed), else the route's cost.
  std::uint64_t cost(std::size_t route, std::string_view method) const;

  /// Whether `route` charges the cost its responses report (route_config::cost_from_response).
  /// Then try_check and check only peek (charge_mode::peek: allowed iff a 1-unit request would
  /// be, nothing charged), and the session charges the reported cost through try_charge or
  /// charge when the response has ended.
  bool cost_from_response(std::size_t route) const;
  /// Charges `cost` to every limit of the route for the subject, past the limit if it must
  /// (charge_mode::force). nullopt when the store must wait: then co_await `charge`.
  std::optional<route_decision> try_charge(const limit_request& req, std::uint64_t cost);
  /// The same, waiting for the store when it must. `req`'s views must outlive the await.
  boost::asio::awaitable<route_decision> charge(const limit_request& req, std::uint64_t cost);
  /// The resolved limits of `route` for `plan`, in config order, with their slots and keys, at
  /// their configured values.
  std::span<const policy> policies(std::size_t route, std::string_view plan) const;
  /// The adaptive factor of `route` in parts per million (k_factor_one: none, or not lowered).
  std::uint32_t factor_ppm(std::size_t route) const;
  /// The route's limits for `plan` as they apply now: the configured ones, or copies scaled by
  /// the route's adaptive factor (kept in `scaled`, which must outlive the span's use).
  std::span<const policy> effective(std::size_t route, std::string_view plan,
                                    std::vector<policy>& scaled) const;
  /// The identity of limit `limit` of `route` (what its state is kept under).
  const limit_identity& identity(std::size_t route, std::size_t limit) const;

  // Admin operations (see store). Views must outlive the await.
  boost::asio::awaitable<std::vector<decision>> status(std::string_view subject, std::size_t route,
                                                       std::string_view plan);
  /// Forgets the subject's state on `route`, or on every route of this configuration; units in
  /// flight stay. Returns the number of routes on which the subject had state.
  boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                            std::optional<std::size_t> route = std::nullopt);
  boost::asio::awaitable<std::size_t> reset_all();
  /// The `n` subjects denied most in the store's top window (admin.top_window) up to now.
  boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n);
  /// Drops expired state; the server calls it about once a second.
  std::size_t sweep();

  store& backing_store() { return *store_; }
  /// To hand to the next configuration's limiter.
  const std::shared_ptr<store>& shared_store() const { return store_; }

 private:
  struct route_entry {
    std::uint64_t cost = 1;
    std::uint64_t max_cost = 1;  // max_admission_cost: no scaled limit holds less
    bool from_response = false;  // cost_from_response: checks peek, charges come later
    std::vector<std::pair<std::string, std::uint64_t>> method_cost;
    std::vector<policy> limits;  // default plan
    // Only plans that override a limit of this route, with all of the route's limits.
    std::vector<std::pair<std::string, std::vector<policy>>> plans;
    std::vector<limit_identity> identities;          // per limit
    std::shared_ptr<const adaptive_route> adaptive;  // null: the limits as configured
  };

  check_request make_request(const limit_request& req, std::vector<policy>& scaled) const;
  void bind_slots();

  const clock& clock_;
  std::vector<route_entry> routes_;
  std::shared_ptr<store> store_;
  std::vector<std::uint32_t> bound_;  // slots to unbind, one reference each
};

}  // namespace ratewall
