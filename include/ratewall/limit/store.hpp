#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/awaitable.hpp>

#include "ratewall/core/clock.hpp"
#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

class store;

/// The concurrency slots held by one admitted request. Releases them when destroyed (response
/// complete, client gone, upstream failed: whatever ends the request ends the lease), or
/// earlier through `release()`. Movable, not copyable; an empty lease holds nothing.
/// The store must outlive its leases.
class lease {
 public:
  lease() = default;
  lease(store& owner, std::string subject, std::uint32_t route, std::uint64_t limits)
      : owner_(&owner), subject_(std::move(subject)), route_(route), limits_(limits) {}
  lease(lease&& other) noexcept;
  lease& operator=(lease&& other) noexcept;
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  ~lease() { release(); }

  /// Gives the slots back now. Idempotent.
  void release() noexcept;
  bool held() const { return owner_ != nullptr; }

 private:
  store* owner_ = nullptr;
  std::string subject_;
  std::uint32_t route_ = 0;
  std::uint64_t limits_ = 0;  // bit i: a slot of the route's limit i
};

/// One request as the store sees it: everything already resolved.
struct check_request {
  std::string_view subject;
  std::uint32_t route = 0;         // index into config::routes
  std::span<const policy> limits;  // the route's limits, resolved for the subject's plan
  std::uint64_t cost = 1;
  nanos now{0};  // the memory store's time; the Redis store uses its own
};

/// The answer for a whole route: allowed only if every enforced limit allows.
struct route_decision {
  bool allowed = true;
  bool has_limits = false;  // the route has an enforced limit: send the X-RateLimit-* headers
  // The limit the headers report. Denied: the denying limit with the longest retry_after (the
  // request passes no earlier than that), then the lowest remaining. Allowed: the lowest
  // remaining, then the longest reset_after.
  decision headline;
  std::uint32_t limit_index = 0;  // index of `headline` in the route's limits
  nanos delay{0};                 // hold an allowed request this long first (leaky bucket delay)
  bool shadow_denied = false;     // a shadow limit would have denied (log it; nothing else)
  std::uint32_t shadow_limit_index = 0;
  bool untracked = false;  // the store was full: decided as for a new subject, not recorded
  lease slot;              // concurrency slots; keep until the request is over
};

struct denied_subject {
  std::string subject;
  std::uint64_t denied = 0;  // enforced denials, all routes, while its state is tracked
};

/// Where limit state lives: memory (memory_store) or Redis. A route's limits for one subject
/// are decided atomically: all allow and all are charged, or nothing is charged; shadow limits
/// are charged when they themselves allow, and never deny. Implementations are thread-safe.
class store {
 public:
  virtual ~store() = default;

  /// The decision if it can be made without waiting (memory store: always), else nullopt and
  /// the caller co_awaits `check`. `req`'s views need only live for the call.
  virtual std::optional<route_decision> try_check(const check_request& req) = 0;
  /// The decision, possibly after I/O. `req` and what it views must outlive the await.
  virtual boost::asio::awaitable<route_decision> check(const check_request& req) = 0;

  /// Gives back concurrency slots (bit i: limit i of `route`); called by `lease`. Never blocks.
  virtual void release(std::string_view subject, std::uint32_t route,
                       std::uint64_t limits) noexcept = 0;

  // Admin operations. The views must outlive the await.

  /// What each limit of the route holds for `subject` now: remaining, reset_after, and for a
  /// 1-unit request allowed / retry_after. Nothing is charged.
  virtual boost::asio::awaitable<std::vector<decision>> status(std::string_view subject,
                                                               std::uint32_t route,
                                                               std::span<const policy> limits,
                                                               nanos now) = 0;
  /// Forgets the subject's state on one route or all; requests in flight keep their
  /// concurrency slots. Returns the number of (subject, route) entries cleared.
  virtual boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                                    std::optional<std::uint32_t> route) = 0;
  virtual boost::asio::awaitable<std::size_t> reset_all() = 0;
  /// The `n` subjects with the most denials, most first.
  virtual boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n) = 0;

  /// Drops state that has expired by `now` (it equals no state). The server calls it about
  /// once a second; returns the number of entries dropped. Stores with TTLs do nothing.
  virtual std::size_t sweep(nanos now) { return 0; }
};

/// Folds the per-limit decisions of one request into a route_decision; shared by the stores so
/// that they all pick the headline the same way.
class decision_fold {
 public:
  void add(std::uint32_t index, const decision& d, bool shadow);

  /// Every enforced limit allowed.
  bool allowed() const { return !denied_; }
  /// Limit `index` allowed on its own (shadow limits are charged only then).
  bool allowed(std::uint32_t index) const { return ((allowed_mask_ >> index) & 1) != 0; }

  route_decision finish() const;

 private:
  bool enforced_ = false;
  bool denied_ = false;
  bool shadow_denied_ = false;
  std::uint32_t headline_index_ = 0;
  std::uint32_t shadow_index_ = 0;
  std::uint64_t allowed_mask_ = 0;
  nanos delay_{0};
  decision headline_;
};

}  // namespace ratewall
