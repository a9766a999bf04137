#include "ratewall/core/parse.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <limits>

namespace ratewall {
namespace {

constexpr std::string_view k_duration_hint =
    R"(expected a duration like "250ms", "1s", "1m", "1h" or "1d")";
constexpr std::string_view k_rate_hint = R"(expected "<count>/<unit>" like "10/s")";
constexpr std::string_view k_endpoint_hint =
    R"(expected "<host>:<port>" like "127.0.0.1:8080" or "[::]:8080")";
constexpr std::string_view k_cidr_hint =
    R"(expected an address or CIDR range like "10.0.0.0/8" or "fd00::/8")";
constexpr std::string_view k_size_hint = R"(expected a byte size like 16384, "64KiB" or "10MiB")";

struct unit {
  std::string_view name;
  std::int64_t nanos_per;
};

// Longest name first is not needed: names are compared whole, after the digits.
constexpr unit k_duration_units[] = {
    {"ms", 1'000'000},
    {"s", 1'000'000'000},
    {"m", 60LL * 1'000'000'000},
    {"h", 3600LL * 1'000'000'000},
    {"d", 86400LL * 1'000'000'000},
};

const unit* find_unit(std::string_view name) {
  for (const auto& u : k_duration_units) {
    if (u.name == name) {
      return &u;
    }
  }
  return nullptr;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

std::size_t count_digits(std::string_view text) {
  std::size_t n = 0;
  while (n < text.size() && is_digit(text[n])) {
    ++n;
  }
  return n;
}

// Decimal digits only: from_chars alone would also take a leading '-'.
std::optional<std::uint64_t> parse_digits(std::string_view digits, bool& overflow) {
  overflow = false;
  if (digits.empty() || count_digits(digits) != digits.size()) {
    return std::nullopt;
  }
  std::uint64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec == std::errc::result_out_of_range) {
    overflow = true;
    return std::nullopt;
  }
  if (ec != std::errc{} || end != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return value;
}

parse_error error(std::string_view message) {
  return parse_error{std::string(message)};
}

ip_address from_v4(const std::uint8_t (&v4)[4]) {
  ip_address out{};
  out[10] = 0xff;
  out[11] = 0xff;
  for (int i = 0; i < 4; ++i) {
    out[12 + i] = v4[i];
  }
  return out;
}

// inet_pton wants a NUL-terminated string; an embedded NUL would silently truncate.
std::optional<std::string> c_string(std::string_view text) {
  if (text.empty() || text.size() > 64 || text.find('\0') != std::string_view::npos) {
    return std::nullopt;
  }
  return std::string(text);
}

std::optional<ip_address> parse_v4(std::string_view text) {
  auto s = c_string(text);
  std::uint8_t v4[4];
  if (!s || inet_pton(AF_INET, s->c_str(), v4) != 1) {
    return std::nullopt;
  }
  return from_v4(v4);
}

std::optional<ip_address> parse_v6(std::string_view text) {
  auto s = c_string(text);
  ip_address out{};
  if (!s || inet_pton(AF_INET6, s->c_str(), out.data()) != 1) {
    return std::nullopt;
  }
  return out;
}

bool is_hostname_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '.' || c == '-' ||
         c == '_';
}

}  // namespace

parse_result<nanos> parse_duration(std::string_view text) {
  if (!text.empty() && text.front() == '-') {
    return error("a duration cannot be negative");
  }
  std::size_t n = count_digits(text);
  if (n == 0) {
    return error(k_duration_hint);
  }
  std::string_view suffix = text.substr(n);
  if (suffix.empty()) {
    return error(std::string(k_duration_hint) + " (the unit is required)");
  }
  if (suffix.front() == '.') {
    return error(std::string(k_duration_hint) + R"( (whole numbers only, e.g. "1500ms"))");
  }
  const unit* u = find_unit(suffix);
  if (u == nullptr) {
    return error(k_duration_hint);
  }
  constexpr auto k_max = k_max_duration.count();
  bool overflow = false;
  auto value = parse_digits(text.substr(0, n), overflow);
  if (!value || *value > static_cast<std::uint64_t>(k_max / u->nanos_per)) {
    return error("duration too large (at most " +
                 std::to_string(k_max / k_duration_units[4].nanos_per) + "d)");
  }
  return nanos{static_cast<std::int64_t>(*value) * u->nanos_per};
}

parse_result<rate_spec> parse_rate(std::string_view text) {
  if (!text.empty() && text.front() == '-') {
    return error("a rate cannot be negative");
  }
  auto slash = text.find('/');
  if (slash == std::string_view::npos) {
    return error(k_rate_hint);
  }
  bool overflow = false;
  auto count = parse_digits(text.substr(0, slash), overflow);
  if (overflow) {
    return error("rate count too large");
  }
  if (!count) {
    return error(k_rate_hint);
  }
  std::string_view period_text = text.substr(slash + 1);
  nanos period{0};
  if (const unit* u = find_unit(period_text)) {
    period = nanos{u->nanos_per};
  } else if (!period_text.empty() && is_digit(period_text.front())) {
    auto d = parse_duration(period_text);
    if (!d) {
      return error(std::string(k_rate_hint) + ": period: " + d.error());
    }
    period = *d;
  } else {
    return error(k_rate_hint);
  }
  if (*count == 0) {
    return error("a rate needs a count greater than 0");
  }
  if (period.count() == 0) {
    return error("a rate needs a period greater than 0");
  }
  // Below one nanosecond per event the emission interval of GCRA would round to zero.
  if (*count > static_cast<std::uint64_t>(period.count())) {
    return error("rate too high (more than one per nanosecond)");
  }
  return rate_spec{*count, period};
}

parse_result<endpoint> parse_endpoint(std::string_view text) {
  std::string_view host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    auto close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return error(k_endpoint_hint);
    }
    host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
    if (!parse_v6(host)) {
      return error("\"" + std::string(host) + "\" is not a valid IPv6 address");
    }
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return error(std::string(k_endpoint_hint) + " (the port is required)");
    }
    host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return error(R"(IPv6 addresses need brackets, like "[::1]:8080")");
    }
    if (host.empty()) {
      return error(std::string(k_endpoint_hint) + " (the host is required)");
    }
    bool numeric = true;
    for (char c : host) {
      if (!is_hostname_char(c)) {
        return error(std::string(k_endpoint_hint) + " (invalid character in host)");
      }
      numeric = numeric && (is_digit(c) || c == '.');
    }
    // All digits and dots can only be an IPv4 address: "300.1.1.1" is a typo, not a name.
    if (numeric && !parse_v4(host)) {
      return error("\"" + std::string(host) + "\" is not a valid IPv4 address");
    }
  }
  bool overflow = false;
  auto port = parse_digits(port_text, overflow);
  if (!port || *port > 65535) {
    return error("port must be a number from 0 to 65535");
  }
  return endpoint{std::string(host), static_cast<std::uint16_t>(*port)};
}

parse_result<cidr> parse_cidr(std::string_view text) {
  auto slash = text.find('/');
  std::string_view addr_text = text.substr(0, slash);
  cidr out;
  unsigned max_prefix = 128;
  unsigned offset = 0;
  if (auto v4 = parse_v4(addr_text)) {
    out.address = *v4;
    max_prefix = 32;
    offset = 96;
  } else if (auto v6 = parse_v6(addr_text)) {
    out.address = *v6;
  } else {
    return error(k_cidr_hint);
  }
  unsigned prefix = max_prefix;
  if (slash != std::string_view::npos) {
    bool overflow = false;
    auto p = parse_digits(text.substr(slash + 1), overflow);
    if (!p && !overflow) {
      return error(k_cidr_hint);
    }
    if (overflow || *p > max_prefix) {
      return error("prefix /" + std::string(text.substr(slash + 1)) + " is too long for an " +
                   (offset ? "IPv4" : "IPv6") + " address (at most /" + std::to_string(max_prefix) +
                   ")");
    }
    prefix = static_cast<unsigned>(*p);
  }
  out.prefix = prefix + offset;
  ip_address network = mask_ip(out.address, out.prefix);
  if (network != out.address) {
    std::string suggestion = format_ip(network) + "/" + std::to_string(prefix);
    return error("\"" + std::string(text) + "\" has bits set outside its /" +
                 std::to_string(prefix) + " prefix (did you mean \"" + suggestion + "\"?)");
  }
  return out;
}

parse_result<std::uint64_t> parse_byte_size(std::string_view text) {
  struct suffix {
    std::string_view name;
    std::uint64_t factor;
  };
  static constexpr suffix k_suffixes[] = {
      {"", 1}, {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30}};
  std::size_t n = count_digits(text);
  if (n == 0) {
    return error(k_size_hint);
  }
  for (const auto& s : k_suffixes) {
    if (text.substr(n) != s.name) {
      continue;
    }
    bool overflow = false;
    auto value = parse_digits(text.substr(0, n), overflow);
    if (!value || *value > std::numeric_limits<std::uint64_t>::max() / s.factor) {
      return error("byte size too large");
    }
    return *value * s.factor;
  }
  return error(k_size_hint);
}

std::optional<ip_address> parse_ip(std::string_view text) {
  if (auto v4 = parse_v4(text)) {
    return v4;
  }
  return parse_v6(text);
}

bool is_v4_mapped(const ip_address& address) {
  for (int i = 0; i < 10; ++i) {
    if (address[i] != 0) {
      return false;
    }
  }
  return address[10] == 0xff && address[11] == 0xff;
}

std::string format_ip(const ip_address& address) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (is_v4_mapped(address)) {
    inet_ntop(AF_INET, address.data() + 12, buf, sizeof buf);
  } else {
    inet_ntop(AF_INET6, address.data(), buf, sizeof buf);
  }
  return buf;
}

ip_address mask_ip(const ip_address& address, unsigned prefix) {
  ip_address out = address;
  for (unsigned i = 0; i < 16; ++i) {
    unsigned bit = i * 8;
    if (prefix >= bit + 8) {
      continue;
    }
    unsigned keep = prefix > bit ? prefix - bit : 0;
    out[i] &= static_cast<std::uint8_t>(0xff00u >> keep);
  }
  return out;
}

bool cidr_contains(const cidr& range, const ip_address& address) {
  return mask_ip(address, range.prefix) == mask_ip(range.address, range.prefix);
}

std::string format_duration(nanos d) {
  std::int64_t n = d.count();
  if (n == 0) {
    return "0s";
  }
  // Largest unit that divides exactly, so the text parses back to the same value.
  for (auto it = std::rbegin(k_duration_units); it != std::rend(k_duration_units); ++it) {
    if (n % it->nanos_per == 0) {
      return std::to_string(n / it->nanos_per) + std::string(it->name);
    }
  }
  return std::to_string(n) + "ns";
}

std::string format_rate(const rate_spec& rate) {
  std::string period = format_duration(rate.period);
  if (period.size() >= 2 && period[0] == '1' && !is_digit(period[1])) {
    period.erase(0, 1);
  }
  return std::to_string(rate.count) + "/" + period;
}

bool cgi_same(std::string_view name, std::string_view field) {
  if (name.size() != field.size()) {
    return false;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char a = name[i] == '_' ? '-' : name[i];
    const char b = field[i] == '_' ? '-' : field[i];
    if (ascii_lower(a) != ascii_lower(b)) {
      return false;
    }
  }
  return true;
}

bool cgi_same_any(std::string_view name, std::span<const std::string_view> fields) {
  return std::any_of(fields.begin(), fields.end(),
                     [&](std::string_view field) { return cgi_same(name, field); });
}

bool is_loopback_host(const std::string& host) {
  if (host == "localhost") {
    return true;
  }
  auto address = parse_ip(host);
  if (!address) {
    return false;
  }
  if (is_v4_mapped(*address)) {
    return (*address)[12] == 127;
  }
  ip_address loopback{};
  loopback[15] = 1;
  return *address == loopback;
}

}  // namespace ratewall
