#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "ratewall/proxy/gateway.hpp"
#include "ratewall/proxy/upstream_pool.hpp"

namespace ratewall {

/// A connection that can be asked to finish: graceful shutdown tells every open connection
/// to close once its current request is answered (and at once if it is idle).
class drainable {
 public:
  virtual void drain() = 0;
  /// Closes the connection if it is waiting for a next request; false if it is busy.
  virtual bool close_if_idle() = 0;
  /// At max_connections: closes the connection if it is kept alive between requests it was
  /// served (HTTP/2: idle); false otherwise.
  virtual bool close_if_kept_alive() { return close_if_idle(); }
  /// At max_connections: since when the connection's request head has been awaited (from the
  /// accept, through its TLS handshake, until its first head is whole; then from each head's
  /// first byte); nullopt when it is not waiting for one.
  virtual std::optional<std::chrono::steady_clock::time_point> head_since() const {
    return std::nullopt;
  }
  /// Closes the connection at once, without a word: room for another at max_connections.
  virtual void evict() {}
  /// Closes the connection now, busy or not (the end of a drain, or a stop).
  virtual void cut_off() = 0;

 protected:
  ~drainable() = default;

 private:
  friend class worker;
  drainable* prev_ = nullptr;
  drainable* next_ = nullptr;
};

/// What one worker thread owns: its io_context, the configuration it currently serves and
/// its upstream pools. Only its own thread touches it (DESIGN §3), so nothing here locks.
/// How long an access log line may wait in a worker's buffer before it is written.
inline constexpr nanos k_log_flush_interval = std::chrono::milliseconds(100);

/// The upstream pools of one configuration, by upstream name.
using upstream_pools = std::map<std::string, std::shared_ptr<upstream_pool>, std::less<>>;

class worker {
 public:
  worker(boost::asio::io_context& ioc, std::shared_ptr<const gateway> gw);

  boost::asio::io_context& context() { return ioc_; }

  /// The configuration new requests use. A session copies the pointer once per request, so
  /// a request finishes on the configuration it started with.
  const std::shared_ptr<const gateway>& current() const { return gateway_; }

  /// Switches to a new configuration; pools of upstreams whose definition did not change are
  /// kept with their idle connections. Call on this worker's thread.
  void set_gateway(std::shared_ptr<const gateway> gw);

  /// The pools of the current configuration's upstreams, by name. A request copies this
  /// pointer together with current(), before any await: a reload replaces both, and a route
  /// of the old configuration may name an upstream the new one no longer has.
  const std::shared_ptr<const upstream_pools>& pools() const { return pools_; }

  /// A new request id: 32 hex digits from a per-thread generator.
  std::string next_request_id();

  /// This thread's buffer of access log lines, for the current configuration's log. The
  /// server flushes it every k_log_flush_interval.
  access_log_writer& log_writer() { return log_writer_; }

  /// Open client connections; read from any thread (metrics, drain), changed on this one.
  std::uint64_t open_connections() const {
    return open_connections_.load(std::memory_order_relaxed);
  }
  void connection_opened(drainable& d);
  void connection_closed(drainable& d);

  /// Closes one connection of this worker to make room for a new one under
  /// server.max_connections: an idle keep-alive one, else the one whose request head (TLS
  /// handshake, first byte) has been awaited longest. False when every connection is busy with a
  /// request.
  bool close_idle_connection();

  /// Graceful shutdown: idle connections close now, busy ones after their current request.
  /// `deadline` is when the drain ends and what is still open is cut off: a request delayed to a
  /// turn after it is woken now (see turn_wait).
  void begin_drain(std::chrono::steady_clock::time_point deadline);
  /// The end of a drain: every connection still open (a long response, a tunnel) is closed now,
  /// so that its peer learns it at once rather than when the process ends.
  void cut_off_all();
  bool draining() const { return draining_; }
  /// Whether a request whose turn comes at `turn` would find this worker's drain over.
  bool turn_after_drain(std::chrono::steady_clock::time_point turn) const {
    return draining_ && turn > drain_deadline_;
  }

  /// A request waiting on `timer` for its turn (leaky_bucket with delay), known to the worker
  /// while it waits: a drain that ends before that turn cancels the timer.
  class turn_wait {
   public:
    turn_wait(worker& w, boost::asio::steady_timer& timer,
              std::chrono::steady_clock::time_point turn);
    ~turn_wait();
    turn_wait(const turn_wait&) = delete;
    turn_wait& operator=(const turn_wait&) = delete;

   private:
    friend class worker;
    worker& w_;
    boost::asio::steady_timer& timer_;
    std::chrono::steady_clock::time_point turn_;
    turn_wait* prev_ = nullptr;
    turn_wait* next_ = nullptr;
  };

 private:
  boost::asio::io_context& ioc_;
  std::shared_ptr<const gateway> gateway_;
  std::shared_ptr<const upstream_pools> pools_;
  std::uint64_t rng_state_;
  access_log_writer log_writer_{nullptr};
  std::atomic<std::uint64_t> open_connections_{0};
  drainable* connections_ = nullptr;  // intrusive list: no allocation per connection
  turn_wait* turn_waits_ = nullptr;   // intrusive list, as connections_
  bool draining_ = false;
  std::chrono::steady_clock::time_point drain_deadline_ =
      std::chrono::steady_clock::time_point::max();
};

}  // namespace ratewall
