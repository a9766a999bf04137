#pragma once

// The tunnel (DESIGN §1): a client connection upgraded by the upstream's 101 (WebSocket or any
// other Upgrade protocol), spliced to its upstream connection byte for byte, both ways. Internal
// to the proxy module.

#include <boost/asio/awaitable.hpp>
#include <cstdint>

#include "connection.hpp"
#include "ratewall/proxy/upstream_pool.hpp"

namespace ratewall {

/// Carries bytes both ways between `c.client` and `up` until both sides have closed, either
/// fails, no byte has passed either way for `idle_timeout`, or a write either way has not
/// finished in `write_timeout` (its reader stopped reading). What either side sent early
/// (already in c.buffer or up.buffer) goes first. When one side closes, the other is told by a
/// half close and has k_half_closed_timeout to finish. Neither connection is usable afterwards.
/// The bytes written each way are added to `to_upstream` and `to_client` as they go (the access
/// log's counts, right even when the tunnel is cut off and never returns).
asio::awaitable<void> tunnel(connection_state& c, upstream_connection& up, nanos idle_timeout,
                             nanos write_timeout, std::uint64_t& to_upstream,
                             std::uint64_t& to_client);

}  // namespace ratewall
