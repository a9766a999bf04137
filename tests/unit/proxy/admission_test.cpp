// Admission without a socket (DESIGN §1): a request head and a peer in, a local answer or a
// forward out. Every test drives the real router, identity resolver and limiter of a gateway
// built from YAML, on a manual clock.

#include "ratewall/proxy/admission.hpp"

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <memory>
#include <optional>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/proxy/gateway.hpp"

using namespace ratewall;
using namespace std::chrono_literals;
namespace asio = boost::asio;

namespace {

const char* const k_config = R"(
identity:
  unknown_api_key: reject
  reject_limit: { rate: 1/m, burst: 2 }
plans: { free: {}, premium: {} }
api_keys:
  - { key: free-key, plan: free }
  - { key: premium-key, plan: premium }
store: { max_keys: 256, on_full: deny }
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: search
    match: { path_prefix: /search, methods: [GET] }
    upstream: api
    limits:
      - { name: per-second, rate: 2/s, burst: 2, plans: { premium: { rate: 10/s, burst: 10 } } }
  - name: shadowed
    match: { path_prefix: /shadow }
    upstream: api
    shadow: true
    limits: [{ name: one, rate: 1/h, burst: 1 }]
  - name: custom
    match: { path_prefix: /custom }
    upstream: api
    deny: { status: 503, body: "come back later" }
    limits: [{ name: one, rate: 1/h, burst: 1 }]
)";

struct fixture {
  fixture() : gw(std::make_shared<const gateway>(parse_config(k_config, "test.yaml"), clk, "k")) {}

  /// An admission and the fields it put on the response.
  struct answer : admission {
    header_list fields;
  };

  /// Admission of one request, run to completion (the memory store never suspends).
  answer ask(std::string method, std::string path, std::string api_key = "",
             std::string peer = "192.0.2.1") {
    std::optional<answer> out;
    asio::io_context ioc;
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          admission_request req{method, "a.example", path,
                                identity_input{peer, api_key, "", "", ""}};
          // The fields go after those already on the response, which stay.
          header_list fields{{"X-Request-Id", "r1"}};
          admission a = try_admit(*gw, req, fields);
          CHECK_FALSE(a.pending);  // the memory store answers at once: no coroutine needed
          if (a.pending) {
            a = co_await admit(gw, std::move(a), fields);
          }
          CHECK(fields.front() == header_list::value_type{"X-Request-Id", "r1"});
          fields.erase(fields.begin());
          out.emplace(answer{std::move(a), std::move(fields)});
        },
        asio::detached);
    ioc.run();
    REQUIRE(out);
    return std::move(*out);
  }

  static std::string header(const answer& a, std::string_view name) {
    for (const auto& [n, v] : a.fields) {
      if (n == name) {
        return v;
      }
    }
    return "";
  }

  manual_clock clk{std::chrono::hours(1)};
  std::shared_ptr<const gateway> gw;
};

}  // namespace

TEST_CASE("admission: no route is a 404 without touching a limit") {
  fixture f;
  const admission a = f.ask("GET", "/elsewhere");
  CHECK_FALSE(a.forward);
  CHECK(a.status == 404);
  CHECK(a.decision == request_decision::no_route);
  CHECK_FALSE(a.route);
  CHECK(a.content_type == "application/problem+json");
  CHECK(f.ask("POST", "/search").status == 404);  // the route takes GET (and HEAD) only
}

TEST_CASE("admission: a limit admits its burst, then 429 with Retry-After and quota headers") {
  fixture f;
  for (int i = 0; i < 2; ++i) {
    const fixture::answer a = f.ask("GET", "/search", "free-key");
    CHECK(a.forward);
    CHECK(a.decision == request_decision::allowed);
    CHECK(a.route == 0u);
    CHECK(fixture::header(a, "X-RateLimit-Limit") == "2");
    CHECK(fixture::header(a, "X-RateLimit-Remaining") == std::to_string(1 - i));
  }
  const fixture::answer denied = f.ask("GET", "/search", "free-key");
  CHECK_FALSE(denied.forward);
  CHECK(denied.status == 429);
  CHECK(denied.decision == request_decision::denied);
  CHECK(denied.limit == "per-second");
  CHECK(fixture::header(denied, "Retry-After") == "1");
  CHECK(denied.body.find("\"retry_after\":1") != std::string::npos);

  SUBCASE("a plan has its own quota") {
    CHECK(fixture::header(f.ask("GET", "/search", "premium-key"), "X-RateLimit-Limit") == "10");
  }
  SUBCASE("time refills the bucket") {
    f.clk.advance(500ms);
    CHECK(f.ask("GET", "/search", "free-key").forward);
    CHECK_FALSE(f.ask("GET", "/search", "free-key").forward);
  }
}

TEST_CASE("admission: unknown keys are 401, then 429 past identity.reject_limit") {
  fixture f;
  CHECK(f.ask("GET", "/search", "made-up-1").status == 401);
  CHECK(f.ask("GET", "/search", "made-up-2").status == 401);
  const fixture::answer a = f.ask("GET", "/search", "made-up-3");
  CHECK(a.status == 429);
  CHECK(a.decision == request_decision::rejected);
  CHECK_FALSE(fixture::header(a, "Retry-After").empty());
  // Another address has its own allowance.
  CHECK(f.ask("GET", "/search", "made-up-4", "192.0.2.2").status == 401);
}

TEST_CASE("admission: shadow limits report and forward; a custom deny answers its own way") {
  fixture f;
  CHECK(f.ask("GET", "/shadow", "free-key").decision == request_decision::allowed);
  const admission shadow = f.ask("GET", "/shadow", "free-key");
  CHECK(shadow.forward);
  CHECK(shadow.decision == request_decision::shadow_denied);
  CHECK(shadow.limit == "one");

  CHECK(f.ask("GET", "/custom", "free-key").forward);
  const admission custom = f.ask("GET", "/custom", "free-key");
  CHECK(custom.status == 503);
  CHECK(custom.body == "come back later");
  CHECK(custom.content_type == "text/plain; charset=utf-8");
}
