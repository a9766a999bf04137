#pragma once

// Bounds client connections (DESIGN §5a): for the whole process (server.max_connections) and per
// client address (server.max_connections_per_client, as nginx's limit_conn). Every worker's
// acceptor asks the one gate of its server; a connection holds its ticket until it closes.

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

namespace ratewall {

class connection_gate;

/// A connection's place under the caps; gives it back when destroyed. Movable.
class connection_ticket {
 public:
  connection_ticket() = default;
  connection_ticket(connection_ticket&& other) noexcept;
  connection_ticket& operator=(connection_ticket&& other) noexcept;
  connection_ticket(const connection_ticket&) = delete;
  connection_ticket& operator=(const connection_ticket&) = delete;
  ~connection_ticket();

 private:
  friend class connection_gate;
  connection_gate* gate_ = nullptr;
  std::string address_;  // set when counted per client
};

class connection_gate {
 public:
  enum class verdict { admitted, over_total, over_client };

  /// Counts a new connection from `address` unless that would pass `max_per_client` (0: no
  /// limit) or, without `force`, `max_total`. Thread-safe.
  verdict admit(const std::string& address, std::uint64_t max_total, std::uint64_t max_per_client,
                bool force, connection_ticket& out);

  std::uint64_t open() const { return open_.load(std::memory_order_relaxed); }

  /// The default of server.max_connections: what the descriptor limit (RLIMIT_NOFILE) allows
  /// with one upstream connection per client connection and some kept for listeners, Redis
  /// and logs. The limit is read once, when first asked; a later change (prlimit) applies at
  /// the next start.
  static std::uint64_t default_max_connections();

 private:
  friend class connection_ticket;
  void release(const std::string& address);

  std::atomic<std::uint64_t> open_{0};
  std::mutex mutex_;  // per_client_ only: taken once per accept and close when the cap is on
  std::unordered_map<std::string, std::uint32_t> per_client_;
};

}  // namespace ratewall
