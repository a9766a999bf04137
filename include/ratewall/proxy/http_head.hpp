#pragma once

// Writing HTTP/1.1 heads for the two legs of a proxied exchange. The gateway filters and adds
// headers while it serialises, into one contiguous buffer: one write, no edits of the parsed
// message, and the hop-by-hop rules of RFC 9110 §7.6.1 in one place.

#include <boost/beast/http/message.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/proxy/message.hpp"
#include "ratewall/proxy/upstream_response.hpp"

namespace ratewall {

/// How a body is delimited on the wire.
enum class body_framing {
  none,         // no body
  length,       // Content-Length
  chunked,      // Transfer-Encoding: chunked
  until_close,  // the end of the connection ends the body (responses only)
};

/// The request as the upstream gets it: the canonical target and host (request_hygiene.hpp),
/// and what the gateway tells the upstream about the client.
struct forwarding_headers {
  std::string_view target;  // origin-form: canonical path and query
  std::string_view host;    // empty: no Host is sent (write_forward_head fills in a default)
  std::string_view forwarded_for;
  std::string_view forwarded_proto;
  std::string_view forwarded_host;  // empty: not sent
  std::string_view request_id;
  std::string_view upgrade;  // not empty: the protocols asked for (sent with Connection: upgrade)
  // The client's Accept-Encoding is replaced by "identity": the gateway must read the body
  // (cost_from_response's JSON source), and a compressed one it would relay unread.
  bool identity_encoding = false;
  // The peer is a trusted proxy: its Forwarded, X-Real-IP and the like (client_claim_field,
  // core/field_roles.hpp) are passed on. Anyone else's are claims about the client the upstream
  // must not be handed, and are left out.
  bool peer_trusted = false;
  // identity.user_header: who the client is, as a trusted proxy tells it. Anyone else's is a
  // claim the gateway did not believe (it limited the client by another name), left out so that
  // no upstream believes it either.
  std::string_view user_header{};
};

/// Appends the head of the request as the upstream gets it: the request line with fwd.target
/// in HTTP/1.1, Host, the client's fields less the hop-by-hop ones, Host, Expect, the framing
/// fields and those in `fwd`, then `fwd` and the framing (`content_length` is used with
/// body_framing::length). A field named as one of `fwd`'s with '_' for '-' (X_Forwarded_For)
/// is left out too: CGI and WSGI servers read both spellings as HTTP_X_FORWARDED_FOR, so it
/// would pass a client's claim under the gateway's name. So are Forwarded, X-Real-IP and the
/// other claims of an address or of an original URL (in either spelling), and the user header
/// (fwd.user_header), unless fwd.peer_trusted.
void write_upstream_request_head(const request_head& req, body_framing framing,
                                 std::uint64_t content_length, const forwarding_headers& fwd,
                                 std::string& out);

/// Appends the head of the response as the client gets it: status line in `version`, the
/// upstream's fields less hop-by-hop ones, framing fields and any named in `extra`, then
/// `extra`, the framing and Connection as `keep_alive` and `version` need.
void write_client_response_head(const upstream_response& res, unsigned version, bool keep_alive,
                                body_framing framing, std::uint64_t content_length,
                                const header_list& extra, std::string& out);

/// Appends the head of a 101 (Switching Protocols) as the client gets it: the upstream's fields
/// less hop-by-hop ones and those named in `extra`, then `extra`, then `Connection: upgrade` and
/// the upstream's Upgrade.
void write_switching_response_head(const upstream_response& res, const header_list& extra,
                                   std::string& out);

/// The protocols of a request's Upgrade field that the gateway forwards: all of them but h2c
/// (HTTP/2 over cleartext is the gateway's own business, never the upstream's), as a list.
/// Empty when the request asks for no upgrade: no Upgrade field, or Connection does not name it.
std::string upgrade_protocols(const request_head& req);

/// Whether a 101 switches to what was asked: its Upgrade field names at least one protocol, and
/// each is one of `asked` (an upgrade_protocols list), by name, in any case (RFC 9110 §7.8: a
/// server that switches names the protocols, and only ones the client offered).
bool switches_to_asked(const upstream_response& res, std::string_view asked);

/// Appends an interim (1xx) response head as the client gets it: status line in HTTP/1.1 and
/// the upstream's fields less hop-by-hop ones (103's Link fields among them). No framing: an
/// interim response has no body.
void write_interim_response_head(const upstream_response& res, std::string& out);

/// Appends the head of a response the gateway makes itself (404, 429, 502, ...): status line,
/// Server, `extra`, Content-Type (when not empty), Content-Length and Connection as needed.
void write_local_response_head(unsigned status, unsigned version, bool keep_alive,
                               std::string_view content_type, std::size_t content_length,
                               const header_list& extra, std::string& out);

/// "1a2b\r\n": the line that starts a chunk of `n` bytes. Returns its length (at most 18).
std::size_t chunk_size_line(std::size_t n, char (&out)[18]);

inline constexpr std::string_view k_last_chunk = "0\r\n\r\n";

/// Appends the end of a chunked body as the client gets it: the last chunk, then the fields of
/// the upstream's trailer that may go on (hop-by-hop ones, those named in `extra` and those
/// only a head may carry are dropped; RFC 9112 §7.1.2), then the empty line. k_last_chunk when
/// none pass.
void write_client_body_end(const upstream_response& res, const header_list& extra,
                           std::string& out);

}  // namespace ratewall
