#include "ratewall/admin/rate_history.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

// Cumulative counters of one route as /metrics would report them.
route_totals totals(const std::string& route, std::uint64_t allowed, std::uint64_t denied = 0,
                    std::uint64_t shadow_denied = 0) {
  route_totals t{route};
  t.decisions[static_cast<std::size_t>(request_decision::allowed)] = allowed;
  t.decisions[static_cast<std::size_t>(request_decision::denied)] = denied;
  t.decisions[static_cast<std::size_t>(request_decision::shadow_denied)] = shadow_denied;
  return t;
}

std::vector<std::uint64_t> allowed(const std::vector<bucket_counts>& counts) {
  std::vector<std::uint64_t> out;
  for (const bucket_counts& c : counts) {
    out.push_back(c.allowed);
  }
  return out;
}

}  // namespace

TEST_CASE("rate history: a bucket counts from its first sample to the next bucket's") {
  rate_history h(5s, 4);
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{0, 0, 0, 0});

  h.record(100s, {totals("api", 1000, 50)});  // the baseline: what came before is not counted
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{0, 0, 0, 0});

  h.record(101s, {totals("api", 1003, 51, 2)});  // same bucket [100 s, 105 s)
  h.record(104999ms, {totals("api", 1004, 51, 2)});
  auto c = h.counts("api");
  CHECK(c.back().allowed == 4);
  CHECK(c.back().denied == 1);
  CHECK(c.back().shadow_denied == 2);

  CHECK(h.filling() == 4999ms);

  // The next bucket's edge, exactly at 105 s: what came before it is the previous bucket's.
  h.record(105s, {totals("api", 1010, 51, 2)});
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{0, 0, 10, 0});
  h.record(107s, {totals("api", 1013, 51, 2)});
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{0, 0, 10, 3});
  CHECK(h.filling() == 2s);
  CHECK(h.next_edge(107s) == 110s);
  CHECK(h.next_edge(110s) == 115s);
}

TEST_CASE(
    "rate history: a bucket without a sample counts zero, the one before the next edge "
    "what it missed") {
  rate_history h(5s, 4);
  h.record(0s, {totals("api", 0)});
  h.record(6s, {totals("api", 3)});
  h.record(17s, {totals("api", 10)});  // nothing sampled in [10 s, 15 s)
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{3, 0, 7, 0});
}

TEST_CASE("rate history: buckets older than the window fall out") {
  rate_history h(5s, 3);
  h.record(0s, {totals("api", 0)});
  h.record(1s, {totals("api", 1)});
  h.record(5s, {totals("api", 3)});
  h.record(10s, {totals("api", 6)});
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{3, 3, 0});
  h.record(15s, {totals("api", 10)});  // [0 s, 5 s) is gone: its counts no longer show
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{3, 4, 0});
  h.record(60s, {totals("api", 10)});  // a long quiet spell: nothing left but zeros
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{0, 0, 0});
}

TEST_CASE("rate history: routes are apart, and a route added later counts from zero") {
  rate_history h(5s, 2);
  h.record(0s, {totals("api", 5)});
  h.record(5s, {totals("api", 7), totals("new", 4, 1)});
  CHECK(allowed(h.counts("api")) == std::vector<std::uint64_t>{2, 0});
  auto fresh = h.counts("new");
  CHECK(fresh.front().allowed == 4);
  CHECK(fresh.front().denied == 1);
  CHECK(allowed(h.counts("unknown")) == std::vector<std::uint64_t>{0, 0});
}

TEST_CASE("rate history: upstream responses and failures are bucketed too") {
  rate_history h(5s, 2);
  route_totals before = totals("api", 0);
  h.record(0s, {before});
  route_totals after = totals("api", 3);
  after.upstream_responses = 3;
  after.upstream_failures = 2;
  h.record(5s, {after});
  CHECK(h.counts("api").front().upstream_responses == 3);
  CHECK(h.counts("api").front().upstream_failures == 2);
}

TEST_CASE("rate history: a width and a number of buckets are required") {
  CHECK_THROWS_AS(rate_history(0s, 4), std::invalid_argument);
  CHECK_THROWS_AS(rate_history(5s, 0), std::invalid_argument);
}

TEST_CASE("rate history: a steady rate reads the same in every bucket, however often it is read") {
  // 100 requests a second; the admin samples just after each edge and at polls every 2 s.
  rate_history h(5s, 12);
  for (int ms = 0; ms <= 60000; ms += 1) {
    const bool edge = ms % 5000 == 1;
    const bool poll = ms % 2000 == 700;
    if (edge || poll) {
      h.record(std::chrono::milliseconds(ms), {totals("api", static_cast<std::uint64_t>(ms) / 10)});
    }
  }
  const auto c = allowed(h.counts("api"));
  for (std::size_t i = 0; i + 1 < c.size(); ++i) {
    CAPTURE(i);
    CHECK(c[i] == 500);
  }
}

TEST_CASE("rate history: thousands of routes, each counted apart") {
  rate_history h(5s, 60);
  std::vector<route_totals> all;
  for (int i = 0; i < 3000; ++i) {
    all.push_back(totals("r" + std::to_string(i), 0));
  }
  for (int b = 0; b < 60; ++b) {
    for (auto& t : all) {
      t.decisions[static_cast<std::size_t>(request_decision::allowed)] += 1;
    }
    h.record(std::chrono::seconds(5 * b), all);
  }
  for (int i = 0; i < 3000; i += 499) {
    const auto c = allowed(h.counts("r" + std::to_string(i)));
    CHECK(c[c.size() - 2] == 1);
  }
}
