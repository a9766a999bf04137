// The config files shipped in config/ load and mean what their comments say.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>

#include "config_test_support.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
using ratewall::testing::repo_file;

namespace {

unsigned hardware_threads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

cidr range(std::string_view text) {
  return *parse_cidr(text);
}

}  // namespace

TEST_CASE("reference.yaml (DESIGN.md section 11) loads and means what its comments say") {
  const std::string path = repo_file("config/examples/reference.yaml");
  config c = load_config_file(path);
  CHECK(c.source == path);

  SUBCASE("server") {
    CHECK(c.server.listen.host == "0.0.0.0");
    CHECK(c.server.listen.port == 8080);
    CHECK(c.server.threads == hardware_threads());  // "0 = one per hardware thread"
    CHECK(c.server.max_header_bytes == 16384);
    CHECK(c.server.max_body_bytes == 10485760);
    CHECK(c.server.header_timeout == 10s);
    CHECK(c.server.idle_timeout == 60s);
    CHECK(c.server.tunnel_idle_timeout == 1h);
    CHECK(c.server.plain_listener);
    CHECK_FALSE(c.server.tls.has_value());  // commented out: its files would have to exist
  }
  SUBCASE("admin and identity") {
    CHECK(c.admin.listen.host == "127.0.0.1");
    CHECK(c.admin.listen.port == 9090);
    CHECK(c.admin.token_env == "RATEWALL_ADMIN_TOKEN");
    CHECK(c.identity.api_key_header == "X-API-Key");
    CHECK(c.identity.user_header == "X-User-ID");
    REQUIRE(c.identity.trusted_proxies.size() == 2);
    CHECK(c.identity.trusted_proxies[0].address == range("127.0.0.1/32").address);
    CHECK(c.identity.trusted_proxies[0].prefix == 128);
    CHECK(c.identity.trusted_proxies[1].address == range("10.0.0.0/8").address);
    CHECK(c.identity.trusted_proxies[1].prefix == 104);
    CHECK(c.identity.unknown_api_key == unknown_key_policy::ip);
  }
  SUBCASE("store") {
    CHECK(c.store.type == store_type::memory);
    CHECK(c.store.max_keys == 1000000);
    CHECK(c.store.redis.url == "redis://127.0.0.1:6379/0");
    CHECK_FALSE(c.store.redis.cluster);
    CHECK(c.store.redis.timeout == 5ms);
    CHECK(c.store.redis.on_error == store_failure::allow);
  }
  SUBCASE("upstreams, plans and api keys") {
    REQUIRE(c.upstreams.size() == 1);
    CHECK(c.upstreams[0].name == "api");
    REQUIRE(c.upstreams[0].targets.size() == 1);
    CHECK(c.upstreams[0].targets[0].host == "127.0.0.1");
    CHECK(c.upstreams[0].targets[0].port == 8000);
    CHECK(c.upstreams[0].connect_timeout == 1s);
    CHECK(c.upstreams[0].response_timeout == 30s);
    CHECK(c.find_upstream("api") == &c.upstreams[0]);
    CHECK(c.plans == std::vector<std::string>{"free", "premium"});
    REQUIRE(c.api_keys.size() == 2);
    // The raw key is hashed at load; only its digest is kept.
    CHECK(c.api_keys[0].sha256 == sha256("demo-free-key"));
    CHECK(c.api_keys[0].plan == "free");
    CHECK(c.api_keys[1].sha256 == sha256("foo"));
    CHECK(c.api_keys[1].plan == "premium");
  }
  SUBCASE("routes and limits") {
    REQUIRE(c.routes.size() == 2);
    const route_config& search = c.routes[0];
    CHECK(search.name == "search");
    CHECK(search.match.path_prefix == "/api/search");
    CHECK(search.match.path_exact.empty());
    CHECK(search.match.path_regex.empty());
    CHECK(search.match.methods == std::vector<std::string>{"GET"});
    CHECK(search.upstream == "api");
    CHECK(search.identify_by == route_config{}.identify_by);
    CHECK(search.identify_by.size() == 3);
    CHECK(search.cost == 1);
    REQUIRE(search.limits.size() == 2);

    const limit_config& burst = search.limits[0];
    CHECK(burst.name == "burst");
    CHECK(burst.algo == algorithm::token_bucket);
    CHECK(burst.rate.count == 10);
    CHECK(burst.rate.period == 1s);
    CHECK(burst.burst == 20);
    REQUIRE(burst.plans.count("premium") == 1);
    const limit_override& premium = burst.plans.at("premium");
    REQUIRE(premium.rate.has_value());
    CHECK(premium.rate->count == 100);
    CHECK(premium.rate->period == 1s);
    CHECK(premium.burst == std::optional<std::uint64_t>(200));
    CHECK_FALSE(premium.limit.has_value());
    CHECK_FALSE(burst.on_store_error.has_value());

    const limit_config& daily = search.limits[1];
    CHECK(daily.name == "daily");
    CHECK(daily.algo == algorithm::fixed_window);
    CHECK(daily.limit == 10000);
    CHECK(daily.window == 24h);

    const route_config& fallback = c.routes[1];
    CHECK(fallback.name == "default");
    CHECK(fallback.match.path_prefix == "/");
    CHECK(fallback.match.methods.empty());
    REQUIRE(fallback.limits.size() == 1);
    CHECK(fallback.limits[0].rate.count == 5);
    CHECK(fallback.limits[0].burst == 10);
  }
}

TEST_CASE("config/ratewall.yaml is the runnable demo: 5/s burst 10, demo-key is premium") {
  config c = load_config_file(repo_file("config/ratewall.yaml"));
  CHECK(c.server.listen.host == "127.0.0.1");
  CHECK(c.server.listen.port == 8080);
  CHECK(c.server.max_body_bytes == 10 * 1024 * 1024);
  CHECK(c.admin.listen.port == 9090);
  CHECK(c.identity.unknown_api_key == unknown_key_policy::ip);  // made-up keys buy no quota
  REQUIRE(c.upstreams.size() == 1);
  CHECK(c.upstreams[0].name == "api");
  CHECK(c.upstreams[0].targets[0].port == 8000);
  REQUIRE(c.api_keys.size() == 1);
  CHECK(c.api_keys[0].sha256 == sha256("demo-key"));
  CHECK(c.api_keys[0].plan == "premium");
  REQUIRE(c.routes.size() == 1);
  const route_config& demo = c.routes[0];
  CHECK(demo.name == "demo");
  CHECK(demo.match.path_prefix == "/");
  CHECK(demo.upstream == "api");
  REQUIRE(demo.limits.size() == 1);
  const limit_config& limit = demo.limits[0];
  CHECK(limit.algo == algorithm::token_bucket);
  CHECK(limit.rate.count == 5);
  CHECK(limit.rate.period == 1s);
  CHECK(limit.burst == 10);
  const limit_override& premium = limit.plans.at("premium");
  CHECK(premium.rate->count > limit.rate.count);
  CHECK(*premium.burst > limit.burst);
}

TEST_CASE("every file in config/examples loads") {
  std::size_t loaded = 0;
  for (const auto& entry : std::filesystem::directory_iterator(repo_file("config/examples"))) {
    if (entry.path().extension() != ".yaml") {
      continue;
    }
    CAPTURE(entry.path().string());
    CHECK_NOTHROW(load_config_file(entry.path().string()));
    ++loaded;
  }
  CHECK(loaded >= 2);
}

TEST_CASE("a file that cannot be read is a config_error naming the file") {
  SUBCASE("missing") {
    const std::string path = repo_file("config/does-not-exist.yaml");
    CHECK_THROWS_WITH_AS(load_config_file(path),
                         (path + ": cannot read file: No such file or directory").c_str(),
                         config_error);
  }
  SUBCASE("a directory") {
    const std::string path = repo_file("config");
    CHECK_THROWS_WITH_AS(load_config_file(path),
                         (path + ": cannot read file: Is a directory").c_str(), config_error);
  }
}

TEST_CASE("errors from a file carry its path as given") {
  const std::string path = repo_file("tests/unit/config/config_test_support.hpp");
  try {
    load_config_file(path);
    FAIL("a C++ header is not a config");
  } catch (const config_error& e) {
    CHECK(e.file() == path);
    CHECK(std::string(e.what()).rfind(path + ":", 0) == 0);
  }
}
