#pragma once

// What every head the gateway writes for the next hop shares (http_head.cpp for HTTP/1.1,
// h2_fields.cpp for HTTP/2): the hop-by-hop rules of RFC 9110 §7.6.1 and the status code's
// digits. Internal to the proxy module.

#include <array>
#include <boost/beast/http/field.hpp>
#include <cstddef>
#include <string_view>
#include <vector>

#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/proxy/message.hpp"
#include "ratewall/proxy/upstream_response.hpp"

namespace ratewall {

/// The tokens of a message's Connection fields: they name further hop-by-hop fields, every one of
/// which the next hop must not see (RFC 9110 §7.6.1). Few in practice: the first 16 sit in a fixed
/// array, searched in turn, so the usual message allocates nothing. Any further ones go to a list
/// sorted without regard to case, searched by halves: a head of thousands of tokens and thousands
/// of fields costs the sum of the two, not their product.
class connection_tokens {
 public:
  explicit connection_tokens(const request_head& req);
  explicit connection_tokens(const upstream_response& res);

  /// Whether `field` is one of the tokens, in any case.
  bool named(std::string_view field) const;

 private:
  void add(std::string_view connection_value);

  std::array<std::string_view, 16> names_{};
  std::size_t count_ = 0;
  std::vector<std::string_view> more_;  // past the 16th, sorted once the head is read
};

/// A field that is hop-by-hop whatever Connection says, and the framing fields, which the
/// gateway writes itself on each HTTP/1.1 leg. Inline: it is asked of every field.
constexpr bool hop_by_hop(boost::beast::http::field f) {
  using boost::beast::http::field;
  switch (f) {
    case field::connection:
    case field::keep_alive:
    case field::proxy_connection:
    case field::te:
    case field::trailer:
    case field::upgrade:
    case field::proxy_authorization:
    case field::proxy_authenticate:
    case field::transfer_encoding:  // framing is the gateway's own on each leg
    case field::content_length:
      return true;
    default:
      return false;
  }
}

/// Whether `extra` has a field `name`, in any case.
bool named_in(const header_list& extra, std::string_view name);

/// Whether a field of an upstream's head (or trailer) goes on to the client: not hop-by-hop, not
/// named by the head's Connection field, and not one of the fields the gateway sets itself
/// (`extra`: the request id, the rate-limit fields), which replace the upstream's.
template <class Field>
bool passes_on(const Field& f, const connection_tokens& tokens, const header_list& extra) {
  const std::string_view name = f.name_string();
  return !hop_by_hop(f.name()) && !tokens.named(name) && !named_in(extra, name);
}

/// A field whose meaning is needed before the content (RFC 9110 §6.5.1: framing, routing,
/// authentication, response controls, the content's format): a trailer carrying one would
/// contradict the head the client has already acted on. Inline: asked of every trailer field.
constexpr bool head_only(boost::beast::http::field f) {
  using boost::beast::http::field;
  switch (f) {
    case field::host:
    case field::content_type:
    case field::content_encoding:
    case field::content_range:
    case field::set_cookie:
    case field::location:
    case field::www_authenticate:
    case field::cache_control:
    case field::expires:
    case field::vary:
      return true;
    default:
      return false;
  }
}

/// Whether a field of an upstream's trailer goes on to the client (HTTP/1.1 or HTTP/2): as
/// passes_on asks of the head's fields (`tokens` are the head's Connection tokens, which name
/// hop fields in the trailer too), and not head_only.
template <class Field>
bool passes_on_in_trailer(const Field& f, const connection_tokens& tokens,
                          const header_list& extra) {
  return passes_on(f, tokens, extra) && !head_only(f.name());
}

/// A status code's three digits (RFC 9112 §4, RFC 9113 §8.3.2); callers pass 100..599, the
/// exchange refuses the rest. Inline: every response head writes one.
constexpr std::array<char, 3> status_digits(unsigned status) {
  return {static_cast<char>('0' + status / 100 % 10), static_cast<char>('0' + status / 10 % 10),
          static_cast<char>('0' + status % 10)};
}

}  // namespace ratewall
