#pragma once

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <memory>

#include "ratewall/proxy/connection_gate.hpp"

namespace ratewall {

class worker;

/// Serves one client connection until it closes: HTTP/1.1 keep-alive, one request after the
/// other. For each request: read and check the head (431, 400, 408), route (404), identify
/// (401), ask the limiter (429), then forward upstream and relay the response, streaming both
/// bodies (413, 502, 504). Errors are values; the coroutine never throws on the data path.
/// `ticket` is the connection's place under the connection caps, given back when it ends.
/// With `tls`, the connection came to the TLS listener: its handshake comes first, with the
/// certificates of the configuration current at that moment. `peer` is the client's address as
/// accept() gave it (no getpeername() per connection).
boost::asio::awaitable<void> run_session(std::shared_ptr<worker> w,
                                         boost::asio::ip::tcp::socket socket,
                                         boost::asio::ip::tcp::endpoint peer,
                                         connection_ticket ticket, bool tls);

/// The client's address of `peer`, an IPv4-mapped IPv6 address (a dual-stack listener's) as
/// the IPv4 address it maps.
boost::asio::ip::address client_address(const boost::asio::ip::tcp::endpoint& peer);

}  // namespace ratewall
