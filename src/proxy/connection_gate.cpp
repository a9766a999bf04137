#include "ratewall/proxy/connection_gate.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace ratewall {

connection_ticket::connection_ticket(connection_ticket&& other) noexcept
    : gate_(other.gate_), address_(std::move(other.address_)) {
  other.gate_ = nullptr;
}

connection_ticket& connection_ticket::operator=(connection_ticket&& other) noexcept {
  if (this != &other) {
    if (gate_ != nullptr) {
      gate_->release(address_);
    }
    gate_ = other.gate_;
    address_ = std::move(other.address_);
    other.gate_ = nullptr;
  }
  return *this;
}

connection_ticket::~connection_ticket() {
  if (gate_ != nullptr) {
    gate_->release(address_);
  }
}

connection_gate::verdict connection_gate::admit(const std::string& address, std::uint64_t max_total,
                                                std::uint64_t max_per_client, bool force,
                                                connection_ticket& out) {
  if (max_per_client > 0) {
    std::lock_guard lock(mutex_);
    auto& count = per_client_[address];
    if (count >= max_per_client) {
      return verdict::over_client;
    }
    if (!force && open_.load(std::memory_order_relaxed) >= max_total) {
      if (count == 0) {
        per_client_.erase(address);
      }
      return verdict::over_total;
    }
    ++count;
    out.address_ = address;
  } else if (!force && open_.load(std::memory_order_relaxed) >= max_total) {
    return verdict::over_total;
  }
  // Two acceptors may both pass the check at the cap: the cap may be passed by one connection
  // per worker thread for a moment, never more.
  open_.fetch_add(1, std::memory_order_relaxed);
  out.gate_ = this;
  return verdict::admitted;
}

void connection_gate::release(const std::string& address) {
  open_.fetch_sub(1, std::memory_order_relaxed);
  if (address.empty()) {
    return;
  }
  std::lock_guard lock(mutex_);
  auto it = per_client_.find(address);
  if (it != per_client_.end() && --it->second == 0) {
    per_client_.erase(it);
  }
}

std::uint64_t connection_gate::default_max_connections() {
  // Read once, at the first connection: asked at every accept, it was a system call each.
  static const std::uint64_t computed = [] {
    rlimit limit{};
    if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
      return std::uint64_t{1} << 20;
    }
    constexpr std::uint64_t k_reserved = 64;  // listeners, Redis, log files, the admin API
    const std::uint64_t fds = limit.rlim_cur;
    return std::max<std::uint64_t>(16, fds > k_reserved ? (fds - k_reserved) / 2 : 0);
  }();
  return computed;
}

}  // namespace ratewall
