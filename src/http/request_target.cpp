#include "ratewall/http/request_target.hpp"

#include <array>
#include <cstring>

#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace {

using escaped_slash = path_options::escaped_slash;
using backslash = path_options::backslash;
using semicolon = path_options::semicolon;

constexpr bool is_unreserved(unsigned char c) {
  return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_' || c == '~';
}

constexpr bool is_sub_delim(unsigned char c) {
  return c == '!' || c == '$' || c == '&' || c == '\'' || c == '(' || c == ')' || c == '*' ||
         c == '+' || c == ',' || c == ';' || c == '=';
}

// pchar (RFC 3986 §3.3) less '%', which is checked with its two hex digits; '/' and '?' for
// path and query.
constexpr std::array<bool, 256> make_target_chars() {
  std::array<bool, 256> t{};
  for (int c = 0; c < 256; ++c) {
    auto u = static_cast<unsigned char>(c);
    t[u] = is_unreserved(u) || is_sub_delim(u) || u == ':' || u == '@' || u == '/' || u == '?';
  }
  return t;
}
constexpr auto k_target_chars = make_target_chars();

bool istarts_with(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) {
    return false;
  }
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
    if (c != prefix[i]) {
      return false;
    }
  }
  return true;
}

// Resolves "." and ".." segments of `s` (which starts with '/') in place, merging runs of '/'
// when `merge` is set. The output never outgrows the input, so writing behind the read position
// is safe. A trailing '/' (or a trailing dot segment) leaves the path ending in '/'.
void remove_dot_segments(std::string& s, bool merge) {
  const std::size_t n = s.size();
  std::size_t w = 0;
  std::size_t i = 0;
  while (i < n) {
    ++i;  // s[i - 1] is the '/' that starts this segment
    if (merge) {
      while (i < n && s[i] == '/') {
        ++i;
      }
    }
    std::size_t j = s.find('/', i);
    if (j == std::string::npos) {
      j = n;
    }
    const std::string_view seg(s.data() + i, j - i);
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

// Decodes and filters the raw path into `out` per `opts`; false (and `error`) when refused.
// With `lenient` (configuration paths), nothing is refused: what would be is kept as written.
bool decode_path(std::string_view raw, const path_options& opts, bool lenient, std::string& out,
                 std::string_view& error) {
  static constexpr char digits[] = "0123456789ABCDEF";
  out.clear();
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    const char c = raw[i];
    if (c == ';' && !lenient && opts.semicolons != semicolon::keep) {
      if (opts.semicolons == semicolon::reject) {
        error = "path parameters (';') are not accepted";
        return false;
      }
      // strip_params: the segment's parameters go, as Tomcat and Spring read the path.
      while (i + 1 < raw.size() && raw[i + 1] != '/') {
        ++i;
      }
      continue;
    }
    if (c == '\\' && !lenient && opts.backslashes == backslash::reject) {
      error = "backslash in the path";
      return false;
    }
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    const int hi = i + 2 < raw.size() ? hex_value(raw[i + 1]) : -1;
    const int lo = i + 2 < raw.size() ? hex_value(raw[i + 2]) : -1;
    if (hi < 0 || lo < 0) {
      if (lenient) {
        out.push_back(c);
        continue;
      }
      error = "malformed percent-encoding";
      return false;
    }
    i += 2;
    const auto decoded = static_cast<unsigned char>(hi << 4 | lo);
    if (is_unreserved(decoded)) {
      out.push_back(static_cast<char>(decoded));
      continue;
    }
    if ((decoded == '/' || decoded == '\\') && !lenient) {
      if (opts.escaped_slashes == escaped_slash::reject) {
        error = "encoded slash or backslash (%2F, %5C) in the path";
        return false;
      }
      if (opts.escaped_slashes == escaped_slash::decode) {
        if (decoded == '\\' && opts.backslashes == backslash::reject) {
          error = "backslash in the path";
          return false;
        }
        out.push_back(static_cast<char>(decoded));
        continue;
      }
    }
    out.push_back('%');
    out.push_back(digits[hi]);
    out.push_back(digits[lo]);
  }
  return true;
}

}  // namespace

// host [":" port], host a reg-name or an IP-literal in brackets; no userinfo.
bool valid_authority(std::string_view a) {
  if (a.empty()) {
    return false;
  }
  std::size_t i = 0;
  if (a.front() == '[') {
    auto close = a.find(']');
    if (close == std::string_view::npos || close == 1) {
      return false;
    }
    for (char c : a.substr(1, close - 1)) {
      auto u = static_cast<unsigned char>(c);
      if (!(hex_value(c) >= 0 || u == ':' || u == '.')) {
        return false;
      }
    }
    i = close + 1;
  } else {
    for (; i < a.size() && a[i] != ':'; ++i) {
      auto u = static_cast<unsigned char>(a[i]);
      if (!(is_unreserved(u) || is_sub_delim(u))) {  // %-escapes in a host: refused too
        return false;
      }
      // An empty label, as nginx refuses it: "api.example.com.." would name no route's host
      // (one trailing dot is dropped for routing, two are not), and an upstream that does not
      // look at Host would serve it around the host's limit.
      if (u == '.' && (i == 0 || a[i - 1] == '.')) {
        return false;  // a leading dot too: ".api.example.com"
      }
    }
    if (i == 0) {
      return false;
    }
  }
  if (i == a.size()) {
    return true;
  }
  if (a[i] != ':' || i + 1 == a.size() || a.size() - i - 1 > 5) {
    return false;
  }
  for (char c : a.substr(i + 1)) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

bool canonicalize_target(std::string_view target, const path_options& opts, canonical_target& out) {
  out.authority.clear();
  out.path.clear();
  out.query.clear();
  out.error = {};
  if (target.empty()) {
    out.error = "empty request-target";
    return false;
  }
  for (std::size_t i = 0; i < target.size(); ++i) {
    const auto c = static_cast<unsigned char>(target[i]);
    if (k_target_chars[c] || c == '%') {
      continue;
    }
    if (c == '\\' && opts.backslashes == backslash::keep) {
      continue;
    }
    if (c == '[' || c == ']') {
      continue;  // an IP-literal's brackets: valid_authority checks where they stand
    }
    out.error = c == '#' ? "a fragment is not sent in a request-target"
                         : "character not allowed in the request-target";
    return false;
  }

  std::string_view rest = target;
  if (!rest.empty() && rest.front() != '/') {
    std::size_t scheme = istarts_with(rest, "http://") ? 7 : istarts_with(rest, "https://") ? 8 : 0;
    if (scheme == 0) {
      out.error = "the request-target is neither origin-form nor absolute-form";
      return false;
    }
    rest.remove_prefix(scheme);
    const std::size_t end = rest.find_first_of("/?");
    const std::string_view authority = rest.substr(0, end);
    if (!valid_authority(authority)) {
      out.error = "invalid authority in the request-target";
      return false;
    }
    out.authority = authority;
    rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end);
  }
  const std::size_t q = rest.find('?');
  std::string_view raw_path = rest.substr(0, q);
  if (q != std::string_view::npos) {
    out.query = rest.substr(q);
  }
  if (raw_path.find_first_of("[]") != std::string_view::npos ||
      out.query.find_first_of("[]") != std::string::npos) {
    out.error = "character not allowed in the request-target";
    return false;
  }
  if (raw_path.empty()) {
    raw_path = "/";  // "http://h" and "http://h?q" ask for "/"
  }
  if (!decode_path(raw_path, opts, false, out.path, out.error)) {
    return false;
  }
  remove_dot_segments(out.path, opts.merge_slashes);
  return true;
}

std::string canonical_config_path(std::string_view path, const path_options& opts) {
  std::string out;
  std::string_view ignored;
  decode_path(path, opts, true, out, ignored);
  if (out.empty() || out.front() != '/') {
    return out;  // a prefix such as "" matches everything as written
  }
  remove_dot_segments(out, opts.merge_slashes);
  return out;
}

}  // namespace ratewall
