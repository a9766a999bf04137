#include "ratewall/http/identity.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>
#include <string>
#include <utility>

#include "ratewall/core/parse.hpp"
#include "ratewall/core/string_hash.hpp"

namespace ratewall {

namespace {

// Tells the cache entries of one resolver from those of another (reloads make new ones).
std::atomic<std::uint64_t> g_resolver_generation{0};

// 128 bits of HMAC: collisions between subjects are out of reach, and the text stays short.
constexpr std::size_t k_subject_hash_bytes = 16;
// 64 bits: enough to tell subjects apart in logs, short enough to read.
constexpr std::size_t k_log_hash_bytes = 8;

constexpr std::string_view k_unknown_key = "unknown API key";

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    char x = a[i] >= 'A' && a[i] <= 'Z' ? static_cast<char>(a[i] - 'A' + 'a') : a[i];
    char y = b[i] >= 'A' && b[i] <= 'Z' ? static_cast<char>(b[i] - 'A' + 'a') : b[i];
    if (x != y) {
      return false;
    }
  }
  return true;
}

// "Bearer <token>" -> "<token>"; anything else -> "".
std::string_view bearer_token(std::string_view authorization) {
  authorization = trim(authorization);
  constexpr std::string_view scheme = "bearer";
  if (authorization.size() <= scheme.size() ||
      !iequals(authorization.substr(0, scheme.size()), scheme) ||
      (authorization[scheme.size()] != ' ' && authorization[scheme.size()] != '\t')) {
    return {};
  }
  return trim(authorization.substr(scheme.size() + 1));
}

// ":8080" with at least one digit and at most five.
bool is_port_suffix(std::string_view s) {
  if (s.size() < 2 || s.size() > 6 || s.front() != ':') {
    return false;
  }
  for (char c : s.substr(1)) {
    if (c < '0' || c > '9') {
      return false;
    }
  }
  return true;
}

// One address as proxies write it: "1.2.3.4", "1.2.3.4:80", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:80".
std::optional<ip_address> parse_address(std::string_view s) {
  s = trim(s);
  if (s.empty()) {
    return std::nullopt;
  }
  if (s.front() == '[') {
    auto close = s.find(']');
    if (close == std::string_view::npos) {
      return std::nullopt;
    }
    auto rest = s.substr(close + 1);
    if (!rest.empty() && !is_port_suffix(rest)) {
      return std::nullopt;
    }
    return parse_ip(s.substr(1, close - 1));
  }
  auto colon = s.find(':');
  if (colon != std::string_view::npos && s.find(':', colon + 1) == std::string_view::npos) {
    if (!is_port_suffix(s.substr(colon))) {
      return std::nullopt;
    }
    s = s.substr(0, colon);
  }
  return parse_ip(s);
}

// A value as an application reads it: %XX decoded, and for a query (`plus_is_space`) '+' a
// space. A '%' not followed by two hex digits stays as it is. Decoding only ever makes two
// spellings one value, never one spelling two: it cannot give a client a fresh budget.
std::string percent_decoded(std::string_view s, bool plus_is_space) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+' && plus_is_space) {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 &&
               hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

/// What one source of a descriptor found in the request.
struct part_found {
  std::optional<std::string> value;  // nullopt: absent
  bool repeated = false;             // sent more than once: the request is refused
  bool hidden = false;               // a cookie's name again inside a pair: refused too
  bool cut = false;                  // a cookie's value some applications end early: refused too
  std::string_view why;              // set when applications would read it differently: refused too

  bool ambiguous() const { return !why.empty(); }
};

// Why a query parameter or a cookie naming the client is refused, shared by both readers.
constexpr std::string_view k_spelled_alike =
    "spelled in a way some applications read as its name and others do not";
constexpr std::string_view k_not_utf8 =
    "with a value that is not UTF-8 once decoded, which applications read in different ways";

}  // namespace

std::string php_name(std::string_view name) {
  name.remove_prefix(std::min(name.find_first_not_of(' '), name.size()));
  name = name.substr(0, name.find('\0'));
  std::string out(name);
  const auto underscore = [](std::string::iterator from, std::string::iterator to,
                             std::string_view these) {
    std::replace_if(
        from, to, [&](char c) { return these.find(c) != std::string_view::npos; }, '_');
  };
  const std::size_t bracket = std::min(out.find('['), out.size());
  underscore(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(bracket), " .");
  if (bracket < out.size()) {
    if (out.find(']', bracket) != std::string::npos) {
      out.resize(bracket);  // an array element: the array has the name before '['
    } else {
      // Not an array: since PHP 8 the '[' and every ' ', '.' and '[' after it become '_'.
      underscore(out.begin() + static_cast<std::ptrdiff_t>(bracket), out.end(), " .[");
    }
  }
  return out;
}

bool names_alike(std::string_view decoded, std::string_view name) {
  // Every comparison ignores case: ASP.NET reads query and cookie names so.
  if (iequals(decoded, name)) {
    return true;
  }
  // Rack 2 (Rails 7.0, Sinatra) drops any run of '[' and ']' before a name and any of ']'
  // after it, and files what follows in brackets under it: "]tenant", "tenant]", "[[tenant]]"
  // and "tenant]x" are tenant there. Only "tenant[", a bracket left open, keeps its whole
  // name. Express's qs reads a name that opens with "[tenant]" as tenant, whatever follows it
  // ("[tenant][" too: it drops what no bracket closes).
  if (decoded.find_first_of("[]") != std::string_view::npos) {
    std::string_view rest =
        decoded.substr(std::min(decoded.find_first_not_of("[]"), decoded.size()));
    const std::string_view core = rest.substr(0, rest.find_first_of("[]"));
    rest.remove_prefix(core.size());
    rest.remove_prefix(std::min(rest.find_first_not_of(']'), rest.size()));
    if (!core.empty() && (rest != "[" || decoded.front() == '[') && iequals(core, name)) {
      return true;
    }
  }
  // Only a name with a character PHP changes can be another name to it.
  constexpr std::string_view k_php_changes(" .[\0", 4);
  if (decoded.find_first_of(k_php_changes) == std::string_view::npos &&
      name.find_first_of(k_php_changes) == std::string_view::npos) {
    return false;
  }
  return iequals(php_name(decoded), php_name(name));
}

namespace {

// Whether `s` is UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF).
bool is_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned min = 0;
    unsigned cp = 0;
    if (c < 0x80) {
      ++i;
      continue;
    }
    if (c >= 0xC2 && c <= 0xDF) {
      n = 1, min = 0x80, cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
      n = 2, min = 0x800, cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      n = 3, min = 0x10000, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) {
      return false;  // cut short
    }
    for (std::size_t k = 1; k <= n; ++k) {
      const auto next = static_cast<unsigned char>(s[i + k]);
      if ((next & 0xC0) != 0x80) {
        return false;
      }
      cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      return false;
    }
    i += n + 1;
  }
  return true;
}

// Express's qs and PHP (max_input_vars) read the first 1000 parameters of a query, counting
// empty ones in qs's case, and drop the rest.
constexpr std::size_t k_parameters_read = 1000;

// query:NAME: the decoded value of the one parameter whose decoded name is NAME. Pairs are cut
// at '&' and at ';', so that no reading of the query finds a second NAME that this one missed.
// NAME is refused (ambiguous, with `why`) where applications would read it differently: each
// made-up value would then be a budget of its own for requests the application serves as one
// client, or as none:
// - spelled so that some read it as NAME and others not (names_alike: "TENANT" to ASP.NET,
//   "tenant.x" to PHP, "]tenant" to Rack, "[tenant]" to Express);
// - in a pair with a ';': Rack 2 cuts there, Express, Django and PHP read on, Go drops the pair;
// - past the 1000th parameter, which Express and PHP never read;
// - with a value that is not UTF-8 once decoded: Django and Node's querystring make each bad
//   byte U+FFFD, qs keeps the escapes as they were sent.
part_found query_value(std::string_view query, std::string_view name) {
  part_found found;
  std::size_t parameters = 0;
  while (!query.empty()) {
    const auto amp = query.find('&');
    const std::string_view piece = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    ++parameters;
    for (std::string_view rest = piece;;) {
      const auto semi = rest.find(';');
      const std::string_view pair = rest.substr(0, semi);
      const auto eq = pair.find('=');
      const std::string decoded = percent_decoded(pair.substr(0, eq), true);
      if (names_alike(decoded, name)) {
        std::string value = eq == std::string_view::npos
                                ? std::string()
                                : percent_decoded(pair.substr(eq + 1), true);
        if (decoded != name) {
          found.why = k_spelled_alike;
        } else if (piece.find(';') != std::string_view::npos) {
          found.why =
              "in a pair with a ';', which some applications read as a separator, others as "
              "part of the value and Go's as an error";
        } else if (parameters > k_parameters_read) {
          found.why = "past the 1000th parameter, which Express and PHP do not read";
        } else if (!is_utf8(value)) {
          found.why = k_not_utf8;
        } else if (found.value) {
          found.repeated = true;
          return found;
        } else {
          found.value = std::move(value);
        }
        if (found.ambiguous()) {
          return found;
        }
      }
      if (semi == std::string_view::npos) {
        break;
      }
      rest.remove_prefix(semi + 1);
    }
  }
  return found;
}

/// Whether `pair` holds `name=` after a space, a tab or a comma, the name spelled in any way
/// that reads as `name` here (names_alike: any case, PHP's and Express's spellings). This reader
/// splits Cookie at ';' alone (RFC 6265 §5.4); Python's http.cookies (Django, Bottle) also ends
/// a pair at whitespace and after a comma, and ASP.NET Core's reader at a comma, so to them
/// `x=1 session=b` is two cookies, the second taking the place of any `session` before it. One
/// spelling would then be charged, another served.
bool hides_cookie(std::string_view pair, std::string_view name) {
  // Each word that starts after a separator, then optional blanks and '=': every byte is looked
  // at a bounded number of times, however the pair is spaced (it may be 64 KiB of a head).
  constexpr std::string_view k_separators = " \t,";
  for (std::size_t at = pair.find_first_of(k_separators, 1); at != std::string_view::npos;
       at = pair.find_first_of(k_separators, at + 1)) {
    const std::size_t start = at + 1;
    const std::size_t end = pair.find_first_of(" \t,=", start);
    if (end == std::string_view::npos) {
      return false;  // no '=' after it: no word after it is a name
    }
    if (end == start) {
      continue;  // another separator, or '=' at once
    }
    const std::size_t eq = pair.find_first_not_of(" \t", end);
    if (eq != std::string_view::npos && pair[eq] == '=' &&
        names_alike(percent_decoded(pair.substr(start, end - start), true), name)) {
      return true;
    }
  }
  return false;
}

// A cookie's pair, name or value without the blanks around it, as applications trim them:
// Django's str.strip() (the field read as Latin-1) also drops NEL (0x85) and NO-BREAK SPACE
// (0xA0), and Express's cookie module's trim() the latter. "acme\xA0" is acme there: kept,
// it would be a budget of its own for one client.
std::string_view cookie_trim(std::string_view s) {
  constexpr std::string_view k_blanks(" \t\x85\xA0");
  const std::size_t start = s.find_first_not_of(k_blanks);
  if (start == std::string_view::npos) {
    return {};
  }
  return s.substr(start, s.find_last_not_of(k_blanks) - start + 1);
}

// cookie:NAME in the Cookie fields ("a=1; b=2"): its value without the quotes RFC 6265 allows
// around it, percent-decoded (as Express and PHP read cookies). A name only some applications
// read as NAME (names_alike) is ambiguous, and so is a value not UTF-8 once decoded. Sent twice
// with different values: repeated (frameworks differ on which one they
// keep). A value that opens a quote and does not close it, or has a backslash inside quotes,
// is ambiguous: Express's cookie module drops the first and last characters of any value that
// starts with '"', and Python's http.cookies (Django) and Werkzeug undo backslash escapes
// inside quotes ("\141" is a) where Express keeps them. No reading of such a value is every
// application's: each spelling would be a budget of its own.
part_found cookie_value(const request_fields& fields, std::string_view name) {
  part_found found;
  for (std::size_t i = 0;; ++i) {
    const std::optional<std::string_view> line = fields.value("cookie", i);
    if (!line) {
      return found;
    }
    std::string_view rest = *line;
    while (!rest.empty()) {
      const auto semi = rest.find(';');
      const std::string_view pair = cookie_trim(rest.substr(0, semi));
      rest = semi == std::string_view::npos ? std::string_view() : rest.substr(semi + 1);
      if (hides_cookie(pair, name)) {
        found.hidden = true;
        return found;
      }
      const auto eq = pair.find('=');
      if (eq == std::string_view::npos) {
        continue;
      }
      const std::string_view cookie = cookie_trim(pair.substr(0, eq));
      if (cookie != name) {
        if (names_alike(percent_decoded(cookie, true), name)) {
          // "SESSION" to ASP.NET, "sess%69on" or "session[x]" to PHP, no cookie of that name
          // to Express or Django: a made-up value each time would be a budget of its own.
          found.why = k_spelled_alike;
          return found;
        }
        continue;
      }
      std::string_view raw = cookie_trim(pair.substr(eq + 1));
      // RFC 6265's cookie-octets have no blank and no comma, and readers end a value at them
      // differently: Python's http.cookies (Bottle, CherryPy) at a blank outside quotes,
      // ASP.NET Core's and Rack's at a comma, Express's and the gateway's at the ';' alone.
      // `session=victim x1=1` would be victim to one, a fresh budget per spelling to another.
      const bool quoted = !raw.empty() && raw.front() == '"';
      if (raw.find(',') != std::string_view::npos ||
          (!quoted && raw.find_first_of(" \t") != std::string_view::npos)) {
        found.cut = true;
        return found;
      }
      if (quoted) {
        // (A quote inside the quotes too: "a"b" is a"b to one reader, a to another.)
        if (raw.size() < 2 || raw.back() != '"' ||
            raw.substr(1, raw.size() - 2).find_first_of("\\\"") != std::string_view::npos) {
          found.why =
              "and is quoted so that applications read it differently (an unclosed quote, or a "
              "backslash inside quotes)";
          return found;
        }
        raw = raw.substr(1, raw.size() - 2);
      }
      // Rack and PHP read a cookie's '+' as a space, Express and Django as '+': to one reader
      // "a+b" is "a%20b", to the other "a%2Bb". Space and '+' are one character here, so
      // no spelling of a value is a budget of its own to either.
      std::string value = percent_decoded(raw, false);
      std::replace(value.begin(), value.end(), ' ', '+');
      if (!is_utf8(value)) {
        // PHP decodes "k%FF" to a byte, Express and Django keep the escape: each reads two
        // spellings of one value as two.
        found.why = k_not_utf8;
        return found;
      }
      if (found.value && *found.value != value) {
        found.repeated = true;
        return found;
      }
      found.value = std::move(value);
    }
  }
}

}  // namespace

bool query_names(std::string_view query, std::string_view name) {
  const part_found found = query_value(query, name);
  return found.value.has_value() || found.repeated || found.ambiguous();
}

namespace {

// The `index`th segment of a path ("/a/b": 0 is "a"); "" when it has fewer.
std::string_view path_segment(std::string_view path, std::size_t index) {
  for (std::size_t i = 0; !path.empty(); ++i) {
    path.remove_prefix(1);  // "/"
    const std::string_view segment = path.substr(0, path.find('/'));
    if (i == index) {
      return segment;
    }
    path.remove_prefix(segment.size());
  }
  return {};
}

// "header:x-tenant+ip=<32 hex>", as descriptor_subject makes them: the source of its first part,
// or nullopt when `subject` is not one.
std::optional<identity_source> descriptor_subject_source(std::string_view subject) {
  const auto eq = subject.rfind('=');
  if (eq == std::string_view::npos || subject.size() - eq - 1 != 2 * k_subject_hash_bytes ||
      subject.substr(eq + 1).find_first_not_of("0123456789abcdef") != std::string_view::npos) {
    return std::nullopt;
  }
  std::optional<identity_source> first;
  std::string_view spelling = subject.substr(0, eq);
  while (!spelling.empty() || !first) {
    const std::string_view part = spelling.substr(0, spelling.find('+'));
    spelling.remove_prefix(std::min(spelling.size(), part.size() + 1));
    const std::string_view kind = part.substr(0, part.find(':'));
    const bool named = part.size() > kind.size() + 1;
    std::optional<identity_source> source;
    for (identity_source s :
         {identity_source::api_key, identity_source::user, identity_source::ip,
          identity_source::header, identity_source::query, identity_source::cookie,
          identity_source::path, identity_source::jwt}) {
      const bool wants_name =
          s != identity_source::api_key && s != identity_source::user && s != identity_source::ip;
      if (to_string(s) == kind && named == wants_name) {
        source = s;
      }
    }
    if (!source) {
      return std::nullopt;
    }
    first = first.value_or(*source);
  }
  return first;
}

std::string hashed_subject(std::string_view prefix, const sha256_digest& mac) {
  std::string out;
  out.reserve(prefix.size() + 2 * k_subject_hash_bytes);
  out.append(prefix);
  out.append(to_hex(mac.data(), k_subject_hash_bytes));
  return out;
}

std::shared_ptr<const key_registry> seeded_registry(const config& cfg, std::string_view hash_key) {
  auto keys = std::make_shared<key_registry>(hash_key);
  keys->set_seed(cfg.api_keys);
  return keys;
}

}  // namespace

std::optional<ip_address> parse_peer_address(std::string_view peer) {
  if (auto pct = peer.find('%'); pct != std::string_view::npos) {
    // "[fe80::1%eth0]:80" -> "fe80::1": the port says nothing about the client either.
    peer = !peer.empty() && peer.front() == '[' ? peer.substr(1, pct - 1) : peer.substr(0, pct);
  }
  return parse_address(peer);
}

identity_resolver::identity_resolver(const config& cfg, std::string hash_key,
                                     std::shared_ptr<const key_registry> keys)
    : hash_key_(std::move(hash_key)),
      mac_key_(hash_key_),
      generation_(++g_resolver_generation),
      trusted_proxies_(cfg.identity.trusted_proxies),
      unknown_api_key_(cfg.identity.unknown_api_key),
      ipv6_prefix_(cfg.identity.ipv6_prefix),
      paths_case_insensitive_(cfg.server.paths.case_insensitive),
      bearer_(cfg.identity.bearer),
      plans_(cfg.plans),
      api_key_field_(ascii_lowered(cfg.identity.api_key_header)),
      user_field_(ascii_lowered(cfg.identity.user_header)),
      keys_(keys ? std::move(keys) : seeded_registry(cfg, hash_key_)) {
  if (cfg.identity.jwt) {
    // Only the claims something reads are kept from a token: sources' and the plan's.
    std::vector<std::string> claims;
    for (const route_config& route : cfg.routes) {
      for (const identity_descriptor& d : route.identify_by) {
        for (const identity_part& part : d.parts) {
          if (part.source == identity_source::jwt) {
            claims.push_back(part.name);
          }
        }
      }
    }
    if (!cfg.identity.jwt->plan_claim.empty()) {
      claims.push_back(cfg.identity.jwt->plan_claim);
    }
    jwt_ = std::make_shared<const jwt_verifier>(*cfg.identity.jwt, cfg.source, std::move(claims));
    on_invalid_token_ = cfg.identity.jwt->on_invalid;
    plan_claim_ = cfg.identity.jwt->plan_claim;
  }
}

bool identity_resolver::trusted(const ip_address& address) const {
  for (const auto& range : trusted_proxies_) {
    if (cidr_contains(range, address)) {
      return true;
    }
  }
  return false;
}

std::string identity_resolver::key_subject(const sha256_digest& key_digest) const {
  auto mac = mac_key_.mac(
      std::string_view(reinterpret_cast<const char*>(key_digest.data()), key_digest.size()));
  return hashed_subject("key:", mac);
}

namespace {

// What one raw API key means to one resolver is computed once per thread and remembered (at
// most k_key_cache_entries keys, then the cache starts over), because hashing a key (SHA-256,
// then the keyed hash) costs more than everything else identity does. A flood of made-up keys
// only empties the cache: it never grows past its bound, and a miss costs what no cache would.
constexpr std::size_t k_key_cache_entries = 4096;
constexpr std::size_t k_key_cache_bytes = 1 << 20;  // a key may be as long as a header

// Verified tokens are remembered the same way: a client sends the same token for its whole
// lifetime, and a signature check (RS256 ~ 20 µs, ES256 ~ 60 µs) costs more than the rest of a
// request. Tokens that fail are kept too, so a client repeating a bad one costs no more than a
// good one.
constexpr std::size_t k_token_cache_entries = 1024;
constexpr std::size_t k_token_cache_bytes = 1 << 20;  // tokens are long: 1 MiB of them

// One thread's memory of what values a client sends mean to one resolver: emptied when a
// newer resolver (a reload) asks, and when full (`capacity` entries, or `max_bytes` of keys):
// a flood of made-up values starts it over rather than grows it.
template <class V>
class thread_cache {
 public:
  thread_cache(std::size_t capacity, std::size_t max_bytes)
      : capacity_(capacity), max_bytes_(max_bytes) {}

  V* find(std::uint64_t generation, std::string_view key) {
    if (owner_ != generation) {
      entries_.clear();
      bytes_ = 0;
      owner_ = generation;
    }
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  /// After a find() of the same generation that found nothing.
  V& add(std::string_view key, V value) {
    if (entries_.size() >= capacity_ || bytes_ + key.size() > max_bytes_) {
      entries_.clear();
      bytes_ = 0;
    }
    bytes_ += key.size();
    return entries_.emplace(std::string(key), std::move(value)).first->second;
  }

 private:
  std::size_t capacity_;
  std::size_t max_bytes_;
  std::uint64_t owner_ = 0;  // the generation of the resolver the entries belong to
  std::size_t bytes_ = 0;    // of the keys
  boost::unordered_flat_map<std::string, V, string_hash, std::equal_to<>> entries_;
};

}  // namespace

const identity_resolver::bearer_jwt& identity_resolver::read_bearer_jwt(
    const identity_input& input, const client_address& client, bearer_jwt& state) const {
  if (state.looked) {
    return state;
  }
  state.looked = true;
  if (!jwt_ || bearer_ != bearer_use::jwt) {
    return state;
  }
  std::string_view first;
  if (input.fields != nullptr && input.fields->count_like("authorization", first) > 1) {
    // Whatever the first one holds, the upstream may read the other: the client could be
    // counted as no one (its address) and served as the token's subject.
    state.repeated = true;
    return state;
  }
  const std::string_view text = bearer_token(input.authorization);
  if (text.empty()) {
    return state;
  }
  state.sent = true;
  // Tokens that failed are kept apart, so made-up ones cannot push out the valid tokens of
  // clients (whose next request would need a signature check again).
  thread_local thread_cache<jwt_token> valid(k_token_cache_entries, k_token_cache_bytes);
  thread_local thread_cache<jwt_token> failed(k_token_cache_entries / 4, k_token_cache_bytes / 4);
  const jwt_token* token = valid.find(generation_, text);
  if (token == nullptr) {
    token = failed.find(generation_, text);
  }
  if (token == nullptr) {
    const std::string address =
        client.address ? ip_subject(*client.address) : "ip:" + std::string(input.peer_ip);
    if (input.token_budget != nullptr && !input.token_budget->available(address)) {
      state.error = jwt_error::unchecked;
      return state;
    }
    jwt_token checked = jwt_->verify(text);
    if (checked.error != jwt_error::none && input.token_budget != nullptr &&
        on_invalid_token_ == invalid_token_policy::ip) {
      input.token_budget->charge(address);
    }
    if (checked.error == jwt_error::malformed) {
      state.error = checked.error;  // cheap to find again: not worth a place in the cache
      return state;
    }
    token = checked.error == jwt_error::none ? &valid.add(text, std::move(checked))
                                             : &failed.add(text, std::move(checked));
  }
  state.error = token->error;
  if (state.error == jwt_error::none) {
    const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
    state.error = jwt_->time_error(*token, now);
  }
  if (state.error == jwt_error::none) {
    state.token = token;
  }
  return state;
}

namespace {

// The one field that names the client, read as the upstream may read it (X_API_Key is
// X-API-Key to a CGI-style server), "" when none; nullopt with `refused` set when it was sent
// more than once: whatever the first holds, the gateway could count the client by one while
// the upstream serves the other.
std::optional<std::string_view> one_field(const request_fields& fields, std::string_view lowered,
                                          std::string& refused) {
  std::string_view first;
  const std::size_t n = fields.count_like(lowered, first);
  if (n > 1) {
    refused =
        "the " + std::string(lowered) + " header names the client and was sent more than once";
    return std::nullopt;
  }
  return n == 1 ? first : std::string_view();
}

}  // namespace

const identity_resolver::key_identity* identity_resolver::sent_key_identity(
    const identity_input& input, std::string& refused) const {
  std::string_view header = input.api_key;
  if (input.fields != nullptr) {
    // "X-API-Key: junk" first, or "Authorization: Basic" beside a bearer key: refused.
    const std::optional<std::string_view> key = one_field(*input.fields, api_key_field_, refused);
    if (!key ||
        (bearer_ == bearer_use::api_key && !one_field(*input.fields, "authorization", refused))) {
      return nullptr;
    }
    header = *key;
  }
  header = trim(header);
  const std::string_view bearer =
      bearer_ == bearer_use::api_key ? bearer_token(input.authorization) : std::string_view();
  if (header.empty() && bearer.empty()) {
    return nullptr;
  }
  if (!header.empty()) {
    const key_identity& known = identify_key(header);
    if (known.declared || bearer.empty()) {
      return &known;
    }
  }
  // No header key, or one not declared: the bearer's, which an upstream reading Authorization
  // would serve (a junk header key must not turn a declared bearer key into an address).
  return &identify_key(bearer);
}

std::string_view identity_resolver::sent_user(const identity_input& input,
                                              std::string& refused) const {
  if (input.fields == nullptr) {
    return trim(input.user);
  }
  return trim(one_field(*input.fields, user_field_, refused).value_or(std::string_view()));
}

const identity_resolver::key_identity& identity_resolver::identify_key(std::string_view key) const {
  thread_local thread_cache<key_identity> c(k_key_cache_entries, k_key_cache_bytes);
  const std::uint64_t version = keys_->version();
  key_identity* id = c.find(generation_, key);
  if (id == nullptr) {
    key_identity fresh;
    fresh.sha256 = sha256(key);
    fresh.version = version - 1;  // looked up below
    id = &c.add(key, std::move(fresh));
  }
  if (id->version != version) {
    // A key changed somewhere (admin API, reload): what this one means is read again, its
    // hashes are not.
    id->version = version;
    std::optional<key_meaning> meaning = keys_->find(id->sha256);
    id->declared = meaning.has_value();
    id->plan = meaning ? std::move(meaning->plan) : std::string();
    id->name = meaning ? std::move(meaning->name) : std::string();
    // Only a known key, or any key under unknown_api_key: allow, is named by its own subject.
    const bool named = id->declared || unknown_api_key_ == unknown_key_policy::allow;
    if (!named) {
      id->subject.clear();
    } else if (id->subject.empty()) {
      id->subject = key_subject(id->sha256);
    }
  }
  return *id;
}

std::string identity_resolver::ip_subject(const ip_address& address) const {
  if (!is_v4_mapped(address) && ipv6_prefix_ < 128) {
    return "ip:" + format_ip(mask_ip(address, ipv6_prefix_)) + "/" + std::to_string(ipv6_prefix_);
  }
  return "ip:" + format_ip(address);
}

identity_resolver::client_address identity_resolver::find_client(
    const identity_input& input) const {
  client_address out;
  out.address = input.peer_address ? input.peer_address : parse_peer_address(input.peer_ip);
  if (!out.address || !trusted(*out.address)) {
    return out;
  }
  out.peer_trusted = true;
  // Right to left: each trusted hop vouches for the address to its left, and only for that.
  std::string_view list = input.forwarded_for;
  while (!list.empty()) {
    auto comma = list.rfind(',');
    std::string_view item = comma == std::string_view::npos ? list : list.substr(comma + 1);
    list = comma == std::string_view::npos ? std::string_view() : list.substr(0, comma);
    if (trim(item).empty()) {
      continue;
    }
    auto address = parse_address(item);
    if (!address) {
      // Garbage written or relayed by a trusted hop: nothing left of it can be believed.
      break;
    }
    out.address = *address;
    if (!trusted(*address)) {
      break;
    }
  }
  return out;
}

identity_result identity_resolver::resolve(const route_config& route,
                                           const identity_input& input) const {
  identity_result result;
  const client_address client = find_client(input);
  result.peer_trusted = client.peer_trusted;
  auto identify_by_ip = [&] {
    result.source = identity_source::ip;
    result.subject = client.address ? ip_subject(*client.address) : "ip:" + result.client_ip;
  };
  // (A loop, not find_first_of, which calls memchr once per character.)
  const bool peer_text_canonical = std::none_of(input.peer_ip.begin(), input.peer_ip.end(),
                                                [](char c) { return c == '%' || c == '['; }) &&
                                   (!client.address || !is_v4_mapped(*client.address) ||
                                    input.peer_ip.find(':') == std::string_view::npos);
  if (client.address && !client.peer_trusted && peer_text_canonical) {
    result.client_ip = std::string(input.peer_ip);  // spares formatting the address again
  } else if (client.address) {
    result.client_ip = format_ip(*client.address);
  } else {
    // Only reachable with a peer string the socket layer did not produce; keep it readable.
    result.client_ip = input.peer_ip.empty() ? "unknown" : std::string(input.peer_ip);
  }

  bearer_jwt jwt;
  for (const identity_descriptor& d : route.identify_by) {
    const identity_source source = d.parts.front().source;
    const bool classic =
        d.parts.size() == 1 && (source == identity_source::api_key ||
                                source == identity_source::user || source == identity_source::ip);
    if (!classic) {
      if (resolve_descriptor(route, d, input, client, jwt, result)) {
        if (result.rejected || !result.refused.empty()) {
          const identity_source decided = result.source;
          identify_by_ip();  // what reject_limit counts 401s by; what a refusal is logged as
          result.source = decided;
        }
        return result;
      }
      continue;
    }
    switch (source) {
      case identity_source::api_key: {
        const key_identity* sent = sent_key_identity(input, result.refused);
        if (!result.refused.empty()) {
          identify_by_ip();  // what a refusal is logged as
          return result;
        }
        if (sent == nullptr) {
          break;
        }
        const key_identity& known = *sent;
        if (known.declared) {
          result.source = identity_source::api_key;
          result.subject = known.subject;
          result.plan = known.plan;
          result.key_name = known.name;
          return result;
        }
        if (unknown_api_key_ == unknown_key_policy::reject) {
          identify_by_ip();  // what reject_limit counts the 401s by
          result.rejected = true;
          result.rejected_for = k_unknown_key;
          result.source = identity_source::api_key;
          return result;
        }
        if (unknown_api_key_ == unknown_key_policy::allow) {
          result.source = identity_source::api_key;
          result.subject = known.subject;
          return result;
        }
        break;  // unknown_key_policy::ip: as if no key had been sent
      }
      case identity_source::user: {
        if (!client.peer_trusted) {
          break;
        }
        const std::string_view user = sent_user(input, result.refused);
        if (!result.refused.empty()) {
          identify_by_ip();  // what a refusal is logged as
          return result;
        }
        if (user.empty()) {
          break;
        }
        result.source = identity_source::user;
        result.subject = hashed_subject("user:", mac_key_.mac(user));
        return result;
      }
      case identity_source::ip:
        identify_by_ip();
        return result;
      default:
        break;  // not classic: resolved above
    }
  }
  // No listed source applied: fall back to the address rather than leave the client unlimited.
  identify_by_ip();
  return result;
}

std::string identity_resolver::descriptor_subject(const identity_descriptor& d,
                                                  const std::vector<std::string>& values) const {
  // The spelling, then each value as a netstring ("5:acme,"): no two lists of values give the
  // same text, whatever bytes they hold.
  const std::string spelling = to_string(d);
  std::string text = spelling;
  text += '\n';
  for (const std::string& v : values) {
    text += std::to_string(v.size());
    text += ':';
    text += v;
    text += ',';
  }
  return hashed_subject(spelling + "=", mac_key_.mac(text));
}

bool identity_resolver::resolve_descriptor(const route_config& route, const identity_descriptor& d,
                                           const identity_input& input,
                                           const client_address& client, bearer_jwt& jwt,
                                           identity_result& result) const {
  std::vector<std::string> values;
  values.reserve(d.parts.size());
  // The plan and the key's name are the client's only when every part is there.
  std::string plan;
  std::string key_name;
  for (const identity_part& part : d.parts) {
    std::optional<std::string> value;
    switch (part.source) {
      case identity_source::api_key: {
        const key_identity* sent = sent_key_identity(input, result.refused);
        if (!result.refused.empty()) {
          return true;
        }
        if (sent == nullptr) {
          break;
        }
        const key_identity& known = *sent;
        if (!known.declared && unknown_api_key_ == unknown_key_policy::reject) {
          result.rejected = true;
          result.rejected_for = k_unknown_key;
          result.source = identity_source::api_key;
          return true;
        }
        if (!known.subject.empty()) {  // declared, or unknown under unknown_api_key: allow
          value = known.subject;
          plan = known.plan;
          key_name = known.name;
        }
        break;
      }
      case identity_source::jwt: {
        const bearer_jwt& token = read_bearer_jwt(input, client, jwt);
        if (token.repeated) {
          result.refused = "the authorization header names the client and was sent more than once";
          return true;
        }
        if (!token.sent) {
          break;
        }
        if (token.error != jwt_error::none) {
          if (on_invalid_token_ == invalid_token_policy::reject) {
            result.rejected = true;
            result.rejected_for = to_string(token.error);
            result.source = identity_source::jwt;
            return true;
          }
          break;  // on_invalid: ip: as if no token had been sent
        }
        if (auto claim = token.token->claim(part.name)) {
          value = std::string(*claim);
        }
        if (plan.empty() && !plan_claim_.empty()) {
          // A plan the config does not declare is no plan: the default one, never a made-up
          // tier a token could pick.
          auto named = token.token->claim(plan_claim_);
          if (named && std::find(plans_.begin(), plans_.end(), *named) != plans_.end()) {
            plan = std::string(*named);
          }
        }
        break;
      }
      case identity_source::user: {
        if (!client.peer_trusted) {
          break;
        }
        const std::string_view user = sent_user(input, result.refused);
        if (!result.refused.empty()) {
          return true;
        }
        if (!user.empty()) {
          value = std::string(user);
        }
        break;
      }
      case identity_source::ip:
        value = client.address ? ip_subject(*client.address) : "ip:" + result.client_ip;
        break;
      case identity_source::header:
        if (input.fields != nullptr) {
          std::string_view first;
          const std::size_t count = input.fields->count_like(part.name, first);
          if (count > 1) {
            result.refused =
                "the " + part.name + " header names the client and was sent more than once";
            return true;
          }
          if (count == 1 && !input.fields->value(part.name, 0)) {
            // X_Tenant alone: X-Tenant to CGI-style servers (PHP-FPM, WSGI), another field to
            // Express, Go or ASP.NET, which would serve the request with no tenant while each
            // made-up value was a budget of its own.
            result.refused = "the " + part.name +
                             " header names the client spelled with '_' for '-' (or '-' for "
                             "'_'), which some applications read as it and others do not";
            return true;
          }
          if (count == 1) {
            value = std::string(trim(first));
          }
        }
        break;
      case identity_source::query: {
        part_found found = query_value(input.query, part.name);
        if (found.repeated) {
          result.refused =
              "the query parameter " + part.name + " names the client and was sent more than once";
          return true;
        }
        if (found.ambiguous()) {
          result.refused =
              "the query parameter " + part.name + " names the client " + std::string(found.why);
          return true;
        }
        value = std::move(found.value);
        break;
      }
      case identity_source::cookie:
        if (input.fields != nullptr) {
          part_found found = cookie_value(*input.fields, part.name);
          if (found.repeated) {
            result.refused = "the cookie " + part.name +
                             " names the client and was sent more than once with different values";
            return true;
          }
          if (found.ambiguous()) {
            result.refused =
                "the cookie " + part.name + " names the client " + std::string(found.why);
            return true;
          }
          if (found.cut) {
            result.refused = "the cookie " + part.name +
                             " names the client and its value holds a blank or a comma, where "
                             "some applications end it and others do not";
            return true;
          }
          if (found.hidden) {
            result.refused = "the cookie " + part.name +
                             " names the client and follows a space or comma inside another "
                             "cookie, where some applications read it and others do not";
            return true;
          }
          value = std::move(found.value);
        }
        break;
      case identity_source::path: {
        // Matrix parameters (";v=1") are not part of the name, %XX is decoded, and a route that
        // ignores case names "ACME" and "acme" alike: each makes spellings one, never one two.
        std::string_view segment = path_segment(input.path, part.segment);
        segment = segment.substr(0, segment.find(';'));
        std::string decoded = percent_decoded(segment, false);
        if (route.match.case_insensitive.value_or(paths_case_insensitive_)) {
          decoded = ascii_lowered(decoded);
        }
        value = std::move(decoded);
        break;
      }
    }
    if (value && value->empty()) {
      value.reset();  // an empty value names no one
    }
    if (!value) {
      return false;  // a part is missing: the descriptor is not present
    }
    values.push_back(std::move(*value));
  }
  result.source = d.parts.front().source;
  result.subject = descriptor_subject(d, values);
  result.plan = std::move(plan);
  result.key_name = std::move(key_name);
  return true;
}

std::optional<identity_result> identity_resolver::resolve_named(std::string_view spec,
                                                                std::string* error) const {
  auto fail = [&](std::string message) -> std::optional<identity_result> {
    if (error != nullptr) {
      *error = std::move(message);
    }
    return std::nullopt;
  };
  auto is_hex = [](std::string_view s) {
    return s.size() == 2 * k_subject_hash_bytes &&
           s.find_first_not_of("0123456789abcdef") == std::string_view::npos;
  };
  identity_result result;
  if (spec.starts_with("api_key:")) {
    std::string_view key = trim(spec.substr(8));
    if (key.empty()) {
      return fail("api_key: needs the key after the colon");
    }
    const sha256_digest digest = sha256(key);
    result.source = identity_source::api_key;
    if (auto known = keys_->find(digest)) {
      result.subject = key_subject(digest);
      result.plan = std::move(known->plan);
      result.key_name = std::move(known->name);
      return result;
    }
    if (unknown_api_key_ != unknown_key_policy::allow) {
      return fail(unknown_api_key_ == unknown_key_policy::reject
                      ? "unknown API key (unknown_api_key: reject: it is refused, never counted)"
                      : "unknown API key (unknown_api_key: ip: its client is counted by IP)");
    }
    result.subject = key_subject(digest);
    return result;
  }
  if (spec.starts_with("user:")) {
    std::string_view user = trim(spec.substr(5));
    if (user.empty()) {
      return fail("user: needs the user id after the colon");
    }
    result.source = identity_source::user;
    result.subject = hashed_subject("user:", hmac_sha256(hash_key_, user));
    return result;
  }
  if (spec.starts_with("ip:")) {
    std::string_view text = trim(spec.substr(3));
    if (text.size() > 2 && text.front() == '[' && text.back() == ']') {
      text = text.substr(1, text.size() - 2);
    }
    auto address = parse_ip(text);
    if (!address) {
      return fail("ip: expected an IPv4 or IPv6 address");
    }
    result.source = identity_source::ip;
    result.client_ip = format_ip(*address);
    result.subject = ip_subject(*address);
    return result;
  }
  if (spec.starts_with("subject:")) {
    std::string_view subject = spec.substr(8);
    if (subject.starts_with("key:") && is_hex(subject.substr(4))) {
      result.source = identity_source::api_key;
      if (auto known = keys_->find_subject(subject)) {
        result.plan = std::move(known->meaning.plan);
        result.key_name = std::move(known->meaning.name);
      }
    } else if (subject.starts_with("user:") && is_hex(subject.substr(5))) {
      result.source = identity_source::user;
    } else if (subject.starts_with("ip:") && subject.size() > 3) {
      result.source = identity_source::ip;
    } else if (auto source = descriptor_subject_source(subject)) {
      result.source = *source;
    } else {
      return fail(
          "subject: expected key:<32 hex>, user:<32 hex>, ip:<address> or a descriptor's "
          "<source>=<32 hex>");
    }
    result.subject = std::string(subject);
    return result;
  }
  return fail("expected api_key:<key>, user:<id>, ip:<address> or subject:<subject>");
}

std::string subject_hash(std::string_view subject, std::string_view hash_key) {
  auto mac = hmac_sha256(hash_key, subject);
  return to_hex(mac.data(), k_log_hash_bytes);
}

}  // namespace ratewall
