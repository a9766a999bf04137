#pragma once

// Parsers for the small value syntaxes of the config file: durations, rates, endpoints,
// address ranges and byte sizes, plus the 16-byte address form the identity module compares
// against `trusted_proxies`. Pure functions: no I/O, no exceptions, no locale.

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "ratewall/config/config.hpp"

namespace ratewall {

/// `s` without leading and trailing optional whitespace (spaces and tabs, RFC 9110 §5.6.3).
constexpr std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) {
    s.remove_suffix(1);
  }
  return s;
}

/// Calls `each` for every element of a comma-separated field value, trimmed, empty ones
/// skipped (RFC 9110 §5.6.1).
template <class F>
constexpr void for_each_list_element(std::string_view value, F each) {
  while (!value.empty()) {
    const std::size_t comma = value.find(',');
    const std::string_view element = trim(value.substr(0, comma));
    if (!element.empty()) {
      each(element);
    }
    value = comma == std::string_view::npos ? std::string_view{} : value.substr(comma + 1);
  }
}

/// `c` in lower case when it is an ASCII letter.
constexpr char ascii_lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

/// `c` may appear in a token (RFC 9110 §5.6.2): a method, a field name, a transfer coding.
constexpr bool is_tchar(char c) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) {
    return true;
  }
  switch (c) {  // (a switch, not a find in "!#$...": that is a memchr call for each '-')
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

/// `s` is a token (RFC 9110 §5.6.2): one or more tchar.
constexpr bool is_token(std::string_view s) {
  if (s.empty()) {
    return false;
  }
  for (char c : s) {
    if (!is_tchar(c)) {
      return false;
    }
  }
  return true;
}

/// `name` is `field` to a CGI or WSGI server: the same letters, case and '_' for '-' (on either
/// side) aside.
bool cgi_same(std::string_view name, std::string_view field);
/// cgi_same(name, f) for one of `fields`.
bool cgi_same_any(std::string_view name, std::span<const std::string_view> fields);

/// `s` with ASCII letters in lower case.
inline std::string ascii_lowered(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = ascii_lower(c);
  }
  return out;
}

/// The value of a hexadecimal digit, -1 for any other character.
constexpr int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  if (c >= 'A' && c <= 'F') {
    return c - 'A' + 10;
  }
  return -1;
}

/// Why a text is not a value, phrased for the operator ("expected a duration like ...").
struct parse_error {
  std::string message;
};

/// Either a value or a parse_error. Reads like std::optional: test it, then dereference.
template <class T>
class parse_result {
 public:
  parse_result(T value) : value_(std::move(value)) {}
  parse_result(parse_error error) : error_(std::move(error.message)) {}

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }
  const T& operator*() const { return *value_; }
  const T* operator->() const { return &*value_; }
  const T& value() const { return value_.value(); }
  /// Empty when ok().
  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

/// The longest duration (timeout, window, rate period) a config may hold: 10000 days, about
/// 27 years. Timeouts are added to a monotonic clock reading, windows up to twice (a sliding
/// window counter looks two ahead): bounded so, every such sum stays exact in 64-bit
/// nanoseconds for well over a century of uptime (INT64_MAX ns, 106751 days, would overflow
/// after a day).
inline constexpr nanos k_max_duration = std::chrono::hours(24) * 10000;

/// A whole number followed by one unit: `ms`, `s`, `m`, `h` or `d` ("250ms", "1s", "1m",
/// "1h", "1d"). The unit is required (a bare "10" is ambiguous); fractions, signs, spaces and
/// anything above k_max_duration are rejected. "0s" is accepted: callers decide whether zero
/// makes sense.
parse_result<nanos> parse_duration(std::string_view text);

/// `<count>/<period>`: the period is a bare unit ("10/s", "1000/h", "1/d") or a duration
/// ("5/60s", "100/250ms"). The count must be > 0, the period > 0, and the rate at most one
/// event per nanosecond.
parse_result<rate_spec> parse_rate(std::string_view text);

/// `host:port` or `[ipv6]:port` ("127.0.0.1:8080", "[::]:8080", "api.internal:8000").
/// Bracketed hosts must be IPv6 addresses and are returned without brackets. Port 0 is
/// accepted (an ephemeral listen port); callers reject it where it cannot work.
parse_result<endpoint> parse_endpoint(std::string_view text);

/// `address/prefix` or a bare address (= one host: /32 or /128). IPv4 ranges are stored
/// v4-mapped with the prefix counted on 128 bits ("10.0.0.0/8" -> ::ffff:10.0.0.0/104).
/// Bits set beyond the prefix are an error ("10.0.0.1/8" is probably a typo).
parse_result<cidr> parse_cidr(std::string_view text);

/// A number of bytes: plain digits ("16384") or digits with a binary suffix `KiB`, `MiB`,
/// `GiB` ("64KiB", "10MiB").
parse_result<std::uint64_t> parse_byte_size(std::string_view text);

/// An address in the 16-byte form of `cidr::address` (IPv4 as ::ffff:a.b.c.d).
using ip_address = std::array<std::uint8_t, 16>;

/// ::ffff:0.0.0.0: IPv4's 0.0.0.0 (its wildcard) in that form, and, as a /96, all of IPv4.
inline constexpr ip_address k_v4_mapped_any{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 0};

/// Parses one IPv4 or IPv6 address (no brackets, no port, no zone). IPv4 and its v4-mapped
/// IPv6 spelling ("::ffff:1.2.3.4") give the same bytes.
std::optional<ip_address> parse_ip(std::string_view text);

/// True for ::ffff:a.b.c.d, i.e. an address that came from IPv4.
bool is_v4_mapped(const ip_address& address);
/// Whether `host` (an address, or "localhost") can only be reached from this machine:
/// 127.0.0.0/8, ::1, ::ffff:127.0.0.0/104, localhost.
bool is_loopback_host(const std::string& host);

/// Dotted quad for v4-mapped addresses, RFC 5952 text for the rest.
std::string format_ip(const ip_address& address);

/// `address` with every bit after the first `prefix` (of 128) cleared: groups IPv6 clients by
/// network (identity.ipv6_prefix). A prefix >= 128 returns the address unchanged.
ip_address mask_ip(const ip_address& address, unsigned prefix);

/// True when the first `range.prefix` bits of `address` equal those of `range.address`.
bool cidr_contains(const cidr& range, const ip_address& address);

/// The shortest exact spelling in the units parse_duration reads ("1500ms", "2m", "1d").
/// Sub-millisecond remainders are printed as nanoseconds ("1500ns"): for messages only.
std::string format_duration(nanos d);

/// "10/s", "5/60s": round-trips through parse_rate.
std::string format_rate(const rate_spec& rate);

}  // namespace ratewall
