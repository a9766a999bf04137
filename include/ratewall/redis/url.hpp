#pragma once

// Header-only so that the config loader can validate store.redis.url without linking the
// Redis module.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ratewall/core/parse.hpp"

namespace ratewall::redis {

/// redis://[[user][:password]@]host[:port][/db]; IPv6 hosts in brackets ("[::1]:6379").
struct redis_url {
  std::string host;
  std::uint16_t port = 6379;
  std::string username;  // empty: AUTH with the password alone (the "default" user)
  std::string password;  // empty: no AUTH
  unsigned db = 0;
};

namespace detail {

// %XX escapes in the user part, so that passwords may hold '@', ':' or '/'.
inline std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out += s[i];
      continue;
    }
    if (i + 2 >= s.size() || hex_value(s[i + 1]) < 0 || hex_value(s[i + 2]) < 0) {
      return std::nullopt;
    }
    out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
    i += 2;
  }
  return out;
}

inline std::optional<unsigned> parse_decimal(std::string_view s, unsigned max) {
  if (s.empty() || s.size() > 10) {
    return std::nullopt;
  }
  std::uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  if (v > max) {
    return std::nullopt;
  }
  return static_cast<unsigned>(v);
}

}  // namespace detail

/// The parts of `url`, or nullopt with `error` saying what is wrong.
inline std::optional<redis_url> parse_redis_url(std::string_view url, std::string* error) {
  auto fail = [&](const char* what) -> std::optional<redis_url> {
    if (error != nullptr) {
      *error = what;
    }
    return std::nullopt;
  };
  constexpr std::string_view scheme = "redis://";
  if (url.substr(0, scheme.size()) != scheme) {
    return fail(R"(expected a URL like "redis://127.0.0.1:6379/0")");
  }
  std::string_view rest = url.substr(scheme.size());
  if (rest.find_first_of("?#") != std::string_view::npos) {
    return fail("query strings and fragments are not supported");
  }
  redis_url out;
  // The last '@' ends the user part: an unescaped '@' may sit in a password.
  if (auto at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view user = rest.substr(0, at);
    rest = rest.substr(at + 1);
    std::string_view name = user;
    std::string_view password;
    if (auto colon = user.find(':'); colon != std::string_view::npos) {
      name = user.substr(0, colon);
      password = user.substr(colon + 1);
    } else {
      // "redis://secret@host": a lone user part is the password, as redis-cli reads it.
      name = {};
      password = user;
    }
    auto decoded_name = detail::percent_decode(name);
    auto decoded_password = detail::percent_decode(password);
    if (!decoded_name || !decoded_password) {
      return fail("bad %-escape in the user part");
    }
    out.username = std::move(*decoded_name);
    out.password = std::move(*decoded_password);
  }
  std::string_view authority = rest;
  if (auto slash = rest.find('/'); slash != std::string_view::npos) {
    authority = rest.substr(0, slash);
    std::string_view db = rest.substr(slash + 1);
    if (!db.empty()) {
      auto n = detail::parse_decimal(db, 1u << 20);
      if (!n) {
        return fail("the database after '/' must be a number");
      }
      out.db = *n;
    }
  }
  std::string_view port;
  if (!authority.empty() && authority.front() == '[') {
    auto close = authority.find(']');
    if (close == std::string_view::npos) {
      return fail("unclosed '[' in an IPv6 host");
    }
    out.host = std::string(authority.substr(1, close - 1));
    std::string_view after = authority.substr(close + 1);
    if (!after.empty()) {
      if (after.front() != ':') {
        return fail("expected ':' and a port after the IPv6 host");
      }
      port = after.substr(1);
      if (port.empty()) {
        return fail("empty port");
      }
    }
  } else {
    auto colon = authority.rfind(':');
    out.host = std::string(authority.substr(0, colon));
    if (colon != std::string_view::npos) {
      port = authority.substr(colon + 1);
      if (port.empty()) {
        return fail("empty port");
      }
    }
  }
  if (out.host.empty()) {
    return fail("the URL names no host");
  }
  if (!port.empty()) {
    auto p = detail::parse_decimal(port, 65535);
    if (!p || *p == 0) {
      return fail("the port must be a number from 1 to 65535");
    }
    out.port = static_cast<std::uint16_t>(*p);
  }
  return out;
}

}  // namespace ratewall::redis
