#include "ratewall/http/router.hpp"

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

bool istarts_with(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
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

int hex_value(char c) {
  if (c >= '0' && c <= '9') {
    return c - '0';
  }
  c = ascii_lower(c);
  if (c >= 'a' && c <= 'f') {
    return c - 'a' + 10;
  }
  return -1;
}

bool is_unreserved(char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

bool needs_normalizing(std::string_view path) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '%') {
      return true;
    }
    // "//", "/." (covers "/./" and "/../"; also "/.well-known", which then costs a copy).
    if (path[i] == '/' && i + 1 < path.size() && (path[i + 1] == '/' || path[i + 1] == '.')) {
      return true;
    }
  }
  return false;
}

// Decodes unreserved escapes into `out` and upper-cases the hex of the others.
void percent_decode_unreserved(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      int hi = hex_value(in[i + 1]);
      int lo = hex_value(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        char c = static_cast<char>(hi << 4 | lo);
        if (is_unreserved(c)) {
          out.push_back(c);
        } else {
          static constexpr char digits[] = "0123456789ABCDEF";
          out.push_back('%');
          out.push_back(digits[hi]);
          out.push_back(digits[lo]);
        }
        i += 2;
        continue;
      }
    }
    out.push_back(in[i]);
  }
}

// Merges "/" runs and resolves dot segments in place; `s` starts with '/'. The output never
// outgrows the input, so writing behind the read position is safe.
void remove_dot_segments(std::string& s) {
  const std::size_t n = s.size();
  std::size_t w = 0;
  std::size_t i = 0;
  while (i < n) {
    while (i < n && s[i] == '/') {
      ++i;
    }
    std::size_t j = s.find('/', i);
    if (j == std::string::npos) {
      j = n;
    }
    std::string_view seg(s.data() + i, j - i);
    if (seg.empty()) {
      // Only reached at the end: the path ended with one or more slashes.
      s[w++] = '/';
      break;
    }
    if (seg == "." || seg == "..") {
      if (seg == ".." && w > 0) {
        w = std::string_view(s.data(), w).rfind('/');
      }
      if (j == n) {
        s[w++] = '/';
      }
      i = j;
      continue;
    }
    s[w++] = '/';
    std::memmove(s.data() + w, s.data() + i, seg.size());
    w += seg.size();
    i = j;
  }
  if (w == 0) {
    s[w++] = '/';
  }
  s.resize(w);
}

struct split_target {
  std::string_view authority;  // non-empty only for absolute-form
  std::string_view path;       // without query and fragment
};

split_target split(std::string_view target) {
  split_target out;
  if (!target.empty() && target.front() != '/') {
    std::size_t scheme_end = 0;
    if (istarts_with(target, "http://")) {
      scheme_end = 7;
    } else if (istarts_with(target, "https://")) {
      scheme_end = 8;
    }
    if (scheme_end != 0) {
      auto rest = target.substr(scheme_end);
      auto path_begin = rest.find_first_of("/?#");
      out.authority = rest.substr(0, path_begin);
      if (auto at = out.authority.rfind('@'); at != std::string_view::npos) {
        out.authority.remove_prefix(at + 1);
      }
      target =
          path_begin == std::string_view::npos ? std::string_view("/") : rest.substr(path_begin);
      if (target.front() != '/') {
        // "http://h?q": the path is "/".
        target = "/";
      }
    }
  }
  out.path = target.substr(0, target.find_first_of("?#"));
  return out;
}

std::string normalized_config_path(const std::string& path) {
  std::string scratch;
  return std::string(normalize_request_path(path, scratch));
}

}  // namespace

struct router::compiled_route {
  enum class kind { exact, prefix, regex };
  kind path_kind = kind::prefix;
  std::string path;  // exact or prefix, normalized
  std::regex regex;
  std::vector<std::string> methods;
  std::string host;  // without port; compared case-insensitively
};

std::string_view normalize_request_path(std::string_view target, std::string& scratch) {
  auto path = split(target).path;
  if (path.empty() || path.front() != '/' || !needs_normalizing(path)) {
    return path;
  }
  percent_decode_unreserved(path, scratch);
  remove_dot_segments(scratch);
  return scratch;
}

std::optional<std::string> path_regex_error(std::string_view pattern) {
  try {
    std::regex re(pattern.begin(), pattern.end(), k_regex_flags);
  } catch (const std::regex_error& e) {
    return std::string(e.what());
  }
  return std::nullopt;
}

router::router(const config& cfg) {
  routes_.reserve(cfg.routes.size());
  for (std::size_t i = 0; i < cfg.routes.size(); ++i) {
    const auto& m = cfg.routes[i].match;
    compiled_route r;
    // The loader sets exactly one path field; should several be set, the most specific wins.
    if (!m.path_exact.empty()) {
      r.path_kind = compiled_route::kind::exact;
      r.path = normalized_config_path(m.path_exact);
    } else if (!m.path_regex.empty()) {
      r.path_kind = compiled_route::kind::regex;
      try {
        r.regex = std::regex(m.path_regex, k_regex_flags);
      } catch (const std::regex_error& e) {
        throw std::invalid_argument("routes[" + std::to_string(i) + "] (" + cfg.routes[i].name +
                                    "): path_regex: " + e.what());
      }
    } else {
      r.path_kind = compiled_route::kind::prefix;
      r.path = m.path_prefix.empty() ? std::string() : normalized_config_path(m.path_prefix);
    }
    r.methods = m.methods;
    r.host = std::string(host_without_port(m.host));
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
                                         std::string_view target) const {
  auto parts = split(target);
  std::string_view request_host =
      host_without_port(parts.authority.empty() ? host : parts.authority);
  std::string scratch;
  std::string_view path = normalize_request_path(target, scratch);

  for (std::size_t i = 0; i < routes_.size(); ++i) {
    const auto& r = routes_[i];
    if (!r.host.empty() && !iequals(r.host, request_host)) {
      continue;
    }
    if (!r.methods.empty() &&
        std::find(r.methods.begin(), r.methods.end(), method) == r.methods.end()) {
      continue;
    }
    bool path_ok = false;
    switch (r.path_kind) {
      case compiled_route::kind::exact:
        path_ok = path == r.path;
        break;
      case compiled_route::kind::prefix:
        path_ok = path.starts_with(r.path);
        break;
      case compiled_route::kind::regex:
        path_ok = std::regex_match(path.begin(), path.end(), r.regex);
        break;
    }
    if (path_ok) {
      return i;
    }
  }
  return std::nullopt;
}

}  // namespace ratewall
