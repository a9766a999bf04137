#include "ratewall/config/config.hpp"

namespace ratewall {

std::string_view to_string(algorithm a) {
  switch (a) {
    case algorithm::token_bucket:
      return "token_bucket";
    case algorithm::leaky_bucket:
      return "leaky_bucket";
    case algorithm::fixed_window:
      return "fixed_window";
    case algorithm::sliding_window_log:
      return "sliding_window_log";
    case algorithm::sliding_window_counter:
      return "sliding_window_counter";
    case algorithm::concurrency:
      return "concurrency";
  }
  return "token_bucket";
}

std::string_view to_string(store_failure f) {
  switch (f) {
    case store_failure::allow:
      return "allow";
    case store_failure::deny:
      return "deny";
    case store_failure::local:
      return "local";
  }
  return "allow";
}

std::string_view to_string(identity_source s) {
  switch (s) {
    case identity_source::api_key:
      return "api_key";
    case identity_source::user:
      return "user";
    case identity_source::ip:
      return "ip";
    case identity_source::header:
      return "header";
    case identity_source::query:
      return "query";
    case identity_source::cookie:
      return "cookie";
    case identity_source::path:
      return "path";
    case identity_source::jwt:
      return "jwt";
  }
  return "ip";
}

std::string_view to_string(bearer_use b) {
  switch (b) {
    case bearer_use::api_key:
      return "api_key";
    case bearer_use::jwt:
      return "jwt";
    case bearer_use::ignore:
      return "ignore";
  }
  return "api_key";
}

std::string_view to_string(jwt_algorithm a) {
  switch (a) {
    case jwt_algorithm::hs256:
      return "HS256";
    case jwt_algorithm::rs256:
      return "RS256";
    case jwt_algorithm::es256:
      return "ES256";
  }
  return "HS256";
}

std::string_view to_string(invalid_token_policy p) {
  return p == invalid_token_policy::reject ? "reject" : "ip";
}

std::string to_string(const endpoint& e) {
  const bool v6 = e.host.find(':') != std::string::npos;
  return (v6 ? "[" + e.host + "]" : e.host) + ":" + std::to_string(e.port);
}

std::string_view to_string(client_address_log c) {
  switch (c) {
    case client_address_log::raw:
      return "raw";
    case client_address_log::off:
      return "off";
    case client_address_log::hashed:
      break;
  }
  return "hashed";
}

std::string to_string(const identity_descriptor& d) {
  std::string out;
  for (const identity_part& part : d.parts) {
    if (!out.empty()) {
      out += '+';
    }
    out += to_string(part.source);
    if (!part.name.empty()) {
      out += ':';
      out += part.name;
    }
  }
  return out;
}

std::string_view to_string(tls_version v) {
  switch (v) {
    case tls_version::v1_2:
      return "1.2";
    case tls_version::v1_3:
      return "1.3";
  }
  return "1.2";
}

std::string key_name_problem(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return "a key name has 1 to 64 characters";
  }
  for (char c : name) {
    if (c < 0x20 || c > 0x7e || c == '"' || c == '\\') {
      return "a key name is printable ASCII without quotes or backslashes";
    }
  }
  return {};
}

}  // namespace ratewall
