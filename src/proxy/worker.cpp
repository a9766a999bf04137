#include "ratewall/proxy/worker.hpp"

#include <random>

namespace ratewall {

namespace {

bool same_upstream(const upstream_config& a, const upstream_config& b) {
  // An https upstream's pool is always made anew: its certificates and trust anchors were
  // loaded again with the configuration, and may have changed.
  if (a.https || b.https || a.targets.size() != b.targets.size() ||
      a.connect_timeout != b.connect_timeout || a.response_timeout != b.response_timeout ||
      a.read_timeout != b.read_timeout || a.max_idle != b.max_idle ||
      a.queue_timeout != b.queue_timeout) {
    return false;
  }
  for (std::size_t i = 0; i < a.targets.size(); ++i) {
    if (a.targets[i].host != b.targets[i].host || a.targets[i].port != b.targets[i].port) {
      return false;
    }
  }
  return true;
}

// splitmix64: fast, and good enough to make request ids unique; they are not secrets.
std::uint64_t next_random(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace

worker::worker(boost::asio::io_context& ioc, std::shared_ptr<const gateway> gw)
    : ioc_(ioc),
      rng_state_(std::random_device{}() ^ (std::uint64_t{std::random_device{}()} << 32)) {
  set_gateway(std::move(gw));
}

void worker::set_gateway(std::shared_ptr<const gateway> gw) {
  // A new map each time: requests in flight keep the one of their configuration.
  auto pools = std::make_shared<upstream_pools>();
  for (const auto& u : gw->cfg().upstreams) {
    std::shared_ptr<upstream_pool> kept;
    if (pools_) {
      auto old = pools_->find(u.name);
      // The same settings and the addresses this load found (a reload looks names up again).
      if (old != pools_->end() && same_upstream(old->second->cfg(), u) &&
          old->second->addresses() == *gw->addresses(u.name)) {
        kept = old->second;
      }
    }
    pools->emplace(u.name, kept ? std::move(kept)
                                : std::make_shared<upstream_pool>(
                                      ioc_.get_executor(), u, gw->addresses(u.name),
                                      gw->budget(u.name), gw->upstream_tls_for(u.name)));
  }
  if (pools_) {
    for (const auto& [name, old] : *pools_) {
      auto now = pools->find(name);
      if (now == pools->end() || now->second != old) {
        old->retire();
      }
    }
  }
  pools_ = std::move(pools);
  if (!gateway_ || gateway_->log() != gw->log()) {
    log_writer_.set_log(gw->log());
  }
  gateway_ = std::move(gw);
}

void worker::connection_opened(drainable& d) {
  d.prev_ = nullptr;
  d.next_ = connections_;
  if (connections_ != nullptr) {
    connections_->prev_ = &d;
  }
  connections_ = &d;
  open_connections_.fetch_add(1, std::memory_order_relaxed);
}

void worker::connection_closed(drainable& d) {
  if (d.prev_ != nullptr) {
    d.prev_->next_ = d.next_;
  } else {
    connections_ = d.next_;
  }
  if (d.next_ != nullptr) {
    d.next_->prev_ = d.prev_;
  }
  d.prev_ = d.next_ = nullptr;
  open_connections_.fetch_sub(1, std::memory_order_relaxed);
}

bool worker::close_idle_connection() {
  for (drainable* d = connections_; d != nullptr; d = d->next_) {
    if (d->close_if_kept_alive()) {
      return true;
    }
  }
  // Then the connection whose head has been awaited longest (the list is newest first, so of
  // equal ones the oldest): half-open handshakes and heads sent slowly would otherwise hold
  // every place for header_timeout, renewed at will, while a client's own handshake and head
  // take a millisecond.
  drainable* first = nullptr;
  auto since = std::chrono::steady_clock::time_point::max();
  for (drainable* d = connections_; d != nullptr; d = d->next_) {
    if (const auto t = d->head_since(); t && *t <= since) {
      first = d;
      since = *t;
    }
  }
  if (first == nullptr) {
    return false;
  }
  first->evict();
  return true;
}

void worker::cut_off_all() {
  for (drainable* d = connections_; d != nullptr;) {
    drainable* next = d->next_;
    d->cut_off();
    d = next;
  }
}

void worker::begin_drain(std::chrono::steady_clock::time_point deadline) {
  draining_ = true;
  drain_deadline_ = deadline;
  for (turn_wait* t = turn_waits_; t != nullptr; t = t->next_) {
    if (turn_after_drain(t->turn_)) {
      t->timer_.cancel();  // its waiter finds itself after the drain and answers 503
    }
  }
  for (drainable* d = connections_; d != nullptr;) {
    drainable* next = d->next_;  // drain() may not unlink, but be safe if it ever does
    d->drain();
    d = next;
  }
}

worker::turn_wait::turn_wait(worker& w, boost::asio::steady_timer& timer,
                             std::chrono::steady_clock::time_point turn)
    : w_(w), timer_(timer), turn_(turn), next_(w.turn_waits_) {
  if (next_ != nullptr) {
    next_->prev_ = this;
  }
  w_.turn_waits_ = this;
}

worker::turn_wait::~turn_wait() {
  (prev_ != nullptr ? prev_->next_ : w_.turn_waits_) = next_;
  if (next_ != nullptr) {
    next_->prev_ = prev_;
  }
}

std::string worker::next_request_id() {
  static constexpr char digits[] = "0123456789abcdef";
  std::string id(32, '0');
  for (int half = 0; half < 2; ++half) {
    std::uint64_t r = next_random(rng_state_);
    for (int i = 0; i < 16; ++i) {
      id[half * 16 + i] = digits[(r >> (i * 4)) & 0xf];
    }
  }
  return id;
}

}  // namespace ratewall
