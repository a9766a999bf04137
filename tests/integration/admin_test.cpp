// The admin API over real sockets: a real admin_server on 127.0.0.1 port 0 in front of a real
// gateway (router, identity, limiter with its memory store), driven by a manual clock so that
// what the limits report is exact.

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/config/loader.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/proxy/gateway.hpp"
#include "support/harness_backend.hpp"
#include "support/http_client.hpp"
#include "unit/admin/exposition_parser.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string k_token = "s3cret-admin-token";

const std::string k_config = R"(
store:
  redis:
    url: redis://ops:hunter2@127.0.0.1:6379/0
plans:
  premium: {}
api_keys:
  - key: premium-key
    plan: premium
upstreams:
  api:
    targets: [127.0.0.1:9]
routes:
  - name: search
    match: { path_prefix: /search }
    upstream: api
    limits:
      - name: burst
        algorithm: token_bucket
        rate: 1/m
        burst: 5
        plans: { premium: { rate: 1/m, burst: 50 } }
      - name: daily
        algorithm: fixed_window
        limit: 1000
        window: 1d
        shadow: true
  - name: other
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: per-minute
        algorithm: fixed_window
        limit: 2
        window: 1m
)";

/// What the server would implement: the current gateway, reload from YAML text, readiness.
class test_backend final : public admin_backend {
 public:
  explicit test_backend(std::string yaml = k_config) : next_yaml(std::move(yaml)) {
    gateway_ = build(next_yaml, nullptr);
  }

  std::shared_ptr<const gateway> current() override {
    std::lock_guard lock(mutex_);
    return gateway_;
  }
  reload_result reload() override {
    std::string yaml;
    {
      std::lock_guard lock(mutex_);
      ++reloads;
      yaml = next_yaml;
    }
    {
      // Held here, with the file read, while the gate is closed.
      std::unique_lock lock(gate_mutex_);
      gate_changed_.wait(lock, [this] { return !gate_closed_; });
    }
    std::lock_guard lock(mutex_);
    try {
      gateway_ = build(yaml, gateway_.get());
      return {true, ""};
    } catch (const config_error& e) {
      return {false, e.what()};
    }
  }
  /// What the next reload reads, set while one may be running.
  void set_next_yaml(std::string yaml) {
    std::lock_guard lock(mutex_);
    next_yaml = std::move(yaml);
  }
  /// Reloads that have read the file wait at the gate while it is closed.
  void close_gate() {
    std::lock_guard lock(gate_mutex_);
    gate_closed_ = true;
  }
  void open_gate() {
    {
      std::lock_guard lock(gate_mutex_);
      gate_closed_ = false;
    }
    gate_changed_.notify_all();
  }
  readiness ready() override { return {is_ready.load(), is_ready ? "up" : "store unreachable"}; }
  /// Kept in memory only (the runtime's journals have tests of their own).
  boost::asio::awaitable<std::string> change_key(key_change change) override {
    if (refuse_changes) {
      co_return "the disk is full";
    }
    current()->keys()->apply(change);
    co_return std::string();
  }
  std::atomic<bool> refuse_changes{false};

  /// Sends one request through the limiter, as the session would.
  route_decision request(const std::string& route_name, const std::string& subject_spec) {
    auto gw = current();
    std::string error;
    auto who = gw->identity().resolve_named(subject_spec, &error);
    REQUIRE_MESSAGE(who, error);
    std::size_t route = 0;
    while (gw->cfg().routes[route].name != route_name) {
      ++route;
    }
    auto d = gw->limits().try_check(limit_request{route, who->subject, who->plan, "GET"});
    REQUIRE(d.has_value());
    return std::move(*d);
  }

  /// The gateways' clock: the limiter's time, its sweeps and /admin/top's window.
  manual_clock& clock() { return clock_; }

  std::string next_yaml;
  std::atomic<bool> is_ready{true};
  std::atomic<int> reloads{0};

 private:
  std::shared_ptr<const gateway> build(const std::string& yaml, const gateway* previous) {
    return std::make_shared<const gateway>(parse_config(yaml, "reload.yaml"), clock_, "hash-key",
                                           previous);
  }

  manual_clock clock_;
  std::mutex mutex_;
  std::shared_ptr<const gateway> gateway_;
  std::mutex gate_mutex_;
  std::condition_variable gate_changed_;
  bool gate_closed_ = false;
};

// k_config with an `admin:` section (its indented lines) in front.
std::string with_admin(const std::string& admin_lines) {
  return "admin:\n" + admin_lines + k_config;
}

// Bytes written as they are on a new connection, and the reply (status 0: none, closed).
http_reply raw_request(std::uint16_t port, const std::string& bytes) {
  http_client client(port, 5s);
  client.send_raw(bytes);
  return client.read_reply();
}

// Writes `bytes` one at a time, `gap` apart, on a new connection until a write fails (the
// server closed the connection); how many went out.
std::size_t trickle(std::uint16_t port, const std::string& bytes, std::chrono::milliseconds gap) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  std::size_t sent = 0;
  for (char byte : bytes) {
    if (::send(fd, &byte, 1, MSG_NOSIGNAL) != 1) {
      break;
    }
    ++sent;
    std::this_thread::sleep_for(gap);
  }
  ::close(fd);
  return sent;
}

struct fixture {
  explicit fixture(std::string token = k_token, std::string yaml = k_config)
      : backend(std::move(yaml)), server(loopback(std::move(token)), backend, metrics) {
    server.start();
  }

  http_reply call(const std::string& method, const std::string& target, bool with_token = true) {
    http_client client(server.port());
    header_pairs headers;
    if (with_token) {
      headers.emplace_back("Authorization", "Bearer " + k_token);
    }
    return client.request(method, target, headers);
  }
  json call_json(const std::string& method, const std::string& target, unsigned expected = 200) {
    http_reply r = call(method, target);
    INFO(method << " " << target << " -> " << r.status << " " << r.body);
    REQUIRE(r.status == expected);
    CHECK(r.header("content-type") == "application/json");
    return json::parse(r.body);
  }
  // remaining of `limit` on `route` for `subject`, from GET /admin/limits.
  std::uint64_t remaining(const std::string& subject, const std::string& route,
                          const std::string& limit) {
    json j = call_json("GET", "/admin/limits?route=" + route + "&subject=" + subject);
    for (const auto& l : j["routes"][0]["limits"]) {
      if (l["name"] == limit) {
        return l["remaining"].get<std::uint64_t>();
      }
    }
    FAIL("no limit " << limit);
    return 0;
  }

  test_backend backend;
  metrics_registry metrics;
  admin_server server;
};

}  // namespace

TEST_CASE("admin: /healthz and /readyz answer without a token") {
  fixture f;
  http_reply h = f.call("GET", "/healthz", false);
  CHECK(h.status == 200);
  CHECK(h.body == "ok\n");
  CHECK(f.call("GET", "/healthz", true).status == 200);
  CHECK(f.call("POST", "/healthz", false).status == 405);

  http_reply r = f.call("GET", "/readyz", false);
  CHECK(r.status == 200);
  CHECK(json::parse(r.body)["ready"] == true);
  f.backend.is_ready = false;
  r = f.call("GET", "/readyz", false);
  CHECK(r.status == 503);
  CHECK(json::parse(r.body)["detail"] == "store unreachable");
}

TEST_CASE("admin: every other endpoint is 401 without the token or with a wrong one") {
  fixture f;
  const std::pair<const char*, const char*> endpoints[] = {
      {"GET", "/metrics"},
      {"GET", "/admin/limits?subject=ip:1.2.3.4"},
      {"DELETE", "/admin/limits?subject=ip:1.2.3.4"},
      {"POST", "/admin/reset-all"},
      {"POST", "/admin/reload"},
      {"GET", "/admin/config"},
      {"GET", "/admin/top"},
      {"GET", "/admin/nonexistent"},
  };
  for (const auto& [method, target] : endpoints) {
    CAPTURE(method);
    CAPTURE(target);
    http_reply none = f.call(method, target, false);
    CHECK(none.status == 401);
    CHECK(none.header("www-authenticate") == R"(Bearer realm="ratewall-admin")");
    http_client client(f.server.port());
    for (const char* wrong :
         {"Bearer wrong", "Bearer s3cret-admin-toke", "Bearer s3cret-admin-token2",
          "Basic czNjcmV0LWFkbWluLXRva2Vu", "s3cret-admin-token", "Bearer "}) {
      CAPTURE(wrong);
      CHECK(client.request(method, target, {{"Authorization", wrong}}).status == 401);
    }
    http_reply ok = f.call(method, target, true);
    CHECK(ok.status != 401);
  }
  CHECK(f.backend.reloads == 1);  // only the authorized reload ran
  // The scheme is case-insensitive (RFC 9110 §11.1).
  http_client client(f.server.port());
  CHECK(client.request("GET", "/admin/top", {{"Authorization", "bearer " + k_token}}).status ==
        200);
}

TEST_CASE("admin: without a token configured, reads are open and every change is 403") {
  fixture f("");
  CHECK(f.call("GET", "/healthz", false).status == 200);
  CHECK(f.call("GET", "/readyz", false).status == 200);
  CHECK(f.call("GET", "/metrics", false).status == 200);
  CHECK(f.call("GET", "/admin/top", false).status == 200);
  CHECK(f.call("GET", "/admin/config", false).status == 200);
  CHECK(f.call("GET", "/admin/limits?subject=ip:1.2.3.4", false).status == 200);

  f.backend.request("search", "ip:1.2.3.4");
  const std::pair<const char*, const char*> changes[] = {
      {"POST", "/admin/reload"},
      {"POST", "/admin/reset-all"},
      {"DELETE", "/admin/limits?subject=ip:1.2.3.4"},
      {"PUT", "/admin/limits?subject=ip:1.2.3.4"},
      {"POST", "/admin/nonexistent"},
  };
  for (const auto& [method, target] : changes) {
    CAPTURE(method);
    CAPTURE(target);
    // A token sent anyway changes nothing: there is none to compare it with.
    for (bool with_token : {false, true}) {
      http_reply r = f.call(method, target, with_token);
      CHECK(r.status == 403);
      CHECK(r.header("content-type") == "application/json");
      CHECK(json::parse(r.body)["error"] ==
            "no admin token is configured: set RATEWALL_ADMIN_TOKEN in the gateway's environment "
            "to enable this endpoint");
    }
  }
  CHECK(f.backend.reloads == 0);
  CHECK(f.remaining("ip:1.2.3.4", "search", "burst") == 4);  // nothing was reset
}

TEST_CASE("admin: refuses to start on a non-loopback address without a token") {
  test_backend backend;
  metrics_registry metrics;
  admin_options o = loopback("");
  o.listen = endpoint{"0.0.0.0", 0};
  try {
    admin_server s(o, backend, metrics);
    FAIL("expected the admin server to refuse");
  } catch (const std::runtime_error& e) {
    std::string what = e.what();
    CHECK(what.find("0.0.0.0:0 is not a loopback address") != std::string::npos);
    CHECK(what.find("RATEWALL_ADMIN_TOKEN") != std::string::npos);
  }
  o.token = k_token;
  CHECK_NOTHROW(admin_server(o, backend, metrics));
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK(is_loopback_host("127.1.2.3"));
  CHECK(is_loopback_host("::1"));
  CHECK(is_loopback_host("localhost"));
  CHECK_FALSE(is_loopback_host("::"));
  CHECK_FALSE(is_loopback_host("10.0.0.1"));
}

TEST_CASE("admin: the token comes from the environment variable admin.token_env") {
  admin_config cfg;
  cfg.token_env = "RATEWALL_TEST_ADMIN_TOKEN_X";
  ::setenv(cfg.token_env.c_str(), "from-env", 1);
  admin_options o = admin_options::from_config(cfg, "k");
  ::unsetenv(cfg.token_env.c_str());
  CHECK(o.token == "from-env");
  CHECK(o.listen.host == "127.0.0.1");
  CHECK(o.listen.port == 9090);
  CHECK(admin_options::from_config(cfg, "k").token.empty());
}

TEST_CASE("admin: /metrics is valid exposition text and its counters move") {
  fixture f;
  auto slots = f.metrics.routes_for(f.backend.current()->cfg());
  const decision_metrics decisions(f.metrics, f.backend.current()->cfg());
  http_reply r = f.call("GET", "/metrics");
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "text/plain; version=0.0.4; charset=utf-8");
  auto before = parse_exposition(r.body);
  REQUIRE_MESSAGE(before.ok, before.error);
  const std::string allowed =
      R"(ratewall_requests_total{route="search",plan="premium",decision="allowed"})";
  CHECK(before.value(allowed) == 0);

  decisions.of(0, "premium")[0]->count(request_decision::allowed);
  decisions.of(0, "premium")[0]->count(request_decision::allowed);
  slots[0]->upstream_response(200);
  slots[0]->upstream_latency(std::chrono::milliseconds(3));
  auto provider = f.metrics.add_provider([](metric_writer& w) {
    w.gauge("ratewall_tracked_subjects", "Subjects with state in the store.", 3.0);
  });

  auto after = parse_exposition(f.call("GET", "/metrics").body);
  REQUIRE_MESSAGE(after.ok, after.error);
  CHECK(after.value(allowed) == 2);
  CHECK(after.value(R"(ratewall_upstream_responses_total{route="search",class="2xx"})") == 1);
  CHECK(after.value(R"(ratewall_upstream_latency_seconds_count{route="search"})") == 1);
  CHECK(after.value("ratewall_tracked_subjects") == 3);
}

TEST_CASE("admin: GET /admin/limits reports the state of each limit, DELETE resets it") {
  fixture f;
  const std::string client = "ip:203.0.113.7";
  CHECK(f.remaining(client, "search", "burst") == 5);

  f.backend.request("search", client);
  f.backend.request("search", client);
  f.backend.request("search", client);
  CHECK(f.remaining(client, "search", "burst") == 2);

  json j = f.call_json("GET", "/admin/limits?route=search&subject=" + client);
  CHECK(j["subject"] == "ip:203.0.113.7");
  CHECK(j["plan"].is_null());
  REQUIRE(j["routes"].size() == 1);
  const json& burst = j["routes"][0]["limits"][0];
  CHECK(burst["name"] == "burst");
  CHECK(burst["algorithm"] == "token_bucket");
  CHECK(burst["limit"] == 5);
  CHECK(burst["allowed"] == true);
  CHECK(burst["retry_after_ms"] == 0);
  CHECK(burst["reset_after_ms"] == 180000);  // 3 tokens at 1/min
  CHECK(burst["shadow"] == false);
  const json& daily = j["routes"][0]["limits"][1];
  CHECK(daily["name"] == "daily");
  CHECK(daily["algorithm"] == "fixed_window");
  CHECK(daily["shadow"] == true);

  SUBCASE("denied: allowed false and a retry time") {
    f.backend.request("search", client);
    f.backend.request("search", client);
    CHECK_FALSE(f.backend.request("search", client).allowed);
    json d = f.call_json("GET", "/admin/limits?route=search&subject=" + client);
    CHECK(d["routes"][0]["limits"][0]["remaining"] == 0);
    CHECK(d["routes"][0]["limits"][0]["allowed"] == false);
    CHECK(d["routes"][0]["limits"][0]["retry_after_ms"] == 60000);
  }
  SUBCASE("DELETE with a route resets that route only") {
    f.backend.request("other", client);
    json d = f.call_json("DELETE", "/admin/limits?route=search&subject=" + client);
    CHECK(d["cleared"] >= 1);  // entries, as the store counts them
    CHECK(d["route"] == "search");
    CHECK(f.remaining(client, "search", "burst") == 5);
    CHECK(f.remaining(client, "other", "per-minute") == 1);
    CHECK(f.backend.request("search", client).headline.remaining == 4);
  }
  SUBCASE("DELETE without a route resets every route") {
    f.backend.request("other", client);
    json d = f.call_json("DELETE", "/admin/limits?subject=" + client);
    CHECK(d["cleared"] >= 2);
    CHECK(d["route"].is_null());
    CHECK(f.remaining(client, "search", "burst") == 5);
    CHECK(f.remaining(client, "other", "per-minute") == 2);
  }
  SUBCASE("other clients are untouched by a reset") {
    f.backend.request("search", "ip:198.51.100.1");
    f.call_json("DELETE", "/admin/limits?subject=" + client);
    CHECK(f.remaining("ip:198.51.100.1", "search", "burst") == 4);
  }
  SUBCASE("POST /admin/reset-all forgets everyone") {
    f.backend.request("search", "ip:198.51.100.1");
    json d = f.call_json("POST", "/admin/reset-all");
    CHECK(d["cleared"] >= 2);
    CHECK(f.remaining(client, "search", "burst") == 5);
    CHECK(f.remaining("ip:198.51.100.1", "search", "burst") == 5);
  }
}

TEST_CASE("admin: subjects by API key (with its plan), user, and as printed") {
  fixture f;
  f.backend.request("search", "api_key:premium-key");
  json j = f.call_json("GET", "/admin/limits?route=search&subject=api_key:premium-key");
  CHECK(j["plan"] == "premium");
  CHECK(j["routes"][0]["limits"][0]["limit"] == 50);
  CHECK(j["routes"][0]["limits"][0]["remaining"] == 49);
  std::string subject = j["subject"];
  CHECK(subject.starts_with("key:"));
  CHECK(subject.find("premium-key") == std::string::npos);
  // The printed subject works as well, with its plan found again.
  json again = f.call_json("GET", "/admin/limits?route=search&subject=subject:" + subject);
  CHECK(again["plan"] == "premium");
  CHECK(again["routes"][0]["limits"][0]["remaining"] == 49);
  // Without a route: every route that has limits.
  json all = f.call_json("GET", "/admin/limits?subject=user:u%2042");
  CHECK(all["routes"].size() == 2);
  CHECK(all["subject"].get<std::string>().starts_with("user:"));
}

TEST_CASE("admin: bad requests say what is wrong") {
  fixture f;
  CHECK(f.call_json("GET", "/admin/limits", 400)["error"].get<std::string>().starts_with(
      "subject is required"));
  CHECK(f.call_json("GET", "/admin/limits?subject=1.2.3.4", 400)["error"] ==
        "subject: expected api_key:<key>, user:<id>, ip:<address> or subject:<subject>");
  CHECK(f.call_json("GET", "/admin/limits?subject=api_key:made-up", 400)["error"] ==
        "subject: unknown API key (unknown_api_key: ip: its client is counted by IP)");
  CHECK(f.call_json("GET", "/admin/limits?subject=ip:1.2.3.4&route=nope", 404)["error"] ==
        "no route named \"nope\"");
  CHECK(f.call_json("DELETE", "/admin/limits?subject=ip:1.2.3.4&route=nope", 404)["error"] ==
        "no route named \"nope\"");
  CHECK(f.call_json("GET", "/admin/limits?subject=%zz", 400)["error"] == "malformed query string");
  CHECK(f.call_json("GET", "/admin/top?n=0", 400)["error"] ==
        "n: expected a number from 1 to 1000");
  CHECK(f.call_json("GET", "/admin/top?n=ten", 400).contains("error"));
  CHECK(f.call_json("GET", "/admin/nothing", 404)["error"] == "no such endpoint");
  http_reply wrong = f.call("GET", "/admin/reset-all");
  CHECK(wrong.status == 405);
  CHECK(wrong.header("allow") == "POST");
  CHECK(f.call("PUT", "/admin/limits?subject=ip:1.2.3.4").header("allow") == "GET, HEAD, DELETE");
}

TEST_CASE("admin: /admin/top lists the subjects with the most denials") {
  fixture f;
  for (int i = 0; i < 5; ++i) {
    f.backend.request("other", "ip:203.0.113.1");  // 2 allowed, 3 denied
  }
  for (int i = 0; i < 3; ++i) {
    f.backend.request("other", "ip:203.0.113.2");  // 2 allowed, 1 denied
  }
  f.backend.request("other", "ip:203.0.113.3");  // never denied
  json j = f.call_json("GET", "/admin/top?n=10");
  REQUIRE(j["top"].size() == 2);
  CHECK(j["top"][0]["subject"] == "ip:203.0.113.1");
  CHECK(j["top"][0]["denied"] == 3);
  CHECK(j["top"][0]["subject_hash"] == subject_hash("ip:203.0.113.1", "hash-key"));
  CHECK(j["top"][1]["denied"] == 1);
  CHECK(j["window_seconds"] == 600);  // admin.top_window's default, 10m
  CHECK(f.call_json("GET", "/admin/top?n=1")["top"].size() == 1);
}

TEST_CASE("admin: /admin/top keeps a subject for admin.top_window, past its limit state") {
  fixture f(k_token, with_admin("  top_window: 5m\n"));
  for (int i = 0; i < 5; ++i) {
    f.backend.request("other", "ip:203.0.113.1");  // 2 allowed, 3 denied
  }
  // The fixed window (1m) is over and its state swept: the limiter has forgotten the subject.
  f.backend.clock().set(2min);
  CHECK(f.backend.current()->limits().sweep() == 1);
  CHECK(f.remaining("ip:203.0.113.1", "other", "per-minute") == 2);
  json j = f.call_json("GET", "/admin/top");
  CHECK(j["window_seconds"] == 300);
  REQUIRE(j["top"].size() == 1);
  CHECK(j["top"][0]["subject"] == "ip:203.0.113.1");
  CHECK(j["top"][0]["denied"] == 3);

  SUBCASE("gone once the window has passed (to a tenth of it)") {
    f.backend.clock().set(5min + 30s - 1ns);
    CHECK(f.call_json("GET", "/admin/top")["top"].size() == 1);
    f.backend.clock().set(5min + 30s);
    CHECK(f.call_json("GET", "/admin/top")["top"].empty());
  }
  SUBCASE("a reload to a longer window keeps the counts for the new window") {
    f.backend.next_yaml = with_admin("  top_window: 1h\n");
    CHECK(f.call_json("POST", "/admin/reload")["reloaded"] == true);
    f.backend.clock().set(50min);
    j = f.call_json("GET", "/admin/top");
    CHECK(j["window_seconds"] == 3600);
    REQUIRE(j["top"].size() == 1);
    CHECK(j["top"][0]["denied"] == 3);
  }
  SUBCASE("a reload to a shorter window drops who is past it") {
    f.backend.next_yaml = with_admin("  top_window: 1m\n");
    CHECK(f.call_json("POST", "/admin/reload")["reloaded"] == true);
    j = f.call_json("GET", "/admin/top");
    CHECK(j["window_seconds"] == 60);
    CHECK(j["top"].empty());
  }
}

TEST_CASE("admin: POST /admin/reload swaps a good file and reports a bad one") {
  fixture f;
  SUBCASE("good") {
    f.backend.next_yaml = std::string(k_config) + R"(  - name: added
    match: { path_prefix: /added }
    upstream: api
)";
    json j = f.call_json("POST", "/admin/reload");
    CHECK(j["reloaded"] == true);
    CHECK(f.backend.current()->cfg().routes.size() == 3);
  }
  SUBCASE("bad: 422 with file, line and key; the running config stays") {
    f.backend.next_yaml = "upstreams:\n  api: { targets: [127.0.0.1:9] }\nroutes: []\n";
    json j = f.call_json("POST", "/admin/reload", 422);
    CHECK(j["reloaded"] == false);
    CHECK(j["error"] == "reload.yaml:3: routes: declare at least one route");
    CHECK(f.backend.current()->cfg().routes.size() == 2);
  }
}

// POST /admin/reload's bytes, sent without waiting for the answer.
std::string reload_request(std::uint16_t port) {
  return "POST /admin/reload HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) +
         "\r\nAuthorization: Bearer " + k_token + "\r\nContent-Length: 0\r\n\r\n";
}

struct gate_opener {
  ~gate_opener() { backend.open_gate(); }
  test_backend& backend;
};

// Waits (up to 10 s) until `n` reloads have begun.
bool reloads_began(const test_backend& backend, int n) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (backend.reloads < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  return backend.reloads >= n;
}

TEST_CASE("admin: POST /admin/reload while one runs joins the next reload, one for them all") {
  // Each POST was one more reload queued behind the others: twenty POSTs were twenty reloads
  // in a row, answered only once the last had run, and SIGTERM waited for all of them.
  fixture f;
  f.backend.close_gate();
  const gate_opener opens_at_end{f.backend};  // a failed check must not leave stop() waiting
  http_client first(f.server.port(), 30s);
  first.send_raw(reload_request(f.server.port()));
  REQUIRE(reloads_began(f.backend, 1));
  // Changed after the running reload read the file: the requests sent now must see it.
  f.backend.set_next_yaml("upstreams:\n  api: { targets: [127.0.0.1:9] }\nroutes: []\n");
  std::vector<std::unique_ptr<http_client>> later;
  for (int i = 0; i < 8; ++i) {
    later.push_back(std::make_unique<http_client>(f.server.port(), 30s));
    later.back()->send_raw(reload_request(f.server.port()));
  }
  std::this_thread::sleep_for(300ms);  // for the admin thread to read them
  CHECK(f.call("GET", "/healthz", false).status == 200);
  f.backend.open_gate();
  CHECK(first.read_reply().status == 200);
  for (auto& client : later) {
    const http_reply r = client->read_reply();
    CHECK(r.status == 422);
    CHECK(r.body.find("declare at least one route") != std::string::npos);
  }
  CHECK(f.backend.reloads == 2);
  CHECK(f.backend.current()->cfg().routes.size() == 2);
}

TEST_CASE("admin: stop waits for the reload under way only, not for those asked for after it") {
  fixture f;
  f.backend.close_gate();
  const gate_opener opens_at_end{f.backend};  // a failed check must not leave stop() waiting
  std::vector<std::unique_ptr<http_client>> clients;
  for (int i = 0; i < 4; ++i) {
    clients.push_back(std::make_unique<http_client>(f.server.port(), 30s));
    clients.back()->send_raw(reload_request(f.server.port()));
    if (i == 0) {
      REQUIRE(reloads_began(f.backend, 1));
    }
  }
  std::this_thread::sleep_for(300ms);
  std::thread stopping([&f] { f.server.stop(); });
  std::this_thread::sleep_for(100ms);
  f.backend.open_gate();
  stopping.join();
  CHECK(f.backend.reloads == 1);
}

TEST_CASE("admin: /admin/config shows the effective config without secrets") {
  fixture f;
  http_reply r = f.call("GET", "/admin/config");
  REQUIRE(r.status == 200);
  CHECK(r.body.find("hunter2") == std::string::npos);
  CHECK(r.body.find(k_token) == std::string::npos);
  CHECK(r.body.find("premium-key") == std::string::npos);
  std::string full_hash = to_hex(sha256("premium-key"));
  CHECK(r.body.find(full_hash) == std::string::npos);
  json j = json::parse(r.body);
  CHECK(j["store"]["redis"]["url"] == "redis://ops:***@127.0.0.1:6379/0");
  CHECK(j["admin"]["token_set"] == true);
  CHECK(j["admin"]["token_env"] == "RATEWALL_ADMIN_TOKEN");
  CHECK(j["api_keys"][0]["key_sha256"] == full_hash.substr(0, 8) + "...");
  CHECK(j["api_keys"][0]["plan"] == "premium");
  CHECK(j["routes"][0]["name"] == "search");
  CHECK(j["routes"][0]["limits"][0]["rate"] == "1/m");
  CHECK(j["routes"][0]["limits"][0]["burst"] == 5);
  CHECK(j["routes"][0]["limits"][0]["plans"]["premium"]["burst"] == 50);
  CHECK(j["routes"][0]["limits"][1]["window"] == "1d");
  CHECK(j["routes"][0]["deny"]["status"] == 429);
  CHECK(j["headers"]["reset"] == "delta");
  CHECK(j["log"]["access"] == "off");
  CHECK(j["server"]["header_timeout"] == "10s");
}

TEST_CASE("admin: keep-alive across requests, and stop() ends open connections") {
  auto f = std::make_unique<fixture>();
  http_client client(f->server.port());
  header_pairs auth{{"Authorization", "Bearer " + k_token}};
  CHECK(client.request("GET", "/admin/top", auth).status == 200);
  CHECK(client.request("GET", "/metrics", auth).status == 200);
  f->server.stop();
  CHECK(client.request("GET", "/healthz").status == 0);
}

TEST_CASE("admin: the Host must be loopback, localhost or in admin.allowed_hosts") {
  // DNS rebinding: a page on evil.example whose name is made to resolve to 127.0.0.1 reaches
  // the admin listener with its own name in Host; an address or localhost cannot be rebound.
  fixture f(k_token, with_admin("  allowed_hosts: [admin.internal, \"[fd00::1]\", 192.0.2.10]\n"));
  const std::string port = std::to_string(f.server.port());
  struct row {
    std::string host_lines;
    unsigned status;
  };
  const row rows[] = {
      {"Host: localhost\r\n", 200},
      {"Host: localhost:" + port + "\r\n", 200},
      {"Host: LocalHost:" + port + "\r\n", 200},
      {"Host: localhost.\r\n", 200},
      {"Host: 127.0.0.1:" + port + "\r\n", 200},
      {"Host: 127.0.0.1\r\n", 200},
      {"Host: 127.8.9.10:" + port + "\r\n", 200},
      {"Host: [::1]:" + port + "\r\n", 200},
      {"Host: [::1]\r\n", 200},
      {"Host: [::ffff:127.0.0.1]:" + port + "\r\n", 200},
      {"Host: admin.internal\r\n", 200},
      {"Host: Admin.Internal:9090\r\n", 200},
      {"Host: [fd00::1]:9090\r\n", 200},
      {"Host: [FD00:0::1]\r\n", 200},
      {"Host: 192.0.2.10:9090\r\n", 200},
      // Any other name, and addresses that are not loopback.
      {"Host: evil.example\r\n", 403},
      {"Host: evil.example:" + port + "\r\n", 403},
      {"Host: localhost.evil.example\r\n", 403},
      {"Host: 127.0.0.1.nip.io\r\n", 403},
      {"Host: admin.internal.evil.example\r\n", 403},
      {"Host: internal\r\n", 403},
      {"Host: 10.0.0.1\r\n", 403},
      {"Host: 0.0.0.0\r\n", 403},
      {"Host: [::]\r\n", 403},
      {"Host: [::2]\r\n", 403},
      {"Host: [fd00::2]:9090\r\n", 403},
      // No Host, or one that is not a host[:port]: 400 (RFC 9112 §3.2).
      {"", 400},
      {"Host: \r\n", 400},
      {"Host: :9090\r\n", 400},
      {"Host: localhost\r\nHost: localhost\r\n", 400},
      {"Host: localhost:http\r\n", 400},
      {"Host: localhost:99999\r\n", 400},
      {"Host: localhost:-1\r\n", 400},
      {"Host: ::1\r\n", 400},
      {"Host: [::1\r\n", 400},
      {"Host: [::1]x\r\n", 400},
      {"Host: [localhost]\r\n", 400},
      {"Host: evil.example@localhost\r\n", 400},
      {"Host: localhost/x\r\n", 400},
      {"Host: local host\r\n", 400},
  };
  for (const auto& [host_lines, status] : rows) {
    CAPTURE(host_lines);
    http_reply r = raw_request(f.server.port(), "GET /healthz HTTP/1.1\r\n" + host_lines + "\r\n");
    CHECK(r.status == status);
    if (status == 403) {
      CHECK(json::parse(r.body)["error"].get<std::string>().find("admin.allowed_hosts") !=
            std::string::npos);
    }
  }
  // HTTP/1.0 does not require Host, and no browser leaves it out.
  CHECK(raw_request(f.server.port(), "GET /healthz HTTP/1.0\r\n\r\n").status == 200);
  CHECK(
      raw_request(f.server.port(), "GET /healthz HTTP/1.0\r\nHost: evil.example\r\n\r\n").status ==
      403);

  // The token does not make a foreign Host acceptable.
  const std::string auth = "Authorization: Bearer " + k_token + "\r\n";
  CHECK(raw_request(f.server.port(),
                    "GET /admin/config HTTP/1.1\r\nHost: evil.example\r\n" + auth + "\r\n")
            .status == 403);
  CHECK(raw_request(f.server.port(), "POST /admin/reload HTTP/1.1\r\nHost: evil.example\r\n" +
                                         auth + "Content-Length: 0\r\n\r\n")
            .status == 403);
  CHECK(f.backend.reloads == 0);
  CHECK(raw_request(f.server.port(), "POST /admin/reload HTTP/1.1\r\nHost: 127.0.0.1:" + port +
                                         "\r\n" + auth + "Content-Length: 0\r\n\r\n")
            .status == 200);
  CHECK(f.backend.reloads == 1);
}

TEST_CASE("admin: cross-site requests are refused (Origin, Sec-Fetch-Site)") {
  fixture f;
  const header_pairs auth{{"Authorization", "Bearer " + k_token}};
  struct row {
    header_pairs headers;
    unsigned status;
  };
  const row rows[] = {
      {{}, 200},
      {{{"Sec-Fetch-Site", "none"}}, 200},  // typed into the address bar, curl with the header
      {{{"Sec-Fetch-Site", "same-origin"}}, 200},
      {{{"Sec-Fetch-Site", "cross-site"}}, 403},
      {{{"Sec-Fetch-Site", "same-site"}}, 403},
      {{{"Sec-Fetch-Site", "whatever"}}, 403},
      {{{"Sec-Fetch-Site", "none"}, {"Sec-Fetch-Site", "cross-site"}}, 403},
      // Browsers send Origin with every cross-origin request and every POST; the admin API
      // has no page of its own to be called from, so any Origin is a browser elsewhere.
      {{{"Origin", "http://evil.example"}}, 403},
      {{{"Origin", "null"}}, 403},
      {{{"Origin", "http://127.0.0.1:" + std::to_string(f.server.port())}}, 403},
      {{{"Origin", "http://evil.example"}, {"Sec-Fetch-Site", "same-origin"}}, 403},
  };
  int reloads = 0;
  for (const auto& [headers, status] : rows) {
    std::string sent;
    for (const auto& [name, value] : headers) {
      sent += name + ": " + value + "; ";
    }
    CAPTURE(sent);
    for (auto [method, target] : {std::pair{"GET", "/healthz"}, std::pair{"GET", "/admin/config"},
                                  std::pair{"POST", "/admin/reload"}}) {
      CAPTURE(target);
      header_pairs h = auth;
      h.insert(h.end(), headers.begin(), headers.end());
      http_client client(f.server.port());
      http_reply r = client.request(method, target, h);
      CHECK(r.status == status);
      if (status == 403) {
        CHECK(json::parse(r.body)["error"].get<std::string>().find("cross-site") !=
              std::string::npos);
      } else if (std::string(target) == "/admin/reload") {
        ++reloads;
      }
    }
  }
  CHECK(f.backend.reloads == reloads);
}

TEST_CASE("admin: at admin.max_connections a new connection closes the oldest idle one") {
  SUBCASE("a cap of 4") {
    fixture f(k_token, with_admin("  max_connections: 4\n  header_timeout: 30s\n"));
    std::vector<std::unique_ptr<http_client>> idle;
    // One request each, one after the other: idle in that order, then 0 again last.
    for (int i = 0; i < 4; ++i) {
      idle.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      REQUIRE(idle.back()->get("/healthz").status == 200);
    }
    REQUIRE(idle[0]->get("/healthz").status == 200);

    http_client fresh(f.server.port(), 5s);
    CHECK(fresh.get("/healthz").status == 200);
    CHECK(idle[1]->closed_by_peer());
    // The others stay open and usable.
    CHECK(idle[2]->get("/healthz").status == 200);
    CHECK(idle[0]->get("/healthz").status == 200);

    // Idle now, oldest first: 3, fresh, 2, 0.
    http_client another(f.server.port(), 5s);
    CHECK(another.get("/healthz").status == 200);
    CHECK(idle[3]->closed_by_peer());
    CHECK(fresh.get("/healthz").status == 200);
  }
  SUBCASE("the default cap of 64: idle connections never lock out /healthz") {
    fixture f;
    std::vector<std::unique_ptr<http_client>> idle;
    for (int i = 0; i < 64; ++i) {
      idle.push_back(std::make_unique<http_client>(f.server.port(), 5s));
    }
    for (int i = 0; i < 3; ++i) {
      http_client probe(f.server.port(), 5s);
      CHECK(probe.get("/healthz").status == 200);
    }
  }
}

TEST_CASE("admin: at admin.max_connections a head that never ends is closed for a new one") {
  // Anyone who reaches the port can start a head without a token: 64 that never end held
  // every place, and /healthz (the container's health check) was shut out.
  const std::string partial = "GET /healthz HTTP/1.1\r\nHost: loc";
  SUBCASE("the head awaited longest goes first") {
    fixture f(k_token, with_admin("  max_connections: 4\n  header_timeout: 30s\n"));
    std::vector<std::unique_ptr<http_client>> heads;
    for (int i = 0; i < 4; ++i) {
      heads.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      heads.back()->send_raw(partial);
      std::this_thread::sleep_for(50ms);  // read by the server: a head begun, not idle
    }
    {
      http_client probe(f.server.port(), 5s);
      CHECK(probe.get("/healthz").status == 200);
      CHECK(heads[0]->closed_by_peer());
    }
    // One more head fills the cap again: the next connection closes heads[1].
    heads.push_back(std::make_unique<http_client>(f.server.port(), 5s));
    heads.back()->send_raw(partial);
    std::this_thread::sleep_for(50ms);
    http_client second(f.server.port(), 5s);
    CHECK(second.get("/healthz").status == 200);
    CHECK(heads[1]->closed_by_peer());
    // The others are still read: a head that ends is answered.
    heads[3]->send_raw("alhost\r\n\r\n");
    CHECK(heads[3]->read_reply().status == 200);
  }
  SUBCASE("an idle connection goes before a head begun earlier") {
    fixture f(k_token, with_admin("  max_connections: 4\n  header_timeout: 30s\n"));
    std::vector<std::unique_ptr<http_client>> heads;
    for (int i = 0; i < 2; ++i) {
      heads.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      heads.back()->send_raw(partial);
    }
    std::vector<std::unique_ptr<http_client>> idle;
    for (int i = 0; i < 2; ++i) {
      idle.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      REQUIRE(idle.back()->get("/healthz").status == 200);
    }
    http_client probe(f.server.port(), 5s);
    CHECK(probe.get("/healthz").status == 200);
    CHECK(idle[0]->closed_by_peer());
    heads[0]->send_raw("alhost\r\n\r\n");
    CHECK(heads[0]->read_reply().status == 200);
  }
  SUBCASE("the default cap of 64: heads that never end do not lock out /healthz") {
    fixture f;
    std::vector<std::unique_ptr<http_client>> heads;
    for (int i = 0; i < 100; ++i) {
      heads.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      heads.back()->send_raw(partial);
    }
    for (int i = 0; i < 3; ++i) {
      http_client probe(f.server.port(), 5s);
      CHECK(probe.get("/healthz").status == 200);
    }
  }
}

TEST_CASE(
    "admin: over admin.max_connections with every one serving a request, a new one is "
    "refused") {
  fixture f(k_token, with_admin("  max_connections: 4\n  header_timeout: 30s\n"));
  std::vector<std::unique_ptr<http_client>> busy;
  const std::string head =
      "POST /admin/reset-all HTTP/1.1\r\nHost: localhost\r\nAuthorization: "
      "Bearer " +
      k_token + "\r\nContent-Length: 2\r\n\r\n";
  for (int i = 0; i < 4; ++i) {
    busy.push_back(std::make_unique<http_client>(f.server.port(), 5s));
    // A whole head whose body is still to come: the request is being served.
    busy.back()->send_raw(head);
  }
  std::this_thread::sleep_for(100ms);  // every head read
  {
    http_client refused(f.server.port(), 5s);
    CHECK(refused.get("/healthz").status == 0);
  }
  // The busy ones were left alone: each finishes its request.
  busy[3]->send_raw("{}");
  CHECK(busy[3]->read_reply().status == 200);

  // One goes away: its place is free for the next connection.
  busy[0].reset();
  unsigned status = 0;
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (status != 200 && std::chrono::steady_clock::now() < deadline) {
    http_client next(f.server.port(), 5s);
    status = next.get("/healthz").status;
  }
  CHECK(status == 200);
}

TEST_CASE("admin: admin.header_timeout bounds the wait for each request head") {
  fixture f(k_token, with_admin("  header_timeout: 300ms\n"));
  http_client c(f.server.port(), 5s);
  SUBCASE("a connection that sends nothing is closed") {
    CHECK(c.closed_by_peer());
  }
  SUBCASE("a partial head is closed") {
    c.send_raw("GET /healthz HTTP/1.1\r\nHost: loc");
    CHECK(c.closed_by_peer());
  }
  SUBCASE("a head sent a byte at a time does not extend it") {
    const std::string head =
        "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Slow: " + std::string(40, 'a');
    // 50 ms apart the whole head would take 4 s: the server closes long before.
    CHECK(trickle(f.server.port(), head, 50ms) < head.size());
  }
  SUBCASE("the idle gap after a response on a keep-alive connection") {
    REQUIRE(c.get("/healthz").status == 200);
    CHECK(c.closed_by_peer());
  }
}

TEST_CASE("admin: a request refused on its head is answered before its body, and closed") {
  // Before, each body was read (for up to 30 s) before the token was looked at: 64 such
  // connections without a token, never idle, held the cap and shut /healthz out.
  SUBCASE("no token configured") {
    fixture f("", with_admin("  max_connections: 2\n  header_timeout: 30s\n"));
    std::vector<std::unique_ptr<http_client>> holders;
    for (int i = 0; i < 4; ++i) {
      holders.push_back(std::make_unique<http_client>(f.server.port(), 5s));
      holders.back()->send_raw(
          "POST /admin/reset-all HTTP/1.1\r\nHost: localhost\r\nContent-Length: 60000\r\n\r\nx");
      const http_reply r = holders.back()->read_reply();
      CHECK(r.status == 403);
      CHECK_FALSE(r.keep_alive);
      CHECK(holders.back()->closed_by_peer());
    }
    http_client probe(f.server.port(), 5s);
    CHECK(probe.get("/healthz").status == 200);
  }
  SUBCASE("a wrong token") {
    fixture f(k_token, with_admin("  header_timeout: 30s\n"));
    http_client c(f.server.port(), 5s);
    c.send_raw(
        "POST /admin/reload HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer wrong\r\n"
        "Content-Length: 1000\r\n\r\n");
    CHECK(c.read_reply().status == 401);
    CHECK(c.closed_by_peer());
  }
  SUBCASE("an authorized body that stalls: closed after header_timeout") {
    fixture f(k_token, with_admin("  header_timeout: 300ms\n"));
    http_client c(f.server.port(), 5s);
    c.send_raw("POST /admin/reload HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer " +
               std::string(k_token) + "\r\nContent-Length: 10\r\n\r\nab");
    CHECK(c.closed_by_peer());
    CHECK(f.backend.reloads == 0);
  }
}

TEST_CASE("admin: Connection: close in a second Connection line closes after the answer") {
  fixture f(k_token);
  for (const std::string lines : {"HTTP/1.1\r\nConnection: foo\r\nConnection: close",
                                  "HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close",
                                  "HTTP/1.0\r\nConnection: keep-alive, close"}) {
    CAPTURE(lines);
    http_client c(f.server.port(), 5s);
    c.send_raw("GET /healthz " + lines +
               "\r\nHost: localhost\r\n\r\nGET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n");
    const http_reply r = c.read_reply();
    CHECK(r.status == 200);
    CHECK_FALSE(r.keep_alive);
    CHECK(c.closed_by_peer());
  }
}

TEST_CASE("admin: HTTP/1.0 clients get HTTP/1.1's status line, which says close or keep-alive") {
  // The version of the request was echoed: "HTTP/1.0 200", unlike the proxy's listener.
  fixture f(k_token);
  http_client closed(f.server.port(), 5s);
  closed.send_raw("GET /healthz HTTP/1.0\r\n\r\n");
  const std::string bytes = closed.read_until_closed();
  CHECK(bytes.starts_with("HTTP/1.1 200 "));
  CHECK(bytes.find("\r\nConnection: close\r\n") != std::string::npos);
  http_client kept(f.server.port(), 5s);
  kept.send_raw("GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
  const std::string first = kept.read_some();
  CHECK(first.starts_with("HTTP/1.1 200 "));
  CHECK(first.find("\r\nConnection: keep-alive\r\n") != std::string::npos);
  kept.send_raw("GET /healthz HTTP/1.0\r\n\r\n");
  const http_reply second = kept.read_reply();
  CHECK(second.status == 200);
  CHECK_FALSE(second.keep_alive);
}

TEST_CASE("admin: allowed_hosts and header_timeout follow a reload") {
  fixture f;
  auto with_host = [&](const std::string& host) {
    return raw_request(f.server.port(), "GET /healthz HTTP/1.1\r\nHost: " + host + "\r\n\r\n")
        .status;
  };
  CHECK(with_host("admin.internal") == 403);
  f.backend.next_yaml = with_admin("  allowed_hosts: [admin.internal]\n  header_timeout: 300ms\n");
  REQUIRE(f.call("POST", "/admin/reload").status == 200);
  CHECK(with_host("admin.internal") == 200);
  http_client c(f.server.port(), 5s);
  c.send_raw("GET /healthz HTTP/1.1\r\n");
  CHECK(c.closed_by_peer());
}

namespace {

// A call with a JSON body and the token.
http_reply call_with_body(fixture& f, const std::string& method, const std::string& target,
                          const std::string& body) {
  http_client client(f.server.port());
  return client.request(
      method, target,
      {{"Authorization", "Bearer " + k_token}, {"Content-Type", "application/json"}}, body);
}

std::string sha_of(std::string_view key) {
  return to_hex(sha256(key));
}

}  // namespace

TEST_CASE("admin: PUT, GET and DELETE /admin/keys/{sha256} change API keys without a reload") {
  fixture f;
  const std::string sha = sha_of("runtime-key");
  // Unknown: the key's client is counted by address, as identity's default (unknown_api_key: ip).
  CHECK(f.call("GET", "/admin/keys/" + sha).status == 404);
  CHECK(f.call_json("GET", "/admin/limits?subject=api_key:runtime-key", 400).contains("error"));

  http_reply put =
      call_with_body(f, "PUT", "/admin/keys/" + sha, R"({"plan": "premium", "name": "acme"})");
  REQUIRE_MESSAGE(put.status == 201, put.body);
  json created = json::parse(put.body);
  CHECK(created["sha256"] == sha);
  CHECK(created["plan"] == "premium");
  CHECK(created["name"] == "acme");
  CHECK(created["source"] == "admin");
  const std::string subject = created["subject"];

  // The limiter now counts the key as its own subject on its plan's limits (premium: 50).
  json limits = f.call_json("GET", "/admin/limits?route=search&subject=api_key:runtime-key");
  CHECK(limits["subject"] == subject);
  CHECK(limits["plan"] == "premium");
  CHECK(limits["routes"][0]["limits"][0]["remaining"] == 50);
  CHECK(f.call_json("GET", "/admin/keys/" + sha)["name"] == "acme");

  // Changed: 200; the name is optional.
  put = call_with_body(f, "PUT", "/admin/keys/" + sha, R"({"plan": "premium"})");
  CHECK(put.status == 200);
  CHECK(json::parse(put.body)["name"].is_null());

  // Listed with the configuration's key, filtered by plan, a page at a time.
  json all = f.call_json("GET", "/admin/keys");
  REQUIRE(all["keys"].size() == 2);
  CHECK(all["next_after"].is_null());
  json page = f.call_json("GET", "/admin/keys?plan=premium&limit=1");
  REQUIRE(page["keys"].size() == 1);
  json rest = f.call_json(
      "GET", "/admin/keys?plan=premium&limit=1&after=" + page["next_after"].get<std::string>());
  REQUIRE(rest["keys"].size() == 1);
  CHECK(rest["keys"][0]["sha256"] != page["keys"][0]["sha256"]);
  std::set<std::string> sources{page["keys"][0]["source"], rest["keys"][0]["source"]};
  CHECK(sources == std::set<std::string>{"admin", "config"});

  // Deleted: unknown again. A configuration key can be deleted at run time too.
  CHECK(f.call_json("DELETE", "/admin/keys/" + sha)["deleted"] == true);
  CHECK(f.call("GET", "/admin/keys/" + sha).status == 404);
  CHECK(f.call("DELETE", "/admin/keys/" + sha).status == 404);
  CHECK(f.call_json("DELETE", "/admin/keys/" + sha_of("premium-key"))["deleted"] == true);
  CHECK(f.call_json("GET", "/admin/limits?subject=api_key:premium-key", 400).contains("error"));
}

TEST_CASE("admin: /admin/keys refuses what it cannot keep, and changes nothing then") {
  fixture f;
  const std::string sha = sha_of("runtime-key");
  struct row {
    std::string method, target, body;
    unsigned status;
    std::string says;
  };
  const std::vector<row> rows{
      {"PUT", "/admin/keys/abc", R"({"plan":"premium"})", 400, "64 hex"},
      {"PUT", "/admin/keys/" + sha, "plan=premium", 400, "JSON object"},
      {"PUT", "/admin/keys/" + sha, R"(["premium"])", 400, "JSON object"},
      {"PUT", "/admin/keys/" + sha, R"({"name":"acme"})", 400, "plan"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":7})", 400, "plan"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"premium","tier":"x"})", 400, "unknown field"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"platinum"})", 422, "unknown plan \\\"platinum"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"premium","name":""})", 422, "1 to 64"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"premium","name":"a\"b"})", 422, "quotes"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"premium","name":"new\nline"})", 422, "printable"},
      {"PUT", "/admin/keys/" + sha, R"({"plan":"premium","name":42})", 400, "string"},
      {"GET", "/admin/keys?limit=0", "", 400, "limit"},
      {"GET", "/admin/keys?after=xyz", "", 400, "after"},
      {"POST", "/admin/keys/" + sha, "", 405, "method"},
      {"POST", "/admin/keys", "", 405, "method"},
      // Past 64 KiB: a 413, not a silent close.
      {"PUT", "/admin/keys/" + sha, std::string(70'000, ' ') + R"({"plan":"premium"})", 413,
       "at most 64 KiB"},
  };
  for (const row& r : rows) {
    http_reply reply = call_with_body(f, r.method, r.target, r.body);
    INFO(r.method << " " << r.target << " " << r.body << " -> " << reply.status << " "
                  << reply.body);
    CHECK(reply.status == r.status);
    CHECK(reply.body.find(r.says) != std::string::npos);
  }
  CHECK(f.call("GET", "/admin/keys/" + sha).status == 404);
  {
    http_client chunked(f.server.port());  // no length declared: found while reading
    const http_reply r =
        chunked.request("PUT", "/admin/keys/" + sha, {{"Authorization", "Bearer " + k_token}},
                        std::string(70'000, ' ') + R"({"plan":"premium"})", true);
    CHECK(r.status == 413);
    CHECK_FALSE(r.keep_alive);
  }

  // Without a token configured, even reads are refused: the list shows every key's SHA-256.
  {
    fixture open_admin("");
    http_client c(open_admin.server.port());
    http_reply r = c.get("/admin/keys");
    CHECK(r.status == 403);
    CHECK(r.body.find("no admin token is configured") != std::string::npos);
    CHECK(c.get("/admin/top").status == 200);  // other reads stay open on loopback
  }

  // Without the token: 401, nothing changed.
  http_client anonymous(f.server.port());
  CHECK(anonymous.request("PUT", "/admin/keys/" + sha, {}, R"({"plan":"premium"})").status == 401);
  CHECK(f.call("GET", "/admin/keys/" + sha).status == 404);

  // Where the change is kept cannot take it: 503 saying why, and the key is as it was.
  f.backend.refuse_changes = true;
  http_reply refused = call_with_body(f, "PUT", "/admin/keys/" + sha, R"({"plan":"premium"})");
  CHECK(refused.status == 503);
  CHECK(refused.body.find("the disk is full") != std::string::npos);
  CHECK(f.call("GET", "/admin/keys/" + sha).status == 404);
}

TEST_CASE("admin: /admin/top shows a key by its name") {
  fixture f;
  const std::string sha = sha_of("named-key");
  REQUIRE(call_with_body(f, "PUT", "/admin/keys/" + sha, R"({"plan":"premium","name":"acme"})")
              .status == 201);
  for (int i = 0; i < 5; ++i) {
    f.backend.request("other", "api_key:named-key");  // 2 allowed, 3 denied
  }
  f.backend.request("other", "ip:203.0.113.9");
  f.backend.request("other", "ip:203.0.113.9");
  f.backend.request("other", "ip:203.0.113.9");  // 1 denied, no name
  json top = f.call_json("GET", "/admin/top");
  REQUIRE(top["top"].size() == 2);
  CHECK(top["top"][0]["name"] == "acme");
  CHECK(top["top"][0]["denied"] == 3);
  CHECK_FALSE(top["top"][1].contains("name"));
}
