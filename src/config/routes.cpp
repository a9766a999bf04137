#include <algorithm>
#include <cctype>
#include <charconv>
#include <optional>
#include <regex>
#include <string>

#include "ratewall/config/limit_bounds.hpp"
#include "ratewall/core/field_roles.hpp"
#include "ratewall/core/parse.hpp"
#include "sections.hpp"

namespace ratewall {
namespace {

std::string to_upper(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return s;
}

std::string to_lower(std::string s) {
  for (char& c : s) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  return s;
}

// Which keys each algorithm reads; the others are rejected so that, say, a `window` left on a
// token bucket does not look like it has an effect.
struct algorithm_info {
  algorithm algo;
  std::vector<std::string_view> required;
  std::vector<std::string_view> optional;
};

const std::vector<algorithm_info>& algorithms() {
  static const std::vector<algorithm_info> k_algorithms = {
      {algorithm::token_bucket, {"rate"}, {"burst"}},
      {algorithm::leaky_bucket, {"rate"}, {"burst", "delay"}},
      {algorithm::fixed_window, {"limit", "window"}, {}},
      {algorithm::sliding_window_log, {"limit", "window"}, {}},
      {algorithm::sliding_window_counter, {"limit", "window"}, {}},
      {algorithm::concurrency, {"limit"}, {}},
  };
  return k_algorithms;
}

const algorithm_info& read_algorithm(const yaml_reader& r, const yaml_field& field) {
  std::string text = read_string(r, field);
  std::string names;
  for (const auto& info : algorithms()) {
    if (to_string(info.algo) == text) {
      return info;
    }
    names += names.empty() ? "" : ", ";
    names += to_string(info.algo);
  }
  r.fail(field, "expected one of: " + names);
}

bool uses(const algorithm_info& info, std::string_view key) {
  return std::find(info.required.begin(), info.required.end(), key) != info.required.end() ||
         std::find(info.optional.begin(), info.optional.end(), key) != info.optional.end();
}

std::string describe_keys(const algorithm_info& info) {
  std::vector<std::string> keys(info.required.begin(), info.required.end());
  keys.insert(keys.end(), info.optional.begin(), info.optional.end());
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == keys.size() ? " and " : ", ");
    out += keys[i];
  }
  return out;
}

// Rejects the value keys (`checked`) that `info` does not read.
void check_used(const yaml_reader& r, const yaml_map& m, const algorithm_info& info,
                std::initializer_list<std::string_view> checked) {
  for (std::string_view key : checked) {
    if (auto f = m.get(key); f && !uses(info, key)) {
      r.fail(*f, "not used by " + std::string(to_string(info.algo)) + " (it takes " +
                     describe_keys(info) + ")");
    }
  }
}

// The segments of a path template, "/tenants/{tenant}/items" -> tenants, {tenant}, items.
std::vector<std::string_view> template_segments(std::string_view path) {
  std::vector<std::string_view> segments;
  path.remove_prefix(1);  // the leading "/"
  for (;;) {
    const auto slash = path.find('/');
    segments.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) {
      return segments;
    }
    path.remove_prefix(slash + 1);
  }
}

// pchar of RFC 3986 §3.3 without percent-encodings: what a canonical path segment holds.
bool is_plain_path_char(char c) {
  static constexpr std::string_view k_others = "-._~!$&'()*+,;=:@";
  return std::isalnum(static_cast<unsigned char>(c)) || k_others.find(c) != std::string_view::npos;
}

bool is_template_name(std::string_view name) {
  return !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// "/tenants/{tenant}/items": segments are literal or one whole {name}, each name once.
void check_path_template(const yaml_reader& r, const yaml_field& f, const std::string& path) {
  static const std::string k_expected =
      " (expected segments like \"/tenants/{tenant}/items\", a {name} being one whole segment)";
  if (path.front() != '/') {
    r.fail(f, "must start with \"/\"");
  }
  std::vector<std::string_view> names;
  for (std::string_view segment : template_segments(path)) {
    if (segment.empty()) {
      r.fail(f, "empty segment" + k_expected);
    }
    if (segment.front() == '{' && segment.back() == '}') {
      std::string_view name = segment.substr(1, segment.size() - 2);
      if (!is_template_name(name)) {
        r.fail(f, "\"" + std::string(segment) + "\": a name is letters, digits and '_'");
      }
      if (std::find(names.begin(), names.end(), name) != names.end()) {
        r.fail(f, "{" + std::string(name) + "} named twice");
      }
      names.push_back(name);
    } else if (!std::all_of(segment.begin(), segment.end(), is_plain_path_char) || segment == "." ||
               segment == "..") {
      r.fail(f, "\"" + std::string(segment) + "\" is not a plain segment" + k_expected);
    }
  }
}

route_match read_match(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::strict(r, field,
                            {"path_exact", "path_prefix", "path_regex", "path_template", "methods",
                             "host", "case_insensitive"});
  route_match match;
  std::optional<yaml_field> path_field;
  for (std::string_view key : {"path_exact", "path_prefix", "path_regex", "path_template"}) {
    auto f = m.get(key);
    if (!f) {
      continue;
    }
    if (path_field) {
      r.fail(*f, "set only one of path_exact, path_prefix, path_regex and path_template");
    }
    path_field = f;
  }
  if (!path_field) {
    match.path_prefix = "/";
  } else if (auto f = m.get("path_template")) {
    match.path_template = read_nonempty_string(r, *f);
    check_path_template(r, *f, match.path_template);
  } else if (auto f = m.get("path_regex")) {
    match.path_regex = read_nonempty_string(r, *f);
    try {
      std::regex compiled(match.path_regex, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      r.fail(*f, std::string("invalid regular expression: ") + e.what());
    }
    // The whole path must match, as with Envoy's safe_regex; nginx's `location ~` searches. A
    // pattern anchored at one end that ends at the other on a plain character or class
    // (`^/api/v[0-9]+/`, `/login$`) reads as a search.
    const std::string_view re = match.path_regex;
    const auto escaped = [&](std::size_t at) {  // an odd run of backslashes before `at`
      std::size_t n = 0;
      while (at > n && re[at - n - 1] == '\\') {
        ++n;
      }
      return n % 2 == 1;
    };
    const bool anchored_start = re.front() == '^';
    const bool anchored_end = re.back() == '$' && !escaped(re.size() - 1);
    const auto closed = [](char c) {
      return std::string_view("*+?)}|").find(c) == std::string_view::npos;
    };
    if (anchored_start && !anchored_end && closed(re.back())) {
      r.warn(*f, "\"" + match.path_regex +
                     "\" must match the whole path, not a part of it: add \".*\" at its end to "
                     "take the paths that go on (or say path_prefix)");
    } else if (anchored_end && !anchored_start && re.size() > 1 && closed(re.front()) &&
               re.front() != '.' && re.front() != '(') {
      r.warn(*f, "\"" + match.path_regex +
                     "\" must match the whole path, not a part of it: add \".*\" at its start "
                     "to take the paths that begin otherwise");
    }
  } else {
    std::string path = read_nonempty_string(r, *path_field);
    if (path.front() != '/') {
      r.fail(*path_field, "must start with \"/\"");
    }
    (m.has("path_exact") ? match.path_exact : match.path_prefix) = path;
  }
  if (auto f = m.get("methods")) {
    auto items = read_list(r, *f);
    if (items.empty()) {
      r.fail(*f, "expected at least one method (leave methods out to match every method)");
    }
    for (const auto& item : items) {
      std::string method = to_upper(read_token(r, item));
      if (std::find(match.methods.begin(), match.methods.end(), method) != match.methods.end()) {
        r.fail(item, "duplicate method " + method);
      }
      match.methods.push_back(std::move(method));
    }
  }
  if (auto f = m.get("case_insensitive")) {
    match.case_insensitive = read_bool(r, *f);
  }
  if (auto f = m.get("host")) {
    match.host = to_lower(read_nonempty_string(r, *f));
    for (char c : match.host) {
      bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
      if (!ok) {
        r.fail(*f, "expected a host name like \"api.example.com\" (without port or path)");
      }
    }
  }
  return match;
}

const std::string k_sources =
    "api_key, user, ip, header:NAME, query:NAME, cookie:NAME, path:NAME (a {NAME} of "
    "match.path_template), jwt:CLAIM (identity.jwt)";

// "api_key", "header:X-Tenant", "path:tenant", ...: one source of identify_by.
identity_part read_identity_part(const yaml_reader& r, const yaml_field& f,
                                 const route_match& match, const identity_config& identity) {
  if (!f.node.IsScalar()) {
    r.fail(f, "expected one of: " + k_sources);
  }
  const std::string text = read_nonempty_string(r, f);
  const auto colon = text.find(':');
  identity_part part;
  if (colon == std::string::npos) {
    for (identity_source s :
         {identity_source::api_key, identity_source::user, identity_source::ip}) {
      if (text == to_string(s)) {
        part.source = s;
        return part;
      }
    }
    r.fail(f, "expected one of: " + k_sources);
  }
  const std::string kind = text.substr(0, colon);
  part.name = text.substr(colon + 1);
  if (kind == "jwt") {
    if (!identity.jwt) {
      r.fail(f, "jwt: descriptors need identity.jwt (how bearer tokens are verified)");
    }
    if (identity.bearer != bearer_use::jwt) {
      r.fail(f, "jwt: descriptors need identity.bearer: jwt (bearer tokens are read as " +
                    std::string(to_string(identity.bearer)) + ")");
    }
    part.source = identity_source::jwt;
  } else if (kind == "header") {
    part.source = identity_source::header;
  } else if (kind == "query") {
    part.source = identity_source::query;
  } else if (kind == "cookie") {
    part.source = identity_source::cookie;
  } else if (kind == "path") {
    part.source = identity_source::path;
  } else {
    r.fail(f, "unknown source \"" + kind + "\" (expected one of: " + k_sources + ")");
  }
  if (!is_token(part.name)) {
    r.fail(f, "\"" + part.name + "\" is not a valid " + kind + " name");
  }
  if (part.name.find('+') != std::string::npos) {
    r.fail(f,
           "\"" + part.name + "\": '+' joins the parts of a composite in subjects, not in names");
  }
  if (part.source == identity_source::header) {
    part.name = to_lower(part.name);
    if (is_gateway_field(part.name)) {
      r.fail(f, "the gateway rewrites or drops " + part.name +
                    " before the upstream sees it: it cannot name a client");
    }
    if (part.name == "cookie") {
      r.fail(f, "use cookie:NAME to name a client by a cookie");
    }
    if (cgi_same(part.name, identity.user_header)) {
      r.fail(f, "the gateway drops " + part.name +
                    " (identity.user_header) from clients other than trusted proxies before the "
                    "upstream sees it: use `user` to name a client by it");
    }
  }
  if (part.source == identity_source::path) {
    if (match.path_template.empty()) {
      r.fail(f, "path:" + part.name + " needs match.path_template with {" + part.name + "}");
    }
    const auto segments = template_segments(match.path_template);
    const auto it = std::find(segments.begin(), segments.end(), "{" + part.name + "}");
    if (it == segments.end()) {
      r.fail(f, "match.path_template \"" + match.path_template + "\" has no {" + part.name + "}");
    }
    part.segment = static_cast<std::size_t>(it - segments.begin());
  }
  return part;
}

// [api_key, header:X-Tenant, [path:tenant, ip]]: sources in order, a list being a composite.
std::vector<identity_descriptor> read_identify_by(const yaml_reader& r, const yaml_field& field,
                                                  const route_match& match,
                                                  const identity_config& identity) {
  auto items = read_list(r, field);
  if (items.empty()) {
    r.fail(field, "expected at least one of: " + k_sources);
  }
  std::vector<identity_descriptor> descriptors;
  for (const auto& item : items) {
    identity_descriptor d;
    if (item.node.IsSequence()) {
      const auto parts = read_list(r, item);
      if (parts.size() < 2) {
        r.fail(item, "a composite (a list in identify_by) joins at least two sources");
      }
      for (const auto& p : parts) {
        if (p.node.IsSequence()) {
          r.fail(p, "a composite's parts are sources, not lists");
        }
        identity_part part = read_identity_part(r, p, match, identity);
        if (std::find(d.parts.begin(), d.parts.end(), part) != d.parts.end()) {
          r.fail(p, "listed twice in this composite");
        }
        d.parts.push_back(std::move(part));
      }
    } else {
      d.parts.push_back(read_identity_part(r, item, match, identity));
    }
    if (std::find(descriptors.begin(), descriptors.end(), d) != descriptors.end()) {
      r.fail(item, "listed twice");
    }
    descriptors.push_back(std::move(d));
  }
  return descriptors;
}

// `cost: 2` or `cost: { default: 1, POST: 5 }`.
void read_cost(const yaml_reader& r, const yaml_field& field, route_config& route) {
  if (!field.node.IsMap()) {
    if (!field.node.IsScalar()) {
      r.fail(field, "expected a positive integer or a mapping like { default: 1, POST: 5 }");
    }
    route.cost = read_uint(r, field, 1);
    return;
  }
  yaml_map costs = yaml_map::open(r, field);
  for (const auto& [key, value] : costs.entries()) {
    std::uint64_t cost = read_uint(r, value, 1);
    if (key == "default") {
      route.cost = cost;
      continue;
    }
    std::string method =
        to_upper(read_token(r, yaml_field{YAML::Node(key), value.path, value.line}));
    if (!route.method_cost.emplace(method, cost).second) {
      r.fail(value, "cost for " + method + " set twice");
    }
  }
}

// `limit` of a window algorithm or a concurrency limit, within limit_bounds.hpp.
std::uint64_t read_limit_count(const yaml_reader& r, const yaml_field& field, algorithm algo) {
  const std::uint64_t count = read_uint(r, field, 1, k_max_limit_count);
  if (algo == algorithm::sliding_window_log && count > k_max_log_limit) {
    r.fail(field, "sliding_window_log keeps one timestamp per request: at most " +
                      std::to_string(k_max_log_limit) + " (use sliding_window_counter)");
  }
  return count;
}

// A token or leaky bucket must refill within k_max_duration (limit_bounds.hpp). `rate_field`
// and `burst_field` are where the values were written, when in this mapping; otherwise
// `fallback` is blamed (a plan whose rate makes the limit's own burst too deep).
void check_bucket_depth(const yaml_reader& r, algorithm algo, const rate_spec& rate,
                        std::uint64_t burst, const std::optional<yaml_field>& rate_field,
                        const std::optional<yaml_field>& burst_field, const yaml_field& fallback) {
  const std::uint64_t units = bucket_units(algo, burst);
  if (units == 0 || bucket_depth(rate, units) <= k_max_duration) {
    return;
  }
  const std::string formula =
      algo == algorithm::leaky_bucket ? "(burst + 1) × period / count" : "burst × period / count";
  const yaml_field blame = burst_field.value_or(rate_field.value_or(fallback));
  r.fail(blame, "burst " + std::to_string(burst) + " at " + format_rate(rate) +
                    " takes too long to refill (" + formula + " must be at most " +
                    format_duration(k_max_duration) + ")");
}

limit_override read_override(const yaml_reader& r, const yaml_field& field,
                             const algorithm_info& info, const limit_config& own,
                             bool burst_defaulted) {
  auto m = yaml_map::strict(r, field, {"rate", "burst", "limit", "window"});
  check_used(r, m, info, {"rate", "burst", "limit", "window"});
  limit_override o;
  if (auto f = m.get("rate")) {
    o.rate = read_rate(r, *f);
  }
  if (auto f = m.get("burst")) {
    o.burst = read_uint(r, *f, info.algo == algorithm::token_bucket ? 1 : 0);
  }
  if (auto f = m.get("limit")) {
    o.limit = read_limit_count(r, *f, info.algo);
  }
  if (auto f = m.get("window")) {
    o.window = read_duration(r, *f);
  }
  // A burst left to its default follows the rate: premium 100/s gets burst 100, not the 10 of
  // a 10/s base limit.
  if (burst_defaulted && o.rate && !o.burst) {
    o.burst = o.rate->count;
  }
  if (o.rate || o.burst) {
    check_bucket_depth(r, info.algo, o.rate.value_or(own.rate), o.burst.value_or(own.burst),
                       m.get("rate"), m.get("burst"), field);
  }
  return o;
}

limit_config read_limit(const yaml_reader& r, const yaml_field& field, const config& declared,
                        const std::vector<limit_config>& earlier) {
  auto m = yaml_map::strict(r, field,
                            {"name", "algorithm", "rate", "burst", "limit", "window", "delay",
                             "plans", "on_store_error", "shadow"});
  limit_config limit;
  auto name = m.require("name");
  limit.name = read_name(r, name);
  for (std::size_t i = 0; i < earlier.size(); ++i) {
    if (earlier[i].name == limit.name) {
      r.fail(name, "duplicate limit name \"" + limit.name + "\" (also limits[" + std::to_string(i) +
                       "])");
    }
  }
  const algorithm_info* info = &algorithms().front();
  if (auto f = m.get("algorithm")) {
    info = &read_algorithm(r, *f);
  }
  limit.algo = info->algo;
  for (std::string_view key : info->required) {
    m.require(key, std::string(to_string(info->algo)) + " takes " + describe_keys(*info));
  }
  check_used(r, m, *info, {"rate", "burst", "limit", "window", "delay"});
  if (auto f = m.get("rate")) {
    limit.rate = read_rate(r, *f);
  }
  bool burst_defaulted = info->algo == algorithm::token_bucket && !m.has("burst");
  if (auto f = m.get("burst")) {
    limit.burst = read_uint(r, *f, info->algo == algorithm::token_bucket ? 1 : 0);
  } else if (burst_defaulted) {
    limit.burst = limit.rate.count;
  }
  if (auto f = m.get("limit")) {
    limit.limit = read_limit_count(r, *f, info->algo);
  }
  if (auto f = m.get("window")) {
    limit.window = read_duration(r, *f);
  }
  if (auto f = m.get("delay")) {
    limit.delay = read_bool(r, *f);
  }
  check_bucket_depth(r, limit.algo, limit.rate, limit.burst, m.get("rate"), m.get("burst"), field);
  if (auto f = m.get("plans")) {
    yaml_map overrides = yaml_map::open(r, *f);
    for (const auto& [plan, value] : overrides.entries()) {
      check_plan(r, value, plan, declared.plans);
      limit.plans.emplace(plan, read_override(r, value, *info, limit, burst_defaulted));
    }
  }
  if (auto f = m.get("on_store_error")) {
    limit.on_store_error = read_store_failure(r, *f);
  }
  if (auto f = m.get("shadow")) {
    limit.shadow = read_bool(r, *f);
  }
  return limit;
}

// How much one request may cost and still pass `limit` when it is full; 0 = no bound here.
std::uint64_t capacity(const limit_config& limit, const limit_override* o) {
  switch (limit.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket:
      return bucket_units(limit.algo, o != nullptr && o->burst ? *o->burst : limit.burst);
    case algorithm::fixed_window:
    case algorithm::sliding_window_log:
    case algorithm::sliding_window_counter:
      return o != nullptr && o->limit ? *o->limit : limit.limit;
    default:
      return 0;
  }
}

// A cost above a limit's capacity would deny every such request forever: a config mistake.
void check_costs(const yaml_reader& r, const yaml_field& cost_field, const route_config& route) {
  std::uint64_t max_cost = route.cost;
  for (const auto& [method, cost] : route.method_cost) {
    max_cost = std::max(max_cost, cost);
  }
  for (const auto& limit : route.limits) {
    std::vector<std::pair<std::string, const limit_override*>> variants{{"", nullptr}};
    for (const auto& [plan, o] : limit.plans) {
      variants.emplace_back(plan, &o);
    }
    for (const auto& [plan, o] : variants) {
      std::uint64_t cap = capacity(limit, o);
      if (cap != 0 && max_cost > cap) {
        std::string which =
            "limit \"" + limit.name + "\"" + (plan.empty() ? "" : " for plan \"" + plan + "\"");
        r.fail(cost_field, "a request costing " + std::to_string(max_cost) + " could never pass " +
                               which + " (capacity " + std::to_string(cap) + ")");
      }
    }
  }
}

// `cost_from_response: { header: NAME }` or `{ json: a.b.c }`, with `default`, `max` and (json)
// `max_body`. Read after the route's limits and cost, which it must agree with.
cost_from_response_config read_cost_from_response(const yaml_reader& r, const yaml_field& field,
                                                  const route_config& route, bool cost_set) {
  auto m = yaml_map::strict(r, field, {"header", "json", "default", "max", "max_body"});
  cost_from_response_config c;
  auto header = m.get("header");
  auto json = m.get("json");
  if (header.has_value() == json.has_value()) {
    r.fail(field,
           "set exactly one of header (a response header) and json (a field of a JSON body)");
  }
  if (header) {
    c.from = cost_from_response_config::source::header;
    c.header = read_token(r, *header);
  } else {
    if (route.grpc) {
      r.fail(*json,
             "cannot be read on a grpc route: a gRPC response body is length-prefixed messages, "
             "never one JSON document (use header)");
    }
    c.from = cost_from_response_config::source::json;
    const std::string path = read_nonempty_string(r, *json);
    std::size_t start = 0;
    for (;;) {
      const std::size_t dot = path.find('.', start);
      const std::string key = path.substr(start, dot == std::string::npos ? dot : dot - start);
      if (key.empty()) {
        r.fail(*json, "\"" + path + "\": expected keys joined by '.', like usage.total_tokens");
      }
      c.json.push_back(key);
      if (dot == std::string::npos) {
        break;
      }
      start = dot + 1;
    }
    if (c.json.size() > k_max_json_path_depth) {
      r.fail(*json, "at most " + std::to_string(k_max_json_path_depth) + " keys");
    }
  }
  if (auto f = m.get("max")) {
    c.max = read_uint(r, *f, 1, k_max_response_cost);
  }
  if (auto f = m.get("default")) {
    c.default_cost = read_uint(r, *f, 0, k_max_response_cost);
    if (c.default_cost > c.max) {
      r.fail(*f, "default " + std::to_string(c.default_cost) + " is above max " +
                     std::to_string(c.max));
    }
  }
  if (auto f = m.get("max_body")) {
    if (header) {
      r.fail(*f, "only for json (a header needs no body)");
    }
    c.max_body = read_byte_size(r, *f, 1);
    if (c.max_body > k_max_cost_body_bytes) {
      r.fail(*f, "at most 16MiB (the body is kept in memory until it ends)");
    }
  }
  if (cost_set) {
    r.fail(field,
           "cost and cost_from_response cannot both be set (the response's cost is "
           "charged; cost_from_response.default when it reports none)");
  }
  for (const limit_config& limit : route.limits) {
    std::string why;
    if (limit.algo == algorithm::sliding_window_log) {
      why =
          "a sliding_window_log keeps one timestamp per unit and cannot hold a debt (use "
          "sliding_window_counter)";
    } else if (limit.algo == algorithm::concurrency) {
      why = "a concurrency limit counts requests in flight, not costs";
    } else if (limit.algo == algorithm::leaky_bucket && limit.delay) {
      why = "a leaky bucket with delay holds a request for its cost, unknown until the response";
    }
    if (!why.empty()) {
      r.fail(field, "limit \"" + limit.name + "\": " + why);
    }
  }
  return c;
}

// A plain decimal like 0.05 or 1 (digits and at most one '.', no sign or exponent) in [0, 1].
// `zero` and `one` say whether the ends themselves are allowed; `expected` ends the message.
double read_fraction(const yaml_reader& r, const yaml_field& field, bool zero, bool one,
                     const std::string& expected) {
  const std::string text = read_string(r, field);
  double v = -1;
  const bool plain = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos &&
                     std::count(text.begin(), text.end(), '.') <= 1 && text != ".";
  if (plain) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size()) {
      v = -1;
    }
  }
  if (v < 0 || v > 1 || (!zero && v == 0) || (!one && v == 1)) {
    r.fail(field, "expected " + expected);
  }
  return v;
}

// `adaptive: { latency_target, error_rate_target, min_factor, window }` (limit/adaptive.hpp).
// Read after the route's limits, which it scales.
adaptive_config read_adaptive(const yaml_reader& r, const yaml_field& field,
                              const route_config& route) {
  auto m =
      yaml_map::strict(r, field, {"latency_target", "error_rate_target", "min_factor", "window"});
  adaptive_config a;
  auto latency = m.get("latency_target");
  auto errors = m.get("error_rate_target");
  if (!latency && !errors) {
    r.fail(field,
           "set latency_target, error_rate_target or both (what says that the upstream "
           "struggles)");
  }
  if (latency) {
    a.latency_target = read_duration(r, *latency);
  }
  if (errors) {
    a.error_rate_target =
        read_fraction(r, *errors, true, false, "a fraction from 0 to below 1, like 0.05");
  }
  if (auto f = m.get("min_factor")) {
    a.min_factor = read_fraction(r, *f, false, true, "a fraction above 0 and at most 1, like 0.1");
    // The factor is applied in millionths (adaptive.hpp): a smaller floor could not be kept.
    if (a.min_factor < 1e-6) {
      r.fail(*f, "must be at least 0.000001");
    }
  }
  if (auto f = m.get("window")) {
    a.window = read_duration(r, *f);
    if (a.window < k_min_adaptive_window || a.window > k_max_adaptive_window) {
      r.fail(*f, "must be from 1s to 10m");
    }
  }
  if (route.limits.empty()) {
    r.fail(field, "the route has no limits for the factor to apply to");
  }
  return a;
}

route_config read_route(const yaml_reader& r, const yaml_field& field, const config& declared,
                        const std::vector<route_config>& earlier) {
  auto m = yaml_map::strict(
      r, field,
      {"name", "match", "upstream", "identify_by", "cost", "limits", "shadow", "headers", "deny",
       "request_buffering", "cost_from_response", "adaptive", "grpc"});
  route_config route;
  auto name = m.require("name");
  route.name = read_name(r, name);
  for (std::size_t i = 0; i < earlier.size(); ++i) {
    if (earlier[i].name == route.name) {
      r.fail(name, "duplicate route name \"" + route.name + "\" (also routes[" + std::to_string(i) +
                       "])");
    }
  }
  if (auto f = m.get("match")) {
    route.match = read_match(r, *f);
  } else {
    route.match.path_prefix = "/";
  }
  auto upstream = m.require("upstream");
  route.upstream = read_nonempty_string(r, upstream);
  if (declared.find_upstream(route.upstream) == nullptr) {
    std::vector<std::string> names;
    for (const auto& u : declared.upstreams) {
      names.push_back(u.name);
    }
    r.fail(upstream, "unknown upstream \"" + route.upstream +
                         "\" (declared under upstreams: " + join_names(names) + ")");
  }
  if (auto f = m.get("identify_by")) {
    route.identify_by = read_identify_by(r, *f, route.match, declared.identity);
  }
  auto cost = m.get("cost");
  if (cost) {
    read_cost(r, *cost, route);
  }
  if (auto f = m.get("limits")) {
    for (const auto& item : read_list(r, *f)) {
      route.limits.push_back(read_limit(r, item, declared, route.limits));
    }
  }
  if (auto f = m.get("shadow")) {
    route.shadow = read_bool(r, *f);
  }
  route.headers = declared.headers;
  if (auto f = m.get("headers")) {
    route.headers = read_headers(r, *f, declared.headers);
  }
  if (auto f = m.get("grpc")) {
    route.grpc = read_bool(r, *f);
  }
  // A gRPC call's request is a stream of messages that may go on while answers come back, so
  // a grpc route never buffers it: off by default there, and an error when written true.
  route.request_buffering = !route.grpc;
  if (auto f = m.get("request_buffering")) {
    route.request_buffering = read_bool(r, *f);
    if (route.grpc && route.request_buffering) {
      r.fail(*f, "request_buffering cannot be true on a grpc route (gRPC calls stream)");
    }
  }
  if (auto f = m.get("deny")) {
    route.deny = read_deny(r, *f, route.grpc);
  }
  if (cost) {
    check_costs(r, *cost, route);
  }
  if (auto f = m.get("cost_from_response")) {
    route.cost_from_response = read_cost_from_response(r, *f, route, cost.has_value());
  }
  if (auto f = m.get("adaptive")) {
    route.adaptive = read_adaptive(r, *f, route);
  }
  return route;
}

}  // namespace

bool is_gateway_field(std::string_view name) {
  static constexpr std::string_view k_fields[] = {
      "host",    "connection", "keep-alive", "proxy-connection",    "te",
      "trailer", "upgrade",    "expect",     "proxy-authorization", "proxy-authenticate"};
  return cgi_same_any(name, k_fields) || gateway_owned_field(name) || client_claim_field(name);
}

std::vector<route_config> read_routes(const yaml_reader& reader, const yaml_field& field,
                                      const config& declared) {
  auto items = read_list(reader, field);
  if (items.empty()) {
    reader.fail(field, "declare at least one route");
  }
  std::vector<route_config> routes;
  for (const auto& item : items) {
    routes.push_back(read_route(reader, item, declared, routes));
  }
  return routes;
}

}  // namespace ratewall
