// ratewall_requests_total through the real server: requests sent to a running gateway, the
// counters scraped from GET /metrics of an admin server on the process's registry. Route, plan
// and limit labels come from the configuration; no client ever becomes a label.

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "ratewall/admin/admin_server.hpp"
#include "ratewall/admin/metrics.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/harness_backend.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"
#include "unit/admin/exposition_parser.hpp"

using namespace ratewall;
using namespace ratewall::testing;

namespace {

// The registry is the process's, shared with every other test: route names of this file only.
const std::string k_config = R"(
identity:
  unknown_api_key: reject
plans:
  gold: {}
api_keys:
  - { key: gold-key, plan: gold }
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: metered
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: burst
        rate: 1/m
        burst: 2
        plans: { gold: { rate: 1/m, burst: 10 } }
      - name: daily
        algorithm: fixed_window
        limit: 3
        window: 1d
)";

std::string series(const std::string& plan, const std::string& decision,
                   const std::string& limit = "") {
  return R"(ratewall_requests_total{route="metered",plan=")" + plan + "\"" +
         (limit.empty() ? "" : ",limit=\"" + limit + "\"") + ",decision=\"" + decision + "\"}";
}

}  // namespace

TEST_CASE("metrics: requests are counted by route, plan and the limit that denied them") {
  test_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  harness_backend backend(gw);
  admin_options options;
  options.listen = endpoint{"127.0.0.1", 0};
  admin_server admin(options, backend, process_metrics());
  admin.start();

  http_client client(gw.port());
  for (int i = 0; i < 3; ++i) {
    client.get("/");  // by address, default plan: 2 allowed, then the burst denies
  }
  for (int i = 0; i < 4; ++i) {
    client.get("/", {{"X-API-Key", "gold-key"}});  // gold: 3 allowed, then the daily limit
  }
  CHECK(client.get("/", {{"X-API-Key", "made-up-key"}}).status == 401);

  exposition ex;
  std::string text;
  // A request is counted when it is over, a moment after its answer went out.
  CHECK(eventually([&] {
    text = http_client(admin.port()).get("/metrics").body;
    ex = parse_exposition(text);
    return ex.ok && ex.value(series("default", "rejected")) == 1;
  }));
  REQUIRE_MESSAGE(ex.ok, ex.error);
  CHECK(ex.value(series("default", "allowed")) == 2);
  CHECK(ex.value(series("default", "denied", "burst")) == 1);
  CHECK(ex.value(series("default", "denied", "daily")) == 0);
  CHECK(ex.value(series("gold", "allowed")) == 3);
  CHECK(ex.value(series("gold", "denied", "daily")) == 1);
  CHECK(ex.value(series("gold", "denied", "burst")) == 0);
  CHECK(ex.value(series("gold", "shadow_denied", "burst")) == 0);
  CHECK(ex.value(series("default", "error")) == 0);
  // Keys, addresses and subjects never become labels.
  CHECK(text.find("gold-key") == std::string::npos);
  CHECK(text.find("made-up-key") == std::string::npos);
  CHECK(text.find("127.0.0.1") == std::string::npos);
  CHECK(text.find("key:") == std::string::npos);
  admin.stop();
}
