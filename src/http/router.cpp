#include "ratewall/http/router.hpp"

#include "ratewall/http/request_target.hpp"

#include "ratewall/core/parse.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <stdexcept>
#include <utility>

namespace ratewall {

namespace {

// libstdc++ runs std::regex by recursive backtracking by default: one stack frame per input
// character, so a 16 KiB path segfaults on patterns like "/api/(a|b)*". Its breadth-first
// executor is linear in the input and only gives up back-references.
constexpr auto k_regex_flags = std::regex::ECMAScript | std::regex::optimize
#ifdef __GLIBCXX__
                               | std::regex_constants::__polynomial
#endif
    ;

char ascii_lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) {
      return false;
    }
  }
  return true;
}

// "Example.COM:8080" -> "Example.COM", "[::1]:80" -> "::1", "host." -> "host".
std::string_view host_without_port(std::string_view host) {
  while (!host.empty() && (host.front() == ' ' || host.front() == '\t')) {
    host.remove_prefix(1);
  }
  while (!host.empty() && (host.back() == ' ' || host.back() == '\t')) {
    host.remove_suffix(1);
  }
  if (!host.empty() && host.front() == '[') {
    auto close = host.find(']');
    return close == std::string_view::npos ? host : host.substr(1, close - 1);
  }
  // More than one colon: a bare IPv6 address (not valid in Host, but not a port either).
  auto colon = host.find(':');
  if (colon != std::string_view::npos && host.find(':', colon + 1) == std::string_view::npos) {
    host = host.substr(0, colon);
  }
  if (!host.empty() && host.back() == '.') {
    host.remove_suffix(1);
  }
  return host;
}

/// The segments of a path_template with each literal made canonical by `canonical` (which
/// takes and gives a path); "" for each {name}.
template <class Canonical>
std::vector<std::string> template_literals(std::string_view path, const Canonical& canonical) {
  std::vector<std::string> segments;
  while (!path.empty()) {
    path.remove_prefix(1);  // "/"
    const std::string_view segment = path.substr(0, path.find('/'));
    path.remove_prefix(segment.size());
    if (segment.starts_with('{')) {
      segments.emplace_back();
    } else {
      segments.push_back(canonical("/" + std::string(segment)).substr(1));
    }
  }
  return segments;
}

bool ends_with_slash_of(std::string_view path, std::string_view exact) {
  return path.size() == exact.size() + 1 && path.back() == '/' && path.starts_with(exact);
}

// The IPv4 address a host names when it is an IPv4 literal: what parse_ip reads as one (the
// dotted quad, "::ffff:127.0.0.1") and the other spellings a client's resolver or browser takes
// for one, as inet_aton reads them ("127.1", "2130706433", "0x7f.0.0.1", "0177.0.0.1"); nullopt
// for a name.
std::optional<ip_address> ipv4_literal(std::string_view host) {
  if (auto address = parse_ip(host)) {
    return is_v4_mapped(*address) ? address : std::nullopt;
  }
  // inet_aton stops at whitespace and takes what came before; a host has none left here.
  in_addr v4{};
  if (host.empty() || host.find_first_of(" \t") != std::string_view::npos ||
      ::inet_aton(std::string(host).c_str(), &v4) == 0) {
    return std::nullopt;
  }
  ip_address address = k_v4_mapped_any;
  std::memcpy(address.data() + 12, &v4.s_addr, sizeof v4.s_addr);
  return address;
}

}  // namespace

struct router::compiled_route {
  enum class kind { exact, prefix, regex, path_template };
  kind path_kind = kind::prefix;
  std::string path;  // exact or prefix, canonical (lower case when case_insensitive)
  std::regex regex;
  // path_template: its segments, canonical like `path`; "" stands for a {name}.
  std::vector<std::string> segments;
  std::vector<std::string> methods;
  std::string host;  // without port; compared case-insensitively
  // The address `host` names when it is an IPv4 literal: a request's host in another spelling
  // of it ("127.1") matches too, so it cannot go around the route's limits.
  std::optional<ip_address> host_ipv4;
  bool case_insensitive = false;

  bool path_matches(std::string_view p) const {
    switch (path_kind) {
      case kind::exact:
        return p == path || ends_with_slash_of(p, path);
      case kind::prefix:
        return p.starts_with(path);
      case kind::regex:
        return std::regex_match(p.begin(), p.end(), regex);
      case kind::path_template:
        return template_matches(p);
    }
    return false;
  }
  // Segment by segment; a {name} takes any one non-empty segment. One trailing "/" is allowed,
  // as for path_exact.
  bool template_matches(std::string_view p) const {
    if (p.size() > 1 && p.back() == '/') {
      p.remove_suffix(1);
    }
    for (const std::string& segment : segments) {
      if (p.empty() || p.front() != '/') {
        return false;
      }
      p.remove_prefix(1);
      const std::string_view part = p.substr(0, p.find('/'));
      if (segment.empty() ? part.empty() : part != segment) {
        return false;
      }
      p.remove_prefix(part.size());
    }
    return p.empty();
  }
  bool method_matches(std::string_view method) const {
    if (methods.empty() || std::find(methods.begin(), methods.end(), method) != methods.end()) {
      return true;
    }
    return method == "HEAD" && std::find(methods.begin(), methods.end(), "GET") != methods.end();
  }
};

std::optional<std::string> path_regex_error(std::string_view pattern) {
  try {
    std::regex re(pattern.begin(), pattern.end(), k_regex_flags);
  } catch (const std::regex_error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

router::router(const config& cfg) {
  const path_options& opts = cfg.server.paths;
  routes_.reserve(cfg.routes.size());
  for (std::size_t i = 0; i < cfg.routes.size(); ++i) {
    const auto& m = cfg.routes[i].match;
    compiled_route r;
    r.case_insensitive = m.case_insensitive.value_or(opts.case_insensitive);
    auto canonical = [&](const std::string& p) {
      std::string c = canonical_config_path(p, opts);
      return r.case_insensitive ? ascii_lowered(c) : c;
    };
    // The loader sets exactly one path field; should several be set, the most specific wins.
    if (!m.path_exact.empty()) {
      r.path_kind = compiled_route::kind::exact;
      r.path = canonical(m.path_exact);
    } else if (!m.path_template.empty()) {
      r.path_kind = compiled_route::kind::path_template;
      r.segments = template_literals(m.path_template, canonical);
    } else if (!m.path_regex.empty()) {
      r.path_kind = compiled_route::kind::regex;
      auto flags = k_regex_flags;
      if (r.case_insensitive) {
        flags |= std::regex::icase;
      }
      try {
        r.regex = std::regex(m.path_regex, flags);
      } catch (const std::regex_error& e) {
        throw std::invalid_argument("routes[" + std::to_string(i) + "] (" + cfg.routes[i].name +
                                    "): path_regex: " + e.what());
      }
    } else {
      r.path_kind = compiled_route::kind::prefix;
      r.path = m.path_prefix.empty() ? std::string() : canonical(m.path_prefix);
    }
    r.methods = m.methods;
    r.host = std::string(host_without_port(m.host));
    r.host_ipv4 = ipv4_literal(r.host);
    routes_.push_back(std::move(r));
  }
}

router::router(const router&) = default;
router::router(router&&) noexcept = default;
router& router::operator=(const router&) = default;
router& router::operator=(router&&) noexcept = default;
router::~router() = default;

std::size_t router::size() const {
  return routes_.size();
}

std::optional<std::size_t> router::match(std::string_view method, std::string_view host,
                                         std::string_view path) const {
  const std::string_view request_host = host_without_port(host);
  std::string lowered;  // made once, for the first case-insensitive route tried
  std::optional<std::optional<ip_address>> request_ipv4;  // read once, when first needed
  for (std::size_t i = 0; i < routes_.size(); ++i) {
    const auto& r = routes_[i];
    if (!r.host.empty() && !iequals(r.host, request_host)) {
      if (!r.host_ipv4) {
        continue;
      }
      if (!request_ipv4) {
        request_ipv4 = ipv4_literal(request_host);
      }
      if (*request_ipv4 != r.host_ipv4) {
        continue;
      }
    }
    if (!r.method_matches(method)) {
      continue;
    }
    const bool lower = r.case_insensitive && r.path_kind != compiled_route::kind::regex;
    if (lower && lowered.empty()) {
      lowered = ascii_lowered(path);
    }
    if (r.path_matches(lower ? std::string_view(lowered) : path)) {
      return i;
    }
  }
  return std::nullopt;
}

}  // namespace ratewall
