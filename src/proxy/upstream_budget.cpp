#include "ratewall/proxy/upstream_budget.hpp"

#include <algorithm>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "ratewall/core/use_tuple.hpp"

namespace ratewall {

namespace asio = boost::asio;

// A waiter lives on its own thread's executor; a unit handed to it from another thread is
// marked under the budget's mutex and its timer cancelled on its own executor (a timer is not
// thread-safe).
struct upstream_budget::waiter {
  explicit waiter(asio::any_io_executor ex) : timer(std::move(ex)) {}
  asio::steady_timer timer;
  bool granted = false;  // guarded by the budget's mutex
};

budget_unit& budget_unit::operator=(budget_unit&& other) noexcept {
  if (this != &other) {
    reset();
    budget_ = std::move(other.budget_);
  }
  return *this;
}

void budget_unit::reset() noexcept {
  if (budget_) {
    budget_->give_back();
    budget_.reset();
  }
}

void upstream_budget::set_capacity(std::uint64_t capacity) {
  std::lock_guard lock(mutex_);
  capacity_.store(capacity);
  admit_waiters();
}

std::size_t upstream_budget::waiting() const {
  std::lock_guard lock(mutex_);
  return waiters_.size();
}

bool upstream_budget::has_room() const {
  const std::uint64_t capacity = capacity_.load();
  return capacity == 0 || in_use_.load() < capacity;
}

budget_unit upstream_budget::try_take() {
  if (capacity_.load() == 0) {
    in_use_.fetch_add(1);
    return budget_unit(shared_from_this());
  }
  std::lock_guard lock(mutex_);
  // Nobody overtakes a waiter: a free unit goes to the queue first.
  if (waiters_.empty() && has_room()) {
    in_use_.fetch_add(1);
    return budget_unit(shared_from_this());
  }
  return budget_unit();
}

asio::awaitable<budget_unit> upstream_budget::take(asio::any_io_executor ex, nanos timeout,
                                                   budget_wait* wait) {
  if (budget_unit unit = try_take()) {
    co_return unit;
  }
  auto w = std::make_shared<waiter>(ex);
  {
    std::lock_guard lock(mutex_);
    // Looked at again under the lock: a unit may have been given back since try_take.
    if (waiters_.empty() && has_room()) {
      in_use_.fetch_add(1);
      co_return budget_unit(shared_from_this());
    }
    if (timeout <= nanos{0}) {
      co_return budget_unit();
    }
    waiters_.push_back(w);
    queued_.store(true);
    // A unit given back between the check above and the store was given back without the
    // mutex (give_back saw no queue): look again now that the queue is visible.
    admit_waiters();
    if (w->granted) {
      co_return budget_unit(shared_from_this());
    }
    w->timer.expires_after(timeout);
  }
  if (wait != nullptr) {
    wait->cancel_ = [w] { w->timer.cancel(); };
  }
  co_await w->timer.async_wait(use_tuple);
  if (wait != nullptr) {
    wait->cancel_ = nullptr;
  }
  std::lock_guard lock(mutex_);
  if (w->granted) {
    co_return budget_unit(shared_from_this());  // in_use_ was counted when it was granted
  }
  waiters_.erase(std::find(waiters_.begin(), waiters_.end(), w));
  queued_.store(!waiters_.empty());
  co_return budget_unit();
}

void upstream_budget::give_back() noexcept {
  // Sequentially consistent on both sides (here and in take): either this sees the queue, or
  // the waiter that queued sees this unit free.
  in_use_.fetch_sub(1);
  if (queued_.load()) {
    std::lock_guard lock(mutex_);
    admit_waiters();
  }
}

// Called with mutex_ held.
void upstream_budget::admit_waiters() {
  while (!waiters_.empty() && has_room()) {
    std::shared_ptr<waiter> w = std::move(waiters_.front());
    waiters_.pop_front();
    w->granted = true;
    in_use_.fetch_add(1);
    asio::post(w->timer.get_executor(), [w] { w->timer.cancel(); });
  }
  queued_.store(!waiters_.empty());
}

}  // namespace ratewall
