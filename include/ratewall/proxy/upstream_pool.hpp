#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/proxy/transport.hpp"
#include "ratewall/proxy/upstream_addresses.hpp"
#include "ratewall/proxy/upstream_budget.hpp"
#include "ratewall/tls/upstream_tls.hpp"

namespace ratewall {

/// One connection to an upstream target, with the read buffer that belongs to it.
struct upstream_connection {
  explicit upstream_connection(transport t) : stream(std::move(t)) {}

  // The session's watchdog bounds every operation on it (no timer per operation).
  transport stream;
  boost::beast::flat_buffer buffer;
  std::size_t target = 0;  // index into the upstream's targets
  bool reused = false;     // taken from the idle pool (so it may have been closed meanwhile)
  nanos idle_since{0};
  std::uint64_t idle_generation = 0;        // tells this idle spell from any later one
  budget_unit unit;                         // held while leased (upstreams.*.max_connections)
  std::shared_ptr<const upstream_tls> tls;  // https: what made the stream's context, kept alive
};

/// The result of asking for a connection.
struct upstream_lease {
  std::unique_ptr<upstream_connection> connection;  // null on failure
  bool timed_out = false;                           // connect timeout (504) vs refused (502)
  bool queue_full = false;  // max_connections in use for all of queue_timeout (503)
};

/// What waits on an idle upstream connection (upstream_pool).
enum class idle_look { nothing, closed, unsolicited };

/// Keep-alive connections to the targets of one named upstream, for one thread.
/// Not thread-safe: every worker thread owns its own pools (DESIGN §3), so nothing here locks.
/// Made with make_shared: an idle connection's watch holds a weak reference to its pool.
class upstream_pool : public std::enable_shared_from_this<upstream_pool> {
 public:
  /// `addresses`: each of cfg.targets' (resolve_targets), at least one each. `budget` bounds the
  /// connections in use towards this upstream across the process; `tls` (for https:// targets,
  /// else null) makes every connection a TLS one.
  upstream_pool(boost::asio::any_io_executor ex, upstream_config cfg,
                std::shared_ptr<const std::vector<target_addresses>> addresses,
                std::shared_ptr<upstream_budget> budget,
                std::shared_ptr<const upstream_tls> tls = nullptr);

  const upstream_config& cfg() const { return cfg_; }
  const std::vector<target_addresses>& addresses() const { return *addresses_; }

  /// A connection to the next healthy target (round robin): an idle one if `allow_reuse` and
  /// one is kept, else a new one. Targets that refused a connection are skipped for a while.
  /// Waits first for a unit of the upstream's budget, up to queue_timeout (`wait` ends that
  /// wait early).
  boost::asio::awaitable<upstream_lease> acquire(bool allow_reuse, budget_wait* wait = nullptr);

  /// What acquire(true) does first, without a coroutine: an idle connection to the next target,
  /// when one is kept and a unit of the budget is free at once. Empty otherwise, and then
  /// nothing has changed but idle connections dropped (the round robin stays): acquire() takes
  /// it from there.
  upstream_lease reuse_idle();

  /// Whether acquire may wait: the upstream has a max_connections.
  bool bounded() const { return budget_->capacity() != 0; }

  /// Gives back a connection whose last exchange ended exactly at a message boundary on both
  /// legs (the caller checks: request sent whole, response read whole, keep-alive). Bytes
  /// buffered after the response drop it, and so does anything the upstream sends, or its
  /// close, while it is idle (it is watched), so no byte of an old exchange can ever be read as
  /// the answer to a new request; and an upstream caught sending such bytes has its connections
  /// carry one request each for a while (caught_unsolicited).
  void release(std::unique_ptr<upstream_connection> c);

  /// A reload replaced this pool (its upstream's settings changed, or it is gone): its idle
  /// connections close now, and those still in use close as they come back, instead of staying
  /// open, one pool's worth per reload, for as long as any request of an older configuration is
  /// in flight (a WebSocket tunnel may be for hours).
  void retire();

  std::size_t idle_count() const;

 private:
  struct target_state {
    std::deque<std::unique_ptr<upstream_connection>> idle;  // most recent at the back
    nanos down_until{0};
    nanos no_reuse_until{0};   // caught sending bytes no request asked for: no reuse till then
    std::size_t answered = 0;  // the address a connection was last made to, tried first
  };

  /// The target pick_target would choose now, without choosing it.
  std::size_t next_target(nanos now) const;
  std::size_t pick_target(nanos now);
  /// The newest idle connection of `state` young enough to use and with nothing waiting on its
  /// socket, with `unit`; null when none (the others are dropped on the way).
  std::unique_ptr<upstream_connection> take_idle(target_state& state, nanos now, budget_unit& unit);
  /// Connects to target `t` (its addresses raced when it has several, each attempt with
  /// connect_timeout of its own), then (https) does the TLS handshake within the rest of the
  /// winning attempt's connect_timeout.
  boost::asio::awaitable<std::unique_ptr<upstream_connection>> connect(std::size_t t,
                                                                       bool& timed_out);
  /// The socket of the first of `addresses` to connect (race_addresses in the .cpp), with that
  /// attempt's `deadline`; none when all failed (`timed_out`: one of them timed out).
  boost::asio::awaitable<std::optional<boost::asio::ip::tcp::socket>> race_addresses(
      target_state& state, const target_addresses& addresses,
      std::chrono::steady_clock::time_point& deadline, bool& timed_out);
  void log_tls_failure(std::size_t t, const std::string& reason);
  void watch_idle(upstream_connection& c);
  /// `target` sent bytes no request asked for: its connections are not reused for a while.
  void caught_unsolicited(std::size_t target, nanos now);
  void drop_idle(const upstream_connection* c, std::size_t target, std::uint64_t generation);

  boost::asio::any_io_executor ex_;
  upstream_config cfg_;
  std::shared_ptr<const std::vector<target_addresses>> addresses_;
  std::shared_ptr<upstream_budget> budget_;
  std::shared_ptr<const upstream_tls> tls_;
  std::vector<target_state> targets_;
  std::chrono::steady_clock::time_point last_tls_report_{};
  std::uint64_t tls_failures_unreported_ = 0;
  std::size_t next_ = 0;
  std::uint64_t generation_ = 0;
  bool retired_ = false;
};

}  // namespace ratewall
