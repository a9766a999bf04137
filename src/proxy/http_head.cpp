#include "ratewall/proxy/http_head.hpp"

#include <algorithm>
#include <array>
#include <boost/beast/core/string.hpp>
#include <charconv>

#include "hop_by_hop.hpp"
#include "ratewall/core/field_roles.hpp"
#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

namespace {

void append_field(std::string& out, std::string_view name, std::string_view value) {
  // One growth and four copies: a head has a dozen fields, and this is most of building it.
  const std::size_t at = out.size();
  out.resize(at + name.size() + 2 + value.size() + 2);
  char* p = out.data() + at;
  p = std::copy(name.begin(), name.end(), p);
  *p++ = ':';
  *p++ = ' ';
  p = std::copy(value.begin(), value.end(), p);
  *p++ = '\r';
  *p = '\n';
}

void append_framing(std::string& out, body_framing framing, std::uint64_t content_length) {
  if (framing == body_framing::length) {
    char digits[24];
    auto end = std::to_chars(digits, digits + sizeof digits, content_length).ptr;
    append_field(out, "Content-Length", std::string_view(digits, end - digits));
  } else if (framing == body_framing::chunked) {
    append_field(out, "Transfer-Encoding", "chunked");
  }
}

}  // namespace

void write_upstream_request_head(const request_head& req, body_framing framing,
                                 std::uint64_t content_length, const forwarding_headers& fwd,
                                 std::string& out) {
  const connection_tokens tokens(req);
  out.append(req.method_string());
  out.push_back(' ');
  out.append(fwd.target);
  out.append(" HTTP/1.1\r\n");
  if (!fwd.host.empty()) {
    append_field(out, "Host", fwd.host);
  }
  for (const auto& f : req) {
    const http::field id = f.name();
    const std::string_view name = f.name_string();
    if (hop_by_hop(id) || tokens.named(name) || id == http::field::expect ||
        id == http::field::host) {
      continue;
    }
    if (gateway_owned_field(name) ||
        (!fwd.peer_trusted && (client_claim_field(name) || cgi_same(name, fwd.user_header))) ||
        (fwd.identity_encoding && id == http::field::accept_encoding)) {
      continue;
    }
    append_field(out, name, f.value());
  }
  append_field(out, "X-Forwarded-For", fwd.forwarded_for);
  append_field(out, "X-Forwarded-Proto", fwd.forwarded_proto);
  if (!fwd.forwarded_host.empty()) {
    append_field(out, "X-Forwarded-Host", fwd.forwarded_host);
  }
  append_field(out, "X-Request-Id", fwd.request_id);
  if (fwd.identity_encoding) {
    append_field(out, "Accept-Encoding", "identity");
  }
  if (!fwd.upgrade.empty()) {
    append_field(out, "Connection", "upgrade");
    append_field(out, "Upgrade", fwd.upgrade);
  }
  append_framing(out, framing, content_length);
  out.append("\r\n");
}

namespace {

// The reason phrase of a status the upstream sent without one: Beast's, with the two RFC 8297
// and RFC 9110 added that it lacks; empty for a code with none (RFC 9112 §4 allows it, where
// Beast would write "<unknown-status>").
std::string_view usual_reason(unsigned status) {
  switch (status) {
    case 103:
      return "Early Hints";
    case 425:
      return "Too Early";
    default:
      break;
  }
  const std::string_view reason = http::obsolete_reason(static_cast<http::status>(status));
  return reason == "<unknown-status>" ? std::string_view{} : reason;
}

// HTTP/1.1 to an HTTP/1.0 client too: a server sends the highest version it conforms to
// within the request's major version (RFC 9110 §6.2), as nginx does; the client's version
// still decides the framing and the Connection field.
void append_status_line(std::string& out, unsigned status, std::string_view reason) {
  out.append("HTTP/1.1 ");
  const std::array<char, 3> digits = status_digits(status);
  out.append(digits.data(), digits.size());
  out.push_back(' ');
  if (reason.empty()) {
    reason = usual_reason(status);
  }
  out.append(reason);
  out.append("\r\n");
}

// Under an HTTP/1.1 status line a connection persists unless the response says close; an
// HTTP/1.0 client keeps one only when told keep-alive.
void append_connection(std::string& out, unsigned version, bool keep_alive) {
  if (!keep_alive) {
    append_field(out, "Connection", "close");
  } else if (version < 11) {
    append_field(out, "Connection", "keep-alive");
  }
}

}  // namespace

void write_local_response_head(unsigned status, unsigned version, bool keep_alive,
                               std::string_view content_type, std::size_t content_length,
                               const header_list& extra, std::string& out) {
  append_status_line(out, status, {});
  append_field(out, "Server", "ratewall");
  for (const auto& [name, value] : extra) {
    append_field(out, name, value);
  }
  if (!content_type.empty()) {
    append_field(out, "Content-Type", content_type);
  }
  append_framing(out, body_framing::length, content_length);
  append_connection(out, version, keep_alive);
  out.append("\r\n");
}

void write_client_response_head(const upstream_response& res, unsigned version, bool keep_alive,
                                body_framing framing, std::uint64_t content_length,
                                const header_list& extra, std::string& out) {
  const connection_tokens tokens(res);
  append_status_line(out, res.result_int(), res.reason());
  for (const auto& f : res) {
    if (passes_on(f, tokens, extra)) {
      append_field(out, f.name_string(), f.value());
    }
  }
  for (const auto& [name, value] : extra) {
    append_field(out, name, value);
  }
  append_framing(out, framing, content_length);
  append_connection(out, version, keep_alive);
  out.append("\r\n");
}

void write_switching_response_head(const upstream_response& res, const header_list& extra,
                                   std::string& out) {
  const connection_tokens tokens(res);
  append_status_line(out, 101, res.reason());
  for (const auto& f : res) {
    if (passes_on(f, tokens, extra)) {
      append_field(out, f.name_string(), f.value());
    }
  }
  for (const auto& [name, value] : extra) {
    append_field(out, name, value);
  }
  append_field(out, "Connection", "upgrade");
  append_field(out, "Upgrade", res[http::field::upgrade]);
  out.append("\r\n");
}

std::string upgrade_protocols(const request_head& req) {
  const connection_tokens tokens(req);
  std::string protocols;
  if (req.version() < 11 || !tokens.named("upgrade")) {
    return protocols;
  }
  auto range = req.equal_range(http::field::upgrade);
  for (auto it = range.first; it != range.second; ++it) {
    // A list of protocol["/"version] (RFC 9110 §7.8), which is not a token list: split at
    // the commas.
    for_each_list_element(it->value(), [&](std::string_view name) {
      if (boost::beast::iequals(name.substr(0, name.find('/')), "h2c")) {
        return;
      }
      if (!protocols.empty()) {
        protocols += ", ";
      }
      protocols.append(name);
    });
  }
  return protocols;
}

bool switches_to_asked(const upstream_response& res, std::string_view asked) {
  const auto name_of = [](std::string_view protocol) {
    return protocol.substr(0, protocol.find('/'));
  };
  bool named = false;
  bool all_asked = true;
  for (const auto& f : res) {
    if (f.name() != http::field::upgrade) {
      continue;
    }
    for_each_list_element(f.value(), [&](std::string_view protocol) {
      named = true;
      bool found = false;
      for_each_list_element(asked, [&](std::string_view offered) {
        found = found || boost::beast::iequals(name_of(protocol), name_of(offered));
      });
      all_asked = all_asked && found;
    });
  }
  return named && all_asked;
}

void write_interim_response_head(const upstream_response& res, std::string& out) {
  const connection_tokens tokens(res);
  append_status_line(out, res.result_int(), res.reason());
  for (const auto& f : res) {
    if (!hop_by_hop(f.name()) && !tokens.named(f.name_string())) {
      append_field(out, f.name_string(), f.value());
    }
  }
  out.append("\r\n");
}

void write_client_body_end(const upstream_response& res, const header_list& extra,
                           std::string& out) {
  out.append("0\r\n");
  if (res.trailer_count() > 0) {
    const connection_tokens tokens(res);
    for (std::size_t i = 0; i < res.trailer_count(); ++i) {
      const upstream_response::field_view f = res.trailer(i);
      if (passes_on_in_trailer(f, tokens, extra)) {
        append_field(out, f.name_string(), f.value());
      }
    }
  }
  out.append("\r\n");
}

std::size_t chunk_size_line(std::size_t n, char (&out)[18]) {
  auto end = std::to_chars(out, out + 16, n, 16).ptr;
  *end++ = '\r';
  *end++ = '\n';
  return static_cast<std::size_t>(end - out);
}

}  // namespace ratewall
