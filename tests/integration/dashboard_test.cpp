// GET /dashboard and the data it polls (GET /admin/dashboard) through the real server: traffic
// sent to a running gateway in front of a real upstream, read back from an admin server on the
// process's registry; then the page itself, loaded after that traffic by headless Chromium.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/admin/metrics.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/harness_backend.hpp"
#include "support/http_client.hpp"
#include "support/refusing_port.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"
#include "support/time_scale.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using json = nlohmann::json;
using namespace std::chrono_literals;

namespace {

const std::string k_key = "dash-secret-key-0123";

// The registry is the process's, shared with every other test: route names of this file only.
// dash_busy: 2 requests allowed, the next 3 allowed but over the shadow limit, then denied.
const std::string k_config = R"(
plans:
  basic: {}
api_keys:
  - { key: dash-secret-key-0123, plan: basic, name: dash-acme }
upstreams:
  dash_api: { targets: [${UPSTREAM}] }
routes:
  - name: dash_busy
    match: { path_prefix: /busy }
    upstream: dash_api
    limits:
      - name: hard
        algorithm: fixed_window
        limit: 5
        window: 1m
      - name: soft
        algorithm: fixed_window
        limit: 2
        window: 1m
        shadow: true
  - name: dash_quiet
    match: { path_prefix: /quiet }
    upstream: dash_api
    limits:
      - name: roomy
        algorithm: fixed_window
        limit: 100
        window: 1m
    adaptive: { latency_target: 1s, error_rate_target: 0.5, min_factor: 0.2, window: 1s }
)";

constexpr int k_sent = 8;
constexpr std::uint64_t k_allowed = 2;
constexpr std::uint64_t k_shadow_denied = 3;
constexpr std::uint64_t k_denied = 3;

// A gateway with its upstream and an admin server on the process's registry.
struct dashboard_fixture {
  // `upstream_port`: where the gateway sends requests, when not to `upstream`.
  explicit dashboard_fixture(std::string token = "",
                             std::optional<std::uint16_t> upstream_port = std::nullopt)
      : gw(k_config, upstream_port.value_or(upstream.port())),
        backend(gw),
        admin(loopback(std::move(token)), backend, process_metrics()) {
    admin.start();
  }

  // Sends the traffic of k_config's comment to dash_busy, by API key.
  void send_traffic() {
    http_client client(gw.port());
    for (int i = 0; i < k_sent; ++i) {
      const unsigned status = client.get("/busy/item", {{"X-API-Key", k_key}}).status;
      CHECK(status == (i < 5 ? 200U : 429U));
    }
  }

  json data(const header_pairs& headers = {}) {
    http_reply r = http_client(admin.port()).get("/admin/dashboard", headers);
    INFO(r.status << " " << r.body);
    REQUIRE(r.status == 200);
    CHECK(r.header("content-type") == "application/json");
    return json::parse(r.body);
  }

  // A request is counted when it is over, a moment after its answer went out.
  json data_after_traffic(const header_pairs& headers = {}) {
    json j;
    REQUIRE(eventually(
        [&] {
          j = data(headers);
          const json& t = route(j, "dash_busy")["totals"];
          return t["allowed"] == k_allowed && t["shadow_denied"] == k_shadow_denied &&
                 t["denied"] == k_denied &&
                 upstream_of(j, "dash_api")["responses_last_minute"] == k_allowed + k_shadow_denied;
        },
        scaled(5s)));
    return j;
  }

  static const json& route(const json& data, const std::string& name) {
    return named(data["routes"], "route", name);
  }
  static const json& upstream_of(const json& data, const std::string& name) {
    return named(data["upstreams"], "name", name);
  }
  // The element of `list` whose `field` is `name`.
  static const json& named(const json& list, const char* field, const std::string& name) {
    for (const json& item : list) {
      if (item[field] == name) {
        return item;
      }
    }
    FAIL("no " << name << " in " << list.dump());
    throw std::logic_error("unreachable");
  }

  test_upstream upstream;
  gateway_harness gw;
  harness_backend backend;
  admin_server admin;
};

std::uint64_t sum(const json& counts) {
  std::uint64_t total = 0;
  for (const json& c : counts) {
    total += c.get<std::uint64_t>();
  }
  return total;
}

}  // namespace

TEST_CASE("dashboard: the page is one self-contained HTML document with strict headers") {
  dashboard_fixture f;
  http_reply r = http_client(f.admin.port()).get("/dashboard");
  REQUIRE(r.status == 200);
  CHECK(r.header("content-type") == "text/html; charset=utf-8");
  CHECK(r.header("cache-control") == "no-store");
  CHECK(r.header("x-content-type-options") == "nosniff");
  CHECK(r.header("x-frame-options") == "DENY");
  const std::string csp = r.header("content-security-policy");
  CHECK(csp.find("default-src 'none'") != std::string::npos);
  CHECK(csp.find("connect-src 'self'") != std::string::npos);
  CHECK(csp.find("frame-ancestors 'none'") != std::string::npos);
  CHECK(r.body.starts_with("<!DOCTYPE html>"));
  CHECK(r.body.find("/admin/dashboard") != std::string::npos);
  // Nothing is fetched from elsewhere: the only URL is the SVG namespace, which names and
  // loads nothing.
  for (std::string_view outside : {"<link", "src=", "href=", "@import", "url(", "//cdn"}) {
    CHECK_MESSAGE(r.body.find(outside) == std::string::npos, outside);
  }
  std::string rest = r.body;
  for (auto at = rest.find("http"); at != std::string::npos; at = rest.find("http", at + 1)) {
    CHECK(rest.compare(at, 26, "http://www.w3.org/2000/svg") == 0);
  }

  http_reply head = http_client(f.admin.port()).request("HEAD", "/dashboard");
  CHECK(head.status == 200);
  CHECK(head.body.empty());
  CHECK(http_client(f.admin.port()).request("POST", "/dashboard").status == 403);  // no token
}

TEST_CASE("dashboard: the page and its data are refused as every other admin read is") {
  const std::string token = "dash-admin-token";
  dashboard_fixture f(token);
  const header_pairs bearer{{"Authorization", "Bearer " + token}};
  for (const std::string path : {"/dashboard", "/admin/dashboard"}) {
    CAPTURE(path);
    auto with = [&](header_pairs extra) {
      extra.insert(extra.end(), bearer.begin(), bearer.end());
      return http_client(f.admin.port()).get(path, extra);
    };
    CHECK(with({}).status == 200);
    http_reply no_token = http_client(f.admin.port()).get(path);
    CHECK(no_token.status == 401);
    CHECK(no_token.has("www-authenticate"));
    CHECK(http_client(f.admin.port()).get(path, {{"Authorization", "Bearer wrong-token"}}).status ==
          401);
    http_client rebound(f.admin.port());  // DNS rebinding: the page's own name in Host
    rebound.send_raw("GET " + path + " HTTP/1.1\r\nHost: evil.example\r\n" +
                     "Authorization: Bearer " + token + "\r\n\r\n");
    CHECK(rebound.read_reply().status == 403);
    CHECK(with({{"Origin", "https://evil.example"}}).status == 403);  // another site's page
    CHECK(with({{"Sec-Fetch-Site", "cross-site"}}).status == 403);
    CHECK(with({{"Sec-Fetch-Site", "same-origin"}}).status == 200);  // the page's own poll
    CHECK(http_client(f.admin.port()).request("DELETE", path, bearer).status == 405);
  }
}

TEST_CASE("dashboard: a browser may send the token as a Basic password, for the dashboard only") {
  const std::string token = "dash-admin-token";
  dashboard_fixture f(token);
  // base64("admin:dash-admin-token"), base64(":dash-admin-token"), base64("admin:wrong-token")
  const header_pairs basic{{"Authorization", "Basic YWRtaW46ZGFzaC1hZG1pbi10b2tlbg=="}};
  const header_pairs no_user{{"Authorization", "basic OmRhc2gtYWRtaW4tdG9rZW4="}};
  const header_pairs wrong{{"Authorization", "Basic YWRtaW46d3JvbmctdG9rZW4="}};
  for (const std::string path : {"/dashboard", "/admin/dashboard"}) {
    CAPTURE(path);
    CHECK(http_client(f.admin.port()).get(path, basic).status == 200);
    CHECK(http_client(f.admin.port()).get(path, no_user).status == 200);
    CHECK(http_client(f.admin.port()).get(path, wrong).status == 401);
    CHECK(http_client(f.admin.port())
              .get(path, {{"Authorization", "Basic YWRtaW46ZGFzaC1hZG1pbi10b2tlbg"}})
              .status == 401);  // not base64: the padding is missing
    // Without credentials the browser is asked for them.
    http_reply asked = http_client(f.admin.port()).get(path);
    CHECK(asked.status == 401);
    auto [first, last] = asked.headers.equal_range("www-authenticate");
    std::set<std::string> challenges;
    for (auto it = first; it != last; ++it) {
      challenges.insert(it->second);
    }
    CHECK(challenges == std::set<std::string>{R"(Bearer realm="ratewall-admin")",
                                              R"(Basic realm="ratewall-admin", charset="UTF-8")"});
  }
  // Everything else still needs the bearer token: a browser that remembers Basic credentials
  // sends them with any site's request, so they never authorize a change.
  CHECK(http_client(f.admin.port()).get("/metrics", basic).status == 401);
  CHECK(http_client(f.admin.port()).request("POST", "/admin/reset-all", basic).status == 401);
  CHECK(http_client(f.admin.port()).request("POST", "/admin/dashboard", basic).status == 401);
  http_reply metrics = http_client(f.admin.port()).get("/metrics");
  CHECK(metrics.header("www-authenticate") == R"(Bearer realm="ratewall-admin")");
  CHECK(metrics.headers.count("www-authenticate") == 1);
}

TEST_CASE("dashboard: the data reports each route's traffic, subjects, upstreams and store") {
  dashboard_fixture f;
  // Before any traffic: every route at zero, a history of whole buckets.
  json before = f.data();
  CHECK(before["bucket_seconds"] == 5);
  for (const std::string name : {"dash_busy", "dash_quiet"}) {
    const json& r = dashboard_fixture::route(before, name);
    CHECK(r["allowed"].size() == 60);
    CHECK(sum(r["allowed"]) + sum(r["denied"]) + sum(r["shadow_denied"]) == 0);
  }

  f.send_traffic();
  json j = f.data_after_traffic();

  const json& busy = dashboard_fixture::route(j, "dash_busy");
  CHECK(busy["upstream"] == "dash_api");
  // The buckets add up to the totals: the chart draws what the legend says.
  CHECK(sum(busy["allowed"]) == k_allowed);
  CHECK(sum(busy["shadow_denied"]) == k_shadow_denied);
  CHECK(sum(busy["denied"]) == k_denied);
  const json& quiet = dashboard_fixture::route(j, "dash_quiet");
  CHECK(quiet["totals"] == json{{"allowed", 0}, {"denied", 0}, {"shadow_denied", 0}});
  // routes[].adaptive: no traffic, so no window has ended and the limits are whole.
  CHECK_FALSE(busy.contains("adaptive"));
  CHECK(quiet["adaptive"] == json{{"factor", 1.0},
                                  {"min_factor", 0.2},
                                  {"window_seconds", 1.0},
                                  {"latency_target_ms", 1000.0},
                                  {"error_rate_target", 0.5},
                                  {"windows", 0},
                                  {"last_window", nullptr}});
  CHECK(j["config"]["routes"][1]["adaptive"] == json{{"latency_target", "1s"},
                                                     {"error_rate_target", 0.5},
                                                     {"min_factor", 0.2},
                                                     {"window", "1s"}});

  // The most limited subject, by the name of its key, and never the key itself.
  REQUIRE(j["top"].size() == 1);
  CHECK(j["top"][0]["name"] == "dash-acme");
  CHECK(j["top"][0]["denied"] == k_denied);
  CHECK(j["top_window_seconds"].is_number());
  CHECK(j.dump().find(k_key) == std::string::npos);

  const json& up = dashboard_fixture::upstream_of(j, "dash_api");
  CHECK(up["health"] == "up");
  CHECK(up["failures_last_minute"] == 0);
  CHECK(up["targets"] == json::array({"127.0.0.1:" + std::to_string(f.upstream.port())}));

  CHECK(j["store"]["kind"] == "memory");
  CHECK(j["store"]["ready"] == true);
  CHECK(j["store"]["rows"].get<std::uint64_t>() >= 1);
  CHECK(j["config"]["routes"].size() == 2);
  CHECK(j["config"]["routes"][0]["name"] == "dash_busy");
  CHECK(j["config"]["admin"]["token_set"] == false);
}

TEST_CASE("dashboard: an upstream that refuses connections shows down") {
  const refusing_port dead;  // the gateway's connections to it are refused: it answers 502
  dashboard_fixture f("", dead.port());
  f.data();  // the baseline, before any traffic
  http_client client(f.gw.port());
  CHECK(client.get("/quiet/x").status == 502);
  json j;
  CHECK(eventually(
      [&] {
        j = f.data();
        return dashboard_fixture::upstream_of(j, "dash_api")["failures_last_minute"] == 1;
      },
      scaled(5s)));
  CHECK(dashboard_fixture::upstream_of(j, "dash_api")["health"] == "down");
  CHECK(dashboard_fixture::upstream_of(j, "dash_api")["responses_last_minute"] == 0);
}

namespace {

// Debian's package (scripts/setup.sh installs it).
constexpr const char* k_chromium = "/usr/bin/chromium";

// Headless Chromium on `url`, given 8 s of virtual time to load the page and run its polls;
// what it printed (with --dump-dom: the DOM as the script left it).
std::string run_chromium(const std::string& url, const std::vector<std::string>& extra) {
  REQUIRE_MESSAGE(std::filesystem::exists(k_chromium),
                  "chromium is not installed: scripts/setup.sh installs it");
  temp_dir profile;
  std::vector<std::string> argv{k_chromium,
                                "--headless",
                                "--no-sandbox",
                                "--disable-gpu",
                                "--disable-quic",
                                "--no-first-run",
                                "--disable-background-networking",
                                "--disable-component-update",
                                "--disable-sync",
                                "--user-data-dir=" + profile.path,
                                "--virtual-time-budget=8000"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.push_back(url);
  child_process chromium(argv);
  const int exit_code = chromium.wait_exit(scaled(std::chrono::milliseconds(90s)));
  INFO(chromium.output());
  REQUIRE(exit_code == 0);
  return chromium.output();
}

// One series of the chart as the DOM shows it.
struct drawn_series {
  std::string route;
  std::string series;
  std::string total;
  std::vector<double> ys;  // of its points, top of the chart is 0

  bool flat() const {
    return std::adjacent_find(ys.begin(), ys.end(), std::not_equal_to<>()) == ys.end();
  }
};

std::vector<drawn_series> polylines(const std::string& dom) {
  static const std::regex tag(R"(<polyline\b[^>]*>)");
  static const std::regex attribute(R"(([a-z-]+)="([^"]*)\")");
  std::vector<drawn_series> out;
  for (std::sregex_iterator t(dom.begin(), dom.end(), tag), end; t != end; ++t) {
    const std::string text = t->str();
    std::map<std::string, std::string> attrs;
    for (std::sregex_iterator a(text.begin(), text.end(), attribute); a != end; ++a) {
      attrs[(*a)[1]] = (*a)[2];
    }
    drawn_series s{attrs["data-route"], attrs["data-series"], attrs["data-total"], {}};
    std::istringstream points(attrs["points"]);
    std::string point;
    while (points >> point) {
      s.ys.push_back(std::stod(point.substr(point.find(',') + 1)));
    }
    out.push_back(std::move(s));
  }
  return out;
}

const drawn_series& find_series(const std::vector<drawn_series>& all, const std::string& route,
                                const std::string& series) {
  for (const drawn_series& s : all) {
    if (s.route == route && s.series == series) {
      return s;
    }
  }
  FAIL("no " << series << " series drawn for " << route);
  throw std::logic_error("unreachable");
}

}  // namespace

TEST_CASE("dashboard: headless Chromium draws the traffic on the route's chart") {
  dashboard_fixture f;
  f.data();  // the baseline, before any traffic
  f.send_traffic();
  f.data_after_traffic();
  const std::string url = "http://127.0.0.1:" + std::to_string(f.admin.port()) + "/dashboard";

  const std::string dom = run_chromium(url, {"--dump-dom"});
  INFO(dom);
  CHECK(dom.find(R"(data-updated="true")") != std::string::npos);  // a poll succeeded
  const std::vector<drawn_series> drawn = polylines(dom);
  const std::map<std::string, std::uint64_t> busy_totals{
      {"allowed", k_allowed}, {"denied", k_denied}, {"shadow_denied", k_shadow_denied}};
  for (const auto& [series, total] : busy_totals) {
    CAPTURE(series);
    const drawn_series& busy = find_series(drawn, "dash_busy", series);
    CHECK(busy.total == std::to_string(total));
    CHECK(busy.ys.size() == 60);
    CHECK_FALSE(busy.flat());  // the traffic shows as a rise, not only in the legend
    const drawn_series& quiet = find_series(drawn, "dash_quiet", series);
    CHECK(quiet.total == "0");
    CHECK(quiet.ys.size() == 60);
    CHECK(quiet.flat());
  }
  // The adaptive route shows the factor its limits apply at; the other route none.
  CHECK(dom.find(R"(data-adaptive-factor="1.000")") != std::string::npos);
  CHECK(dom.find("limits × 1.00") != std::string::npos);
  CHECK(dom.find(R"(data-adaptive-factor=")") == dom.rfind(R"(data-adaptive-factor=")"));

  // A picture for whoever reads the test run: build/dashboard.png.
  const auto screenshot = std::filesystem::path(RATEWALL_BINARY).parent_path() / "dashboard.png";
  std::filesystem::remove(screenshot);
  run_chromium(
      url, {"--screenshot=" + screenshot.string(), "--window-size=1280,900", "--hide-scrollbars"});
  CHECK(std::filesystem::file_size(screenshot) > 10000);
}

TEST_CASE("dashboard: with a token set, Chromium opens the page with it as a Basic password") {
  const std::string token = "dash-admin-token";
  dashboard_fixture f(token);
  const header_pairs bearer{{"Authorization", "Bearer " + token}};
  f.data(bearer);  // the baseline, before any traffic
  f.send_traffic();
  f.data_after_traffic(bearer);
  const std::string address = "127.0.0.1:" + std::to_string(f.admin.port()) + "/dashboard";

  // What a person does: answer the browser's prompt (here, in the address) with the token.
  const std::string dom = run_chromium("http://admin:" + token + "@" + address, {"--dump-dom"});
  INFO(dom);
  CHECK(dom.find(R"(data-updated="true")") != std::string::npos);  // its polls got through
  CHECK_FALSE(find_series(polylines(dom), "dash_busy", "allowed").flat());

  const std::string refused = run_chromium("http://" + address, {"--dump-dom"});
  CHECK(refused.find("<polyline") == std::string::npos);
}
