#include <doctest/doctest.h>

#include <string>

#include "ratewall/limit/address_limiter.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

TEST_CASE("address_limiter: a token bucket per address") {
  address_limiter limits(rate_spec{10, 1s}, 20);  // 10/s, burst 20
  const nanos start = 1000s;
  for (int i = 0; i < 20; ++i) {
    CHECK(limits.take("198.51.100.7", start).allowed);
  }
  const decision denied = limits.take("198.51.100.7", start);
  CHECK_FALSE(denied.allowed);
  CHECK(denied.retry_after == 100ms);
  CHECK(limits.take("198.51.100.8", start).allowed);  // another address: its own bucket
  CHECK_FALSE(limits.take("198.51.100.7", start + 99ms).allowed);
  CHECK(limits.take("198.51.100.7", start + 100ms).allowed);
}

TEST_CASE("address_limiter: bounded under a flood of addresses, exact for the busy ones") {
  address_limiter limits(rate_spec{1, 1s}, 2, 64);
  const nanos now = 50s;
  CHECK(limits.take("busy", now).allowed);
  CHECK(limits.take("busy", now).allowed);
  // Buckets of addresses seen once are whole again a second later: those go first.
  for (int i = 0; i < 10000; ++i) {
    limits.take("flood-" + std::to_string(i), now + 3s);
  }
  CHECK(limits.take("x", now).allowed);
}
