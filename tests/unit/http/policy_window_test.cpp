// RateLimit-Policy's w=, X-RateLimit-Reset and Retry-After at the extremes `ratewall check`
// accepts (config/limit_bounds.hpp). The decisions are those the limiter gives for the same
// limits (tests/unit/limit/extremes_test.cpp).

#include <doctest/doctest.h>

#include <chrono>
#include <limits>
#include <optional>
#include <string>

#include "ratewall/config/loader.hpp"
#include "ratewall/http/rate_limit_headers.hpp"

using namespace ratewall;
using std::chrono::hours;
using std::chrono::seconds;

namespace {

constexpr nanos k_day = hours(24);
const std::chrono::system_clock::time_point k_wall{seconds(1'700'000'000)};

// limits[0] of a route whose only limit is `limit` (a flow mapping), loaded as check loads it.
limit_config loaded(const std::string& limit) {
  const std::string text = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
plans:
  gold: {}
routes:
  - name: r
    upstream: api
    limits:
      - )" + limit + "\n";
  return parse_config(text, "test.yaml").routes.at(0).limits.at(0);
}

decision make(bool allowed, std::uint64_t limit, std::uint64_t remaining, nanos reset_after,
              nanos retry_after = nanos{0}) {
  decision d;
  d.allowed = allowed;
  d.limit = limit;
  d.remaining = remaining;
  d.reset_after = reset_after;
  d.retry_after = retry_after;
  return d;
}

struct rendered {
  header_list all;
  std::optional<std::string> operator[](std::string_view name) const {
    for (const auto& [n, v] : all) {
      if (n == name) {
        return v;
      }
    }
    return std::nullopt;
  }
};

rendered render(const decision& d, const limit_config& limit, bool epoch = false) {
  header_options options;
  options.ietf_draft = true;
  options.reset_epoch = epoch;
  rendered out;
  render_rate_limit_headers(d, limit.name, policy_window_seconds(limit), options, k_wall, out.all);
  return out;
}

}  // namespace

TEST_CASE("policy window: a bucket's refill time, a window's length, none for concurrency") {
  CHECK(policy_window_seconds(loaded("{ name: b, rate: 10/s, burst: 20 }")) == 2);
  CHECK(policy_window_seconds(loaded("{ name: b, rate: 10/s }")) == 1);
  CHECK(policy_window_seconds(loaded("{ name: b, rate: 3/s, burst: 1 }")) == 1);  // 1/3 s up
  CHECK(policy_window_seconds(loaded("{ name: b, rate: 3/s, burst: 4 }")) == 2);  // 4/3 s up
  // A leaky bucket without a burst still speaks of one unit's time.
  CHECK(policy_window_seconds(loaded("{ name: b, algorithm: leaky_bucket, rate: 1/m }")) == 60);
  CHECK(policy_window_seconds(
            loaded("{ name: w, algorithm: fixed_window, limit: 5, window: 1500ms }")) == 2);
  CHECK(policy_window_seconds(loaded("{ name: c, algorithm: concurrency, limit: 5 }")) == 0);
}

TEST_CASE("policy window: a plan's rate, burst and window replace the limit's") {
  const limit_config bucket =
      loaded("{ name: b, rate: 10/s, burst: 20, plans: { gold: { rate: 100/s, burst: 500 } } }");
  CHECK(policy_window_seconds(bucket) == 2);
  CHECK(policy_window_seconds(bucket, &bucket.plans.at("gold")) == 5);
  const limit_config window = loaded(
      "{ name: w, algorithm: sliding_window_counter, limit: 5, window: 1m, "
      "plans: { gold: { window: 1h } } }");
  CHECK(policy_window_seconds(window, &window.plans.at("gold")) == 3600);
}

TEST_CASE("600/365d: w is a year, not the 791427 a 64-bit product wrapped to") {
  const limit_config yearly = loaded("{ name: yearly, rate: 600/365d }");
  CHECK(policy_window_seconds(yearly) == 31'536'000);
  // After the first request: 599 left, full again in one interval (52560 s).
  rendered first = render(make(true, 600, 599, seconds(52560)), yearly);
  CHECK(first["RateLimit-Policy"] == R"("yearly";q=600;w=31536000)");
  CHECK(first["X-RateLimit-Reset"] == "52560");
  CHECK(first["RateLimit"] == R"("yearly";r=599;t=52560)");
  // The 601st: retry in one interval, full again in a year.
  rendered denied = render(make(false, 600, 0, k_day * 365, seconds(52560)), yearly);
  CHECK(denied["Retry-After"] == "52560");
  CHECK(denied["X-RateLimit-Reset"] == "31536000");
  CHECK(render(make(false, 600, 0, k_day * 365, seconds(52560)), yearly,
               true)["X-RateLimit-Reset"] == "1731536000");
}

TEST_CASE("100/3650d: w is ten years, not dropped as a negative product") {
  const limit_config decade = loaded("{ name: decade, rate: 100/3650d }");
  CHECK(policy_window_seconds(decade) == 315'360'000);
  rendered denied = render(make(false, 100, 0, k_day * 3650, seconds(3'153'600)), decade);
  CHECK(denied["RateLimit-Policy"] == R"("decade";q=100;w=315360000)");
  CHECK(denied["Retry-After"] == "3153600");
  CHECK(denied["X-RateLimit-Reset"] == "315360000");
  CHECK(denied["RateLimit"] == R"("decade";r=0;t=315360000)");
}

TEST_CASE("the deepest buckets and the longest window: w = 10000 days") {
  const limit_config token =
      loaded("{ name: deep, rate: 1000000000/s, burst: 864000000000000000 }");
  CHECK(policy_window_seconds(token) == 864'000'000);
  const limit_config leaky = loaded(
      "{ name: deep, algorithm: leaky_bucket, rate: 1000000000/s, burst: 863999999999999999 }");
  CHECK(policy_window_seconds(leaky) == 864'000'000);  // 863999999999999999 ns, rounded up
  const limit_config longest = loaded("{ name: long, rate: 1/10000d }");
  CHECK(policy_window_seconds(longest) == 864'000'000);
  const limit_config vast = loaded("{ name: vast, rate: 864000000000000000/10000d }");
  CHECK(policy_window_seconds(vast) == 864'000'000);
  const limit_config finest = loaded("{ name: fine, rate: 1000000/1ms }");
  CHECK(policy_window_seconds(finest) == 1);
  for (const char* algo : {"fixed_window", "sliding_window_log", "sliding_window_counter"}) {
    CAPTURE(algo);
    CHECK(policy_window_seconds(loaded(std::string("{ name: w, algorithm: ") + algo +
                                       ", limit: 1000000, window: 10000d }")) == 864'000'000);
  }

  // The whole bucket taken by one request (cost = burst), then a request of 1.
  rendered all = render(make(true, 864'000'000'000'000'000, 0, k_day * 10000), token);
  CHECK(all["X-RateLimit-Limit"] == "864000000000000000");
  CHECK(all["X-RateLimit-Reset"] == "864000000");
  CHECK(all["RateLimit-Policy"] == R"("deep";q=864000000000000000;w=864000000)");
  rendered one = render(make(false, 864'000'000'000'000'000, 0, k_day * 10000, nanos{1}), token);
  CHECK(one["Retry-After"] == "1");
  CHECK(render(make(false, 864'000'000'000'000'000, 0, k_day * 10000, nanos{1}), token,
               true)["X-RateLimit-Reset"] == "2564000000");
}

TEST_CASE("the largest limit with cost = limit, in the longest window") {
  const limit_config w =
      loaded("{ name: w, algorithm: fixed_window, limit: 4611686018427387903, window: 10000d }");
  // Ten years into the window: 6350 days left.
  rendered denied =
      render(make(false, 4'611'686'018'427'387'903, 0, k_day * 6350, k_day * 6350), w);
  CHECK(denied["X-RateLimit-Limit"] == "4611686018427387903");
  CHECK(denied["X-RateLimit-Reset"] == "548640000");
  CHECK(denied["Retry-After"] == "548640000");
  CHECK(denied["RateLimit-Policy"] == R"("w";q=4611686018427387903;w=864000000)");
}

TEST_CASE("values beyond what loads are exact or saturate, never wrap") {
  // Hand-built limits the loader refuses: the rendering still cannot overflow.
  limit_config huge;
  huge.name = "huge";
  huge.rate = {1, k_day * 10000};
  huge.burst = std::numeric_limits<std::uint64_t>::max();
  CHECK(policy_window_seconds(huge) == 9'223'372'037);  // nanos::max(), rounded up
  huge.rate = {3, nanos{7}};
  huge.burst = std::numeric_limits<std::uint64_t>::max();
  // 7 × (2^64 − 1) / 3 ns = 43 042 502 838 322 953 215 ns: saturates too.
  CHECK(policy_window_seconds(huge) == 9'223'372'037);
  huge.rate = {3, nanos{7}};
  huge.burst = 3'000'000'000;
  CHECK(policy_window_seconds(huge) == 7);

  // A reset as far as a decision can say, in epoch form: wall + nanos::max().
  rendered far = render(make(true, 1, 0, nanos::max()), huge, true);
  CHECK(far["X-RateLimit-Reset"] == "10923372037");
  CHECK(render(make(true, 1, 0, nanos::max()), huge)["X-RateLimit-Reset"] == "9223372037");
}
