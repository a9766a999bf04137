#include <doctest/doctest.h>

#include <chrono>

#include "ratewall/redis/breaker.hpp"

using namespace ratewall;
using namespace ratewall::redis;
using std::chrono::milliseconds;
using admit = circuit_breaker::admit;
using state = circuit_breaker::state;

TEST_CASE("the breaker opens after N consecutive failures and refuses until the cooldown") {
  circuit_breaker b({3, milliseconds(1000)});
  CHECK(b.current() == state::closed);
  b.record_failure(milliseconds(0));
  b.record_failure(milliseconds(1));
  CHECK(b.try_acquire(milliseconds(2)) == admit::yes);
  b.record_failure(milliseconds(10));
  CHECK(b.current() == state::open);
  CHECK(b.opened() == 1);
  CHECK(b.refusing(milliseconds(10)));
  CHECK(b.try_acquire(milliseconds(10)) == admit::no);
  CHECK(b.try_acquire(milliseconds(1009)) == admit::no);
  SUBCASE("a success in between resets the count") {
    circuit_breaker c({3, milliseconds(1000)});
    c.record_failure(milliseconds(0));
    c.record_failure(milliseconds(0));
    c.record_success();
    c.record_failure(milliseconds(0));
    c.record_failure(milliseconds(0));
    CHECK(c.current() == state::closed);
  }
}

TEST_CASE("after the cooldown exactly one caller probes; its result decides") {
  circuit_breaker b({1, milliseconds(1000)});
  b.record_failure(milliseconds(0));
  REQUIRE(b.current() == state::open);
  CHECK_FALSE(b.refusing(milliseconds(1000)));
  CHECK(b.try_acquire(milliseconds(1000)) == admit::probe);
  CHECK(b.current() == state::half_open);
  // Everyone else is still answered at once while the probe is out.
  CHECK(b.try_acquire(milliseconds(1001)) == admit::no);
  CHECK(b.refusing(milliseconds(1001)));

  SUBCASE("a successful probe closes it") {
    b.record_success();
    CHECK(b.current() == state::closed);
    CHECK(b.try_acquire(milliseconds(1002)) == admit::yes);
  }
  SUBCASE("a failed probe opens it for another cooldown from the failure") {
    b.record_failure(milliseconds(1500));
    CHECK(b.current() == state::open);
    CHECK(b.try_acquire(milliseconds(2499)) == admit::no);
    CHECK(b.try_acquire(milliseconds(2500)) == admit::probe);
    CHECK(b.opened() == 1);  // reopening after a probe is not a new opening
  }
  SUBCASE("a probe that never reports does not wedge it: a cooldown later, another probe") {
    CHECK(b.try_acquire(milliseconds(1999)) == admit::no);
    CHECK(b.try_acquire(milliseconds(2000)) == admit::probe);
  }
}

TEST_CASE("late failures of calls sent before the breaker opened do not extend it") {
  circuit_breaker b({2, milliseconds(100)});
  b.record_failure(milliseconds(0));
  b.record_failure(milliseconds(0));
  REQUIRE(b.current() == state::open);
  b.record_failure(milliseconds(90));  // a timeout of an older call
  CHECK(b.try_acquire(milliseconds(100)) == admit::probe);
}
