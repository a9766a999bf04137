#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ratewall/proxy/connection_gate.hpp"
#include "ratewall/proxy/gateway.hpp"

namespace ratewall {

/// The listening side: one worker thread per `server.threads`, each with its own io_context,
/// its own acceptor on the shared port (SO_REUSEPORT, so the kernel spreads connections) and
/// its own upstream pools. A connection stays on the thread that accepted it.
class server {
 public:
  /// Opens the listeners; throws std::system_error naming the address when it cannot.
  explicit server(std::shared_ptr<const gateway> gw);
  ~server();
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  /// The bound port of the plain listener (useful when the config asked for port 0); 0 when
  /// there is none (`listen: off`).
  std::uint16_t port() const { return port_; }
  /// The bound port of the TLS listener (server.tls); 0 when there is none.
  std::uint16_t tls_port() const { return tls_port_; }

  /// Starts the worker threads and returns.
  void start();
  /// Stops accepting and ends every connection; joins the threads. Idempotent.
  void stop();
  /// Blocks until the workers have ended (after stop()).
  void wait();

  /// Graceful shutdown: stops accepting, lets requests in flight finish (idle keep-alive
  /// connections close at once, busy ones after their response), then stops. Returns true when
  /// every connection ended within `timeout`, false when the rest were cut off.
  bool drain(nanos timeout);

  /// Open client connections across all workers.
  std::uint64_t open_connections() const;
  /// A drain or stop has begun.
  bool stopping() const { return stopping_flag_.load(std::memory_order_relaxed); }

  /// Serves new requests with `gw` from now on; requests in flight finish on the old one.
  void reload(std::shared_ptr<const gateway> gw);

 private:
  struct thread_state;
  // Declared before threads_, so destroyed after them: sessions, destroyed with their
  // io_context, hand their tickets back to it.
  connection_gate gate_;
  std::vector<std::unique_ptr<thread_state>> threads_;
  std::uint16_t port_ = 0;
  std::uint16_t tls_port_ = 0;
  bool started_ = false;

  std::mutex mutex_;  // guards current_ and stopping_ (not used on the request path)
  std::shared_ptr<const gateway> current_;
  bool stopping_ = false;
  std::atomic<bool> stopping_flag_{false};
  std::condition_variable sweep_wakeup_;
  std::thread sweeper_;
};

}  // namespace ratewall
