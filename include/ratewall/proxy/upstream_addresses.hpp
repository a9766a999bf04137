#pragma once

// The addresses of each upstream target, looked up when a configuration is loaded (at start, at
// each reload and by `ratewall check`), never on the request path nor on a worker's loop.

#include <boost/asio/ip/tcp.hpp>
#include <string>
#include <vector>

#include "ratewall/config/config.hpp"

namespace ratewall {

/// One target's addresses, in the order the system's resolver gave them (/etc/hosts, then DNS):
/// a connection tries each in turn, racing the next after a delay as curl does
/// (upstream_pool::connect), so `localhost` that gives ::1 first still reaches an upstream that
/// listens on 127.0.0.1 only.
using target_addresses = std::vector<boost::asio::ip::tcp::endpoint>;

/// `addresses` with IPv6 and IPv4 taking turns, from the family of the first (the resolver's
/// preference, RFC 6724), each family's in their order (RFC 8305 §4): a name whose IPv6
/// addresses all lead nowhere then costs one attempt delay before an IPv4 one is tried, not
/// one for each of them.
target_addresses interleave_families(const target_addresses& addresses);

/// The addresses of each of `u.targets`, in their order (interleave_families). Throws config_error
/// naming `source`, the target's line and key when a name gives no address: a typo in a reload must
/// be refused, not turned into a 502 for every request while the gateway reports itself ready.
std::vector<target_addresses> resolve_targets(const upstream_config& u, const std::string& source);

}  // namespace ratewall
