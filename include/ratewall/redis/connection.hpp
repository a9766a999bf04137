#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>

#include "ratewall/core/clock.hpp"
#include "ratewall/redis/cluster.hpp"
#include "ratewall/redis/reply.hpp"

namespace ratewall::redis {

struct connection_options {
  std::string username;  // AUTH username password when set, AUTH password otherwise
  std::string password;  // empty: no AUTH
  unsigned db = 0;       // SELECT when not 0
  nanos connect_timeout = std::chrono::seconds(1);  // resolve + TCP + AUTH/SELECT
  // After a failed connect, calls are refused at once (call_status::unavailable) for a backoff
  // that doubles from min to max; a success resets it.
  nanos backoff_min = std::chrono::milliseconds(25);
  nanos backoff_max = std::chrono::seconds(1);
  // Replies owed and none received for this long: the connection is wedged (a frozen server,
  // a black-holed route): drop it and reconnect.
  nanos stuck_after = std::chrono::seconds(2);
};

/// Shared by the connections of one store (every thread): plain counters for metrics.
struct connection_counters {
  std::atomic<std::uint64_t> connects{0};          // handshakes completed
  std::atomic<std::uint64_t> connect_failures{0};  // attempts that failed or timed out
  std::atomic<std::uint64_t> timeouts{0};          // calls that passed their deadline
  std::atomic<std::uint64_t> broken{0};            // connections lost with replies owed
  std::atomic<std::uint64_t> late_replies{0};      // replies discarded after a timeout
  std::atomic<std::uint64_t> writes{0};            // socket writes (commands are coalesced)
};

enum class call_status {
  ok,           // every reply arrived (each may itself be an error reply)
  timeout,      // the deadline passed first; the replies, if they come, are discarded
  unavailable,  // not connected and not trying yet (backoff), or the connect failed
  failed,       // the connection broke while the replies were owed
};

struct call_result {
  call_status status = call_status::unavailable;
  std::vector<reply> replies;  // status ok: one per command, in order
};

/// One pipelined connection to one Redis node, living on one executor (one thread): every
/// member function must be called there. Commands queued during one turn of the event loop
/// go out in one write; replies are matched to calls in order. A call that passes its
/// deadline completes with `timeout` at once, and keeps its place in the queue so that its
/// late reply is read and dropped, never handed to the next call.
///
/// Connects lazily on the first call, and again after a failure (with backoff). Commands
/// queued while connecting are sent when the handshake succeeds, except those whose caller
/// already gave up: a limit request answered by its failure policy must not be charged later.
class connection {
 public:
  using time_point = std::chrono::steady_clock::time_point;

  static std::shared_ptr<connection> create(boost::asio::any_io_executor ex, node_address where,
                                            connection_options options,
                                            std::shared_ptr<connection_counters> counters);
  virtual ~connection() = default;

  /// Sends `commands` (`replies` RESP commands back to back, made with append_command) and
  /// completes with their replies. `connect_now` skips a reconnect backoff (for calls that a
  /// circuit breaker already let through).
  virtual boost::asio::awaitable<call_result> call(std::string commands, std::size_t replies,
                                                   time_point deadline,
                                                   bool connect_now = false) = 0;
  /// Sends and forgets: the replies are read and dropped (releases of concurrency slots).
  virtual void send(std::string commands, std::size_t replies) = 0;
  /// Fails what is queued (unavailable) and closes for good.
  virtual void close() = 0;

  virtual bool connected() const = 0;
  virtual const node_address& address() const = 0;
};

}  // namespace ratewall::redis
