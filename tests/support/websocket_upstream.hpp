#pragma once

// A real WebSocket server (Boost.Beast's) on 127.0.0.1, port 0, a thread per connection: the
// upstream of the tunnel tests. Every message is echoed with its type (text or binary) until the
// client closes. A request for /refuse is answered 403 instead of upgraded, and a request without
// an upgrade gets 200; both keep the connection alive. A session ends when its peer closes.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ratewall::testing {

class websocket_upstream {
 public:
  websocket_upstream();
  ~websocket_upstream();
  websocket_upstream(const websocket_upstream&) = delete;
  websocket_upstream& operator=(const websocket_upstream&) = delete;

  std::uint16_t port() const { return port_; }
  /// WebSocket sessions open now, and upgraded in all.
  int open_sessions() const { return open_.load(); }
  int upgraded() const { return upgraded_.load(); }
  /// The request heads received, as received.
  std::vector<std::string> heads() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
  std::uint16_t port_ = 0;
  std::atomic<int> open_{0};
  std::atomic<int> upgraded_{0};
  mutable std::mutex mutex_;
  std::vector<std::string> heads_;
};

}  // namespace ratewall::testing
