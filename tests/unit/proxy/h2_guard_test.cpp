#include "ratewall/proxy/h2_guard.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

/// How many times in a row `ask` answers true before its first false (at most 100,000 asks).
template <class Ask>
int times_allowed(Ask ask) {
  int n = 0;
  while (n < 100'000 && ask()) {
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("h2 guard: resets are a bucket of the rate per second, one second deep") {
  h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 100});
  // 100 at t = 0 pass; the 101st is the first refused.
  REQUIRE(times_allowed([&] { return guard.reset(0ms); }) == 100);
  CHECK_FALSE(guard.reset(0ms));
  SUBCASE("a reset's worth (10 ms at 100/s) later, one more passes, and only one") {
    CHECK_FALSE(guard.reset(10ms - 1ns));
    CHECK(guard.reset(10ms));
    CHECK_FALSE(guard.reset(10ms));
  }
  SUBCASE("a second later the whole burst is back, and no more") {
    CHECK(times_allowed([&] { return guard.reset(1s); }) == 100);
  }
}

TEST_CASE("h2 guard: a rate that does not divide a second rounds the time per reset up") {
  // 1 s / 3 = 333,333,333.3 ns: a reset comes back after 333,333,334 ns, never sooner.
  h2_guard guard({.resets_per_second = 3, .max_concurrent_streams = 100});
  REQUIRE(times_allowed([&] { return guard.reset(0ns); }) == 3);
  CHECK_FALSE(guard.reset(333'333'333ns));
  CHECK(guard.reset(333'333'334ns));
}

TEST_CASE("h2 guard: a reset rate of 0 is refused when the guard is made") {
  CHECK_THROWS_AS(h2_guard({.resets_per_second = 0, .max_concurrent_streams = 100}),
                  std::invalid_argument);
}

TEST_CASE("h2 guard: one read opens at most twice the concurrent stream limit") {
  h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 10});
  guard.read_start();
  CHECK(times_allowed([&] { return guard.new_stream(); }) == 20);
  CHECK_FALSE(guard.new_stream());  // still refused later in the same read

  SUBCASE("the next read counts from zero") {
    guard.read_start();
    CHECK(times_allowed([&] { return guard.new_stream(); }) == 20);
  }
}

TEST_CASE("h2 guard: a stream limit of 0 refuses every new stream") {
  h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 0});
  guard.read_start();
  CHECK_FALSE(guard.new_stream());
}

TEST_CASE("h2 guard: refusals end the connection past max(stream limit, 100)") {
  SUBCASE("a stream limit above 100 is the bound") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 250});
    CHECK(times_allowed([&] { return guard.refused(); }) == 250);
  }
  SUBCASE("a stream limit below 100: 100 is") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 10});
    CHECK(times_allowed([&] { return guard.refused(); }) == 100);
  }
  SUBCASE("a new read does not forgive them") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 10});
    CHECK(times_allowed([&] {
            guard.read_start();
            return guard.refused();
          }) == 100);
  }
}

TEST_CASE("h2 guard: refusals before our SETTINGS are acknowledged have ten times the bound") {
  SUBCASE("a stream limit below 100: 1000") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 1});
    CHECK(times_allowed([&] { return guard.refused_before_settings(); }) == 1000);
  }
  SUBCASE("a stream limit above 100: ten times it") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 250});
    CHECK(times_allowed([&] { return guard.refused_before_settings(); }) == 2500);
  }
  SUBCASE("counted apart from the refusals after it") {
    h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 1});
    for (int i = 0; i < 1000; ++i) {
      REQUIRE(guard.refused_before_settings());
    }
    CHECK(times_allowed([&] { return guard.refused(); }) == 100);
  }
}

TEST_CASE("h2 guard: traffic of more than 8 bytes read per payload byte, past 1 MiB, is a flood") {
  const h2_guard guard({.resets_per_second = 100, .max_concurrent_streams = 100});
  constexpr std::uint64_t mib = 1024 * 1024;
  SUBCASE("nothing but frames: 8 MiB and 7 bytes pass, one byte more does not") {
    CHECK(guard.traffic(0, 0));
    CHECK(guard.traffic(8 * mib, 0));  // bytes_read / 8 equal to payload + 1 MiB
    CHECK(guard.traffic(8 * mib + 7, 0));
    CHECK_FALSE(guard.traffic(8 * mib + 8, 0));
  }
  SUBCASE("payload raises the bound 8 bytes a byte") {
    const std::uint64_t payload = 5000;
    const std::uint64_t bound = 8 * (payload + mib);
    CHECK(guard.traffic(bound + 7, payload));
    CHECK_FALSE(guard.traffic(bound + 8, payload));
    CHECK_FALSE(guard.traffic(bound, payload - 1));
  }
  SUBCASE("a connection that reads mostly payload never comes near") {
    CHECK(guard.traffic(100 * mib, 90 * mib));
  }
}
