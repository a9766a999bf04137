#pragma once

// The exchange (DESIGN §7): one admitted request forwarded on a pooled upstream connection, and
// its response relayed to the client piece by piece as it arrives. Internal to the proxy module.

#include <boost/asio/awaitable.hpp>
#include <memory>

#include "connection.hpp"
#include "ratewall/proxy/upstream_pool.hpp"

namespace ratewall {

/// How the request is forwarded: built by the session from the route and the admission.
struct forward_plan {
  std::shared_ptr<upstream_pool> pool;
  nanos body_timeout{0};  // client: each gap in the request body
  nanos send_timeout{0};  // client: each write of the response
  bool keep_alive = false;
  bool watch_client = false;         // a concurrency slot is held: a client that hangs up cancels
  bool body_buffered = false;        // the whole body is in c.head: a retry may send it again
  std::uint64_t buffered_bytes = 0;  // body bytes in c.head (read before the exchange)
  bool upgrade = false;              // the head asks for an upgrade: a 101 opens a tunnel
  nanos tunnel_idle_timeout{0};
  // routes[].cost_from_response: told the final response head and, for a JSON source, the body
  // as it is relayed. Owned by the session, which charges its cost() after the exchange.
  response_cost* cost = nullptr;
};

/// Forwards the request whose upstream head is in `c.head` and whose body `p` may still be
/// reading, then relays the answer, or on a 101 carries the upgraded connection (tunnel.hpp).
/// Returns whether the client connection stays open.
asio::awaitable<bool> exchange(connection_state& c, worker& w, request_parser& p, forward_plan plan,
                               request_trace& trace);

}  // namespace ratewall
