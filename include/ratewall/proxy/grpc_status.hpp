#pragma once

// The gateway's own answers to gRPC calls (routes[].grpc, DESIGN §11a; HTTP/2, §12). A gRPC
// client reads a call's outcome from grpc-status, not from the HTTP status, so a 429 or 502 of the
// gateway's is sent to it in gRPC's Trailers-Only form (gRPC's doc/PROTOCOL-HTTP2.md, "Responses"):
// one HEADERS frame with END_STREAM holding :status 200, content-type, grpc-status and
// grpc-message.

#include <string>
#include <string_view>

#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/proxy/h2_fields.hpp"

namespace ratewall {

/// gRPC's status codes (gRPC's doc/statuscodes.md), as sent in grpc-status.
enum class grpc_code : unsigned {
  ok = 0,
  cancelled = 1,
  unknown = 2,
  invalid_argument = 3,
  deadline_exceeded = 4,
  not_found = 5,
  already_exists = 6,
  permission_denied = 7,
  resource_exhausted = 8,
  failed_precondition = 9,
  aborted = 10,
  out_of_range = 11,
  unimplemented = 12,
  internal = 13,
  unavailable = 14,
  data_loss = 15,
  unauthenticated = 16,
};

/// The gRPC code the gateway answers with where an HTTP client would get `http_status`.
///   429, 413, 431        resource_exhausted     401  unauthenticated
///   502, 503, 504        unavailable            403  permission_denied
///   400                  internal               404  unimplemented
///   408                  deadline_exceeded      any other: unknown
/// gRPC's doc/http-grpc-status-mapping.md is a table for clients that get a response without
/// grpc-status, and says servers must not use it; the gateway is the server here. It follows
/// that table but for four statuses. 429 is UNAVAILABLE there, which clients read as "the
/// service is down" and may retry at once; 413 and 431 are not in it, so UNKNOWN, read as the
/// server's fault. All three are a limit the caller ran into, and RESOURCE_EXHAUSTED is
/// gRPC's code for an exhausted quota (Envoy's rate limit filter answers so with
/// rate_limited_as_resource_exhausted). 408 (UNKNOWN there): the request came slower than the
/// gateway waits for it, a deadline the call ran past.
grpc_code grpc_code_for(unsigned http_status);

/// `text` as grpc-message carries it (gRPC's PROTOCOL-HTTP2.md, Status-Message): each byte
/// outside 0x20..0x7E, '%' itself, and a space at either end (an HTTP/2 field value has none
/// there) as %XX in upper-case hex; every other byte as it is. UTF-8 is encoded byte by byte.
std::string percent_encode_grpc_message(std::string_view text);

/// Whether a request's content-type is gRPC's: "application/grpc" alone or followed by '+' (a
/// message format: +proto, +json) or ';' (parameters), in any case. Nothing else: not
/// "application/grpc-web" (another protocol), and no whitespace (HTTP/2 field values have none
/// at either end).
bool is_grpc_request(std::string_view content_type);

/// Makes `out` the fields of a Trailers-Only answer, in this order: `:status: 200`,
/// `content-type: application/grpc`, `grpc-status: <code>`, `grpc-message: <message,
/// percent-encoded>` (left out when `message` is empty: it is optional), then `extra` (the
/// rate-limit headers, Retry-After), names lower-cased. The caller sends them as one HEADERS
/// frame that ends the stream.
void grpc_trailers_only(grpc_code code, std::string_view message, const header_list& extra,
                        h2_fields& out);

}  // namespace ratewall
