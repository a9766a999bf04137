#include "ratewall/sim/trace.hpp"

#include <algorithm>
#include <array>
#include <charconv>

#include "ratewall/core/huge_pages.hpp"
#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace {

constexpr std::int64_t k_nanos_per_second = 1'000'000'000;

// Cuts the next line (without "\n" or "\r\n") off the front of `text`.
std::string_view next_line(std::string_view& text) {
  auto nl = text.find('\n');
  std::string_view line = text.substr(0, nl);
  text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
  if (!line.empty() && line.back() == '\r') {
    line.remove_suffix(1);
  }
  return line;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::int64_t digits_value(std::string_view s) {
  std::int64_t v = 0;
  for (char c : s) {
    v = v * 10 + (c - '0');
  }
  return v;
}

// A decimal number ("1", "1.5", "0.001") of a unit of 10^`digits` ns, in nanoseconds, exact.
std::optional<nanos> parse_decimal(std::string_view text, std::size_t digits) {
  auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (!all_digits(whole) || whole.size() > 9 || frac.size() > digits ||
      (dot != std::string_view::npos && !all_digits(frac))) {
    return std::nullopt;
  }
  std::int64_t unit = 1;
  std::int64_t ns = digits_value(frac);
  for (std::size_t i = 0; i < digits; ++i) {
    unit *= 10;
    if (i >= frac.size()) {
      ns *= 10;
    }
  }
  return nanos{digits_value(whole) * unit + ns};
}

// "1", "1.5", "0.000001": decimal seconds.
std::optional<nanos> parse_seconds(std::string_view text) {
  return parse_decimal(text, 9);
}

// "12", "0.25": decimal milliseconds.
std::optional<nanos> parse_milliseconds(std::string_view text) {
  return parse_decimal(text, 6);
}

// An HTTP status, 100 to 599; 0 for anything else.
std::uint16_t parse_status(std::string_view text) {
  if (text.size() != 3 || !all_digits(text)) {
    return 0;
  }
  const auto value = static_cast<std::uint16_t>(digits_value(text));
  return value >= 100 && value <= 599 ? value : 0;
}

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

// A fixed-width number of `text` at `at`, or -1.
int fixed_number(std::string_view text, std::size_t at, std::size_t width) {
  if (at + width > text.size() || !all_digits(text.substr(at, width))) {
    return -1;
  }
  return static_cast<int>(digits_value(text.substr(at, width)));
}

// The last year a log's time may have (see epoch_of).
constexpr int k_last_year = 2200;

// Days in `month` (1 to 12) of `year`.
int days_in_month(int year, int month) {
  static constexpr int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : days[month - 1];
}

// Nanoseconds since the epoch of a calendar time (UTC), or nullopt when a field is out of
// range. Years stop at k_last_year: nanoseconds since 1970 overflow 64 bits in 2262, and no
// log holds such a time. A leap second (:60) reads as the next second's start.
std::optional<nanos> epoch_of(int year, int month, int day, int hour, int minute, int second) {
  if (year < 1970 || year > k_last_year || month < 1 || month > 12 || day < 1 ||
      day > days_in_month(year, month) || hour > 23 || minute > 59 || second > 60 || hour < 0 ||
      minute < 0 || second < 0) {
    return std::nullopt;
  }
  std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return nanos{((days * 24 + hour) * 60 + minute) * 60 * k_nanos_per_second +
               second * k_nanos_per_second};
}

// "+0200", "-07:00", "Z": the offset from UTC, or nullopt.
std::optional<nanos> parse_zone(std::string_view z) {
  if (z == "Z") {
    return nanos{0};
  }
  std::array<char, 4> digits{};
  std::size_t n = 0;
  for (char c : z.substr(std::min<std::size_t>(1, z.size()))) {
    if (c == ':' && n == 2) {
      continue;
    }
    if (n == digits.size() || c < '0' || c > '9') {
      return std::nullopt;
    }
    digits[n++] = c;
  }
  if (n != 4 || (z.front() != '+' && z.front() != '-')) {
    return std::nullopt;
  }
  const int hours = (digits[0] - '0') * 10 + (digits[1] - '0');
  const int minutes = (digits[2] - '0') * 10 + (digits[3] - '0');
  if (hours > 23 || minutes > 59) {
    return std::nullopt;
  }
  const nanos offset{(hours * 60 + minutes) * 60 * k_nanos_per_second};
  return z.front() == '+' ? offset : -offset;
}

// ".123" (1 to 9 digits) at the front of `text`: its nanoseconds, and `text` moved past it.
std::optional<nanos> take_fraction(std::string_view& text) {
  if (text.empty() || text.front() != '.') {
    return nanos{0};
  }
  std::size_t n = 1;
  while (n < text.size() && text[n] >= '0' && text[n] <= '9') {
    ++n;
  }
  std::string_view digits = text.substr(1, n - 1);
  if (digits.empty() || digits.size() > 9) {
    return std::nullopt;
  }
  std::int64_t ns = digits_value(digits);
  for (std::size_t i = digits.size(); i < 9; ++i) {
    ns *= 10;
  }
  text.remove_prefix(n);
  return nanos{ns};
}

// "2024-05-01T12:00:00.123Z" (the access log's; other RFC 3339 offsets are taken too).
std::optional<nanos> parse_rfc3339(std::string_view t) {
  if (t.size() < 20 || t[4] != '-' || t[7] != '-' || (t[10] != 'T' && t[10] != ' ') ||
      t[13] != ':' || t[16] != ':') {
    return std::nullopt;
  }
  auto when = epoch_of(fixed_number(t, 0, 4), fixed_number(t, 5, 2), fixed_number(t, 8, 2),
                       fixed_number(t, 11, 2), fixed_number(t, 14, 2), fixed_number(t, 17, 2));
  std::string_view rest = t.substr(19);
  auto fraction = take_fraction(rest);
  auto zone = parse_zone(rest);
  if (!when || !fraction || !zone) {
    return std::nullopt;
  }
  return *when + *fraction - *zone;
}

// "10/Oct/2000:13:55:36 -0700" (nginx's $time_local).
std::optional<nanos> parse_time_local(std::string_view t) {
  static constexpr std::array<std::string_view, 12> months = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  if (t.size() != 26 || t[2] != '/' || t[6] != '/' || t[11] != ':' || t[14] != ':' ||
      t[17] != ':' || t[20] != ' ') {
    return std::nullopt;
  }
  auto month = std::find(months.begin(), months.end(), t.substr(3, 3));
  if (month == months.end()) {
    return std::nullopt;
  }
  auto when = epoch_of(fixed_number(t, 7, 4), static_cast<int>(month - months.begin()) + 1,
                       fixed_number(t, 0, 2), fixed_number(t, 12, 2), fixed_number(t, 15, 2),
                       fixed_number(t, 18, 2));
  auto zone = parse_zone(t.substr(21));
  if (!when || !zone) {
    return std::nullopt;
  }
  return *when - *zone;
}

// A malformed log line: what is wrong with it, in words.
struct bad_line {
  std::string problem;
};

// ---- CSV ----

// The fields of one CSV line into `fields`: commas separate, double quotes enclose ("" is a
// quote). Fields are views into `line`, or into `storage` when a quote had to be undone. False
// for a quote that is not closed.
bool split_csv(std::string_view line, std::deque<std::string>& storage,
               std::vector<std::string_view>& fields) {
  fields.clear();
  std::size_t i = 0;
  while (true) {
    std::size_t start = i;
    while (start < line.size() && (line[start] == ' ' || line[start] == '\t')) {
      ++start;
    }
    if (start < line.size() && line[start] == '"') {
      std::string value;
      std::size_t j = start + 1;
      for (;; ++j) {
        if (j >= line.size()) {
          return false;
        }
        if (line[j] == '"' && j + 1 < line.size() && line[j + 1] == '"') {
          value += '"';
          ++j;
        } else if (line[j] == '"') {
          break;
        } else {
          value += line[j];
        }
      }
      // Text after the closing quote belongs to the field, as before quotes were undone.
      auto comma = line.find(',', j + 1);
      value += trim(line.substr(j + 1, comma == std::string_view::npos ? comma : comma - j - 1));
      fields.push_back(storage.emplace_back(std::move(value)));
      i = comma;
    } else {
      auto comma = line.find(',', i);
      fields.push_back(trim(line.substr(i, comma == std::string_view::npos ? comma : comma - i)));
      i = comma;
    }
    if (i == std::string_view::npos) {
      return true;
    }
    ++i;
  }
}

// Line `line_no` of CSV trace `name`, one that holds a request (not empty, a comment or the
// header). `last` and `last_text` are the time of the request before it, updated.
trace_request csv_request(std::string_view line, const std::string& name, std::uint32_t line_no,
                          std::deque<std::string>& storage, std::vector<std::string_view>& fields,
                          nanos& last, std::string& last_text) {
  const auto where = [&] { return name + ":" + std::to_string(line_no) + ": "; };
  if (!split_csv(line, storage, fields)) {
    throw trace_error(where() + "unterminated quoted field");
  }
  if (fields.size() < 6 || fields.size() > 9) {
    throw trace_error(where() +
                      "expected 6 to 9 fields "
                      "(time_s,method,path,api_key,user,ip[,cost[,latency_ms[,status]]]), found " +
                      std::to_string(fields.size()));
  }
  trace_request r;
  auto time = parse_seconds(fields[0]);
  if (!time) {
    throw trace_error(where() + "time_s: expected seconds like 0, 1.5 or 0.001 (got \"" +
                      std::string(fields[0]) + "\")");
  }
  if (*time < last) {
    throw trace_error(where() + "time_s: " + std::string(fields[0]) + " is earlier than the " +
                      last_text + " before it (times must not decrease)");
  }
  last = *time;
  last_text.assign(fields[0]);
  r.time = *time;
  r.method = fields[1];
  if (r.method.empty()) {
    throw trace_error(where() + "method: must not be empty");
  }
  r.path = fields[2];
  if (r.path.empty() || (r.path.front() != '/' && r.path.find("://") == std::string::npos)) {
    throw trace_error(where() + "path: expected a request path like /api/search");
  }
  r.api_key = fields[3];
  r.user = fields[4];
  r.ip = fields[5];
  if (!parse_ip(r.ip)) {
    throw trace_error(where() + "ip: expected an IPv4 or IPv6 address (got \"" + std::string(r.ip) +
                      "\")");
  }
  if (fields.size() >= 8 && !fields[7].empty()) {
    auto latency = parse_milliseconds(fields[7]);
    if (!latency) {
      throw trace_error(where() + "latency_ms: expected milliseconds like 12 or 0.25 (got \"" +
                        std::string(fields[7]) + "\")");
    }
    r.latency = *latency;
  }
  if (fields.size() == 9 && !fields[8].empty()) {
    r.status = parse_status(fields[8]);
    if (r.status == 0) {
      throw trace_error(where() + "status: expected an HTTP status from 100 to 599 (got \"" +
                        std::string(fields[8]) + "\")");
    }
  }
  if (fields.size() >= 7 && !fields[6].empty()) {
    std::uint64_t cost = 0;
    std::string_view c = fields[6];
    auto [end, ec] = std::from_chars(c.data(), c.data() + c.size(), cost);
    if (ec != std::errc() || end != c.data() + c.size() || cost == 0) {
      throw trace_error(where() + "cost: expected a positive integer (got \"" + std::string(c) +
                        "\")");
    }
    r.cost = cost;
  }
  return r;
}

// ---- access log: flat JSON objects ----

// Appends the UTF-8 of code point `cp`.
void append_utf8(std::string& out, std::uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::optional<std::uint32_t> hex4(std::string_view s) {
  std::uint32_t v = 0;
  if (s.size() < 4) {
    return std::nullopt;
  }
  auto [end, ec] = std::from_chars(s.data(), s.data() + 4, v, 16);
  if (ec != std::errc() || end != s.data() + 4) {
    return std::nullopt;
  }
  return v;
}

// A reader of one line holding a flat JSON object: string keys; string, number, true, false
// or null values. That is all the access log writes; anything else is a malformed line.
class json_line {
 public:
  json_line(std::string_view line, std::deque<std::string>& storage)
      : text_(line), storage_(storage) {}

  // For each member, `target(key)` says where its value goes: a string_view* (the text of a
  // string or a number; "" for null), or null to skip the value without undoing its escapes
  // (most of a line is fields the replay does not use).
  template <typename F>
  void each(F&& target) {
    skip_space();
    expect('{');
    skip_space();
    if (peek() == '}') {
      ++at_;
    } else {
      while (true) {
        skip_space();
        std::string_view key = key_value();
        skip_space();
        expect(':');
        skip_space();
        std::string_view* into = target(key);
        if (peek() == '"' && into != nullptr) {
          *into = string_value();
        } else if (peek() == '"') {
          skip_string();
        } else if (into != nullptr) {
          *into = scalar();
        } else {
          scalar();
        }
        skip_space();
        if (peek() == ',') {
          ++at_;
          continue;
        }
        expect('}');
        break;
      }
    }
    skip_space();
    if (at_ != text_.size()) {
      throw bad_line{"text after the JSON object"};
    }
  }

 private:
  char peek() const { return at_ < text_.size() ? text_[at_] : '\0'; }

  void expect(char c) {
    if (peek() != c) {
      throw bad_line{at_ >= text_.size() ? std::string("truncated JSON")
                                         : std::string("expected '") + c + "' in JSON"};
    }
    ++at_;
  }

  void skip_space() {
    while (at_ < text_.size() &&
           (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\r' || text_[at_] == '\n')) {
      ++at_;
    }
  }

  // A number, true, false or null ("" for null).
  std::string_view scalar() {
    std::size_t start = at_;
    while (at_ < text_.size() && text_[at_] != ',' && text_[at_] != '}' && text_[at_] != ' ') {
      ++at_;
    }
    std::string_view v = text_.substr(start, at_ - start);
    if (v == "null") {
      return {};
    }
    if (v == "true" || v == "false") {
      return v;
    }
    if (v.empty()) {
      throw bad_line{"truncated JSON"};
    }
    // A number (its exact grammar does not matter: only "cost" is read, as an integer).
    if (!std::all_of(v.begin(), v.end(), [](char c) {
          return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
        })) {
      throw bad_line{"expected a flat JSON object"};
    }
    return v;
  }

  // A member's name: short, and plain in every log ratewall writes, so read in one loop;
  // anything else is read as any string.
  std::string_view key_value() {
    const std::size_t open = at_;
    expect('"');
    for (std::size_t i = at_; i < text_.size(); ++i) {
      const char c = text_[i];
      if (c == '"') {
        std::string_view key = text_.substr(at_, i - at_);
        at_ = i + 1;
        return key;
      }
      if (c == '\\' || static_cast<unsigned char>(c) < 0x20) {
        break;
      }
    }
    at_ = open;
    return string_value();
  }

  // Moves past a string: to the first quote not escaped by an odd number of backslashes.
  void skip_string() {
    expect('"');
    while (true) {
      auto quote = text_.find('"', at_);
      if (quote == std::string_view::npos) {
        throw bad_line{"truncated JSON"};
      }
      std::size_t backslashes = 0;
      while (quote - backslashes > at_ && text_[quote - backslashes - 1] == '\\') {
        ++backslashes;
      }
      at_ = quote + 1;
      if (backslashes % 2 == 0) {
        return;
      }
    }
  }

  std::string_view string_value() {
    expect('"');
    const std::size_t start = at_;
    // Up to the next quote (memchr is fast), then back to the first escape or control
    // character before it, if any.
    const std::size_t quote = std::min(text_.find('"', at_), text_.size());
    const char* first = text_.data() + at_;
    const char* last = text_.data() + quote;
    at_ += static_cast<std::size_t>(
        std::find_if(first, last,
                     [](char c) { return c == '\\' || static_cast<unsigned char>(c) < 0x20; }) -
        first);
    if (at_ < text_.size() && static_cast<unsigned char>(text_[at_]) < 0x20) {
      throw bad_line{"control character in a JSON string"};
    }
    if (at_ >= text_.size()) {
      throw bad_line{"truncated JSON"};
    }
    if (text_[at_] == '"') {
      return text_.substr(start, at_++ - start);
    }
    // An escape: undo them into storage.
    std::string value(text_.substr(start, at_ - start));
    while (true) {
      if (at_ >= text_.size()) {
        throw bad_line{"truncated JSON"};
      }
      char c = text_[at_++];
      if (c == '"') {
        break;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        throw bad_line{"control character in a JSON string"};
      }
      if (c != '\\') {
        value += c;
        continue;
      }
      char e = peek();
      ++at_;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          value += e;
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'n':
          value += '\n';
          break;
        case 'r':
          value += '\r';
          break;
        case 't':
          value += '\t';
          break;
        case 'u':
          value_of_escape(value);
          break;
        default:
          throw bad_line{"bad escape in a JSON string"};
      }
    }
    return storage_.emplace_back(std::move(value));
  }

  // After "\u": the code point, with its low surrogate when it is a high one.
  void value_of_escape(std::string& value) {
    auto cp = hex4(text_.substr(at_));
    if (!cp) {
      throw bad_line{"bad \\u escape in a JSON string"};
    }
    at_ += 4;
    if (*cp >= 0xD800 && *cp < 0xDC00 && text_.substr(at_, 2) == "\\u") {
      auto low = hex4(text_.substr(at_ + 2));
      if (low && *low >= 0xDC00 && *low < 0xE000) {
        at_ += 6;
        *cp = 0x10000 + ((*cp - 0xD800) << 10) + (*low - 0xDC00);
      }
    }
    if (*cp >= 0xD800 && *cp < 0xE000) {
      throw bad_line{"lone surrogate in a JSON string"};
    }
    append_utf8(value, *cp);
  }

  std::string_view text_;
  std::size_t at_ = 0;
  std::deque<std::string>& storage_;
};

// One access log line. Its "time", "method" and "path" are required (a line of a head the
// gateway could not read has null ones: malformed here, it was no request).
trace_request access_log_request(std::string_view line, std::deque<std::string>& storage) {
  trace_request r;
  r.logged_identity = true;
  std::string_view time;
  std::string_view client;
  std::string_view cost;
  std::string_view upstream_ms;
  std::string_view status;
  json_line(line, storage).each([&](std::string_view key) -> std::string_view* {
    if (key == "upstream_ms") {
      return &upstream_ms;
    }
    if (key == "status") {
      return &status;
    }
    if (key == "time") {
      return &time;
    }
    if (key == "method") {
      return &r.method;
    }
    if (key == "path") {
      return &r.path;
    }
    if (key == "subject") {
      return &r.subject;
    }
    if (key == "plan") {
      return &r.plan;
    }
    if (key == "key") {
      return &r.key_name;
    }
    if (key == "client") {
      return &client;
    }
    return key == "cost" ? &cost : nullptr;
  });
  std::uint64_t cost_value = 0;
  auto [end, ec] = std::from_chars(cost.data(), cost.data() + cost.size(), cost_value);
  if (ec == std::errc() && end == cost.data() + cost.size() && cost_value > 0) {
    r.cost = cost_value;
  }
  auto when = parse_rfc3339(time);
  if (!when) {
    throw bad_line{time.empty() ? "no \"time\"" : "time: expected 2024-05-01T12:00:00.123Z"};
  }
  r.time = *when;
  if (r.method.empty() || r.path.empty() || r.path.front() != '/') {
    throw bad_line{"no request (\"method\" or \"path\" is null or not a path)"};
  }
  // Not forwarded (null), or not a number: unknown.
  if (auto latency = parse_milliseconds(upstream_ms)) {
    r.latency = *latency;
  }
  r.status = parse_status(status);
  // log.client_address: raw gives the address; hashed or off leave it unknown.
  if (parse_ip(client)) {
    r.ip = client;
  }
  return r;
}

// ---- nginx combined ----

// The next space-separated token of `text`, which moves past it.
std::string_view take_token(std::string_view& text) {
  auto space = text.find(' ');
  std::string_view token = text.substr(0, space);
  text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
  return token;
}

// A double-quoted field as nginx writes it: `"` and `\` and bytes outside printable ASCII are
// \xHH; `\"` and `\\` (other servers', or log_format escape=default) are taken too. The
// unescaped text goes to storage when it differs.
std::string_view take_quoted(std::string_view& text, std::deque<std::string>& storage) {
  if (text.empty() || text.front() != '"') {
    throw bad_line{"expected a double-quoted field"};
  }
  std::size_t i = 1;
  bool escaped = false;
  while (i < text.size() && text[i] != '"') {
    if (text[i] == '\\') {
      escaped = true;
      ++i;
    }
    ++i;
  }
  if (i >= text.size()) {
    throw bad_line{"unterminated quoted field"};
  }
  std::string_view raw = text.substr(1, i - 1);
  text.remove_prefix(std::min(text.size(), i + 2));  // the quote and the space after it
  if (!escaped) {
    return raw;
  }
  std::string value;
  for (std::size_t j = 0; j < raw.size(); ++j) {
    if (raw[j] != '\\' || j + 1 >= raw.size()) {
      value += raw[j];
    } else if (raw[j + 1] == 'x' && j + 3 < raw.size()) {
      unsigned byte = 0;
      auto [end, ec] = std::from_chars(raw.data() + j + 2, raw.data() + j + 4, byte, 16);
      if (ec != std::errc() || end != raw.data() + j + 4) {
        throw bad_line{"bad \\x escape"};
      }
      value += static_cast<char>(byte);
      j += 3;
    } else {
      value += raw[j + 1];
      ++j;
    }
  }
  return storage.emplace_back(std::move(value));
}

trace_request nginx_request(std::string_view line, std::deque<std::string>& storage) {
  trace_request r;
  std::string_view rest = line;
  r.ip = take_token(rest);
  if (!parse_ip(r.ip)) {
    throw bad_line{"remote_addr: expected an IPv4 or IPv6 address"};
  }
  take_token(rest);  // "-": identd, never set
  std::string_view user = take_token(rest);
  if (user != "-") {
    r.user = user;
  }
  if (rest.empty() || rest.front() != '[') {
    throw bad_line{"expected [time_local]"};
  }
  auto close = rest.find(']');
  if (close == std::string_view::npos) {
    throw bad_line{"expected [time_local]"};
  }
  auto when = parse_time_local(rest.substr(1, close - 1));
  if (!when) {
    throw bad_line{"time_local: expected 10/Oct/2000:13:55:36 -0700"};
  }
  r.time = *when;
  rest.remove_prefix(std::min(rest.size(), close + 2));
  std::string_view request = take_quoted(rest, storage);
  r.method = take_token(request);
  r.path = take_token(request);
  std::string_view protocol = request;
  if (r.method.empty() || r.path.empty() || !protocol.starts_with("HTTP/") ||
      (r.path.front() != '/' && r.path.find("://") == std::string_view::npos)) {
    throw bad_line{"request: expected \"METHOD /target HTTP/x.y\""};
  }
  std::string_view status = take_token(rest);
  std::string_view bytes = take_token(rest);
  if (!all_digits(status) || (!all_digits(bytes) && bytes != "-")) {
    throw bad_line{"expected the status and the body bytes after the request"};
  }
  take_quoted(rest, storage);  // referer
  take_quoted(rest, storage);  // user agent
  return r;
}

}  // namespace

std::string_view to_string(trace_format f) {
  switch (f) {
    case trace_format::csv:
      return "csv";
    case trace_format::access_log:
      return "access-log";
    case trace_format::nginx:
      return "nginx";
  }
  return "csv";
}

std::optional<trace_format> parse_trace_format(std::string_view text) {
  for (auto f : {trace_format::csv, trace_format::access_log, trace_format::nginx}) {
    if (text == to_string(f)) {
      return f;
    }
  }
  return std::nullopt;
}

trace_format detect_trace_format(std::string_view text) {
  while (!text.empty()) {
    std::string_view line = trim(next_line(text));
    if (line.empty()) {
      continue;
    }
    if (line.front() == '{') {
      return trace_format::access_log;
    }
    std::string_view rest = line;
    std::string_view address = take_token(rest);
    std::string_view ident = take_token(rest);
    take_token(rest);  // remote_user
    if (parse_ip(address) && ident == "-" && rest.starts_with("[")) {
      return trace_format::nginx;
    }
    return trace_format::csv;
  }
  return trace_format::csv;
}

trace_line_reader::trace_line_reader(std::string name, trace_format format, std::ostream& warnings)
    : name_(std::move(name)), format_(format), warnings_(warnings) {}

std::optional<trace_request> trace_line_reader::next(std::string_view line,
                                                     std::deque<std::string>& storage) {
  ++line_no_;
  const std::string_view trimmed = trim(line);
  if (trimmed.empty()) {
    return std::nullopt;
  }
  if (format_ == trace_format::csv) {
    if (trimmed.front() == '#' || (requests_ == 0 && trimmed.starts_with("time_s"))) {
      return std::nullopt;  // a comment, or the header line
    }
    trace_request r = csv_request(line, name_, line_no_, storage, fields_, last_, last_text_);
    r.line = line_no_;
    ++requests_;
    return r;
  }
  try {
    if (line.size() > k_max_log_line_bytes) {
      throw bad_line{"line longer than " + std::to_string(k_max_log_line_bytes) + " bytes"};
    }
    trace_request r = format_ == trace_format::nginx ? nginx_request(line, storage)
                                                     : access_log_request(line, storage);
    r.line = line_no_;
    ++requests_;
    return r;
  } catch (const bad_line& bad) {
    if (++bad_lines_ <= k_reported_bad_lines) {
      warnings_ << name_ << ":" << line_no_ << ": " << bad.problem << " (line skipped)\n";
    }
    return std::nullopt;
  }
}

void trace_line_reader::finish() {
  if (bad_lines_ > 0) {
    warnings_ << name_ << ": " << bad_lines_ << " malformed line" << (bad_lines_ == 1 ? "" : "s")
              << " skipped\n";
  }
  if (bad_lines_ > requests_) {
    throw trace_error(name_ + ": more malformed lines than requests as format " +
                      std::string(to_string(format_)) + " (--format names another)");
  }
}

nanos trace_origin(nanos first) {
  // The gateway's clock counts from 2020-01-01 UTC and its fixed windows align to that: so do
  // the replay's, from the log's first time (before 2020: from the first line).
  const nanos since_origin = first - steady_clock::k_origin;
  return since_origin > nanos{0} ? since_origin : nanos{0};
}

trace read_trace(std::string_view text, const std::string& name, trace_format format,
                 std::ostream& warnings) {
  trace out;
  out.format = format;
  // One request a line, at most, and a request takes 12 bytes at the least
  // ("0,G,/,,,::1\n"): room for all of them without copying as the vector grows, and no
  // more than the text could hold (a file of empty lines).
  std::size_t lines = 1;
  for (auto nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n', nl + 1)) {
    ++lines;
  }
  reserve_huge(out.requests, std::min(lines, text.size() / 12 + 1));
  trace_line_reader reader(name, format, warnings);
  while (!text.empty()) {
    if (auto r = reader.next(next_line(text), out.storage)) {
      out.requests.push_back(*r);
    }
  }
  reader.finish();
  out.bad_lines = reader.bad_lines();
  if (format == trace_format::csv || out.requests.empty()) {
    return out;  // CSV times are already since its start, and never decrease
  }
  // Workers flush their buffers at different moments: put the lines in time order, keeping
  // the order of lines with the same time.
  auto earlier = [](const trace_request& a, const trace_request& b) { return a.time < b.time; };
  if (!std::is_sorted(out.requests.begin(), out.requests.end(), earlier)) {
    std::stable_sort(out.requests.begin(), out.requests.end(), earlier);
  }
  const nanos start = out.requests.front().time;
  for (auto& r : out.requests) {
    r.time -= start;
  }
  out.origin = trace_origin(start);
  return out;
}

}  // namespace ratewall
