// The configurations we ship are safe as they stand: made-up API keys and forged
// X-Forwarded-For headers buy no fresh quota (DESIGN §5).

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall::testing;

namespace {

std::string shipped(const std::string& relative) {
  std::ifstream in(std::string(RATEWALL_SOURCE_DIR) + "/" + relative);
  std::stringstream text;
  text << in.rdbuf();
  REQUIRE_FALSE(text.str().empty());
  // The demo upstream's address becomes the test's.
  return replace_all(text.str(), "127.0.0.1:8000", "${UPSTREAM}");
}

}  // namespace

TEST_CASE("shipped configs: 30 made-up keys or forged addresses are limited like one client") {
  test_upstream upstream;
  for (std::string file : {"config/ratewall.yaml", "config/examples/docker.yaml"}) {
    CAPTURE(file);
    for (std::string header : {"X-API-Key", "X-Forwarded-For", "X-User-ID"}) {
      CAPTURE(header);
      gateway_harness gw(shipped(file), upstream.port());
      http_client client(gw.port());
      int allowed = 0;
      for (int i = 0; i < 30; ++i) {
        const std::string value = header == "X-Forwarded-For" ? "10.1.2." + std::to_string(i)
                                                              : "made-up-" + std::to_string(i);
        if (client.get("/api/hello", {{header, value}}).status == 200) {
          ++allowed;
        }
      }
      // burst 10 at 5/s: the quota of one client (a refill may add one during the loop).
      CHECK(allowed >= 10);
      CHECK(allowed <= 11);
    }
  }
}
