#include <doctest/doctest.h>

#include <string>

#include "ratewall/redis/denied_table.hpp"

using namespace ratewall;
using namespace ratewall::redis;

namespace {

constexpr std::uint64_t k_limits = 0x1234;

denied_entry denied(std::int64_t at, std::int64_t until, std::uint64_t epoch = 0,
                    std::uint64_t cost = 1) {
  denied_entry e;
  e.at = at;
  e.until = until;
  e.epoch = epoch;
  e.cost = cost;
  return e;
}

std::string subject(int i) {
  return "key:" + std::to_string(i);
}

}  // namespace

TEST_CASE("denied table: a flood of subjects never takes it past its capacity nor makes it scan") {
  denied_table t(1024);
  REQUIRE(t.capacity() == 1024);
  constexpr int n = 100'000;
  for (int i = 0; i < n; ++i) {
    const std::uint64_t before = t.probes();
    REQUIRE(t.remember(subject(i), k_limits, denied(i, i + 3'600'000)));
    // One set of 8 ways, whatever the table holds.
    REQUIRE(t.probes() - before <= denied_table::k_ways);
    REQUIRE(t.size() <= t.capacity());
    const std::uint64_t seen = t.probes();
    REQUIRE(t.find(subject(i), k_limits, i, 0) != nullptr);
    REQUIRE(t.probes() - seen <= denied_table::k_ways);
  }
  CHECK(t.size() == t.capacity());
  CHECK(t.evictions() == n - t.capacity());
  // The newest subjects are there, the oldest made room.
  CHECK(t.find(subject(n - 1), k_limits, n, 0) != nullptr);
  CHECK(t.find(subject(0), k_limits, n, 0) == nullptr);
  SUBCASE("capacities round up to whole sets of 8, a power of two of them") {
    CHECK(denied_table(0).capacity() == 8);
    CHECK(denied_table(9).capacity() == 16);
    CHECK(denied_table(1000).capacity() == 1024);
  }
}

TEST_CASE("denied table: an entry answers only its subject and limits, live and of its epoch") {
  denied_table t(64);
  REQUIRE(t.remember("key:a", k_limits, denied(0, 1000, 7)));
  const denied_entry* e = t.find("key:a", k_limits, 999, 7);
  REQUIRE(e != nullptr);
  CHECK(e->until == 1000);
  CHECK(t.find("key:b", k_limits, 0, 7) == nullptr);
  CHECK(t.find("key:a", k_limits + 1, 0, 7) == nullptr);
  CHECK(t.find("key:", k_limits, 0, 7) == nullptr);
  SUBCASE("expired: dropped") {
    CHECK(t.find("key:a", k_limits, 1000, 7) == nullptr);
    CHECK(t.size() == 0);
  }
  SUBCASE("from before a reset (another epoch): dropped") {
    CHECK(t.find("key:a", k_limits, 0, 8) == nullptr);
    CHECK(t.size() == 0);
  }
  SUBCASE("prune drops the expired and the stale") {
    REQUIRE(t.remember("key:b", k_limits, denied(0, 5000, 7)));
    REQUIRE(t.remember("key:c", k_limits, denied(0, 500, 7)));
    CHECK(t.prune(1000, 7) == 2);
    CHECK(t.size() == 1);
    CHECK(t.find("key:b", k_limits, 1000, 7) != nullptr);
    CHECK(t.prune(1000, 8) == 1);
    CHECK(t.size() == 0);
  }
}

TEST_CASE("denied table: the longer of two denials is kept; a new epoch or a wider cost replaces") {
  denied_table t(64);
  REQUIRE(t.remember("key:a", k_limits, denied(0, 1000, 1, 2)));
  SUBCASE("a shorter denial (a late reply) does not shorten it") {
    t.remember("key:a", k_limits, denied(10, 500, 1, 2));
    CHECK(t.find("key:a", k_limits, 10, 1)->until == 1000);
  }
  SUBCASE("a longer one extends it") {
    t.remember("key:a", k_limits, denied(10, 2000, 1, 2));
    CHECK(t.find("key:a", k_limits, 10, 1)->until == 2000);
  }
  SUBCASE("a shorter one for smaller costs replaces it") {
    t.remember("key:a", k_limits, denied(10, 500, 1, 1));
    const denied_entry* e = t.find("key:a", k_limits, 10, 1);
    CHECK(e->until == 500);
    CHECK(e->cost == 1);
  }
  SUBCASE("an entry of a new epoch replaces it") {
    t.remember("key:a", k_limits, denied(10, 500, 2, 2));
    CHECK(t.find("key:a", k_limits, 10, 2)->until == 500);
  }
  CHECK(t.size() == 1);
}

TEST_CASE(
    "denied table: a full set evicts the expired first, then those not hit, first to expire") {
  denied_table t(8);  // one set: every subject competes for the same 8 ways
  for (int i = 0; i < 8; ++i) {
    REQUIRE(t.remember(subject(i), k_limits, denied(0, 1000 + i)));
  }
  SUBCASE("an expired entry makes room before any live one") {
    REQUIRE(t.remember(subject(100), k_limits, denied(1000, 5000)));  // subject 0 expired at 1000
    CHECK(t.evictions() == 0);
    for (int i = 1; i < 8; ++i) {
      CHECK(t.find(subject(i), k_limits, 1000, 0) != nullptr);
    }
  }
  SUBCASE("not hit: the first to expire goes") {
    REQUIRE(t.remember(subject(100), k_limits, denied(10, 5000)));
    CHECK(t.evictions() == 1);
    CHECK(t.find(subject(0), k_limits, 10, 0) == nullptr);
    CHECK(t.find(subject(1), k_limits, 10, 0) != nullptr);
  }
  SUBCASE("a subject that keeps coming back outlives a flood of new ones") {
    for (int i = 100; i < 1100; ++i) {
      REQUIRE(t.find(subject(0), k_limits, 10, 0) != nullptr);
      REQUIRE(t.remember(subject(i), k_limits, denied(10, 1000 + i)));
    }
    CHECK(t.find(subject(0), k_limits, 10, 0) != nullptr);
    CHECK(t.size() == 8);
  }
}

TEST_CASE("denied table: a subject longer than it can hold is not cached") {
  denied_table t(64);
  const std::string longest(denied_table::k_max_subject, 'k');
  const std::string too_long(denied_table::k_max_subject + 1, 'k');
  CHECK(t.remember(longest, k_limits, denied(0, 1000)));
  CHECK_FALSE(t.remember(too_long, k_limits, denied(0, 1000)));
  CHECK(t.find(longest, k_limits, 0, 0) != nullptr);
  CHECK(t.find(too_long, k_limits, 0, 0) == nullptr);
  CHECK(t.size() == 1);
}
