#include <doctest/doctest.h>

#include <chrono>

#include "ratewall/core/clock.hpp"

using namespace ratewall;

TEST_CASE("steady_clock counts from 2020-01-01 UTC, read once, and never steps back") {
  const steady_clock a;
  const steady_clock b;
  const nanos wall =
      std::chrono::duration_cast<nanos>(std::chrono::system_clock::now().time_since_epoch()) -
      steady_clock::k_origin;
  const nanos first = a.now();
  // Within a second of the wall clock's reading (it is the wall clock at the first read, moved
  // by steady_clock since).
  CHECK(first > wall - std::chrono::seconds(1));
  CHECK(first < wall + std::chrono::seconds(1));
  // Every clock of the process shares the origin: a later read of another is not earlier.
  nanos last = first;
  for (int i = 0; i < 1000; ++i) {
    const nanos t = (i % 2 == 0 ? b : a).now();
    CHECK(t >= last);
    last = t;
  }
}
