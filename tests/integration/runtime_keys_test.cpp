// API keys managed at run time (issue 13, item 3) on the real binary: a key put through the
// admin API names its client at once, with its plan and name; it survives a restart (a file
// beside the configuration with the memory store) and a reload; with the Redis store a change
// on one gateway reaches another within a second, and a gateway that missed changes loads
// them all again.

#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "ratewall/core/hash.hpp"
#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using namespace std::chrono_literals;
using nlohmann::json;

namespace {

const header_pairs k_auth{{"Authorization", "Bearer keys-token"}};

// Default plan: 1000 requests an hour; premium: 5000. X-RateLimit-Limit tells which counted.
std::string keys_config(std::uint16_t upstream_port, const std::string& store,
                        const std::string& log_path) {
  return R"(server:
  listen: 127.0.0.1:0
  threads: 2
admin:
  listen: 127.0.0.1:0
)" + store +
         R"(
log:
  access: )" +
         log_path +
         R"(
plans: { premium: {} }
api_keys:
  - { key: seeded-key, plan: premium, name: seeded }
upstreams:
  api: { targets: [127.0.0.1:)" +
         std::to_string(upstream_port) + R"(] }
routes:
  - name: main
    match: { path_prefix: / }
    upstream: api
    limits:
      - name: hourly
        rate: 1/h
        burst: 1000
        plans: { premium: { rate: 1/h, burst: 5000 } }
)";
}

struct gateway_process {
  gateway_process(const std::string& config_path, const std::string& hash_key = "keys-test")
      : process({RATEWALL_BINARY, "--config", config_path},
                {"RATEWALL_HASH_KEY=" + hash_key, "RATEWALL_ADMIN_TOKEN=keys-token"}) {
    REQUIRE_MESSAGE(process.wait_for_output("listening on", 10s), process.output());
    port = listening_port(process.output());
    admin = admin_port_of(process.output());
    REQUIRE(port != 0);
    REQUIRE(admin != 0);
  }
  ~gateway_process() {
    process.signal(SIGTERM);
    process.wait_exit(5s);
  }

  // X-RateLimit-Limit of a request sent with `key`: which plan counted it.
  std::string limit_for(const std::string& key) const {
    http_client c(port);
    http_reply r = c.get("/", {{"X-API-Key", key}});
    REQUIRE(r.status == 200);
    return r.header("x-ratelimit-limit");
  }
  http_reply put_key(const std::string& key, const std::string& body) const {
    http_client c(admin);
    header_pairs headers = k_auth;
    headers.emplace_back("Content-Type", "application/json");
    return c.request("PUT", "/admin/keys/" + to_hex(sha256(key)), headers, body);
  }
  http_reply delete_key(const std::string& key) const {
    http_client c(admin);
    return c.request("DELETE", "/admin/keys/" + to_hex(sha256(key)), k_auth);
  }

  child_process process;
  std::uint16_t port = 0;
  std::uint16_t admin = 0;
};

std::vector<json> log_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    out.push_back(json::parse(line));
  }
  return out;
}

}  // namespace

TEST_CASE("runtime keys: a key put at run time counts at once and survives restart and reload") {
  test_upstream upstream;
  temp_dir dir;
  const std::string config_path = dir.write(
      "gw.yaml", keys_config(upstream.port(), "store: { type: memory }", dir.path + "/access.log"));
  {
    gateway_process gw(config_path);
    CHECK(gw.limit_for("fresh-key") == "1000");  // unknown: its address on the default plan
    http_reply put = gw.put_key("fresh-key", R"({"plan": "premium", "name": "acme"})");
    REQUIRE_MESSAGE(put.status == 201, put.body);
    CHECK(gw.limit_for("fresh-key") == "5000");
    // The access log names the key's client by its name.
    REQUIRE(eventually([&] { return log_lines(dir.path + "/access.log").size() >= 2; }, 2s));
    // Two worker threads write their own lines: the order in the file is not the requests'.
    int named = 0;
    int unnamed = 0;
    for (const json& line : log_lines(dir.path + "/access.log")) {
      if (line["key"] == "acme") {
        CHECK(line["plan"] == "premium");
        ++named;
      } else {
        CHECK(line["key"].is_null());
        ++unnamed;
      }
    }
    CHECK(named == 1);
    CHECK(unnamed == 1);
    // A configuration key deleted at run time.
    CHECK(gw.delete_key("seeded-key").status == 200);
    CHECK(gw.limit_for("seeded-key") == "1000");
  }
  // The file beside the configuration holds the changes, by SHA-256 only.
  std::ifstream journal(dir.path + "/gw.keys.jsonl");
  const std::string text(std::istreambuf_iterator<char>(journal), {});
  CHECK(text.find(to_hex(sha256("fresh-key"))) != std::string::npos);
  CHECK(text.find("fresh-key") == std::string::npos);

  gateway_process again(config_path);
  CHECK(again.limit_for("fresh-key") == "5000");
  CHECK(again.limit_for("seeded-key") == "1000");
  // A reload brings the configuration's keys again; the run-time changes stay over them.
  again.process.signal(SIGHUP);
  REQUIRE(again.process.wait_for_output("reloaded", 5s));
  CHECK(again.limit_for("fresh-key") == "5000");
  CHECK(again.limit_for("seeded-key") == "1000");
}

TEST_CASE("runtime keys: with the Redis store a change reaches another gateway within a second") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server redis;
  test_upstream upstream;
  temp_dir dir;
  const std::string store =
      "store: { type: redis, redis: { url: redis://" + redis.address() + " } }";
  const std::string a_path =
      dir.write("a.yaml", keys_config(upstream.port(), store, dir.path + "/a.log"));
  const std::string b_path =
      dir.write("b.yaml", keys_config(upstream.port(), store, dir.path + "/b.log"));
  gateway_process a(a_path);
  gateway_process b(b_path);
  CHECK(b.limit_for("shared-key") == "1000");

  REQUIRE(a.put_key("shared-key", R"({"plan": "premium", "name": "acme"})").status == 201);
  const auto put_at = std::chrono::steady_clock::now();
  // B sees it within a second (it reads the change stream every 500 ms).
  CHECK(eventually([&] { return b.limit_for("shared-key") == "5000"; }, 1s));
  const auto seen_after = std::chrono::steady_clock::now() - put_at;
  MESSAGE("gateway B saw the change after "
          << std::chrono::duration_cast<std::chrono::milliseconds>(seen_after).count() << " ms");

  // Redis holds SHA-256s only, no raw key.
  const redis::reply table = redis.call({"HGETALL", "rw:keys:{v1}:table"});
  REQUIRE(table.elements.size() == 2);
  CHECK(table.elements[0].str == to_hex(sha256("shared-key")));

  REQUIRE(b.delete_key("shared-key").status == 200);
  CHECK(eventually([&] { return a.limit_for("shared-key") == "1000"; }, 1s));

  SUBCASE("a new gateway loads every change from Redis at start") {
    REQUIRE(a.put_key("later-key", R"({"plan": "premium"})").status == 201);
    gateway_process c(
        dir.write("c.yaml", keys_config(upstream.port(), store, dir.path + "/c.log")));
    CHECK(c.limit_for("later-key") == "5000");
    CHECK(c.limit_for("shared-key") == "1000");
  }
  SUBCASE("a gateway that missed changes (the stream trimmed) loads the whole table again") {
    // A change in the table that the stream never announced, and an announcement whose number
    // skips ahead: B must notice the gap and read the table, where it finds both keys.
    const std::string hidden = to_hex(sha256("hidden-key"));
    redis.call({"HSET", "rw:keys:{v1}:table", hidden,
                R"({"sha256":")" + hidden + R"(","plan":"premium"})"});
    const std::string skipped = to_hex(sha256("skipped-key"));
    const std::string value = R"({"sha256":")" + skipped + R"(","plan":"premium"})";
    redis.call({"HSET", "rw:keys:{v1}:table", skipped, value});
    redis.call({"XADD", "rw:keys:{v1}:changes", "*", "s", "1000", "k", skipped, "v", value});
    CHECK(eventually([&] { return b.limit_for("hidden-key") == "5000"; }, 2s));
    CHECK(b.limit_for("skipped-key") == "5000");
    CHECK(b.process.output().find("changes were missed") != std::string::npos);
  }
  SUBCASE("a Redis that lost its data is noticed and reported, not taken as no news") {
    redis.call({"FLUSHALL"});
    CHECK(eventually(
        [&] { return b.process.output().find("Redis lost them") != std::string::npos; }, 2s));
  }
}

TEST_CASE("runtime keys: with Redis unreachable at start, /readyz waits for the keys") {
  if (!have_program("redis-server")) {
    return;
  }
  test_upstream upstream;
  temp_dir dir;
  std::string address;
  {
    redis_server gone;  // a port that was Redis's a moment ago: connections are refused
    address = gone.address();
  }
  const std::string store = "store: { type: redis, redis: { url: redis://" + address + " } }";
  gateway_process gw(dir.write("a.yaml", keys_config(upstream.port(), store, dir.path + "/a.log")));
  http_client admin(gw.admin);
  http_reply ready = admin.get("/readyz");
  CHECK(ready.status == 503);
  CHECK(ready.body.find("not loaded from Redis yet") != std::string::npos);
  // A change cannot be kept either, and says so.
  http_reply put = gw.put_key("some-key", R"({"plan": "premium"})");
  CHECK(put.status == 503);
}

TEST_CASE("runtime keys: keys_file is refused with the Redis store, naming the key") {
  temp_dir dir;
  const std::string path =
      dir.write("bad.yaml", keys_config(1, "store: { type: redis, keys_file: k.jsonl }", "off"));
  child_process check({RATEWALL_BINARY, "check", path});
  CHECK(check.wait_exit(10s) != 0);
  CHECK(check.output().find("store.keys_file") != std::string::npos);
}
