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

#include "ratewall/core/clock.hpp"
#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

class store;

/// The store slots (store::bind_slot) of the concurrency units one request holds: one inline
/// (a route rarely has more than one concurrency limit), more on the heap.
class slot_list {
 public:
  slot_list() = default;
  slot_list(slot_list&& other) noexcept
      : size_(std::exchange(other.size_, 0)), first_(other.first_), more_(std::move(other.more_)) {}
  slot_list& operator=(slot_list&& other) noexcept {
    size_ = std::exchange(other.size_, 0);
    first_ = other.first_;
    more_ = std::move(other.more_);
    return *this;
  }

  void push_back(std::uint32_t slot);
  std::span<const std::uint32_t> view() const {
    if (size_ <= 1) {
      return {&first_, size_};
    }
    return {more_.get(), size_};
  }
  bool empty() const { return size_ == 0; }
  void clear() {
    size_ = 0;
    more_.reset();
  }

 private:
  std::uint32_t size_ = 0;
  std::uint32_t first_ = 0;
  std::unique_ptr<std::uint32_t[]> more_;  // every slot, once there are two or more
};

/// The concurrency units held by one admitted request. Releases them when destroyed (response
/// complete, client gone, upstream failed: whatever ends the request ends the lease), or
/// earlier through `release()`. Movable, not copyable; an empty lease holds nothing and is one
/// null pointer (every route_decision carries a lease; few hold units).
/// The store must outlive its leases; the configuration that admitted the request need not.
class lease {
 public:
  lease() = default;
  /// Units named by route index and limit mask: given back through store::release.
  lease(store& owner, std::string subject, std::uint32_t route, std::uint64_t limits)
      : units_(std::make_unique<units>(owner, std::move(subject), route, limits, slot_list{})) {}
  /// Units named by store slot: given back through store::release_slots, which finds them
  /// whichever configuration is current by then.
  lease(store& owner, std::string subject, slot_list slots)
      : units_(std::make_unique<units>(owner, std::move(subject), 0, 0, std::move(slots))) {}
  lease(lease&& other) noexcept = default;
  lease& operator=(lease&& other) noexcept {
    if (this != &other) {
      release();
      units_ = std::move(other.units_);
    }
    return *this;
  }
  lease(const lease&) = delete;
  lease& operator=(const lease&) = delete;
  ~lease() { release(); }

  /// Gives the units back now. Idempotent.
  void release() noexcept {
    if (units_) {
      give_back();
    }
  }
  bool held() const { return units_ != nullptr; }

 private:
  struct units {
    units(store& o, std::string s, std::uint32_t r, std::uint64_t l, slot_list sl)
        : owner(o), subject(std::move(s)), route(r), limits(l), slots(std::move(sl)) {}
    store& owner;
    std::string subject;
    std::uint32_t route;
    std::uint64_t limits;  // bit i: a unit of the route's limit i
    slot_list slots;       // or: one unit in each of these slots
  };

  void give_back() noexcept;

  std::unique_ptr<units> units_;
};

/// What a check does with the request's cost.
enum class charge_mode {
  check,  // decide, and charge `cost` only when every enforced limit allows
  // Decide as for a 1-unit request (cost must be 1) and charge nothing: the admission of a
  // route whose cost comes from the response (cost_from_response).
  peek,
  // Charge `cost` to every limit, shadow ones too, whatever they hold: the cost the upstream
  // reported, when the response has ended. The state may go past the limit (a bucket into
  // debt, a window count above its limit), at most k_max_debt_us beyond; sliding_window_log
  // and concurrency limits are not charged (the loader refuses them on such routes). Always
  // answers allowed.
  force,
};

/// One request as the store sees it: everything already resolved.
struct check_request {
  std::string_view subject;
  std::uint32_t route = 0;  // index into config::routes (of the limiter's configuration)
  // The route's limits, resolved for the subject's plan, each with its slot and key bound by
  // this store (policy::slot, policy::key); no two with the same slot.
  std::span<const policy> limits;
  std::uint64_t cost = 1;
  nanos now{0};  // the memory store's time; the Redis store uses its own
  charge_mode mode = charge_mode::check;
  // The most one request of the route asks for at admission (ratewall::max_admission_cost): a
  // limit scaled down for a fallback holds at least this much.
  std::uint64_t max_cost = 1;
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
  // Denied because the store was full and nothing could be evicted (memory store, on_full:
  // deny): not the subject's limit but the store's capacity, so the gateway answers 503 with
  // Retry-After (headline.retry_after) rather than 429.
  bool store_full = false;
  lease slot;  // concurrency slots; keep until the request is over
};

struct denied_subject {
  std::string subject;
  std::uint64_t denied = 0;  // enforced denials, all routes, in the last admin.top_window
};

/// What a store can say about itself without I/O, for the admin dashboard.
struct store_status {
  std::string kind;             // "memory" or "redis"
  std::uint64_t rows = 0;       // memory: (subject, limit) rows held
  std::uint64_t evictions = 0;  // memory: rows evicted at store.max_keys
  std::uint64_t full = 0;       // memory: requests that found the store full (store.on_full)
  std::uint64_t errors = 0;     // redis: limit checks Redis did not answer
  std::uint64_t fallback_decisions = 0;  // redis: decisions made by on_store_error
  // redis: each node by address, with its circuit breaker: "closed", "open" or "half_open".
  std::vector<std::pair<std::string, std::string>> breakers;
};

/// Where limit state lives: memory (memory_store) or Redis. A route's limits for one subject
/// are decided atomically: all allow and all are charged, or nothing is charged; shadow limits
/// are charged when they themselves allow, and never deny. Implementations are thread-safe.
///
/// A store may outlive configurations: on a reload the new limiter binds its limits to the
/// same store (bind_slot), limits with unchanged identities get the slots they had, and so
/// the state they had, and the old limiter unbinds its slots when it is destroyed.
class store {
 public:
  virtual ~store() = default;

  /// The decision if it can be made without waiting (memory store: always), else nullopt and
  /// the caller co_awaits `check`. `req`'s views need only live for the call.
  virtual std::optional<route_decision> try_check(const check_request& req) = 0;
  /// The decision, possibly after I/O. `req` and what it views must outlive the await.
  virtual boost::asio::awaitable<route_decision> check(const check_request& req) = 0;

  /// The slot holding the state of limit `id` (of algorithm `algo`), with one more reference
  /// on it: the slot it already has while any reference is left, a fresh one otherwise. Called
  /// once per limit when a configuration is loaded (not on the request path). The default,
  /// for stores that name state otherwise: k_no_slot.
  virtual std::uint32_t bind_slot(const limit_identity& id, algorithm algo) { return k_no_slot; }
  /// Drops a reference taken by bind_slot. A slot without references is freed, with its state,
  /// once no request holds concurrency units in it. Never throws.
  virtual void unbind_slot(std::uint32_t slot) noexcept {}

  /// Gives back concurrency units (bit i: limit i of `route`); called by a lease made with a
  /// route. Never blocks. Stores whose leases name slots use release_slots instead.
  virtual void release(std::string_view subject, std::uint32_t route,
                       std::uint64_t limits) noexcept {}
  /// Gives back one concurrency unit in each of `slots`; called by a lease made with slots.
  /// Never blocks.
  virtual void release_slots(std::string_view subject,
                             std::span<const std::uint32_t> slots) noexcept {}

  // Admin operations. The views must outlive the await.

  /// Counters and states read from memory, never blocking on I/O. Thread-safe.
  virtual store_status status() const = 0;

  /// What each limit of the route holds for `subject` now: remaining, reset_after, and for a
  /// 1-unit request allowed / retry_after. Nothing is charged.
  virtual boost::asio::awaitable<std::vector<decision>> status(std::string_view subject,
                                                               std::uint32_t route,
                                                               std::span<const policy> limits,
                                                               nanos now) = 0;
  /// Forgets the subject's state on one route or all; requests in flight keep their
  /// concurrency units. Returns the number of entries cleared. (A store shared across
  /// configurations cannot tell routes by index: the limiter calls reset_limits.)
  virtual boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                                    std::optional<std::uint32_t> route) = 0;
  /// Forgets the subject's state in the given limits of `route` (policies as bound to this
  /// store). Default: reset(subject, route).
  virtual boost::asio::awaitable<std::size_t> reset_limits(std::string_view subject,
                                                           std::uint32_t route,
                                                           std::span<const policy> limits);
  virtual boost::asio::awaitable<std::size_t> reset_all() = 0;
  /// The `n` subjects with the most denials in the window that ends at `now` (see
  /// set_top_window), most first. Denials are counted apart from limit state (recent_denials):
  /// a subject stays listed after its state expired, was swept or was reset.
  virtual boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n,
                                                                         nanos now) = 0;
  /// The window top_denied counts over (admin.top_window); a store starts with its
  /// configuration's. Counts carry over (recent_denials::set_window). Not on the request path.
  virtual void set_top_window(nanos window, nanos now) = 0;

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
