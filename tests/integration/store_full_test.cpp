// A full memory store never fails open (issue 11, item 5): at store.max_keys the store evicts
// the row that loses least, never a limited one; when nothing can go, store.on_full answers.

#include <doctest/doctest.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ratewall/admin/metrics.hpp"

#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall::testing;

namespace {

// Every made-up API key is a client of its own (unknown_api_key: allow), and 64 rows hold
// them all: a flood of new keys fills the store. `${BURST}` tokens, one back a minute.
const std::string k_config = R"(
server:
  threads: 2
identity:
  unknown_api_key: allow
store:
  max_keys: 64
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: api
    match: { path_prefix: / }
    upstream: api
    identify_by: [api_key, ip]
    limits:
      - name: small
        rate: 1/m
        burst: ${BURST}
)";

std::string config_with(int burst, const std::string& extra_store = "") {
  std::string yaml = replace_all(k_config, "${BURST}", std::to_string(burst));
  return replace_all(yaml, "  max_keys: 64\n", "  max_keys: 64\n" + extra_store);
}

http_reply as(http_client& client, const std::string& key) {
  return client.get("/", {{"X-API-Key", key}});
}

// The value of an unlabelled sample in the exposition, or -1.
double metric(const std::string& name) {
  std::istringstream lines(ratewall::process_metrics().render());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + " ", 0) == 0) {
      return std::stod(line.substr(name.size() + 1));
    }
  }
  return -1;
}

}  // namespace

TEST_CASE("a made-up-key flood past store.max_keys: the limited stay limited, newcomers too") {
  test_upstream upstream;
  gateway_harness gw(config_with(3), upstream.port());
  http_client client(gw.port());

  for (int i = 0; i < 3; ++i) {
    REQUIRE(as(client, "limited-client").status == 200);
  }
  REQUIRE(as(client, "limited-client").status == 429);

  // 200 new keys, four times the store: each is recorded (an idle row makes room for it), and
  // the limited client stays limited throughout.
  for (int i = 0; i < 200; ++i) {
    const http_reply r = as(client, "made-up-" + std::to_string(i));
    CAPTURE(i);
    CHECK(r.status == 200);
    CHECK(r.header("x-ratelimit-remaining") == "2");
    if (i % 20 == 19) {
      CHECK(as(client, "limited-client").status == 429);
    }
  }
  CHECK(as(client, "limited-client").status == 429);

  // A new client after the flood is limited like any other.
  std::string seen;
  for (int i = 0; i < 5; ++i) {
    seen += (seen.empty() ? "" : " ") + std::to_string(as(client, "newcomer").status);
  }
  CHECK(seen == "200 200 200 429 429");
  // So is the last made-up key: it was recorded, not waved through as new each time.
  CHECK(as(client, "made-up-199").status == 200);
  CHECK(as(client, "made-up-199").status == 200);
  CHECK(as(client, "made-up-199").status == 429);

  CHECK(metric("ratewall_store_evictions_total") >= 200 + 1 - 63);
  CHECK(metric("ratewall_store_full_total") == 0);
  CHECK(metric("ratewall_tracked_subjects") == 64);
}

TEST_CASE(
    "every row limited: store.on_full deny answers 503 with Retry-After, allow lets through") {
  test_upstream upstream;
  // One token each: a client's first request leaves it limited, so 64 clients fill the store
  // with rows that may not go.
  auto fill = [](http_client& client) {
    for (int i = 0; i < 64; ++i) {
      REQUIRE(as(client, "client-" + std::to_string(i)).status == 200);
    }
  };

  SUBCASE("deny (the default)") {
    gateway_harness gw(config_with(1), upstream.port());
    http_client client(gw.port());
    fill(client);
    const double full_before = metric("ratewall_store_full_total");
    const http_reply r = as(client, "newcomer");
    CHECK(r.status == 503);
    CHECK(r.header("retry-after") == "1");
    CHECK_FALSE(r.has("x-ratelimit-remaining"));  // no quota was consulted
    CHECK(r.header("content-type") == "application/problem+json");
    const auto body = nlohmann::json::parse(r.body);
    CHECK(body["status"] == 503);
    CHECK(body["title"] == "Service Unavailable");
    CHECK(body["detail"].get<std::string>().find("at capacity") != std::string::npos);
    CHECK(r.keep_alive);
    CHECK(metric("ratewall_store_full_total") == full_before + 1);
    // The limited clients are still limited; the upstream saw none of the refused requests.
    CHECK(as(client, "client-0").status == 429);
    CHECK(as(client, "newcomer").status == 503);
    CHECK(upstream.count("GET", "/") == 64);
  }
  SUBCASE("allow") {
    gateway_harness gw(config_with(1, "  on_full: allow\n"), upstream.port());
    http_client client(gw.port());
    fill(client);
    // Not recorded: decided as new every time (the documented price of allow).
    for (int i = 0; i < 3; ++i) {
      CHECK(as(client, "newcomer").status == 200);
    }
    CHECK(as(client, "client-0").status == 429);
  }
}
