#pragma once

// Process-wide counters, gauges and histograms, rendered in the Prometheus text exposition
// format 0.0.4 for GET /metrics.
//
// The request path only increments: each counter is striped over k_metric_stripes cache-line
// aligned copies, a thread always adds to the same stripe (picked once per thread) with a
// relaxed atomic add, and rendering sums the stripes. No lock, no lookup by name and no
// allocation per request. Routes get their counters through a `route_metrics*` resolved when
// a configuration is built (routes_for), and requests their decision counters through a
// `decision_metrics` table built with it: the same names (route, plan, limit) across a reload
// keep their counters, and the objects live as long as the registry, so a request still in
// flight on an old configuration may count into them safely.
//
// Labels come from the configuration only (route, plan and limit names), never from a request:
// the number of series is bounded by the configuration whatever the traffic.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/core/clock.hpp"

namespace ratewall {

/// What became of one request; each request counts exactly once.
enum class request_decision : std::uint8_t {
  allowed,        // every enforced limit allowed (or the route has none)
  denied,         // a limit denied: 429 or the route's deny status
  shadow_denied,  // allowed, but a shadow limit would have denied
  rejected,       // refused before the limiter: unknown API key under unknown_api_key: reject
  no_route,       // 404: no route matched
  error,          // the gateway answered with an error of its own (400, 408, 413, 431, ...)
};
inline constexpr std::size_t k_request_decisions = 6;

/// "allowed", "denied", ...: the label value, and the word in access log lines.
std::string_view to_string(request_decision d);

/// Copies of each counter: enough that worker threads rarely share one.
inline constexpr std::size_t k_metric_stripes = 16;

/// The stripe the calling thread adds to (assigned round robin on a thread's first use).
std::size_t metric_stripe() noexcept;

/// N counters striped over k_metric_stripes cache lines. add() is wait-free.
template <std::size_t N>
class striped_counters {
 public:
  void add(std::size_t index, std::uint64_t v = 1) noexcept {
    stripes_[metric_stripe()].values[index].fetch_add(v, std::memory_order_relaxed);
  }
  /// The sum over all stripes. Concurrent adds may or may not be included.
  std::uint64_t sum(std::size_t index) const noexcept {
    std::uint64_t total = 0;
    for (const auto& s : stripes_) {
      total += s.values[index].load(std::memory_order_relaxed);
    }
    return total;
  }

 private:
  struct alignas(64) stripe {
    std::array<std::atomic<std::uint64_t>, N> values{};
  };
  std::array<stripe, k_metric_stripes> stripes_{};
};

/// A histogram's upper bounds, in nanoseconds and as printed in `le` (seconds).
struct histogram_bounds {
  std::span<const std::int64_t> nanos;
  std::span<const std::string_view> labels;
};

/// Upstream latency: 1 ms .. 30 s.
histogram_bounds upstream_latency_bounds();
/// Decision latency (router + identity + limiter): 5 µs .. 100 ms.
histogram_bounds decision_latency_bounds();

/// A latency histogram with at most k_max_buckets bounds (+Inf is added). observe() is a
/// short scan of the bounds and two relaxed adds.
class latency_histogram {
 public:
  static constexpr std::size_t k_max_buckets = 16;

  explicit latency_histogram(histogram_bounds bounds) : bounds_(bounds) {}

  void observe(nanos d) noexcept;

  histogram_bounds bounds() const { return bounds_; }
  /// Non-cumulative count of bucket i (i == bounds().nanos.size() is +Inf).
  std::uint64_t bucket(std::size_t i) const noexcept { return counters_.sum(i); }
  /// Total of the observed values, in nanoseconds.
  std::uint64_t sum_nanos() const noexcept { return counters_.sum(k_max_buckets + 1); }

 private:
  histogram_bounds bounds_;
  striped_counters<k_max_buckets + 2> counters_;  // buckets, +Inf, sum
};

/// ratewall_requests_total of one label set (route, plan, limit): a counter per decision.
/// Thread-safe and lock-free.
class decision_counters {
 public:
  /// Once per request, when it is over.
  void count(request_decision d) noexcept { counters_.add(static_cast<std::size_t>(d)); }
  std::uint64_t requests(request_decision d) const noexcept {
    return counters_.sum(static_cast<std::size_t>(d));
  }

 private:
  striped_counters<k_request_decisions> counters_;
};

/// The upstream counters of one route name. The session gets one per route of its gateway.
/// All methods are thread-safe and lock-free.
class route_metrics {
 public:
  explicit route_metrics(std::string name);

  const std::string& name() const { return name_; }

  /// A response head received from the upstream: counted by class (1xx .. 5xx).
  void upstream_response(unsigned status) noexcept;
  /// The gateway answered 502 (upstream refused, reset or closed), 503 (the upstream's
  /// max_connections in use for all of queue_timeout) or 504 (upstream timed out) for this
  /// route. Other statuses are ignored.
  void upstream_failure(unsigned status) noexcept;
  /// The upstream failed after the response head went to the client (closed, reset or stalled
  /// mid-body): the client connection was closed with the body incomplete.
  void upstream_aborted() noexcept { counters_.add(k_aborted); }
  /// Time from sending the request upstream until its response head arrived.
  void upstream_latency(nanos d) noexcept { latency_.observe(d); }
  /// A request of a cost_from_response route charged `units` when it ended; `reported`: the
  /// response said how much (else the route's default was charged).
  void response_cost(std::uint64_t units, bool reported) noexcept {
    counters_.add(k_cost_units, units);
    counters_.add(reported ? k_cost_reported : k_cost_defaulted);
  }

  // Reading, for render() and tests.
  /// `status_class` 1..5.
  std::uint64_t upstream_responses(unsigned status_class) const noexcept;
  /// 502, 503 or 504.
  std::uint64_t upstream_failures(unsigned status) const noexcept;
  std::uint64_t upstream_aborts() const noexcept { return counters_.sum(k_aborted); }
  std::uint64_t response_cost_units() const noexcept { return counters_.sum(k_cost_units); }
  /// Requests charged what the response reported (true) or the default (false).
  std::uint64_t response_costs(bool reported) const noexcept {
    return counters_.sum(reported ? k_cost_reported : k_cost_defaulted);
  }
  const latency_histogram& latency() const { return latency_; }

 private:
  static constexpr std::size_t k_class_base = 0;                   // 1xx .. 5xx
  static constexpr std::size_t k_failure_base = k_class_base + 5;  // 502, 504, 503
  static constexpr std::size_t k_aborted = k_failure_base + 3;
  static constexpr std::size_t k_cost_units = k_aborted + 1;
  static constexpr std::size_t k_cost_reported = k_cost_units + 1;
  static constexpr std::size_t k_cost_defaulted = k_cost_reported + 1;
  static constexpr std::size_t k_counters = k_cost_defaulted + 1;

  std::string name_;
  striped_counters<k_counters> counters_;
  latency_histogram latency_;
};

/// The counters of one route name summed over plans and limits: what the dashboard samples.
struct route_totals {
  std::string route;
  std::array<std::uint64_t, k_request_decisions> decisions{};  // by request_decision
  std::uint64_t upstream_responses = 0;  // response heads received, any status
  std::uint64_t upstream_failures = 0;   // 502, 503 and 504 the gateway answered itself

  std::uint64_t requests(request_decision d) const {
    return decisions[static_cast<std::size_t>(d)];
  }
};

enum class metric_type { counter, gauge };

/// One label of a sample.
struct metric_label {
  std::string_view name;
  std::string_view value;
};

/// Writes metric families in the exposition format; what a metrics_provider is handed.
/// A family is announced once (HELP, TYPE) and followed by its samples. Names must match
/// [a-zA-Z_:][a-zA-Z0-9_:]* (labels: [a-zA-Z_][a-zA-Z0-9_]*); a family or sample with an
/// invalid name, or a family already written, is left out so the output always parses.
class metric_writer {
 public:
  explicit metric_writer(std::string& out) : out_(out) {}

  void family(std::string_view name, std::string_view help, metric_type type);
  void sample(std::initializer_list<metric_label> labels, double value) {
    sample(std::span<const metric_label>(labels.begin(), labels.size()), value);
  }
  void sample(std::span<const metric_label> labels, double value);
  void sample(std::initializer_list<metric_label> labels, std::uint64_t value) {
    sample(std::span<const metric_label>(labels.begin(), labels.size()), value);
  }
  void sample(std::span<const metric_label> labels, std::uint64_t value);
  void sample(double value) { sample(std::span<const metric_label>{}, value); }
  void sample(std::uint64_t value) { sample(std::span<const metric_label>{}, value); }

  /// A family with one unlabelled sample.
  void gauge(std::string_view name, std::string_view help, double value) {
    family(name, help, metric_type::gauge);
    sample(value);
  }

  /// A histogram family named `name` (samples name_bucket, name_sum, name_count), one series
  /// per `labels` given to histogram_series.
  void histogram_family(std::string_view name, std::string_view help);
  void histogram_series(std::span<const metric_label> labels, const latency_histogram& h);

 private:
  bool begin_family(std::string_view name, std::string_view help, std::string_view type);
  void write_sample(std::string_view suffix, std::span<const metric_label> labels,
                    std::string_view extra_label, std::string_view extra_value,
                    std::string_view value);

  std::string& out_;
  std::string current_;  // the family being written; "" when it was refused
  std::vector<std::string> written_;
};

/// Adds families to a render; called on the thread that renders (the admin thread). Must not
/// block long: it runs on every scrape.
using metrics_provider = std::function<void(metric_writer&)>;

class metrics_registry;

/// Keeps a provider registered; unregisters it when destroyed (waiting for a render in
/// progress to finish, so the provider's captures may die right after).
class metrics_provider_handle {
 public:
  metrics_provider_handle() = default;
  metrics_provider_handle(metrics_registry* owner, std::uint64_t id) : owner_(owner), id_(id) {}
  metrics_provider_handle(metrics_provider_handle&& other) noexcept;
  metrics_provider_handle& operator=(metrics_provider_handle&& other) noexcept;
  metrics_provider_handle(const metrics_provider_handle&) = delete;
  metrics_provider_handle& operator=(const metrics_provider_handle&) = delete;
  ~metrics_provider_handle() { reset(); }

  void reset() noexcept;

 private:
  metrics_registry* owner_ = nullptr;
  std::uint64_t id_ = 0;
};

/// Every metric of the process. One instance (process_metrics()) in the server; tests make
/// their own. Counting methods are thread-safe and lock-free; routes_for, add_provider and
/// render take a mutex and are meant for configuration time and scrapes.
class metrics_registry {
 public:
  metrics_registry();
  ~metrics_registry();
  metrics_registry(const metrics_registry&) = delete;
  metrics_registry& operator=(const metrics_registry&) = delete;

  /// The counters of each route of `cfg`, in config order. A name seen before (an earlier
  /// configuration) gets the same object back. The pointers live as long as the registry.
  std::vector<route_metrics*> routes_for(const config& cfg);
  /// The counters of one route name (created on first use).
  route_metrics& route(std::string_view name);
  /// The decisions of requests on `route` by clients of `plan` (a label value: "default" for
  /// none), denied by `limit` or not ("": no limit label), created on first use.
  decision_counters& decisions(std::string_view route, std::string_view plan,
                               std::string_view limit);
  /// Requests that matched no route, or failed before routing: label route="(none)".
  decision_counters& unrouted() { return unrouted_; }

  /// Time spent deciding one request: routing, identity and the limiter (store included).
  void observe_decision(nanos d) noexcept { decision_latency_.observe(d); }
  void connection_opened() noexcept { gauges_.add(k_connections_opened); }
  void connection_closed() noexcept { gauges_.add(k_connections_closed); }
  /// A configuration reload (SIGHUP or POST /admin/reload) succeeded or failed.
  void count_reload(bool ok) noexcept { gauges_.add(ok ? k_reloads_ok : k_reloads_failed); }
  /// A new connection closed at once: server.max_connections (with no idle connection to close
  /// instead) or server.max_connections_per_client reached.
  void connection_refused(bool per_client) noexcept {
    gauges_.add(per_client ? k_refused_per_client : k_refused_total);
  }
  /// An idle keep-alive connection closed to make room under server.max_connections.
  void idle_connection_evicted() noexcept { gauges_.add(k_idle_evicted); }
  /// An upgraded connection (WebSocket, ...) spliced to its upstream began or ended.
  void tunnel_opened() noexcept { gauges_.add(k_tunnels_opened); }
  void tunnel_closed() noexcept { gauges_.add(k_tunnels_closed); }
  /// Bytes a tunnel carried: from the client to the upstream (`to_upstream`) or back.
  void tunnel_bytes(bool to_upstream, std::uint64_t n) noexcept {
    gauges_.add(to_upstream ? k_tunnel_bytes_up : k_tunnel_bytes_down, n);
  }
  std::int64_t open_tunnels() const noexcept;
  /// A TLS handshake on the TLS listener ended, completed or not.
  void tls_handshake(bool ok) noexcept { gauges_.add(ok ? k_tls_ok : k_tls_failed); }
  /// HTTP/2: a connection began or ended, a client opened a stream, a RST_STREAM was received
  /// (`sent` false) or sent, a GOAWAY was sent with error `code` (RFC 9113 §7).
  void h2_connection_opened() noexcept { gauges_.add(k_h2_opened); }
  void h2_connection_closed() noexcept { gauges_.add(k_h2_closed); }
  void h2_stream_opened() noexcept { gauges_.add(k_h2_streams); }
  void h2_reset(bool sent) noexcept { gauges_.add(sent ? k_h2_resets_sent : k_h2_resets_received); }
  void h2_goaway(std::uint32_t code) noexcept { gauges_.add(k_h2_goaway + goaway_slot(code)); }
  std::uint64_t h2_goaways(std::uint32_t code) const noexcept {
    return gauges_.sum(k_h2_goaway + goaway_slot(code));
  }
  std::uint64_t h2_resets(bool sent) const noexcept {
    return gauges_.sum(sent ? k_h2_resets_sent : k_h2_resets_received);
  }
  std::uint64_t connections_refused(bool per_client) const noexcept {
    return gauges_.sum(per_client ? k_refused_per_client : k_refused_total);
  }

  /// Adds a provider of extra families (store statistics, tracked subjects, ...). Families are
  /// rendered after the built-in ones, providers in the order added.
  [[nodiscard]] metrics_provider_handle add_provider(metrics_provider provider);

  /// The whole exposition (text/plain; version=0.0.4).
  std::string render() const;
  /// Every route name seen so far (any configuration), first-seen order, with its counters.
  std::vector<route_totals> totals_by_route() const;

  std::int64_t open_connections() const noexcept;
  const latency_histogram& decision_latency() const { return decision_latency_; }

 private:
  friend class metrics_provider_handle;
  void remove_provider(std::uint64_t id) noexcept;
  /// Things opened and not yet closed, from the two counters that count them.
  std::int64_t still_open(std::size_t opened, std::size_t closed) const noexcept;

  static constexpr std::size_t k_connections_opened = 0;
  static constexpr std::size_t k_connections_closed = 1;
  static constexpr std::size_t k_reloads_ok = 2;
  static constexpr std::size_t k_reloads_failed = 3;
  static constexpr std::size_t k_refused_total = 4;
  static constexpr std::size_t k_refused_per_client = 5;
  static constexpr std::size_t k_idle_evicted = 6;
  static constexpr std::size_t k_tunnels_opened = 7;
  static constexpr std::size_t k_tunnels_closed = 8;
  static constexpr std::size_t k_tunnel_bytes_up = 9;
  static constexpr std::size_t k_tunnel_bytes_down = 10;
  static constexpr std::size_t k_tls_ok = 11;
  static constexpr std::size_t k_tls_failed = 12;
  static constexpr std::size_t k_h2_opened = 13;
  static constexpr std::size_t k_h2_closed = 14;
  static constexpr std::size_t k_h2_streams = 15;
  static constexpr std::size_t k_h2_resets_received = 16;
  static constexpr std::size_t k_h2_resets_sent = 17;
  // GOAWAYs sent, one slot per error code of RFC 9113 §7 (0x0..0xd), then one for any other.
  static constexpr std::size_t k_h2_goaway = 18;
  static constexpr std::size_t k_h2_goaway_codes = 15;
  static constexpr std::size_t goaway_slot(std::uint32_t code) noexcept {
    return code < k_h2_goaway_codes - 1 ? code : k_h2_goaway_codes - 1;
  }

  // ratewall_requests_total's labels (route, plan, limit) and their counters.
  struct labelled_decisions {
    std::string route;
    std::string plan;
    std::string limit;  // "": no limit label
    decision_counters counters;
  };
  using label_key = std::tuple<std::string, std::string, std::string>;

  mutable std::mutex mutex_;  // routes_, decisions_ and providers_; held while rendering
  std::vector<std::unique_ptr<route_metrics>> routes_;          // first-seen order, never shrinks
  std::vector<std::unique_ptr<labelled_decisions>> decisions_;  // likewise
  std::map<label_key, decision_counters*, std::less<>> decisions_by_label_;
  decision_counters unrouted_;
  std::vector<std::pair<std::uint64_t, metrics_provider>> providers_;
  std::uint64_t next_provider_id_ = 1;
  latency_histogram decision_latency_;
  striped_counters<k_h2_goaway + k_h2_goaway_codes> gauges_;
};

/// ratewall_requests_total's counters for one configuration, resolved when it is loaded (the
/// gateway holds one), so that a request finds its counters by route index and plan without
/// building a label: a plan is one of those declared under `plans` (another name, or none, is
/// "default"), a limit one of its route's. Built before any request, read-only after.
class decision_metrics {
 public:
  decision_metrics(metrics_registry& registry, const config& cfg);

  /// Where a request on `route` by a client of `plan` counts: [0] without a limit label
  /// (allowed, rejected, error), [1 + i] naming the route's limit i (denied by it, or
  /// shadow_denied). The counters live as long as the registry.
  std::span<decision_counters* const> of(std::size_t route, std::string_view plan) const;

 private:
  std::size_t plan_index(std::string_view plan) const;

  std::vector<std::pair<std::string, std::size_t>> plans_;  // declared, by name: 1 + their index
  std::size_t plan_count_ = 1;                              // default, then the declared ones
  std::vector<std::size_t> route_first_;                    // of each route's first cell
  std::vector<std::size_t> route_width_;                    // 1 + the route's limits
  // Per route, per plan (default first, then in declaration order): 1 + limits cells.
  std::vector<decision_counters*> cells_;
};

/// The registry of the running server.
metrics_registry& process_metrics();

/// The content type of render()'s output.
inline constexpr std::string_view k_metrics_content_type =
    "text/plain; version=0.0.4; charset=utf-8";

}  // namespace ratewall
