#include "ratewall/admin/metrics.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace ratewall {

namespace {

constexpr std::int64_t k_ms = 1'000'000;
constexpr std::int64_t k_us = 1'000;

constexpr std::int64_t k_upstream_nanos[] = {
    1 * k_ms,   2 * k_ms,   5 * k_ms,    10 * k_ms,   25 * k_ms,   50 * k_ms,    100 * k_ms,
    250 * k_ms, 500 * k_ms, 1000 * k_ms, 2500 * k_ms, 5000 * k_ms, 10000 * k_ms, 30000 * k_ms};
constexpr std::string_view k_upstream_labels[] = {"0.001", "0.002", "0.005", "0.01", "0.025",
                                                  "0.05",  "0.1",   "0.25",  "0.5",  "1",
                                                  "2.5",   "5",     "10",    "30"};

constexpr std::int64_t k_decision_nanos[] = {
    5 * k_us, 10 * k_us,   25 * k_us, 50 * k_us, 100 * k_us, 250 * k_us, 500 * k_us,
    1 * k_ms, 2500 * k_us, 5 * k_ms,  10 * k_ms, 25 * k_ms,  50 * k_ms,  100 * k_ms};
constexpr std::string_view k_decision_labels[] = {
    "0.000005", "0.00001", "0.000025", "0.00005", "0.0001", "0.00025", "0.0005",
    "0.001",    "0.0025",  "0.005",    "0.01",    "0.025",  "0.05",    "0.1"};

static_assert(std::size(k_upstream_nanos) == std::size(k_upstream_labels));
static_assert(std::size(k_decision_nanos) == std::size(k_decision_labels));
static_assert(std::size(k_upstream_nanos) <= latency_histogram::k_max_buckets);
static_assert(std::size(k_decision_nanos) <= latency_histogram::k_max_buckets);

constexpr std::string_view k_unrouted_name = "(none)";
// The plan label of a client without one.
constexpr std::string_view k_default_plan = "default";

bool valid_metric_name(std::string_view name) {
  if (name.empty()) {
    return false;
  }
  for (std::size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) {
      return false;
    }
  }
  return true;
}

bool valid_label_name(std::string_view name) {
  return valid_metric_name(name) && name.find(':') == std::string_view::npos &&
         !name.starts_with("__");
}

// HELP text escapes backslash and newline; label values also the double quote.
void append_escaped(std::string& out, std::string_view s, bool quote) {
  for (char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

std::string format_uint(std::uint64_t v) {
  char buf[24];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

std::string format_double(double v) {
  if (std::isnan(v)) {
    return "NaN";
  }
  if (std::isinf(v)) {
    return v > 0 ? "+Inf" : "-Inf";
  }
  // Whole numbers print without a fraction, as counters read best.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    char buf[24];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, static_cast<std::int64_t>(v));
    return std::string(buf, end);
  }
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// Exact decimal seconds of a nanosecond count: "0.0125", "3", no floating point.
std::string format_seconds(std::uint64_t ns) {
  std::string out = format_uint(ns / 1'000'000'000);
  std::uint64_t frac = ns % 1'000'000'000;
  if (frac != 0) {
    char digits[10];
    std::snprintf(digits, sizeof digits, "%09llu", static_cast<unsigned long long>(frac));
    std::string_view f(digits, 9);
    while (f.back() == '0') {
      f.remove_suffix(1);
    }
    out += '.';
    out += f;
  }
  return out;
}

}  // namespace

std::string_view to_string(request_decision d) {
  switch (d) {
    case request_decision::allowed:
      return "allowed";
    case request_decision::denied:
      return "denied";
    case request_decision::shadow_denied:
      return "shadow_denied";
    case request_decision::rejected:
      return "rejected";
    case request_decision::no_route:
      return "no_route";
    case request_decision::error:
      return "error";
  }
  return "error";
}

std::size_t metric_stripe() noexcept {
  static std::atomic<std::size_t> next{0};
  thread_local const std::size_t stripe =
      next.fetch_add(1, std::memory_order_relaxed) % k_metric_stripes;
  return stripe;
}

histogram_bounds upstream_latency_bounds() {
  return {k_upstream_nanos, k_upstream_labels};
}

histogram_bounds decision_latency_bounds() {
  return {k_decision_nanos, k_decision_labels};
}

void latency_histogram::observe(nanos d) noexcept {
  const std::int64_t ns = std::max<std::int64_t>(d.count(), 0);
  std::size_t i = 0;
  // `le` is inclusive: a value equal to a bound belongs to that bound's bucket.
  while (i < bounds_.nanos.size() && ns > bounds_.nanos[i]) {
    ++i;
  }
  counters_.add(i);
  counters_.add(k_max_buckets + 1, static_cast<std::uint64_t>(ns));
}

route_metrics::route_metrics(std::string name)
    : name_(std::move(name)), latency_(upstream_latency_bounds()) {}

void route_metrics::upstream_response(unsigned status) noexcept {
  if (status >= 100 && status < 600) {
    counters_.add(k_class_base + status / 100 - 1);
  }
}

void route_metrics::upstream_failure(unsigned status) noexcept {
  if (status == 502) {
    counters_.add(k_failure_base);
  } else if (status == 504) {
    counters_.add(k_failure_base + 1);
  } else if (status == 503) {
    counters_.add(k_failure_base + 2);
  }
}

std::uint64_t route_metrics::upstream_responses(unsigned status_class) const noexcept {
  if (status_class < 1 || status_class > 5) {
    return 0;
  }
  return counters_.sum(k_class_base + status_class - 1);
}

std::uint64_t route_metrics::upstream_failures(unsigned status) const noexcept {
  if (status == 502) {
    return counters_.sum(k_failure_base);
  }
  if (status == 504) {
    return counters_.sum(k_failure_base + 1);
  }
  if (status == 503) {
    return counters_.sum(k_failure_base + 2);
  }
  return 0;
}

bool metric_writer::begin_family(std::string_view name, std::string_view help,
                                 std::string_view type) {
  current_.clear();
  if (!valid_metric_name(name) ||
      std::find(written_.begin(), written_.end(), name) != written_.end()) {
    return false;
  }
  written_.emplace_back(name);
  current_ = name;
  out_ += "# HELP ";
  out_ += name;
  out_ += ' ';
  append_escaped(out_, help, false);
  out_ += "\n# TYPE ";
  out_ += name;
  out_ += ' ';
  out_ += type;
  out_ += '\n';
  return true;
}

void metric_writer::family(std::string_view name, std::string_view help, metric_type type) {
  begin_family(name, help, type == metric_type::counter ? "counter" : "gauge");
}

void metric_writer::histogram_family(std::string_view name, std::string_view help) {
  begin_family(name, help, "histogram");
}

void metric_writer::write_sample(std::string_view suffix, std::span<const metric_label> labels,
                                 std::string_view extra_label, std::string_view extra_value,
                                 std::string_view value) {
  if (current_.empty()) {
    return;
  }
  for (const auto& l : labels) {
    if (!valid_label_name(l.name)) {
      return;
    }
  }
  out_ += current_;
  out_ += suffix;
  if (!labels.empty() || !extra_label.empty()) {
    out_ += '{';
    bool first = true;
    auto label = [&](std::string_view name, std::string_view v) {
      if (!first) {
        out_ += ',';
      }
      first = false;
      out_ += name;
      out_ += "=\"";
      append_escaped(out_, v, true);
      out_ += '"';
    };
    for (const auto& l : labels) {
      label(l.name, l.value);
    }
    if (!extra_label.empty()) {
      label(extra_label, extra_value);
    }
    out_ += '}';
  }
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void metric_writer::sample(std::span<const metric_label> labels, double value) {
  write_sample("", labels, {}, {}, format_double(value));
}

void metric_writer::sample(std::span<const metric_label> labels, std::uint64_t value) {
  write_sample("", labels, {}, {}, format_uint(value));
}

void metric_writer::histogram_series(std::span<const metric_label> labels,
                                     const latency_histogram& h) {
  const auto bounds = h.bounds();
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < bounds.nanos.size(); ++i) {
    cumulative += h.bucket(i);
    write_sample("_bucket", labels, "le", bounds.labels[i], format_uint(cumulative));
  }
  cumulative += h.bucket(bounds.nanos.size());
  write_sample("_bucket", labels, "le", "+Inf", format_uint(cumulative));
  write_sample("_sum", labels, {}, {}, format_seconds(h.sum_nanos()));
  // The count is the +Inf bucket as read above, so the two always agree.
  write_sample("_count", labels, {}, {}, format_uint(cumulative));
}

metrics_provider_handle::metrics_provider_handle(metrics_provider_handle&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), id_(other.id_) {}

metrics_provider_handle& metrics_provider_handle::operator=(
    metrics_provider_handle&& other) noexcept {
  if (this != &other) {
    reset();
    owner_ = std::exchange(other.owner_, nullptr);
    id_ = other.id_;
  }
  return *this;
}

void metrics_provider_handle::reset() noexcept {
  if (owner_ != nullptr) {
    owner_->remove_provider(id_);
    owner_ = nullptr;
  }
}

metrics_registry::metrics_registry() : decision_latency_(decision_latency_bounds()) {}

metrics_registry::~metrics_registry() = default;

route_metrics& metrics_registry::route(std::string_view name) {
  std::lock_guard lock(mutex_);
  for (const auto& r : routes_) {
    if (r->name() == name) {
      return *r;
    }
  }
  routes_.push_back(std::make_unique<route_metrics>(std::string(name)));
  return *routes_.back();
}

decision_counters& metrics_registry::decisions(std::string_view route, std::string_view plan,
                                               std::string_view limit) {
  std::lock_guard lock(mutex_);
  const auto key = std::make_tuple(std::string(route), std::string(plan), std::string(limit));
  if (auto it = decisions_by_label_.find(key); it != decisions_by_label_.end()) {
    return *it->second;
  }
  auto entry = std::make_unique<labelled_decisions>();
  std::tie(entry->route, entry->plan, entry->limit) = key;
  decisions_.push_back(std::move(entry));
  decision_counters& c = decisions_.back()->counters;
  decisions_by_label_.emplace(key, &c);
  return c;
}

std::vector<route_metrics*> metrics_registry::routes_for(const config& cfg) {
  std::vector<route_metrics*> out;
  out.reserve(cfg.routes.size());
  for (const auto& r : cfg.routes) {
    out.push_back(&route(r.name));
  }
  return out;
}

metrics_provider_handle metrics_registry::add_provider(metrics_provider provider) {
  std::lock_guard lock(mutex_);
  std::uint64_t id = next_provider_id_++;
  providers_.emplace_back(id, std::move(provider));
  return metrics_provider_handle(this, id);
}

void metrics_registry::remove_provider(std::uint64_t id) noexcept {
  std::lock_guard lock(mutex_);
  std::erase_if(providers_, [id](const auto& p) { return p.first == id; });
}

std::int64_t metrics_registry::still_open(std::size_t opened, std::size_t closed) const noexcept {
  // Opened and closed may be counted on different stripes; only their difference means
  // anything, and it cannot go below zero once both reads are past the same close.
  const auto o = gauges_.sum(opened);
  const auto c = gauges_.sum(closed);
  return std::max<std::int64_t>(static_cast<std::int64_t>(o - c), 0);
}

std::int64_t metrics_registry::open_connections() const noexcept {
  return still_open(k_connections_opened, k_connections_closed);
}

std::int64_t metrics_registry::open_tunnels() const noexcept {
  return still_open(k_tunnels_opened, k_tunnels_closed);
}

std::vector<route_totals> metrics_registry::totals_by_route() const {
  std::lock_guard lock(mutex_);
  std::vector<route_totals> out;
  std::map<std::string_view, std::size_t, std::less<>> index;
  auto totals_of = [&](std::string_view route) -> route_totals& {
    auto [it, added] = index.emplace(route, out.size());
    if (added) {
      out.push_back(route_totals{std::string(route)});
    }
    return out[it->second];
  };
  for (const auto& r : routes_) {
    route_totals& t = totals_of(r->name());
    for (unsigned c = 1; c <= 5; ++c) {
      t.upstream_responses += r->upstream_responses(c);
    }
    for (unsigned status : {502U, 503U, 504U}) {
      t.upstream_failures += r->upstream_failures(status);
    }
  }
  for (const auto& l : decisions_) {
    route_totals& t = totals_of(l->route);
    for (std::size_t d = 0; d < k_request_decisions; ++d) {
      t.decisions[d] += l->counters.requests(static_cast<request_decision>(d));
    }
  }
  return out;
}

std::string metrics_registry::render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  out.reserve(4096 + routes_.size() * 4096);
  metric_writer w(out);

  w.family("ratewall_requests_total",
           "Requests by route, the client's plan, decision (allowed, denied, shadow_denied, "
           "rejected, no_route, error) and, for denied and shadow_denied, the limit; "
           "route=\"(none)\" before a route matched.",
           metric_type::counter);
  for (request_decision d : {request_decision::no_route, request_decision::error}) {
    w.sample({{"route", k_unrouted_name}, {"decision", to_string(d)}}, unrouted_.requests(d));
  }
  // Only what can happen: a limit label on what a limit decided, none on the rest.
  static constexpr request_decision k_unlimited[] = {
      request_decision::allowed, request_decision::rejected, request_decision::error};
  static constexpr request_decision k_by_limit[] = {request_decision::denied,
                                                    request_decision::shadow_denied};
  for (const auto& l : decisions_) {
    if (l->limit.empty()) {
      for (request_decision d : k_unlimited) {
        w.sample({{"route", l->route}, {"plan", l->plan}, {"decision", to_string(d)}},
                 l->counters.requests(d));
      }
      continue;
    }
    for (request_decision d : k_by_limit) {
      w.sample(
          {{"route", l->route}, {"plan", l->plan}, {"limit", l->limit}, {"decision", to_string(d)}},
          l->counters.requests(d));
    }
  }

  w.family("ratewall_upstream_responses_total",
           "Response heads received from upstreams, by route and status class.",
           metric_type::counter);
  static constexpr std::string_view k_classes[] = {"1xx", "2xx", "3xx", "4xx", "5xx"};
  for (const auto& r : routes_) {
    for (unsigned c = 1; c <= 5; ++c) {
      w.sample({{"route", r->name()}, {"class", k_classes[c - 1]}}, r->upstream_responses(c));
    }
  }

  w.family("ratewall_upstream_failures_total",
           "Requests the gateway answered itself because the upstream failed: 502 (refused, "
           "reset or closed), 503 (all of upstreams.*.max_connections in use for queue_timeout) "
           "or 504 (timed out).",
           metric_type::counter);
  for (const auto& r : routes_) {
    w.sample({{"route", r->name()}, {"status", "502"}}, r->upstream_failures(502));
    w.sample({{"route", r->name()}, {"status", "503"}}, r->upstream_failures(503));
    w.sample({{"route", r->name()}, {"status", "504"}}, r->upstream_failures(504));
  }

  w.family("ratewall_upstream_aborted_total",
           "Responses cut short: the upstream closed, reset or stalled after the response head "
           "had gone to the client, so the client connection was closed with the body "
           "incomplete.",
           metric_type::counter);
  for (const auto& r : routes_) {
    w.sample({{"route", r->name()}}, r->upstream_aborts());
  }

  w.family("ratewall_response_cost_units_total",
           "Units charged when responses ended, on routes whose cost the response reports "
           "(routes[].cost_from_response).",
           metric_type::counter);
  for (const auto& r : routes_) {
    w.sample({{"route", r->name()}}, r->response_cost_units());
  }
  w.family("ratewall_response_costs_total",
           "Requests charged on routes with cost_from_response: source=response when the "
           "response reported a usable value, source=default when the default was charged.",
           metric_type::counter);
  for (const auto& r : routes_) {
    w.sample({{"route", r->name()}, {"source", "response"}}, r->response_costs(true));
    w.sample({{"route", r->name()}, {"source", "default"}}, r->response_costs(false));
  }

  w.histogram_family("ratewall_upstream_latency_seconds",
                     "Time from sending a request upstream to receiving its response head.");
  for (const auto& r : routes_) {
    metric_label route_label{"route", r->name()};
    w.histogram_series({&route_label, 1}, r->latency());
  }

  w.histogram_family("ratewall_decision_latency_seconds",
                     "Time to route, identify and decide a request (limiter and store included).");
  w.histogram_series({}, decision_latency_);

  w.family("ratewall_open_connections", "Client connections open now.", metric_type::gauge);
  w.sample(static_cast<double>(open_connections()));

  w.family("ratewall_open_tunnels",
           "Upgraded connections (WebSocket and other Upgrade protocols) spliced to an upstream "
           "now.",
           metric_type::gauge);
  w.sample(static_cast<double>(open_tunnels()));
  w.family("ratewall_tunnel_bytes_total", "Bytes carried by upgraded connections, by direction.",
           metric_type::counter);
  w.sample({{"direction", "to_upstream"}}, gauges_.sum(k_tunnel_bytes_up));
  w.sample({{"direction", "to_client"}}, gauges_.sum(k_tunnel_bytes_down));

  w.family("ratewall_tls_handshakes_total",
           "TLS handshakes on the TLS listener, completed (ok) or not (failed: a client that "
           "offered nothing acceptable, was not TLS, or did not finish within header_timeout).",
           metric_type::counter);
  w.sample({{"result", "ok"}}, gauges_.sum(k_tls_ok));
  w.sample({{"result", "failed"}}, gauges_.sum(k_tls_failed));

  w.family("ratewall_http2_connections_total",
           "Client connections served in HTTP/2 (h2 by TLS ALPN, h2c by prior knowledge).",
           metric_type::counter);
  w.sample(gauges_.sum(k_h2_opened));
  w.family("ratewall_open_http2_connections", "Client connections served in HTTP/2 now.",
           metric_type::gauge);
  w.sample(static_cast<double>(still_open(k_h2_opened, k_h2_closed)));
  w.family("ratewall_http2_streams_total",
           "HTTP/2 streams clients opened and the gateway accepted (each one request).",
           metric_type::counter);
  w.sample(gauges_.sum(k_h2_streams));
  w.family("ratewall_http2_resets_total",
           "RST_STREAM frames, by direction: received from clients, or sent by the gateway (a "
           "stream refused, cut short, or broken by its client).",
           metric_type::counter);
  w.sample({{"direction", "received"}}, gauges_.sum(k_h2_resets_received));
  w.sample({{"direction", "sent"}}, gauges_.sum(k_h2_resets_sent));
  w.family("ratewall_http2_goaways_total",
           "GOAWAY frames sent, by error code: NO_ERROR (idle, drain, close), "
           "ENHANCE_YOUR_CALM (a client over the reset, refusal or traffic limits, or a flood), "
           "SETTINGS_TIMEOUT, PROTOCOL_ERROR and the others (a client that broke the protocol).",
           metric_type::counter);
  static constexpr std::array<std::string_view, k_h2_goaway_codes> codes{"NO_ERROR",
                                                                         "PROTOCOL_ERROR",
                                                                         "INTERNAL_ERROR",
                                                                         "FLOW_CONTROL_ERROR",
                                                                         "SETTINGS_TIMEOUT",
                                                                         "STREAM_CLOSED",
                                                                         "FRAME_SIZE_ERROR",
                                                                         "REFUSED_STREAM",
                                                                         "CANCEL",
                                                                         "COMPRESSION_ERROR",
                                                                         "CONNECT_ERROR",
                                                                         "ENHANCE_YOUR_CALM",
                                                                         "INADEQUATE_SECURITY",
                                                                         "HTTP_1_1_REQUIRED",
                                                                         "other"};
  for (std::size_t i = 0; i < codes.size(); ++i) {
    w.sample({{"code", codes[i]}}, gauges_.sum(k_h2_goaway + i));
  }

  w.family("ratewall_connections_refused_total",
           "New connections closed at once: server.max_connections reached with no idle "
           "connection to close instead, or server.max_connections_per_client reached.",
           metric_type::counter);
  w.sample({{"reason", "max_connections"}}, gauges_.sum(k_refused_total));
  w.sample({{"reason", "max_connections_per_client"}}, gauges_.sum(k_refused_per_client));
  w.family("ratewall_idle_connections_closed_total",
           "Idle keep-alive connections closed to make room under server.max_connections.",
           metric_type::counter);
  w.sample(gauges_.sum(k_idle_evicted));

  w.family("ratewall_config_reloads_total", "Configuration reloads, by result.",
           metric_type::counter);
  w.sample({{"result", "ok"}}, gauges_.sum(k_reloads_ok));
  w.sample({{"result", "error"}}, gauges_.sum(k_reloads_failed));

  for (const auto& [id, provider] : providers_) {
    provider(w);
  }
  return out;
}

decision_metrics::decision_metrics(metrics_registry& registry, const config& cfg)
    : plan_count_(1 + cfg.plans.size()) {
  for (std::size_t i = 0; i < cfg.plans.size(); ++i) {
    plans_.emplace_back(cfg.plans[i], 1 + i);
  }
  std::sort(plans_.begin(), plans_.end());
  for (const route_config& route : cfg.routes) {
    route_first_.push_back(cells_.size());
    route_width_.push_back(1 + route.limits.size());
    for (std::size_t p = 0; p < plan_count_; ++p) {
      const std::string_view plan = p == 0 ? k_default_plan : cfg.plans[p - 1];
      cells_.push_back(&registry.decisions(route.name, plan, ""));
      for (std::size_t i = 0; i < route.limits.size(); ++i) {
        // The loader requires names; a configuration built in code may leave one out: its
        // index then, never "" (the label set without a limit).
        const std::string& name = route.limits[i].name;
        cells_.push_back(
            &registry.decisions(route.name, plan, name.empty() ? std::to_string(i) : name));
      }
    }
  }
}

std::size_t decision_metrics::plan_index(std::string_view plan) const {
  if (plan.empty()) {
    return 0;
  }
  auto it = std::lower_bound(plans_.begin(), plans_.end(), plan,
                             [](const auto& entry, std::string_view p) { return entry.first < p; });
  return it != plans_.end() && it->first == plan ? it->second : 0;
}

std::span<decision_counters* const> decision_metrics::of(std::size_t route,
                                                         std::string_view plan) const {
  const std::size_t width = route_width_[route];
  return {cells_.data() + route_first_[route] + plan_index(plan) * width, width};
}

metrics_registry& process_metrics() {
  static metrics_registry registry;
  return registry;
}

}  // namespace ratewall
