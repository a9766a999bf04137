#include "ratewall/proxy/request_hygiene.hpp"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>

#include "ratewall/core/parse.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/proxy/http_head.hpp"

namespace ratewall {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

/// Calls `each` for every comma-separated element of every field `name` (empty ones skipped, as
/// RFC 9110 §5.6.1 asks of a recipient).
template <class F>
void for_each_element(const request_head& req, http::field name, F each) {
  auto [first, last] = req.equal_range(name);
  for (auto it = first; it != last; ++it) {
    for_each_list_element(it->value(), each);
  }
}

unsigned refuse(canonical_request& out, unsigned status, std::string_view reason) {
  out.refusal = status;
  out.reason = reason;
  return status;
}

// RFC 9112 §6.1 and §6.3: the final coding of a request must be chunked, or its length cannot
// be known and another parser may read the body as the next request.
unsigned check_transfer_encoding(const request_head& req, canonical_request& out) {
  if (req.find(http::field::transfer_encoding) == req.end()) {
    return 0;
  }
  if (req.version() < 11) {
    return refuse(out, 400, "Transfer-Encoding in an HTTP/1.0 request");
  }
  unsigned status = 0;
  std::string_view reason;
  std::size_t codings = 0;
  std::size_t chunked_at = 0;  // 1-based position of "chunked"; 0: none
  for_each_element(req, http::field::transfer_encoding, [&](std::string_view coding) {
    ++codings;
    if (!is_token(coding)) {
      status = 400;
      reason = "malformed Transfer-Encoding";
      return;
    }
    if (iequals(coding, "chunked")) {
      if (chunked_at != 0 && status == 0) {
        status = 400;
        reason = "chunked applied more than once";
      }
      chunked_at = codings;
    }
  });
  if (status != 0) {
    return refuse(out, status, reason);
  }
  if (codings == 0 || chunked_at != codings) {  // an empty field is no chunked either
    return refuse(out, 400, "the final transfer coding is not chunked");
  }
  if (codings > 1) {
    return refuse(out, 501, "transfer codings other than chunked are not implemented");
  }
  return 0;
}

// RFC 9110 §9.1: a method is case-sensitive, so `post` is not POST to the router, to a route's
// `methods` or to a per-method cost; but frameworks that upper-case what they receive (Django,
// Werkzeug) serve it as POST. nginx refuses a method with a lower-case letter
// (ngx_http_parse_request_line); so does the gateway.
unsigned check_method(const request_head& req, canonical_request& out) {
  const std::string_view method = req.method_string();
  if (std::any_of(method.begin(), method.end(), [](char c) { return c >= 'a' && c <= 'z'; })) {
    return refuse(out, 400, "a method with a lower-case letter");
  }
  // A CONNECT would have the upstream open a tunnel past every route and limit; nginx refuses
  // it too. (Its authority-form target fails canonicalize_target first; an origin-form one,
  // which no client sends, reached the upstream.)
  if (req.method() == http::verb::connect) {
    return refuse(out, 501, "CONNECT: the gateway opens no tunnels");
  }
  // X-HTTP-Method-Override and its kin make many frameworks (Laravel, Symfony, Express's
  // method-override, ASP.NET's) run a request as another method than its line's, which chose
  // its route and its cost: a POST priced as one would run as a DELETE. One that names the
  // line's own method changes nothing and passes.
  for (const auto& f : req) {
    const std::string_view name = f.name_string();
    if ((cgi_same(name, "X-HTTP-Method-Override") || cgi_same(name, "X-HTTP-Method") ||
         cgi_same(name, "X-Method-Override") || cgi_same(name, "X-Forwarded-Method") ||
         cgi_same(name, "X-Original-Method")) &&
        f.value() != method) {
      return refuse(out, 400, "a method override (the request line's method is the method)");
    }
  }
  return 0;
}

// The same through the query: Symfony (so Laravel, where it is on by default) reads a POST's
// `_method` parameter as its method, ASP.NET MVC a POST's `X-HTTP-Method-Override` (in any
// case). (In a form body they are out of the gateway's sight.)
unsigned check_method_parameter(canonical_request& out) {
  const std::string_view query = out.target.query;
  constexpr std::string_view k_word = "method";
  const bool any_spelling =
      query.find('%') != std::string_view::npos ||
      std::search(query.begin(), query.end(), k_word.begin(), k_word.end(),
                  [](char a, char b) { return ascii_lower(a) == b; }) != query.end();
  if (!any_spelling) {
    return 0;  // no spelling of either name: most queries, at one search
  }
  const std::string_view parameters = query.substr(query.starts_with('?') ? 1 : 0);
  if (query_names(parameters, "_method") || query_names(parameters, "X-HTTP-Method-Override")) {
    return refuse(out, 400, "a method override (the request line's method is the method)");
  }
  return 0;
}

unsigned check_host(const request_head& req, canonical_request& out) {
  auto [first, last] = req.equal_range(http::field::host);
  if (first == last) {
    // Even with an absolute-form target (RFC 9112 §3.2: a server MUST answer 400 to any
    // HTTP/1.1 request without Host), as nginx does.
    if (req.version() >= 11) {
      return refuse(out, 400, "an HTTP/1.1 request needs a Host");
    }
    out.host = out.target.authority;
    return 0;
  }
  if (std::next(first) != last) {
    return refuse(out, 400, "more than one Host");
  }
  const std::string_view host = first->value();
  if (host.find(',') != std::string_view::npos) {
    return refuse(out, 400, "a Host list");
  }
  if (host.empty() && out.target.authority.empty()) {
    // It would be forwarded as no Host at all (nginx refuses it too): the target's authority
    // is the origin's, never undefined, for an origin-form target (RFC 9112 §3.2).
    return refuse(out, 400, "an empty Host");
  }
  if (!host.empty() && !valid_authority(host)) {
    return refuse(out, 400, "invalid Host");
  }
  // An absolute-form target's authority replaces Host (RFC 9112 §3.2.2), for routing and
  // forwarding alike: the two can never disagree.
  out.host = out.target.authority.empty() ? std::string(host) : out.target.authority;
  return 0;
}

unsigned check_connection(const request_head& req, const identity_config& identity,
                          canonical_request& out) {
  // Identity reads a field under its CGI spelling too (X_API_Key for X-API-Key: request_steps),
  // so a token naming it that way would drop a field the gateway has charged for.
  bool named = false;
  for_each_element(req, http::field::connection, [&](std::string_view token) {
    named = named || cgi_same(token, "host") || cgi_same(token, "content-length") ||
            cgi_same(token, "transfer-encoding") || cgi_same(token, "authorization") ||
            cgi_same(token, identity.api_key_header) || cgi_same(token, identity.user_header) ||
            std::any_of(identity.descriptor_fields.begin(), identity.descriptor_fields.end(),
                        [&](const std::string& field) { return cgi_same(token, field); });
  });
  return named ? refuse(out, 400, "Connection names a field that must be forwarded") : 0;
}

}  // namespace

unsigned check_request_head(const request_head& req, const path_options& paths,
                            const identity_config& identity, canonical_request& out) {
  out.refusal = 0;
  out.reason = {};
  out.host.clear();
  if (unsigned status = check_method(req, out)) {
    return status;
  }
  if (unsigned status = check_transfer_encoding(req, out)) {
    return status;
  }
  if (!canonicalize_target(req.target(), paths, out.target)) {
    return refuse(out, 400, out.target.error);
  }
  if (unsigned status = check_method_parameter(out)) {
    return status;
  }
  if (unsigned status = check_host(req, out)) {
    return status;
  }
  return check_connection(req, identity, out);
}

std::string_view expectation_of(const request_head& req) {
  auto [first, last] = req.equal_range(http::field::expect);
  if (first == last) {
    return {};
  }
  return std::next(first) == last ? std::string_view(first->value()) : k_several_expectations;
}

}  // namespace ratewall
