// identity.reject_limit across reloads: a client guessing API keys does not get a fresh budget
// from a reload that leaves the settings as they were; new settings start new buckets.

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/limit/address_limiter.hpp"
#include "ratewall/proxy/gateway.hpp"

using namespace ratewall;

namespace {

config config_with(const std::string& reject_limit) {
  return parse_config(R"(identity:
  unknown_api_key: reject
  reject_limit: )" + reject_limit +
                          R"(
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: api
    upstream: api
    identify_by: [api_key]
    limits:
      - { name: burst, rate: 10/s, burst: 10 }
)",
                      "test.yaml");
}

}  // namespace

TEST_CASE("a reload keeps identity.reject_limit's buckets unless its settings change") {
  manual_clock clk;
  const std::string settings = "{ rate: 1/s, burst: 2 }";
  auto first = std::make_shared<const gateway>(config_with(settings), clk, "k");
  const std::string guesser = "203.0.113.7";
  CHECK(first->reject_limit().take(guesser, clk.now()).allowed);
  CHECK(first->reject_limit().take(guesser, clk.now()).allowed);
  CHECK(first->reject_limit().spent(guesser, clk.now()));

  auto same = std::make_shared<const gateway>(config_with(settings), clk, "k", first.get());
  CHECK(&same->reject_limit() == &first->reject_limit());
  CHECK(same->reject_limit().spent(guesser, clk.now()));  // no fresh budget from a reload

  auto other =
      std::make_shared<const gateway>(config_with("{ rate: 1/s, burst: 3 }"), clk, "k", same.get());
  CHECK(&other->reject_limit() != &same->reject_limit());
  CHECK_FALSE(other->reject_limit().spent(guesser, clk.now()));  // new settings, new buckets
}
