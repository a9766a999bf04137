#include "ratewall/sim/simulate.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/clock.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/huge_pages.hpp"
#include "ratewall/http/identity.hpp"
#include "ratewall/http/request_target.hpp"
#include "ratewall/http/router.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/sim/report_html.hpp"
#include "ratewall/sim/trace_file.hpp"

namespace ratewall {

const char* const k_simulate_usage =
    "usage: ratewall simulate --config FILE --trace TRACE [--format csv|access-log|nginx]\n"
    "                         [--compare OTHER.yaml] [--html REPORT.html] [--json] [--summary]\n"
    "\n"
    "Replays TRACE through the routes, identity rules and limits of FILE with a simulated\n"
    "clock, and prints each decision and a summary per route and subject. Nothing is sent over\n"
    "the network. TRACE is CSV (time_s,method,path,api_key,user,ip[,cost[,latency_ms[,status]]]),\n"
    "ratewall's JSON access log or nginx's combined log, detected from its first line unless\n"
    "--format says; \"-\" is the standard input (zcat access.log.gz | ratewall simulate\n"
    "--trace - ...). Routes with adaptive limits replay their factor from the trace's\n"
    "latencies and statuses (CSV's columns, an access log's upstream_ms and status).\n"
    "  --compare B   replay the same trace against B too and show where the decisions differ\n"
    "  --html F      also write a self-contained HTML report (charts over time, tables) to F\n"
    "  --json        one JSON object per line instead of tables\n"
    "  --summary     only the summaries, no line per request (for large traces)\n";

namespace {

using json = nlohmann::ordered_json;

// One JSON line. A trace's bytes need not be UTF-8 (a scanner's path in a real log): bytes that
// are not become U+FFFD rather than an exception.
std::string json_line(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

// Subjects are named by a keyed hash; a fixed key makes them the same on every run.
constexpr std::string_view k_hash_key = "ratewall-simulate";
constexpr std::int64_t k_nanos_per_second = 1'000'000'000;
constexpr std::uint32_t k_none = UINT32_MAX;
// The row of the requests no route took, in tables.
constexpr std::string_view k_no_route = "(no route)";
// A chart has at most this many points per series.
constexpr std::size_t k_max_buckets = 200;
// The replay remembers at most this many routed targets, and as many identified clients.
constexpr std::size_t k_max_remembered = 1 << 20;
// The HTML report lists at most this many of the requests decided differently.
constexpr std::size_t k_html_differing_rows = 1000;

enum class verdict : std::uint8_t { allowed, denied, shadow_denied, rejected, no_route };
constexpr std::array<std::string_view, 5> k_verdict_names = {"allowed", "denied", "shadow_denied",
                                                             "rejected", "no_route"};

std::string_view name_of(verdict v) {
  return k_verdict_names[static_cast<std::size_t>(v)];
}

// One decision; the request it is about has the same index in the trace.
struct outcome {
  std::uint32_t route = k_none;    // index into config::routes
  std::uint32_t subject = k_none;  // index into replay::subjects()
  std::uint32_t limit = k_none;    // the headline limit, index into the route's limits
  std::uint32_t shadow_limit = k_none;
  verdict decision = verdict::no_route;
  bool has_retry = false;
  std::optional<std::uint64_t> remaining;
  std::optional<std::uint64_t> retry_ms;  // nullopt with has_retry: waiting cannot help
  std::uint64_t delay_ms = 0;
  std::uint32_t factor_ppm = k_factor_one;  // the route's adaptive factor when decided
};

// A move of a route's adaptive factor the gateway would have logged.
struct factor_change {
  nanos t{0};  // since the start of the trace
  std::uint32_t route = 0;
  adaptive_route::change change;
};

// routes[].adaptive of each route (null: none), their first window starting at `start`.
std::vector<std::shared_ptr<adaptive_route>> adaptive_routes(const config& cfg, nanos start) {
  std::vector<std::shared_ptr<adaptive_route>> out;
  for (const auto& route : cfg.routes) {
    out.push_back(route.adaptive ? std::make_shared<adaptive_route>(route.name, *route.adaptive,
                                                                    upstream_totals{}, start)
                                 : nullptr);
  }
  return out;
}

struct tally {
  std::uint64_t requests = 0;
  std::array<std::uint64_t, k_verdict_names.size()> by_verdict{};

  void add(verdict v) {
    ++requests;
    ++by_verdict[static_cast<std::size_t>(v)];
  }
  std::uint64_t operator[](verdict v) const { return by_verdict[static_cast<std::size_t>(v)]; }
};

struct subject_entry {
  std::string_view name;  // the key of replay::subject_index_
  std::string plan;
  tally counts;
};

// Lets an unordered_map<std::string, ...> be searched with a string_view.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
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

std::string short_subject(std::string_view subject) {
  // key:/user: subjects are 32 hex digits; 8 tell them apart in a table.
  auto colon = subject.find(':');
  if (colon != std::string::npos && (subject.starts_with("key:") || subject.starts_with("user:")) &&
      subject.size() > colon + 9) {
    return std::string(subject.substr(0, colon + 9)) + "...";
  }
  return std::string(subject);
}

json or_null(std::string_view s) {
  return s.empty() ? json(nullptr) : json(s);
}

// One config's router, identity rules and limiter on a manual clock, fed one request at a
// time in time order.
class replay {
 public:
  replay(const config& cfg, nanos origin)
      : cfg_(cfg),
        origin_(origin),
        router_(cfg),
        identity_(cfg, std::string(k_hash_key)),
        adaptive_(adaptive_routes(cfg, origin)),
        // Always memory: a simulation never talks to Redis, whatever the config says.
        limiter_(cfg, clock_, std::make_shared<memory_store>(cfg),
                 {adaptive_.begin(), adaptive_.end()}),
        totals_(cfg.routes.size()),
        by_route_(cfg.routes.size()) {
    for (const auto& key : cfg.api_keys) {
      if (!key.name.empty()) {
        plan_of_key_.emplace(key.name, key.plan);
      }
    }
    for (std::uint32_t i = 0; i < cfg.routes.size(); ++i) {
      const route_config& route = cfg.routes[i];
      const upstream_config* u = cfg.find_upstream(route.upstream);
      unanswered_.push_back(u != nullptr ? u->response_timeout
                                         : upstream_config{}.response_timeout);
      if (adaptive_[i]) {
        adaptive_indexes_.push_back(i);
      }
      reads_target_.push_back(std::any_of(
          route.identify_by.begin(), route.identify_by.end(), [](const identity_descriptor& d) {
            return std::any_of(d.parts.begin(), d.parts.end(), [](const identity_part& p) {
              return p.source == identity_source::path || p.source == identity_source::query;
            });
          }));
    }
  }

  const config& cfg() const { return cfg_; }
  const std::vector<factor_change>& factor_changes() const { return changes_; }
  bool adaptive(std::uint32_t route) const { return route != k_none && adaptive_[route]; }
  const std::vector<subject_entry>& subjects() const { return subjects_; }
  const std::vector<tally>& by_route() const { return by_route_; }
  const tally& unrouted() const { return unrouted_; }
  std::string_view route_name(const outcome& o) const {
    return o.route == k_none ? std::string_view() : std::string_view(cfg_.routes[o.route].name);
  }
  std::string_view subject_name(const outcome& o) const {
    return o.subject == k_none ? std::string_view() : subjects_[o.subject].name;
  }
  // The name of limit `index` (outcome::limit or shadow_limit) of o's route; "" for none.
  std::string_view limit_name(const outcome& o, std::uint32_t index) const {
    return index == k_none ? std::string_view()
                           : std::string_view(cfg_.routes[o.route].limits[index].name);
  }

  // Decides `r` and counts the decision.
  outcome run(const trace_request& r) {
    outcome o = decide(r);
    observe(r, o);
    (o.route == k_none ? unrouted_ : by_route_[o.route]).add(o.decision);
    if (o.subject != k_none) {
      subjects_[o.subject].counts.add(o.decision);
    }
    return o;
  }

 private:
  outcome decide(const trace_request& r) {
    clock_.set(origin_ + r.time);
    tick_adaptive(r.time);
    outcome o;
    route(r);
    if (target_->route == k_none) {
      o.decision = verdict::no_route;
      return o;
    }
    o.route = target_->route;
    if (!identify(cfg_.routes[o.route], r, o)) {
      o.decision = verdict::rejected;
      return o;
    }
    limit(r, o);
    return o;
  }

  // Points target_ at the route and canonical target of r's method and target. The path is
  // made canonical as the gateway would (a path it refuses routes nowhere). A trace repeats
  // its targets: each is routed once (up to k_max_remembered of them).
  void route(const trace_request& r) {
    lookup_key_.assign(r.method).push_back('\0');
    lookup_key_.append(r.path);
    auto known = routed_.find(lookup_key_);
    if (known != routed_.end()) {
      target_ = &known->second;
      return;
    }
    routed fresh;
    if (canonicalize_target(r.path, cfg_.server.paths, fresh.target)) {
      auto index = router_.match(r.method, "", fresh.target.path);
      fresh.route = index ? static_cast<std::uint32_t>(*index) : k_none;
    }
    if (routed_.size() < k_max_remembered) {
      target_ = &routed_.emplace(lookup_key_, std::move(fresh)).first->second;
    } else {
      unremembered_ = std::move(fresh);
      target_ = &unremembered_;
    }
  }

  // Sets o.subject; false when the request is rejected before the limiter.
  bool identify(const route_config& route, const trace_request& r, outcome& o) {
    if (r.logged_identity) {
      // An access log line: the gateway's subject, since the key behind it is not in the log.
      if (r.subject.empty()) {
        return false;
      }
      subject_text_.assign("log:").append(r.subject);
      auto named = plan_of_key_.find(r.key_name);
      o.subject = intern(subject_text_, named != plan_of_key_.end() ? named->second : r.plan);
      return true;
    }
    // The same client on the same route is identified the same way every time (a trace has no
    // header fields, cookies or tokens): each is resolved once, since the keyed hashes and
    // the address formatting cost more than the rest of the replay.
    lookup_key_.assign(reinterpret_cast<const char*>(&o.route), sizeof o.route);
    for (std::string_view field : {r.ip, r.api_key, r.user}) {
      lookup_key_.append(field).push_back('\0');
    }
    if (reads_target_[o.route]) {
      lookup_key_.append(target_->target.path).push_back('\0');
      lookup_key_.append(target_->target.query);
    }
    auto known = identified_.find(lookup_key_);
    if (known != identified_.end()) {
      o.subject = known->second;
      return o.subject != k_none;
    }
    o.subject = resolve(route, r);
    if (identified_.size() < k_max_remembered) {
      identified_.emplace(lookup_key_, o.subject);
    }
    return o.subject != k_none;
  }

  // The subject of a request the identity rules name, or k_none when they reject it.
  std::uint32_t resolve(const route_config& route, const trace_request& r) {
    identity_input in;
    in.peer_ip = r.ip;
    in.api_key = r.api_key;
    in.user = r.user;
    // path: descriptors; a trace has no header fields or cookies
    const canonical_target& target = target_->target;
    in.path = target.path;
    in.query = target.query.empty() ? std::string_view() : std::string_view(target.query).substr(1);
    identity_result who = identity_.resolve(route, in);
    if (who.rejected || !who.refused.empty()) {
      return k_none;  // a 401, or a 400 for a field that names the client twice
    }
    return intern(who.subject, who.plan);
  }

  void limit(const trace_request& r, outcome& o) {
    const route_config& route = cfg_.routes[o.route];
    const subject_entry& who = subjects_[o.subject];
    auto policies = limiter_.effective(o.route, who.plan, scaled_);
    o.factor_ppm = limiter_.factor_ppm(o.route);
    route_decision d;
    if (!policies.empty()) {
      check_request req;
      req.subject = who.name;
      req.route = o.route;
      req.limits = policies;
      req.cost = r.cost ? *r.cost : limiter_.cost(o.route, r.method);
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
    o.decision = !d.allowed        ? verdict::denied
                 : d.shadow_denied ? verdict::shadow_denied
                                   : verdict::allowed;
    if (d.has_limits) {
      o.limit = d.limit_index;
      o.remaining = d.headline.remaining;
      o.has_retry = true;
      if (d.allowed) {
        o.retry_ms = 0;
      } else if (!d.headline.impossible && d.headline.retry_after != k_never) {
        o.retry_ms = ceil_ms(d.headline.retry_after);
      }
    }
    if (d.shadow_denied && d.shadow_limit_index < route.limits.size()) {
      o.shadow_limit = d.shadow_limit_index;
    }
    o.delay_ms = ceil_ms(d.delay);
    // The request ends here: its concurrency units go back with `d`.
  }

  // Ends the adaptive windows that are due at `t`, as the gateway's housekeeping thread does
  // (the replay looks at every request, the gateway a few times a second).
  void tick_adaptive(nanos t) {
    for (const std::uint32_t i : adaptive_indexes_) {
      if (auto moved = adaptive_[i]->tick(clock_.now(), totals_[i])) {
        changes_.push_back({t, i, *moved});
      }
    }
  }

  // What the upstream did with a request the replay forwards, as the trace recorded it: the
  // counters the exchange keeps in the gateway, which adaptive limits read. A request the
  // trace has no answer for (no latency, no status) adds nothing.
  void observe(const trace_request& r, const outcome& o) {
    const bool forwarded = o.decision == verdict::allowed || o.decision == verdict::shadow_denied;
    if (!forwarded || !adaptive_[o.route]) {
      return;
    }
    upstream_totals& t = totals_[o.route];
    const bool failed = r.status >= 500;
    if (r.latency >= nanos{0}) {
      ++t.exchanges;
      ++t.heads;
      t.latency_ns += static_cast<std::uint64_t>(r.latency.count());
      t.errors += failed ? 1 : 0;
    } else if (r.status == 502 || r.status == 504) {
      // Answered by the gateway, the upstream never did: as long as it would wait, as the
      // gateway counts it.
      ++t.exchanges;
      ++t.errors;
      ++t.heads;
      t.latency_ns += static_cast<std::uint64_t>(unanswered_[o.route].count());
    }
  }

  // The index of `subject`, added (with its plan) when first seen.
  std::uint32_t intern(std::string_view subject, std::string_view plan) {
    auto found = subject_index_.find(subject);
    if (found != subject_index_.end()) {
      return found->second;
    }
    auto index = static_cast<std::uint32_t>(subjects_.size());
    auto [it, fresh] = subject_index_.emplace(std::string(subject), index);
    subjects_.push_back({it->first, std::string(plan), {}});
    return index;
  }

  const config& cfg_;
  nanos origin_;  // trace::origin
  manual_clock clock_;
  router router_;
  // A request-target, canonical, and its route (k_none: none, or refused).
  struct routed {
    canonical_target target;
    std::uint32_t route = k_none;
  };
  std::unordered_map<std::string, routed, string_hash, std::equal_to<>> routed_;
  routed unremembered_;
  const routed* target_ = nullptr;  // of the request being decided
  std::string lookup_key_;
  identity_resolver identity_;
  std::vector<std::shared_ptr<adaptive_route>> adaptive_;  // by route; before limiter_
  limiter limiter_;
  std::vector<upstream_totals> totals_;          // by route: what adaptive_ reads
  std::vector<nanos> unanswered_;                // by route: its upstream's response_timeout
  std::vector<std::uint32_t> adaptive_indexes_;  // the routes with adaptive limits
  std::vector<factor_change> changes_;
  std::vector<policy> scaled_;  // a route's limits at its factor
  std::unordered_map<std::string, std::string, string_hash, std::equal_to<>> plan_of_key_;
  std::unordered_map<std::string, std::uint32_t, string_hash, std::equal_to<>> subject_index_;
  std::vector<subject_entry> subjects_;  // in the order first seen
  std::vector<tally> by_route_;          // per config route
  tally unrouted_;
  std::string subject_text_;
  std::vector<bool> reads_target_;  // per route: identify_by has path: or query: parts
  // Clients already identified: route, fields (and target when the route reads it) to the
  // subject, k_none for rejected.
  std::unordered_map<std::string, std::uint32_t, string_hash, std::equal_to<>> identified_;
};

// A replay of a whole trace: the decisions, index for index with the requests.
struct replayed {
  std::string name;  // the config file's name
  std::unique_ptr<replay> sim;
  std::vector<outcome> outcomes;
};

// `keep`: whether the decisions are kept (else only counted, as --summary needs).
replayed replay_all(const config& cfg, std::string name, const trace& t, bool keep) {
  replayed run{std::move(name), std::make_unique<replay>(cfg, t.origin), {}};
  reserve_huge(run.outcomes, keep ? t.requests.size() : 0);
  for (const auto& r : t.requests) {
    outcome o = run.sim->run(r);
    if (keep) {
      run.outcomes.push_back(o);
    }
  }
  return run;
}

double seconds(nanos t) {
  return static_cast<double>(t.count()) / k_nanos_per_second;
}

json outcome_json(const replay& sim, const trace_request& r, const outcome& o) {
  json j;
  j["t"] = seconds(r.time);
  j["method"] = r.method;
  j["path"] = r.path;
  j["route"] = or_null(sim.route_name(o));
  j["subject"] = or_null(sim.subject_name(o));
  j["plan"] = o.subject == k_none ? json(nullptr) : or_null(sim.subjects()[o.subject].plan);
  j["decision"] = name_of(o.decision);
  j["limit"] = or_null(sim.limit_name(o, o.limit));
  j["remaining"] = o.remaining ? json(*o.remaining) : json(nullptr);
  j["retry_after_s"] =
      o.has_retry && o.retry_ms ? json(static_cast<double>(*o.retry_ms) / 1000) : json(nullptr);
  if (o.delay_ms > 0) {
    j["delay_s"] = static_cast<double>(o.delay_ms) / 1000;
  }
  if (o.shadow_limit != k_none) {
    j["shadow_limit"] = sim.limit_name(o, o.shadow_limit);
  }
  if (sim.adaptive(o.route)) {
    j["factor"] = static_cast<double>(o.factor_ppm) / k_factor_one;
  }
  return j;
}

using table_rows = std::vector<std::vector<std::string>>;

// Aligned columns; `right` marks the numeric ones.
// `text` with control bytes as \xHH: a log's path must not drive the operator's terminal
// (an escape sequence can retitle or clear it).
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f) {
      out += "\\x" + to_hex(&b, 1);
    } else {
      out += c;
    }
  }
  return out;
}

void print_table(std::ostream& out, table_rows rows, const std::vector<bool>& right) {
  for (auto& row : rows) {
    for (auto& cell : row) {
      cell = printable(cell);
    }
  }
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

void print_table(std::ostream& out, const report_table& table) {
  out << "\n" << table.title << "\n";
  print_table(out, table.rows, table.numeric);
}

std::vector<std::string> tally_row(std::string name, const tally& t) {
  return {std::move(name),
          std::to_string(t.requests),
          std::to_string(t[verdict::allowed]),
          std::to_string(t[verdict::denied]),
          std::to_string(t[verdict::shadow_denied]),
          std::to_string(t[verdict::rejected]),
          std::to_string(t[verdict::no_route])};
}

report_table route_table(const replay& sim) {
  report_table table{
      "per route",
      {{"route", "requests", "allowed", "denied", "shadow_denied", "rejected", "no_route"}},
      {false, true, true, true, true, true, true}};
  for (std::size_t i = 0; i < sim.by_route().size(); ++i) {
    table.rows.push_back(tally_row(sim.cfg().routes[i].name, sim.by_route()[i]));
  }
  if (sim.unrouted().requests > 0) {
    table.rows.push_back(tally_row(std::string(k_no_route), sim.unrouted()));
  }
  return table;
}

report_table subject_table(const replay& sim) {
  report_table table{"per subject",
                     {{"subject", "plan", "requests", "allowed", "denied", "shadow_denied"}},
                     {false, false, true, true, true, true}};
  for (const auto& s : sim.subjects()) {
    const tally& t = s.counts;
    table.rows.push_back({short_subject(s.name), s.plan.empty() ? "-" : s.plan,
                          std::to_string(t.requests), std::to_string(t[verdict::allowed]),
                          std::to_string(t[verdict::denied]),
                          std::to_string(t[verdict::shadow_denied])});
  }
  return table;
}

std::vector<std::string> outcome_row(const replay& sim, const trace_request& r, const outcome& o) {
  auto t_ms = static_cast<std::uint64_t>(r.time.count() / 1'000'000);
  std::string retry = "-";
  if (o.has_retry) {
    retry = o.retry_ms ? (*o.retry_ms == 0 ? "-" : fixed3(*o.retry_ms)) : "never";
  }
  std::string decision(name_of(o.decision));
  if (o.shadow_limit != k_none) {
    decision += " (" + std::string(sim.limit_name(o, o.shadow_limit)) + ")";
  }
  if (o.delay_ms > 0) {
    decision += " after " + fixed3(o.delay_ms) + " s";
  }
  const std::string plan = o.subject == k_none ? "" : sim.subjects()[o.subject].plan;
  return {fixed3(t_ms),
          std::string(r.method),
          std::string(r.path),
          o.route == k_none ? "-" : std::string(sim.route_name(o)),
          o.subject == k_none ? "-" : short_subject(sim.subject_name(o)),
          plan.empty() ? "-" : plan,
          decision,
          o.limit == k_none ? "-" : std::string(sim.limit_name(o, o.limit)),
          o.remaining ? std::to_string(*o.remaining) : "-",
          retry};
}

// ---- adaptive factors ----

std::string fixed2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

json factor_change_json(const replay& sim, const factor_change& c) {
  const adaptive_window& w = c.change.window;
  return json{{"adaptive", sim.cfg().routes[c.route].name},
              {"t", seconds(c.t)},
              {"from", c.change.from},
              {"to", c.change.to},
              {"mean_latency_ms", static_cast<double>(w.mean_latency.count()) / 1e6},
              {"error_rate", w.error_rate},
              {"exchanges", w.exchanges}};
}

// The moves of the adaptive factors, as the gateway would have logged them; nothing for a
// config without routes[].adaptive. `label` names the config with --compare.
void print_factor_changes(std::ostream& out, const replay& sim, bool as_json,
                          std::string_view label) {
  const bool any = std::any_of(sim.cfg().routes.begin(), sim.cfg().routes.end(),
                               [](const route_config& r) { return r.adaptive.has_value(); });
  if (!any) {
    return;
  }
  if (as_json) {
    for (const factor_change& c : sim.factor_changes()) {
      json j = factor_change_json(sim, c);
      if (!label.empty()) {
        j["config"] = label;
      }
      out << json_line(j);
    }
    return;
  }
  out << (label.empty() ? "" : std::string(label) + ": ") << "adaptive factor changes ("
      << sim.factor_changes().size() << ")\n";
  if (sim.factor_changes().empty()) {
    return;
  }
  table_rows rows{{"t (s)", "route", "from", "to", "mean latency (ms)", "errors", "exchanges"}};
  for (const factor_change& c : sim.factor_changes()) {
    const adaptive_window& w = c.change.window;
    rows.push_back({fixed3(static_cast<std::uint64_t>(c.t.count() / 1'000'000)),
                    sim.cfg().routes[c.route].name, fixed2(c.change.from), fixed2(c.change.to),
                    fixed3(static_cast<std::uint64_t>(w.mean_latency.count() / 1'000)),
                    fixed2(100 * w.error_rate) + "%", std::to_string(w.exchanges)});
  }
  print_table(out, std::move(rows), {true, false, true, true, true, true, true});
  out << "\n";
}

json tally_json(const tally& t) {
  return json{{"requests", t.requests},           {"allowed", t[verdict::allowed]},
              {"denied", t[verdict::denied]},     {"shadow_denied", t[verdict::shadow_denied]},
              {"rejected", t[verdict::rejected]}, {"no_route", t[verdict::no_route]}};
}

void print_single(const replayed& run, const trace& t, const simulate_options& options,
                  std::ostream& out) {
  const replay& sim = *run.sim;
  if (options.json) {
    if (!options.summary_only) {
      for (std::size_t i = 0; i < t.requests.size(); ++i) {
        out << json_line(outcome_json(sim, t.requests[i], run.outcomes[i]));
      }
    }
    print_factor_changes(out, sim, true, "");
    for (std::size_t i = 0; i < sim.by_route().size(); ++i) {
      json j{{"summary", "route"}, {"route", sim.cfg().routes[i].name}};
      j.update(tally_json(sim.by_route()[i]));
      out << json_line(j);
    }
    if (sim.unrouted().requests > 0) {
      json j{{"summary", "route"}, {"route", nullptr}};
      j.update(tally_json(sim.unrouted()));
      out << json_line(j);
    }
    for (const auto& s : sim.subjects()) {
      out << json_line(json{{"summary", "subject"},
                            {"subject", s.name},
                            {"plan", or_null(s.plan)},
                            {"requests", s.counts.requests},
                            {"allowed", s.counts[verdict::allowed]},
                            {"denied", s.counts[verdict::denied]},
                            {"shadow_denied", s.counts[verdict::shadow_denied]}});
    }
    return;
  }
  if (!options.summary_only) {
    table_rows rows{{"t (s)", "method", "path", "route", "subject", "plan", "decision", "limit",
                     "remaining", "retry (s)"}};
    for (std::size_t i = 0; i < t.requests.size(); ++i) {
      rows.push_back(outcome_row(sim, t.requests[i], run.outcomes[i]));
    }
    print_table(out, std::move(rows),
                {true, false, false, false, false, false, false, false, true, true});
    out << "\n";
  }
  print_factor_changes(out, sim, false, "");
  report_table routes = route_table(sim);
  out << routes.title << "\n";
  print_table(out, routes.rows, routes.numeric);
  print_table(out, subject_table(sim));
}

// ---- --compare ----

// Counts of one row (a route or a subject) under both configs.
struct compared {
  std::string name;
  tally a;
  tally b;
  std::uint64_t differ = 0;
};

// Rows by name, in the order first met.
class compared_rows {
 public:
  compared& operator[](std::string_view name) {
    auto [it, fresh] = index_.emplace(std::string(name), rows_.size());
    if (fresh) {
      rows_.push_back({std::string(name), {}, {}, 0});
    }
    return rows_[it->second];
  }
  const std::vector<compared>& rows() const { return rows_; }

 private:
  std::unordered_map<std::string, std::size_t, string_hash, std::equal_to<>> index_;
  std::vector<compared> rows_;
};

struct comparison {
  compared_rows routes;
  compared_rows subjects;
  std::vector<std::size_t> differing;  // indexes of the requests decided differently
};

std::string_view route_label(const replay& sim, const outcome& o) {
  return o.route == k_none ? k_no_route : sim.route_name(o);
}

comparison compare(const replayed& a, const replayed& b) {
  comparison c;
  // Rows in config order first, so that a route without traffic still shows.
  for (const auto& run : {&a, &b}) {
    for (const auto& route : run->sim->cfg().routes) {
      c.routes[route.name];
    }
  }
  for (std::size_t i = 0; i < a.outcomes.size(); ++i) {
    const outcome& oa = a.outcomes[i];
    const outcome& ob = b.outcomes[i];
    const std::string_view route_a = route_label(*a.sim, oa);
    const std::string_view route_b = route_label(*b.sim, ob);
    const std::string_view subject_a = a.sim->subject_name(oa);
    const std::string_view subject_b = b.sim->subject_name(ob);
    c.routes[route_a].a.add(oa.decision);
    c.routes[route_b].b.add(ob.decision);
    if (!subject_a.empty()) {
      c.subjects[subject_a].a.add(oa.decision);
    }
    if (!subject_b.empty()) {
      c.subjects[subject_b].b.add(ob.decision);
    }
    if (oa.decision == ob.decision) {
      continue;
    }
    c.differing.push_back(i);
    // Counted under each config's route and subject, once when they are the same.
    ++c.routes[route_a].differ;
    if (route_b != route_a) {
      ++c.routes[route_b].differ;
    }
    if (!subject_a.empty()) {
      ++c.subjects[subject_a].differ;
    }
    if (!subject_b.empty() && subject_b != subject_a) {
      ++c.subjects[subject_b].differ;
    }
  }
  return c;
}

report_table compared_table(std::string title, std::string first, const compared_rows& rows,
                            const std::string& name_a, const std::string& name_b) {
  report_table table{std::move(title),
                     {{std::move(first), "requests", "allowed " + name_a, "denied " + name_a,
                       "allowed " + name_b, "denied " + name_b, "differ"}},
                     {false, true, true, true, true, true, true}};
  for (const auto& r : rows.rows()) {
    table.rows.push_back(
        {short_subject(r.name), std::to_string(std::max(r.a.requests, r.b.requests)),
         std::to_string(r.a[verdict::allowed]), std::to_string(r.a[verdict::denied]),
         std::to_string(r.b[verdict::allowed]), std::to_string(r.b[verdict::denied]),
         std::to_string(r.differ)});
  }
  return table;
}

std::vector<report_table> comparison_tables(const comparison& c) {
  return {compared_table("per route", "route", c.routes, "A", "B"),
          compared_table("per subject", "subject", c.subjects, "A", "B")};
}

json side_json(const replay& sim, const outcome& o) {
  return json{{"route", or_null(sim.route_name(o))},
              {"subject", or_null(sim.subject_name(o))},
              {"decision", name_of(o.decision)},
              {"limit", or_null(sim.limit_name(o, o.limit))}};
}

// The requests decided differently, the first `most` of them.
report_table differing_table(const replayed& a, const replayed& b, const comparison& c,
                             const trace& t, std::size_t most) {
  report_table table{"requests decided differently",
                     {{"t (s)", "line", "method", "path", "route", "subject", "A", "B"}},
                     {true, true, false, false, false, false, false, false}};
  for (std::size_t i : c.differing) {
    if (table.rows.size() - 1 == most) {
      table.title +=
          " (the first " + std::to_string(most) + " of " + std::to_string(c.differing.size()) + ")";
      break;
    }
    const trace_request& r = t.requests[i];
    const outcome& oa = a.outcomes[i];
    const outcome& ob = b.outcomes[i];
    table.rows.push_back({fixed3(static_cast<std::uint64_t>(r.time.count() / 1'000'000)),
                          std::to_string(r.line), std::string(r.method), std::string(r.path),
                          std::string(route_label(*a.sim, oa)),
                          oa.subject == k_none ? "-" : short_subject(a.sim->subject_name(oa)),
                          std::string(name_of(oa.decision)), std::string(name_of(ob.decision))});
  }
  return table;
}

void print_compare(const replayed& a, const replayed& b, const comparison& c, const trace& t,
                   const simulate_options& options, std::ostream& out) {
  if (options.json) {
    if (!options.summary_only) {
      for (std::size_t i : c.differing) {
        const trace_request& r = t.requests[i];
        out << json_line(json{{"differ", true},
                              {"t", seconds(r.time)},
                              {"line", r.line},
                              {"method", r.method},
                              {"path", r.path},
                              {"a", side_json(*a.sim, a.outcomes[i])},
                              {"b", side_json(*b.sim, b.outcomes[i])}});
      }
    }
    print_factor_changes(out, *a.sim, true, "a");
    print_factor_changes(out, *b.sim, true, "b");
    for (const auto& [kind, rows] : {std::pair{"route", &c.routes}, {"subject", &c.subjects}}) {
      for (const auto& r : rows->rows()) {
        // The requests no route took: null, as without --compare.
        const bool unrouted = rows == &c.routes && r.name == k_no_route;
        out << json_line(json{{"summary", kind},
                              {kind, unrouted ? json(nullptr) : json(r.name)},
                              {"a", tally_json(r.a)},
                              {"b", tally_json(r.b)},
                              {"differ", r.differ}});
      }
    }
    out << json_line(json{
        {"summary", "total"}, {"requests", t.requests.size()}, {"differ", c.differing.size()}});
    return;
  }
  out << "A: " << a.name << "\nB: " << b.name << "\n";
  print_factor_changes(out, *a.sim, false, "A");
  print_factor_changes(out, *b.sim, false, "B");
  for (const auto& table : comparison_tables(c)) {
    print_table(out, table);
  }
  out << "\n"
      << c.differing.size() << " of " << t.requests.size() << " requests decided differently\n";
  if (options.summary_only || c.differing.empty()) {
    return;
  }
  out << "\n";
  report_table table = differing_table(a, b, c, t, c.differing.size());
  print_table(out, table.rows, table.numeric);
}

// ---- --html ----

// The first of 1, 2, 5, 10, 20, 50 ... ms that cuts `span` into at most k_max_buckets, and is
// no finer than the trace's times (nginx logs whole seconds: half-second buckets would
// alternate between all and nothing).
nanos bucket_width(nanos span, trace_format format) {
  nanos width = format == trace_format::nginx ? nanos(std::chrono::seconds(1))
                                              : nanos(std::chrono::milliseconds(1));
  for (int step = 0; span / width >= static_cast<std::int64_t>(k_max_buckets); ++step) {
    width = step % 3 == 1 ? width * 5 / 2 : width * 2;
  }
  return width;
}

report_series series_of(const replayed& run, const trace& t, std::uint32_t route, nanos width,
                        std::size_t buckets) {
  report_series s{run.name, std::vector<std::uint64_t>(buckets),
                  std::vector<std::uint64_t>(buckets)};
  for (std::size_t i = 0; i < t.requests.size(); ++i) {
    const outcome& o = run.outcomes[i];
    if (o.route != route) {
      continue;
    }
    auto bucket = static_cast<std::size_t>(t.requests[i].time / width);
    if (o.decision == verdict::allowed || o.decision == verdict::shadow_denied) {
      ++s.allowed[bucket];
    } else if (o.decision == verdict::denied) {
      ++s.denied[bucket];
    }
  }
  return s;
}

report build_report(const std::vector<const replayed*>& runs, const trace& t,
                    const std::string& trace_name, std::vector<report_table> tables) {
  report r;
  r.title = "ratewall simulate: " + trace_name;
  const nanos span = t.requests.empty() ? nanos{0} : t.requests.back().time;
  r.bucket = bucket_width(span, t.format);
  const std::size_t buckets = static_cast<std::size_t>(span / r.bucket) + 1;
  // Charts by route name: a route of one config only is drawn for that config.
  std::vector<std::string> names;
  for (const auto* run : runs) {
    for (const auto& route : run->sim->cfg().routes) {
      if (std::find(names.begin(), names.end(), route.name) == names.end()) {
        names.push_back(route.name);
      }
    }
  }
  for (const auto& name : names) {
    report_chart chart{name, {}};
    for (const auto* run : runs) {
      const auto& routes = run->sim->cfg().routes;
      auto found = std::find_if(routes.begin(), routes.end(),
                                [&](const route_config& rc) { return rc.name == name; });
      if (found != routes.end()) {
        chart.runs.push_back(series_of(*run, t, static_cast<std::uint32_t>(found - routes.begin()),
                                       r.bucket, buckets));
      }
    }
    r.charts.push_back(std::move(chart));
  }
  r.tables = std::move(tables);
  return r;
}

bool write_report(const std::string& path, const report& r, std::ostream& err) {
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (file) {
    write_html_report(file, r);
  }
  if (!file) {
    err << path << ": cannot write the HTML report\n";
    return false;
  }
  return true;
}

// Refuses, before a replay that may take a while, a report that could not be written.
void check_writable(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path p(path);
  const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : ".";
  const bool exists = std::filesystem::exists(p, ec);
  if (std::filesystem::is_directory(p, ec) ||
      ::access(exists ? p.c_str() : dir.c_str(), W_OK) != 0) {
    throw trace_error(path + ": cannot write the HTML report");
  }
}

}  // namespace

int simulate(const config& cfg, const config* other, std::string_view trace_text,
             const std::string& trace_name, const simulate_options& options, std::ostream& out,
             std::ostream& err) {
  trace t;
  replayed a;
  replayed b;
  try {
    t = read_trace(trace_text, trace_name, options.format.value_or(detect_trace_format(trace_text)),
                   err);
    // Only the summaries of one config need no decision kept.
    const bool keep = !options.summary_only || other != nullptr || !options.html_path.empty();
    a = replay_all(cfg, options.config_path, t, keep);
    if (other != nullptr) {
      b = replay_all(*other, options.compare_path, t, keep);
    }
  } catch (const std::exception& e) {
    err << e.what() << "\n";
    return 2;
  }
  const bool html = !options.html_path.empty();
  std::vector<const replayed*> runs{&a};
  std::vector<report_table> tables;
  if (other == nullptr) {
    print_single(a, t, options, out);
    if (html) {
      tables = {route_table(*a.sim), subject_table(*a.sim)};
    }
  } else {
    comparison c = compare(a, b);
    print_compare(a, b, c, t, options, out);
    runs.push_back(&b);
    if (html) {
      tables = comparison_tables(c);
      tables.push_back(differing_table(a, b, c, t, k_html_differing_rows));
    }
  }
  if (!html) {
    return 0;
  }
  return write_report(options.html_path, build_report(runs, t, trace_name, std::move(tables)), err)
             ? 0
             : 2;
}

int simulate(const config& cfg, std::string_view trace_text, const std::string& trace_name,
             bool as_json, std::ostream& out, std::ostream& err) {
  simulate_options options;
  options.json = as_json;
  return simulate(cfg, nullptr, trace_text, trace_name, options, out, err);
}

int run_simulate(const simulate_options& options, std::ostream& out, std::ostream& err) {
  config cfg;
  std::optional<config> other;
  std::optional<trace_file> trace;
  try {
    cfg = load_config_file(options.config_path);
    if (!options.compare_path.empty()) {
      other = load_config_file(options.compare_path);
    }
    if (!options.html_path.empty()) {
      check_writable(options.html_path);
    }
    // The summaries of one config need no request kept: the file is read a piece at a time.
    if (options.summary_only && !other && options.html_path.empty()) {
      replayed run{options.config_path, nullptr, {}};
      const auto how = stream_trace(
          options.trace_path, options.format, err,
          [&](nanos origin) { run.sim = std::make_unique<replay>(cfg, origin); },
          [&](const trace_request& r) { run.sim->run(r); }, trace);
      if (how == stream_outcome::streamed) {
        if (!run.sim) {
          run.sim = std::make_unique<replay>(cfg, nanos{0});  // no request
        }
        print_single(run, ratewall::trace{}, options, out);
        return 0;
      }
    }
    if (!trace) {
      trace.emplace(options.trace_path);
    }
  } catch (const std::exception& e) {
    err << e.what() << "\n";
    return 2;
  }
  return simulate(cfg, other ? &*other : nullptr, trace->text(), options.trace_path, options, out,
                  err);
}

int simulate_command(std::span<const std::string_view> args, std::ostream& out, std::ostream& err) {
  simulate_options options;
  std::string format;
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
    } else if (a == "--summary") {
      options.summary_only = true;
    } else if (value("--config", options.config_path) || value("-c", options.config_path) ||
               value("--trace", options.trace_path) || value("--compare", options.compare_path) ||
               value("--html", options.html_path) || value("--format", format)) {
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
  if (!format.empty()) {
    options.format = parse_trace_format(format);
    if (!options.format) {
      err << "ratewall simulate: --format: expected csv, access-log or nginx (got '" << format
          << "')\n";
      return 2;
    }
  }
  return run_simulate(options, out, err);
}

}  // namespace ratewall
