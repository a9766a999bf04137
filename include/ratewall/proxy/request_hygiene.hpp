#pragma once

// What the gateway accepts at all (DESIGN §5a), decided on a parsed request head before it is
// routed: framing that two parsers cannot read differently (RFC 9112 §6), one Host, a Connection
// header that cannot strip what must reach the upstream, and one canonical target that both the
// router and the upstream see. Socket-free: unit tests call it with a parsed head.

#include <boost/beast/http/message.hpp>
#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"
#include "ratewall/http/request_target.hpp"
#include "ratewall/proxy/message.hpp"

namespace ratewall {

/// The request as it is routed and forwarded.
struct canonical_request {
  canonical_target target;  // canonical path and query; the absolute-form authority
  std::string host;         // the authority when the target had one, else the Host value
  unsigned refusal = 0;     // 0: accepted; else 400 or 501
  std::string_view reason;  // why it was refused (fixed text, for the problem body)
};

/// Checks `req` and fills `out` (whose strings are reused). Refuses with 400:
/// Transfer-Encoding in HTTP/1.0, or whose final coding is not chunked, or that names chunked
/// twice or holds a token that is not one; HTTP/1.1 without Host, several Host fields or a Host
/// list, an invalid Host; a Connection header naming Host, Content-Length, Transfer-Encoding or
/// one of `identity_fields` (the credentials the gateway identified the client by, which the
/// upstream must see too); a target canonicalize_target refuses. Refuses with 501 a transfer
/// coding other than chunked (gzip, chunked): the gateway does not forward codings it would
/// have to drop. Returns out.refusal.
unsigned check_request_head(const request_head& req, const path_options& paths,
                            const identity_config& identity, canonical_request& out);

/// What the request expects: its one Expect field's value, "" without one. Several Expect
/// fields read as one list (RFC 9110 §5.3), which is never `100-continue` alone: they come back
/// as k_several_expectations, which a caller refuses with 417 as any other expectation.
std::string_view expectation_of(const request_head& req);
inline constexpr std::string_view k_several_expectations = "(several Expect fields)";

}  // namespace ratewall
