#include "ratewall/proxy/h2_request.hpp"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>

#include "ratewall/core/parse.hpp"
#include "ratewall/core/reuse.hpp"

namespace ratewall {

namespace http = boost::beast::http;
using boost::beast::iequals;

namespace {

// RFC 9113 §8.2.1: no NUL, CR or LF anywhere, no space or tab at either end. HTTP/1.1's parser
// checks this on the gateway's other leg; here a CR LF would split the upstream's head.
bool valid_value(std::string_view v) {
  if (!v.empty() &&
      (v.front() == ' ' || v.front() == '\t' || v.back() == ' ' || v.back() == '\t')) {
    return false;
  }
  // (A loop, not find_first_of: that calls memchr once for every byte of the value.)
  return std::none_of(v.begin(), v.end(),
                      [](char c) { return c == '\0' || c == '\r' || c == '\n'; });
}

// Upper case is malformed in HTTP/2 (RFC 9113 §8.2.1).
bool valid_name(std::string_view s) {
  return is_token(s) &&
         std::none_of(s.begin(), s.end(), [](char c) { return c >= 'A' && c <= 'Z'; });
}

// RFC 9113 §8.2.2: the fields of an HTTP/1.1 connection make an HTTP/2 request malformed.
bool connection_specific(std::string_view name) {
  return name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
         name == "transfer-encoding" || name == "upgrade";
}

}  // namespace

void h2_request_builder::refuse(unsigned status, std::string_view reason) {
  status_ = status;
  reason_ = reason;
}

void h2_request_builder::add(std::string_view name, std::string_view value) {
  bytes_ += name.size() + value.size() + 32;
  if (status_ != 0) {
    return;
  }
  if (bytes_ > max_bytes_) {
    return refuse(431, "the header list is larger than the gateway accepts");
  }
  if (!valid_value(value)) {
    return refuse(400, "a field value with a control character or white space at an end");
  }
  if (!name.empty() && name.front() == ':') {
    return add_pseudo(name, value);
  }
  add_regular(name, value);
}

void h2_request_builder::add_pseudo(std::string_view name, std::string_view value) {
  if (regular_seen_) {
    return refuse(400, "a pseudo-header after a regular field");
  }
  std::size_t* slot = name == ":method"      ? &method_
                      : name == ":scheme"    ? &scheme_
                      : name == ":authority" ? &authority_
                      : name == ":path"      ? &path_
                                             : nullptr;
  if (slot == nullptr) {
    return refuse(400, "an unknown pseudo-header");
  }
  if (*slot != k_none) {
    return refuse(400, "a repeated pseudo-header");
  }
  *slot = fields_.size();
  fields_.add_lowercase(name, value);  // one of the four above
}

void h2_request_builder::add_regular(std::string_view name, std::string_view value) {
  regular_seen_ = true;
  if (!valid_name(name)) {
    return refuse(400, "an invalid field name");
  }
  if (connection_specific(name)) {
    return refuse(400, "a connection-specific field in an HTTP/2 request");
  }
  if (name == "te") {
    if (value != "trailers") {
      return refuse(400, "TE other than trailers in an HTTP/2 request");
    }
    te_trailers_ = true;
    return;
  }
  if (name == "cookie") {
    if (value.empty()) {
      return;  // an empty crumb carries nothing, and would leave "; " at an end
    }
    if (!cookie_.empty()) {
      cookie_.append("; ");
    }
    cookie_.append(value);
    return;
  }
  if (name == "host") {
    if (host_ != k_none) {
      return refuse(400, "more than one Host");
    }
    host_ = fields_.size();
  }
  fields_.add_lowercase(name, value);  // valid_name: no upper case
}

unsigned h2_request_builder::finish(request_head& out) {
  out = request_head();
  if (status_ != 0) {
    return status_;
  }
  if (method_ == k_none) {
    refuse(400, "no :method");
    return status_;
  }
  const std::string_view method = stored(method_);
  if (!is_token(method)) {
    refuse(400, "an invalid :method");
    return status_;
  }
  // CONNECT's form (no :scheme, no :path) is told apart before they are asked for.
  if (method == "CONNECT") {
    refuse(501, "CONNECT over HTTP/2 is not supported");
    return status_;
  }
  if (scheme_ == k_none || path_ == k_none) {
    refuse(400, scheme_ == k_none ? "no :scheme" : "no :path");
    return status_;
  }
  // The upstream is spoken to in HTTP/1.1: only what an http or https URI can say goes on.
  const std::string_view scheme = stored(scheme_);
  if (scheme != "http" && scheme != "https") {
    refuse(400, "a :scheme other than http or https");
    return status_;
  }
  const std::string_view path = stored(path_);
  if (path.empty()) {
    refuse(400, "an empty :path");
    return status_;
  }
  if (path == "*" && method != "OPTIONS") {
    refuse(400, ":path * in a request other than OPTIONS");
    return status_;
  }
  // RFC 9113 §8.3.1: origin-form (or "*"); an absolute URI would reach the upstream as one.
  if (path != "*" && path.front() != '/') {
    refuse(400, "a :path that is not origin-form");
    return status_;
  }
  // RFC 9113 §8.3.1: http and https need an authority, from :authority or else Host; both
  // sent, they must name the same one, since the upstream is told only one.
  if (authority_ == k_none && host_ == k_none) {
    refuse(400, "neither :authority nor Host");
    return status_;
  }
  if ((authority_ != k_none && stored(authority_).empty()) ||
      (host_ != k_none && stored(host_).empty())) {
    refuse(400, "an empty :authority or Host");
    return status_;
  }
  if (authority_ != k_none && host_ != k_none && !iequals(stored(authority_), stored(host_))) {
    refuse(400, ":authority and Host differ");
    return status_;
  }
  out.method_string(method);
  out.target(path);
  out.version(11);
  out.insert(http::field::host, stored(authority_ != k_none ? authority_ : host_));
  for (std::size_t i = 0; i < fields_.size(); ++i) {
    if (i == method_ || i == scheme_ || i == authority_ || i == path_ || i == host_) {
      continue;
    }
    const h2_fields::field f = fields_[i];
    out.insert(f.name, f.value);
  }
  if (!cookie_.empty()) {
    out.insert(http::field::cookie, cookie_);
  }
  return 0;
}

void h2_request_builder::clear() {
  bytes_ = 0;
  status_ = 0;
  reason_ = {};
  te_trailers_ = false;
  regular_seen_ = false;
  fields_.clear();
  clear_keeping(cookie_, k_kept_cookie);
  method_ = scheme_ = authority_ = path_ = host_ = k_none;
}

}  // namespace ratewall
