#pragma once

// Bounds the connections in use towards one upstream for the whole process
// (upstreams.*.max_connections), as HAProxy's server maxconn with its queue and nginx's
// max_conns do: a request that finds the bound reached waits in a first-come queue for up to
// queue_timeout, then is answered 503. Idle keep-alive connections hold no unit; they are
// bounded on their own by max_idle.

#include <atomic>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

#include "ratewall/core/clock.hpp"

namespace ratewall {

class upstream_budget;

/// One unit of an upstream_budget, given back when destroyed (or reset). Movable.
class budget_unit {
 public:
  budget_unit() = default;
  budget_unit(budget_unit&& other) noexcept : budget_(std::move(other.budget_)) {}
  budget_unit& operator=(budget_unit&& other) noexcept;
  budget_unit(const budget_unit&) = delete;
  budget_unit& operator=(const budget_unit&) = delete;
  ~budget_unit() { reset(); }

  explicit operator bool() const { return budget_ != nullptr; }
  void reset() noexcept;

 private:
  friend class upstream_budget;
  explicit budget_unit(std::shared_ptr<upstream_budget> b) : budget_(std::move(b)) {}
  std::shared_ptr<upstream_budget> budget_;
};

/// Ends a queued take() early, from the waiter's own thread (its client hung up): take() then
/// returns empty, unless a unit was handed over first. Does nothing when nothing waits.
class budget_wait {
 public:
  void cancel() {
    if (cancel_) {
      cancel_();
    }
  }

 private:
  friend class upstream_budget;
  std::function<void()> cancel_;  // set while queued
};

/// Thread-safe: the workers of a process share one budget per upstream name, kept across
/// reloads (gateway). With no bound (capacity 0) taking and giving back a unit is one atomic
/// add each.
class upstream_budget : public std::enable_shared_from_this<upstream_budget> {
 public:
  explicit upstream_budget(std::uint64_t capacity) : capacity_(capacity) {}

  /// A reload may change the bound; units already taken stay taken, and waiters are admitted
  /// as far as the new bound allows.
  void set_capacity(std::uint64_t capacity);

  /// A unit at once, when one is free and nobody is queued for one; else empty. What take()
  /// does first, without a coroutine: the common case costs no frame.
  budget_unit try_take();

  /// A unit: at once if one is free, else the first one given back within `timeout` (waiting on
  /// `ex`, the caller's thread). Empty when none came in time, or when `wait` was cancelled.
  boost::asio::awaitable<budget_unit> take(boost::asio::any_io_executor ex, nanos timeout,
                                           budget_wait* wait = nullptr);

  std::uint64_t in_use() const { return in_use_.load(); }
  std::uint64_t capacity() const { return capacity_.load(); }
  std::size_t waiting() const;

 private:
  friend class budget_unit;
  struct waiter;

  void give_back() noexcept;
  bool has_room() const;
  /// Hands free units to waiters, oldest first. Called with mutex_ held.
  void admit_waiters();

  mutable std::mutex mutex_;             // waiters_, and changes of capacity_
  std::atomic<std::uint64_t> capacity_;  // 0: no bound
  std::atomic<std::uint64_t> in_use_{0};
  std::atomic<bool> queued_{false};  // waiters_ is not empty: give_back must look
  std::deque<std::shared_ptr<waiter>> waiters_;
};

}  // namespace ratewall
