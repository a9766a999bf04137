#include "ratewall/sim/simulate.hpp"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/request_target.hpp"
#include "ratewall/http/router.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"

namespace ratewall {

const char* const k_simulate_usage =
    "usage: ratewall simulate --config FILE --trace TRACE.csv [--json]\n"
    "\n"
    "Replays TRACE.csv (time_s,method,path,api_key,user,ip[,cost]) through the routes,\n"
    "identity rules and limits of FILE with a simulated clock, and prints each decision and a\n"
    "summary per route and subject. Nothing is sent over the network.\n"
    "  --json   one JSON object per line instead of tables\n";

namespace {

using json = nlohmann::ordered_json;

// Subjects are named by a keyed hash; a fixed key makes them the same on every run.
constexpr std::string_view k_hash_key = "ratewall-simulate";
constexpr std::int64_t k_nanos_per_second = 1'000'000'000;

struct trace_request {
  int line = 0;
  nanos time{0};
  std::string method;
  std::string path;
  std::string api_key;
  std::string user;
  std::string ip;
  std::optional<std::uint64_t> cost;
};

class trace_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The fields of one CSV line: commas separate, double quotes enclose ("" is a quote).
std::vector<std::string> split_csv(std::string_view line, const std::string& where) {
  std::vector<std::string> fields(1);
  bool quoted = false;
  bool was_quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        fields.back() += c;
      }
    } else if (c == ',') {
      fields.emplace_back();
      was_quoted = false;
    } else if (c == '"' && fields.back().empty() && !was_quoted) {
      quoted = true;
      was_quoted = true;
    } else {
      fields.back() += c;
    }
  }
  if (quoted) {
    throw trace_error(where + "unterminated quoted field");
  }
  for (auto& f : fields) {
    while (!f.empty() && (f.front() == ' ' || f.front() == '\t')) {
      f.erase(0, 1);
    }
    while (!f.empty() && (f.back() == ' ' || f.back() == '\t')) {
      f.pop_back();
    }
  }
  return fields;
}

// "1", "1.5", "0.000001": decimal seconds, exact to the nanosecond.
std::optional<nanos> parse_seconds(std::string_view text) {
  auto dot = text.find('.');
  std::string_view whole = text.substr(0, dot);
  std::string_view frac = dot == std::string_view::npos ? std::string_view() : text.substr(dot + 1);
  if (whole.empty() || whole.size() > 9 || frac.size() > 9 ||
      (dot != std::string_view::npos && frac.empty())) {
    return std::nullopt;
  }
  std::int64_t seconds = 0;
  for (char c : whole) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    seconds = seconds * 10 + (c - '0');
  }
  std::int64_t ns = 0;
  std::int64_t scale = k_nanos_per_second;
  for (char c : frac) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    scale /= 10;
    ns += (c - '0') * scale;
  }
  return nanos{seconds * k_nanos_per_second + ns};
}

std::vector<trace_request> read_trace(std::string_view text, const std::string& name) {
  std::vector<trace_request> out;
  int line_no = 0;
  nanos last{0};
  std::string last_text = "0";
  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    std::string_view trimmed = line;
    while (!trimmed.empty() && (trimmed.front() == ' ' || trimmed.front() == '\t')) {
      trimmed.remove_prefix(1);
    }
    if (trimmed.empty() || trimmed.front() == '#') {
      continue;
    }
    if (out.empty() && trimmed.starts_with("time_s")) {
      continue;  // the header line
    }
    const std::string where = name + ":" + std::to_string(line_no) + ": ";
    auto fields = split_csv(line, where);
    if (fields.size() != 6 && fields.size() != 7) {
      throw trace_error(where +
                        "expected 6 or 7 fields (time_s,method,path,api_key,user,ip[,cost]), "
                        "found " +
                        std::to_string(fields.size()));
    }
    trace_request r;
    r.line = line_no;
    auto time = parse_seconds(fields[0]);
    if (!time) {
      throw trace_error(where + "time_s: expected seconds like 0, 1.5 or 0.001 (got \"" +
                        fields[0] + "\")");
    }
    if (*time < last) {
      throw trace_error(where + "time_s: " + fields[0] + " is earlier than the " + last_text +
                        " before it (times must not decrease)");
    }
    last = *time;
    last_text = fields[0];
    r.time = *time;
    r.method = fields[1];
    if (r.method.empty()) {
      throw trace_error(where + "method: must not be empty");
    }
    r.path = fields[2];
    if (r.path.empty() || (r.path.front() != '/' && r.path.find("://") == std::string::npos)) {
      throw trace_error(where + "path: expected a request path like /api/search");
    }
    r.api_key = fields[3];
    r.user = fields[4];
    r.ip = fields[5];
    if (!parse_ip(r.ip)) {
      throw trace_error(where + "ip: expected an IPv4 or IPv6 address (got \"" + r.ip + "\")");
    }
    if (fields.size() == 7 && !fields[6].empty()) {
      std::uint64_t cost = 0;
      const std::string& c = fields[6];
      auto [end, ec] = std::from_chars(c.data(), c.data() + c.size(), cost);
      if (ec != std::errc() || end != c.data() + c.size() || cost == 0) {
        throw trace_error(where + "cost: expected a positive integer (got \"" + c + "\")");
      }
      r.cost = cost;
    }
    out.push_back(std::move(r));
  }
  return out;
}

struct outcome {
  nanos t{0};
  const trace_request* req = nullptr;
  std::string route;    // "" = no route
  std::string subject;  // "" = not identified
  std::string plan;
  std::string decision;
  std::string limit;  // "" = null
  std::optional<std::uint64_t> remaining;
  std::optional<std::uint64_t> retry_ms;  // nullopt with has_retry: waiting cannot help
  bool has_retry = false;
  std::uint64_t delay_ms = 0;
  std::string shadow_limit;
};

struct tally {
  std::uint64_t requests = 0;
  std::uint64_t allowed = 0;
  std::uint64_t denied = 0;
  std::uint64_t shadow_denied = 0;
  std::uint64_t rejected = 0;
  std::uint64_t no_route = 0;

  void add(const std::string& decision) {
    ++requests;
    if (decision == "allowed") {
      ++allowed;
    } else if (decision == "denied") {
      ++denied;
    } else if (decision == "shadow_denied") {
      ++shadow_denied;
    } else if (decision == "rejected") {
      ++rejected;
    } else {
      ++no_route;
    }
  }
};

std::uint64_t ceil_ms(nanos d) {
  auto ns = static_cast<std::uint64_t>(std::max<std::int64_t>(d.count(), 0));
  return ns / 1'000'000 + (ns % 1'000'000 != 0 ? 1 : 0);
}

// "1.500" style text for tables.
std::string fixed3(std::uint64_t ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%llu.%03llu", static_cast<unsigned long long>(ms / 1000),
                static_cast<unsigned long long>(ms % 1000));
  return buf;
}

std::string short_subject(const std::string& subject) {
  // key:/user: subjects are 32 hex digits; 8 tell them apart in a table.
  auto colon = subject.find(':');
  if (colon != std::string::npos && (subject.starts_with("key:") || subject.starts_with("user:")) &&
      subject.size() > colon + 9) {
    return subject.substr(0, colon + 9) + "...";
  }
  return subject;
}

json or_null(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

class replay {
 public:
  explicit replay(const config& cfg)
      : cfg_(cfg),
        router_(cfg),
        identity_(cfg, std::string(k_hash_key)),
        // Always memory: a simulation never talks to Redis, whatever the config says.
        limiter_(cfg, clock_, std::make_shared<memory_store>(cfg)) {}

  outcome run(const trace_request& r) {
    clock_.set(r.time);
    outcome o;
    o.t = r.time;
    o.req = &r;
    // The path is made canonical as the gateway would (a path it refuses routes nowhere).
    std::optional<std::size_t> route_index;
    if (canonicalize_target(r.path, cfg_.server.paths, target_)) {
      route_index = router_.match(r.method, "", target_.path);
    }
    if (!route_index) {
      o.decision = "no_route";
      return o;
    }
    const route_config& route = cfg_.routes[*route_index];
    o.route = route.name;
    identity_input in;
    in.peer_ip = r.ip;
    in.api_key = r.api_key;
    in.user = r.user;
    in.path = target_.path;  // path: descriptors; a trace has no header fields or cookies
    in.query =
        target_.query.empty() ? std::string_view() : std::string_view(target_.query).substr(1);
    identity_result who = identity_.resolve(route, in);
    if (who.rejected || !who.refused.empty()) {
      o.decision = "rejected";  // a 401, or a 400 for a field that names the client twice
      return o;
    }
    o.subject = who.subject;
    o.plan = who.plan;

    auto policies = limiter_.policies(*route_index, who.plan);
    route_decision d;
    if (!policies.empty()) {
      check_request req;
      req.subject = who.subject;
      req.route = static_cast<std::uint32_t>(*route_index);
      req.limits = policies;
      req.cost = r.cost ? *r.cost : limiter_.cost(*route_index, r.method);
      req.now = clock_.now();
      const bool from_response = route.cost_from_response.has_value();
      if (from_response) {
        // Admitted on room left; the cost column is what the response reported (none: the
        // route's default), charged at once as if the response ended when it was sent.
        req.mode = charge_mode::peek;
        req.cost = 1;
      }
      auto answered = limiter_.backing_store().try_check(req);
      if (!answered) {
        throw std::logic_error("the memory store did not answer at once");
      }
      d = std::move(*answered);
      if (from_response && d.allowed) {
        req.mode = charge_mode::force;
        req.cost = std::min(r.cost.value_or(route.cost_from_response->default_cost),
                            route.cost_from_response->max);
        limiter_.backing_store().try_check(req);
      }
    }
    o.decision = !d.allowed ? "denied" : d.shadow_denied ? "shadow_denied" : "allowed";
    if (d.has_limits) {
      o.limit = route.limits[d.limit_index].name;
      o.remaining = d.headline.remaining;
      o.has_retry = true;
      if (d.allowed) {
        o.retry_ms = 0;
      } else if (!d.headline.impossible && d.headline.retry_after != k_never) {
        o.retry_ms = ceil_ms(d.headline.retry_after);
      }
    }
    if (d.shadow_denied && d.shadow_limit_index < route.limits.size()) {
      o.shadow_limit = route.limits[d.shadow_limit_index].name;
    }
    o.delay_ms = ceil_ms(d.delay);
    return o;  // the request ends here: its concurrency units go back with `d`
  }

 private:
  const config& cfg_;
  manual_clock clock_;
  router router_;
  canonical_target target_;
  identity_resolver identity_;
  limiter limiter_;
};

json outcome_json(const outcome& o) {
  json j;
  j["t"] = static_cast<double>(o.t.count()) / k_nanos_per_second;
  j["method"] = o.req->method;
  j["path"] = o.req->path;
  j["route"] = or_null(o.route);
  j["subject"] = or_null(o.subject);
  j["plan"] = or_null(o.plan);
  j["decision"] = o.decision;
  j["limit"] = or_null(o.limit);
  j["remaining"] = o.remaining ? json(*o.remaining) : json(nullptr);
  j["retry_after_s"] =
      o.has_retry && o.retry_ms ? json(static_cast<double>(*o.retry_ms) / 1000) : json(nullptr);
  if (o.delay_ms > 0) {
    j["delay_s"] = static_cast<double>(o.delay_ms) / 1000;
  }
  if (!o.shadow_limit.empty()) {
    j["shadow_limit"] = o.shadow_limit;
  }
  return j;
}

json tally_json(const tally& t) {
  return json{{"requests", t.requests}, {"allowed", t.allowed},
              {"denied", t.denied},     {"shadow_denied", t.shadow_denied},
              {"rejected", t.rejected}, {"no_route", t.no_route}};
}

// Aligned columns; `right` marks the numeric ones.
void print_table(std::ostream& out, const std::vector<std::vector<std::string>>& rows,
                 const std::vector<bool>& right) {
  std::vector<std::size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < row.size(); ++i) {
      widths[i] = std::max(widths[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line = " ";
    for (std::size_t i = 0; i < row.size(); ++i) {
      std::string pad(widths[i] - row[i].size(), ' ');
      line += ' ';
      line += right[i] ? pad + row[i] : row[i] + (i + 1 < row.size() ? pad : "");
    }
    while (!line.empty() && line.back() == ' ') {
      line.pop_back();
    }
    out << line << "\n";
  }
}

std::vector<std::string> tally_row(std::string name, const tally& t) {
  return {std::move(name),           std::to_string(t.requests),      std::to_string(t.allowed),
          std::to_string(t.denied),  std::to_string(t.shadow_denied), std::to_string(t.rejected),
          std::to_string(t.no_route)};
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw trace_error(path + ": cannot read file");
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

int simulate(const config& cfg, std::string_view trace_text, const std::string& trace_name,
             bool as_json, std::ostream& out, std::ostream& err) {
  std::vector<trace_request> trace;
  std::unique_ptr<replay> sim;
  try {
    trace = read_trace(trace_text, trace_name);
    sim = std::make_unique<replay>(cfg);
  } catch (const std::exception& e) {
    err << e.what() << "\n";
    return 2;
  }

  std::vector<outcome> outcomes;
  outcomes.reserve(trace.size());
  std::vector<std::pair<std::string, tally>> by_route;
  for (const auto& r : cfg.routes) {
    by_route.emplace_back(r.name, tally{});
  }
  tally unrouted;
  std::vector<std::pair<std::string, std::pair<std::string, tally>>> by_subject;  // first seen
  std::map<std::string, std::size_t> subject_index;
  for (const auto& r : trace) {
    outcome o = sim->run(r);
    if (o.route.empty()) {
      unrouted.add(o.decision);
    } else {
      for (auto& [name, t] : by_route) {
        if (name == o.route) {
          t.add(o.decision);
        }
      }
    }
    if (!o.subject.empty()) {
      auto [it, fresh] = subject_index.emplace(o.subject, by_subject.size());
      if (fresh) {
        by_subject.emplace_back(o.subject, std::make_pair(o.plan, tally{}));
      }
      by_subject[it->second].second.second.add(o.decision);
    }
    outcomes.push_back(std::move(o));
  }

  if (as_json) {
    for (const auto& o : outcomes) {
      out << outcome_json(o).dump() << "\n";
    }
    for (const auto& [name, t] : by_route) {
      json j{{"summary", "route"}, {"route", name}};
      j.update(tally_json(t));
      out << j.dump() << "\n";
    }
    if (unrouted.requests > 0) {
      json j{{"summary", "route"}, {"route", nullptr}};
      j.update(tally_json(unrouted));
      out << j.dump() << "\n";
    }
    for (const auto& [subject, entry] : by_subject) {
      const tally& t = entry.second;
      json j{{"summary", "subject"},
             {"subject", subject},
             {"plan", or_null(entry.first)},
             {"requests", t.requests},
             {"allowed", t.allowed},
             {"denied", t.denied},
             {"shadow_denied", t.shadow_denied}};
      out << j.dump() << "\n";
    }
    return 0;
  }

  std::vector<std::vector<std::string>> rows{{"t (s)", "method", "path", "route", "subject", "plan",
                                              "decision", "limit", "remaining", "retry (s)"}};
  for (const auto& o : outcomes) {
    auto t_ms = static_cast<std::uint64_t>(o.t.count() / 1'000'000);
    std::string retry = "-";
    if (o.has_retry) {
      retry = o.retry_ms ? (*o.retry_ms == 0 ? "-" : fixed3(*o.retry_ms)) : "never";
    }
    std::string decision = o.decision;
    if (!o.shadow_limit.empty()) {
      decision += " (" + o.shadow_limit + ")";
    }
    if (o.delay_ms > 0) {
      decision += " after " + fixed3(o.delay_ms) + " s";
    }
    rows.push_back({fixed3(t_ms), o.req->method, o.req->path, o.route.empty() ? "-" : o.route,
                    o.subject.empty() ? "-" : short_subject(o.subject),
                    o.plan.empty() ? "-" : o.plan, decision, o.limit.empty() ? "-" : o.limit,
                    o.remaining ? std::to_string(*o.remaining) : "-", retry});
  }
  print_table(out, rows, {true, false, false, false, false, false, false, false, true, true});

  out << "\nper route\n";
  std::vector<std::vector<std::string>> routes{
      {"route", "requests", "allowed", "denied", "shadow_denied", "rejected", "no_route"}};
  for (const auto& [name, t] : by_route) {
    routes.push_back(tally_row(name, t));
  }
  if (unrouted.requests > 0) {
    routes.push_back(tally_row("(no route)", unrouted));
  }
  print_table(out, routes, {false, true, true, true, true, true, true});

  out << "\nper subject\n";
  std::vector<std::vector<std::string>> subjects{
      {"subject", "plan", "requests", "allowed", "denied", "shadow_denied"}};
  for (const auto& [subject, entry] : by_subject) {
    const tally& t = entry.second;
    subjects.push_back({short_subject(subject), entry.first.empty() ? "-" : entry.first,
                        std::to_string(t.requests), std::to_string(t.allowed),
                        std::to_string(t.denied), std::to_string(t.shadow_denied)});
  }
  print_table(out, subjects, {false, false, true, true, true, true});
  return 0;
}

int run_simulate(const simulate_options& options, std::ostream& out, std::ostream& err) {
  config cfg;
  std::string trace;
  try {
    cfg = load_config_file(options.config_path);
    trace = read_file(options.trace_path);
  } catch (const std::exception& e) {
    err << e.what() << "\n";
    return 2;
  }
  return simulate(cfg, trace, options.trace_path, options.json, out, err);
}

int simulate_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  simulate_options options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    auto value = [&](std::string_view flag, std::string& into) {
      if (a == flag && i + 1 < args.size()) {
        into = std::string(args[++i]);
        return true;
      }
      if (a.size() > flag.size() + 1 && a.starts_with(flag) && a[flag.size()] == '=') {
        into = std::string(a.substr(flag.size() + 1));
        return true;
      }
      return false;
    };
    if (a == "--help" || a == "-h") {
      out << k_simulate_usage;
      return 0;
    }
    if (a == "--json") {
      options.json = true;
    } else if (value("--config", options.config_path) || value("-c", options.config_path) ||
               value("--trace", options.trace_path)) {
      continue;
    } else {
      err << "ratewall simulate: unexpected argument '" << a << "'\n" << k_simulate_usage;
      return 2;
    }
  }
  if (options.config_path.empty() || options.trace_path.empty()) {
    err << "ratewall simulate: --config and --trace are required\n" << k_simulate_usage;
    return 2;
  }
  return run_simulate(options, out, err);
}

}  // namespace ratewall
