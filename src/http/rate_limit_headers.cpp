#include "ratewall/http/rate_limit_headers.hpp"

#include <algorithm>
#include <charconv>
#include <limits>

#include "ratewall/config/limit_bounds.hpp"
#include "ratewall/core/json_text.hpp"

namespace ratewall {

namespace {

constexpr std::int64_t k_nanos_per_second = 1'000'000'000;

std::string to_decimal(std::uint64_t v) {
  char buf[20];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

void append_decimal(std::string& out, std::uint64_t v) {
  char buf[20];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

// An RFC 8941 sf-string: printable ASCII, with '"' and '\' escaped. Anything else cannot be
// written in one, so it becomes '?' rather than an unparseable header.
void append_sf_string(std::string& out, std::string_view s) {
  out.push_back('"');
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (u < 0x20 || u > 0x7e) {
      out.push_back('?');
    } else {
      out.push_back(c);
    }
  }
  out.push_back('"');
}

// Unix seconds, rounded up, of wall_now + after, in 128 bits: a reset_after from a store's
// reply is not bounded by the configuration.
std::uint64_t epoch_seconds_after(std::chrono::system_clock::time_point wall_now, nanos after) {
  using i128 = __int128;
  const auto now = std::chrono::duration_cast<nanos>(wall_now.time_since_epoch()).count();
  const i128 at = static_cast<i128>(now) + std::max<nanos::rep>(after.count(), 0);
  if (at <= 0) {
    return 0;
  }
  const i128 seconds = (at + k_nanos_per_second - 1) / k_nanos_per_second;
  constexpr auto k_max = std::numeric_limits<std::uint64_t>::max();
  return seconds > static_cast<i128>(k_max) ? k_max : static_cast<std::uint64_t>(seconds);
}

}  // namespace

std::uint64_t ceil_seconds(nanos d) {
  if (d.count() <= 0) {
    return 0;
  }
  auto ns = static_cast<std::uint64_t>(d.count());
  return ns / k_nanos_per_second + (ns % k_nanos_per_second != 0 ? 1 : 0);
}

std::uint64_t policy_window_seconds(const limit_config& limit, const limit_override* plan) {
  switch (limit.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket: {
      const rate_spec rate = plan != nullptr && plan->rate ? *plan->rate : limit.rate;
      const std::uint64_t burst = plan != nullptr && plan->burst ? *plan->burst : limit.burst;
      // bucket_depth saturates at nanos::max(): about 292 years, far beyond what loads.
      return ceil_seconds(bucket_depth(rate, std::max<std::uint64_t>(burst, 1)));
    }
    case algorithm::fixed_window:
    case algorithm::sliding_window_log:
    case algorithm::sliding_window_counter:
      return ceil_seconds(plan != nullptr && plan->window ? *plan->window : limit.window);
    case algorithm::concurrency:
      break;
  }
  return 0;
}

std::uint64_t retry_after_seconds(const decision& d) {
  // A denial with no known end (e.g. a concurrency slot) still must not invite an instant retry.
  std::uint64_t s = ceil_seconds(d.retry_after);
  return s == 0 ? 1 : s;
}

void render_rate_limit_headers(const decision& d, std::string_view limit_name,
                               std::uint64_t window_seconds, const header_options& options,
                               std::chrono::system_clock::time_point wall_now, header_list& out) {
  if (options.enabled) {
    const std::uint64_t reset = ceil_seconds(d.reset_after);
    out.emplace_back("X-RateLimit-Limit", to_decimal(d.limit));
    out.emplace_back("X-RateLimit-Remaining", to_decimal(d.remaining));
    if (options.reset_epoch) {
      out.emplace_back("X-RateLimit-Reset",
                       to_decimal(epoch_seconds_after(wall_now, d.reset_after)));
    } else {
      out.emplace_back("X-RateLimit-Reset", to_decimal(reset));
    }
    if (options.ietf_draft) {
      std::string policy;
      policy.reserve(limit_name.size() + 48);
      append_sf_string(policy, limit_name);
      policy.append(";q=");
      append_decimal(policy, d.limit);
      if (window_seconds != 0) {
        policy.append(";w=");
        append_decimal(policy, window_seconds);
      }
      out.emplace_back("RateLimit-Policy", std::move(policy));

      std::string state;
      state.reserve(limit_name.size() + 48);
      append_sf_string(state, limit_name);
      state.append(";r=");
      append_decimal(state, d.remaining);
      state.append(";t=");
      append_decimal(state, reset);
      out.emplace_back("RateLimit", std::move(state));
    }
  }
  // A request that can never pass gets no Retry-After: any value would invite a futile retry.
  if (!d.allowed && !d.impossible) {
    out.emplace_back("Retry-After", to_decimal(retry_after_seconds(d)));
  }
}

namespace {

/// A problem body, but for its retry time: what comes before the first (the detail's "retry
/// in N seconds"), and what comes between it and the second ("retry_after": N). `impossible`:
/// the detail says the request can never pass, and the whole body is `head` plus "null}".
struct problem_parts {
  std::string head;
  std::string middle;
};

/// The fields after "detail", up to the value of "retry_after".
void append_route_and_policy(std::string& out, std::string_view route,
                             std::string_view limit_name) {
  out.append(R"(,"route":)");
  append_json_string(out, route);
  out.append(R"(,"policy":)");
  append_json_string(out, limit_name);
  out.append(R"(,"retry_after":)");
}

problem_parts make_problem_parts(std::string_view route, std::string_view limit_name,
                                 unsigned status, bool impossible) {
  problem_parts parts;
  std::string& head = parts.head;
  // Names as long as the configuration allows are rare; plain ones leave room to spare.
  head.reserve(160 + 2 * (route.size() + limit_name.size()));
  head.append(R"({"type":"about:blank","title":)");
  append_json_string(head, denial_reason(status));
  head.append(R"(,"status":)");
  append_decimal(head, status);
  // "detail" is written in place, its quotes escaped: Limit "<limit>" of route "<route>" ...
  head.append(R"(,"detail":"Limit \")");
  append_json_escaped(head, limit_name);
  head.append(R"(\" of route \")");
  append_json_escaped(head, route);
  if (impossible) {
    head.append(R"(\" can never admit a request of this cost; retrying will not help.")");
    append_route_and_policy(head, route, limit_name);
  } else {
    head.append(R"(\" exceeded; retry in )");
    append_route_and_policy(parts.middle, route, limit_name);
  }
  return parts;
}

/// The parts of the body last rendered on this thread, kept while its route, limit and status
/// stay the same: a flood of 429s is mostly one client, or a few, over the same limit. The
/// names are compared by value (a reload may reuse a freed name's address).
struct problem_parts_cache {
  std::string route;
  std::string limit_name;
  unsigned status = 0;
  bool valid = false;
  problem_parts parts;

  const problem_parts& get(std::string_view r, std::string_view l, unsigned s) {
    if (!valid || s != status || r != route || l != limit_name) {
      parts = make_problem_parts(r, l, s, false);
      route.assign(r);
      limit_name.assign(l);
      status = s;
      valid = true;
    }
    return parts;
  }
};

}  // namespace

std::string render_problem_body(std::string_view route, std::string_view limit_name,
                                const decision& d, unsigned status) {
  if (d.impossible) {
    std::string body = make_problem_parts(route, limit_name, status, true).head;
    body.append("null}");
    return body;
  }
  thread_local problem_parts_cache cache;
  const problem_parts& parts = cache.get(route, limit_name, status);
  const std::uint64_t retry = retry_after_seconds(d);
  std::string body;
  body.reserve(parts.head.size() + parts.middle.size() + 64);
  body.append(parts.head);
  append_decimal(body, retry);
  body.append(retry == 1 ? R"( second.")" : R"( seconds.")");
  body.append(parts.middle);
  append_decimal(body, retry);
  body.push_back('}');
  return body;
}

std::string_view denial_reason(unsigned status) {
  // The 4xx/5xx codes of RFC 9110 and RFC 6585 an operator may plausibly deny with.
  static constexpr std::pair<unsigned, std::string_view> k_reasons[] = {
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {402, "Payment Required"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {406, "Not Acceptable"},
      {407, "Proxy Authentication Required"},
      {408, "Request Timeout"},
      {409, "Conflict"},
      {410, "Gone"},
      {411, "Length Required"},
      {412, "Precondition Failed"},
      {413, "Content Too Large"},
      {414, "URI Too Long"},
      {415, "Unsupported Media Type"},
      {416, "Range Not Satisfiable"},
      {417, "Expectation Failed"},
      {421, "Misdirected Request"},
      {422, "Unprocessable Content"},
      {423, "Locked"},
      {424, "Failed Dependency"},
      {425, "Too Early"},
      {426, "Upgrade Required"},
      {428, "Precondition Required"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {451, "Unavailable For Legal Reasons"},
      {500, "Internal Server Error"},
      {501, "Not Implemented"},
      {502, "Bad Gateway"},
      {503, "Service Unavailable"},
      {504, "Gateway Timeout"},
      {505, "HTTP Version Not Supported"},
      {507, "Insufficient Storage"},
      {508, "Loop Detected"},
      {511, "Network Authentication Required"},
  };
  for (const auto& [code, reason] : k_reasons) {
    if (code == status) {
      return reason;
    }
  }
  return "Request Denied";
}

denial render_denial(const deny_config& deny, std::string_view route, std::string_view limit_name,
                     const decision& d) {
  denial out;
  out.status = deny.status;
  out.content_type = deny.content_type;
  // Not a conditional expression: with a copied string on one side, GCC copies the rendered
  // one too (a second allocation per 429).
  if (deny.body) {
    out.body = *deny.body;
  } else {
    out.body = render_problem_body(route, limit_name, d, deny.status);
  }
  return out;
}

}  // namespace ratewall
