#include <doctest/doctest.h>

#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/redis/url.hpp"

using namespace ratewall;
using namespace ratewall::redis;
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST_CASE("Redis URLs: host, port, database, user and password") {
  std::string error;
  auto u = parse_redis_url("redis://10.0.3.5:6380/2", &error);
  REQUIRE(u);
  CHECK(u->host == "10.0.3.5");
  CHECK(u->port == 6380);
  CHECK(u->db == 2);
  CHECK(u->password.empty());

  u = parse_redis_url("redis://redis.internal", &error);
  REQUIRE(u);
  CHECK(u->port == 6379);
  CHECK(u->db == 0);

  u = parse_redis_url("redis://:s3cr%40t@[::1]:7000/", &error);
  REQUIRE(u);
  CHECK(u->host == "::1");
  CHECK(u->port == 7000);
  CHECK(u->username.empty());
  CHECK(u->password == "s3cr@t");

  u = parse_redis_url("redis://ratewall:pw@h:1/0", &error);
  REQUIRE(u);
  CHECK(u->username == "ratewall");
  CHECK(u->password == "pw");

  for (const char* bad :
       {"http://h:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:1/x",
        "redis://h:1?db=2", "redis://[::1:7000", "redis://h:", "redis://:p%4@h"}) {
    CHECK_MESSAGE(!parse_redis_url(bad, &error), bad);
  }
}

namespace {

const std::string k_routes = R"(
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: 10/s
        on_store_error: local
)";

config load(const std::string& store) {
  return parse_config("store:\n" + store + k_routes, "test.yaml");
}

std::string error_of(const std::string& store) {
  try {
    load(store);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("store.redis keys: cluster seeds, password_env, timeouts, breaker, units, cache") {
  const config c = load(R"(  type: redis
  redis:
    url: redis://10.0.0.1:7000
    cluster: true
    seeds: [10.0.0.2:7000, "[::1]:7001"]
    password_env: RATEWALL_REDIS_PASSWORD
    timeout: 20ms
    connect_timeout: 500ms
    on_error: deny
    instances: 3
    breaker: { failures: 7, cooldown: 2s }
    slot_ttl: 90s
    denied_cache: false
)");
  const redis_config& r = c.store.redis;
  CHECK(c.store.type == store_type::redis);
  CHECK(r.cluster);
  REQUIRE(r.seeds.size() == 2);
  CHECK(r.seeds[1].host == "::1");
  CHECK(r.seeds[1].port == 7001);
  CHECK(r.password_env == "RATEWALL_REDIS_PASSWORD");
  CHECK(r.timeout == milliseconds(20));
  CHECK(r.connect_timeout == milliseconds(500));
  CHECK(r.on_error == store_failure::deny);
  CHECK(r.instances == 3);
  CHECK(r.breaker_failures == 7);
  CHECK(r.breaker_cooldown == seconds(2));
  CHECK(r.slot_ttl == seconds(90));
  CHECK_FALSE(r.denied_cache);
  CHECK(c.routes[0].limits[0].on_store_error == store_failure::local);
}

TEST_CASE("store.redis defaults") {
  const redis_config r = load("  type: redis\n").store.redis;
  CHECK(r.url == "redis://127.0.0.1:6379/0");
  CHECK_FALSE(r.cluster);
  CHECK(r.timeout == milliseconds(5));
  CHECK(r.connect_timeout == seconds(1));
  CHECK(r.on_error == store_failure::allow);
  CHECK(r.breaker_failures == 5);
  CHECK(r.breaker_cooldown == seconds(1));
  CHECK(r.slot_ttl == seconds(30));
  CHECK(r.denied_cache);
}

TEST_CASE("store.redis errors name the key") {
  CHECK(error_of("  redis:\n    url: redis://h:0\n").find("store.redis.url: the port") !=
        std::string::npos);
  CHECK(error_of("  redis:\n    url: redis://h/3\n    cluster: true\n")
            .find("store.redis.cluster: Redis Cluster has only database 0") != std::string::npos);
  CHECK(error_of("  redis:\n    seeds: [h:1]\n").find("store.redis.seeds: seeds are for") !=
        std::string::npos);
  CHECK(error_of("  redis:\n    password_env: 1BAD\n").find("store.redis.password_env") !=
        std::string::npos);
  CHECK(error_of("  redis:\n    breaker: { failures: 0 }\n").find("store.redis.breaker.failures") !=
        std::string::npos);
  CHECK(error_of("  redis:\n    slot_ttl: 1s\n").find("store.redis.slot_ttl: must be at least") !=
        std::string::npos);
  CHECK(error_of("  redis:\n    tiemout: 5ms\n").find("store.redis.tiemout: unknown key") !=
        std::string::npos);
}
