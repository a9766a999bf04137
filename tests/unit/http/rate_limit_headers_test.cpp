#include <doctest/doctest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "ratewall/http/rate_limit_headers.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

const std::chrono::system_clock::time_point k_wall{std::chrono::seconds(1'700'000'000)};

decision allowed(std::uint64_t limit, std::uint64_t remaining, nanos reset_after) {
  decision d;
  d.allowed = true;
  d.limit = limit;
  d.remaining = remaining;
  d.reset_after = reset_after;
  return d;
}

decision denied(std::uint64_t limit, nanos reset_after, nanos retry_after) {
  decision d;
  d.allowed = false;
  d.limit = limit;
  d.remaining = 0;
  d.reset_after = reset_after;
  d.retry_after = retry_after;
  return d;
}

header_list render(const decision& d, header_options options = {},
                   std::chrono::system_clock::time_point wall = k_wall) {
  header_list out;
  render_rate_limit_headers(d, "burst", 60, options, wall, out);
  return out;
}

std::optional<std::string> header(const header_list& h, std::string_view name) {
  for (const auto& [n, v] : h) {
    if (n == name) {
      return v;
    }
  }
  return std::nullopt;
}

}  // namespace

TEST_CASE("an allowed response carries limit, remaining and reset, and no Retry-After") {
  auto h = render(allowed(20, 13, 1500ms));
  CHECK(h.size() == 3);
  CHECK(header(h, "X-RateLimit-Limit") == "20");
  CHECK(header(h, "X-RateLimit-Remaining") == "13");
  CHECK(header(h, "X-RateLimit-Reset") == "2");
  CHECK(header(h, "Retry-After") == std::nullopt);
  CHECK(header(h, "RateLimit") == std::nullopt);
}

TEST_CASE("headers are appended after what the list already holds") {
  header_list out{{"Content-Type", "text/plain"}};
  render_rate_limit_headers(allowed(1, 0, 0ns), "x", 1, {}, k_wall, out);
  CHECK(out.size() == 4);
  CHECK(out.front().first == "Content-Type");
}

TEST_CASE("Retry-After is whole seconds, rounded up, at least 1") {
  auto retry = [](nanos r) { return header(render(denied(20, 10s, r)), "Retry-After"); };
  CHECK(retry(500ms) == "1");
  CHECK(retry(1s) == "1");
  CHECK(retry(1001ms) == "2");
  CHECK(retry(1s + 1ns) == "2");
  CHECK(retry(0ns) == "1");
  CHECK(retry(-5ms) == "1");
  CHECK(retry(86400s) == "86400");
}

TEST_CASE("X-RateLimit-Reset is whole seconds until the quota is whole, rounded up") {
  auto reset = [](nanos r) { return header(render(allowed(20, 5, r)), "X-RateLimit-Reset"); };
  CHECK(reset(0ns) == "0");
  CHECK(reset(1ns) == "1");
  CHECK(reset(999ms) == "1");
  CHECK(reset(1s) == "1");
  CHECK(reset(1001ms) == "2");
  CHECK(reset(60s) == "60");
}

TEST_CASE("X-RateLimit-Reset in epoch form counts from the wall clock") {
  header_options options;
  options.reset_epoch = true;
  auto reset = [&](auto wall, nanos r) {
    return header(render(allowed(20, 5, r), options, wall), "X-RateLimit-Reset");
  };
  CHECK(reset(k_wall, 0ns) == "1700000000");
  CHECK(reset(k_wall, 2s) == "1700000002");
  CHECK(reset(k_wall, 1500ms) == "1700000002");
  // 0.6 s past the second plus 0.5 s is 1.1 s: rounded up to the next whole second.
  CHECK(reset(k_wall + 600ms, 500ms) == "1700000002");
  CHECK(reset(k_wall + 200ms, 500ms) == "1700000001");
  // Retry-After stays relative: it is defined in seconds from now.
  auto h = render(denied(20, 3s, 1500ms), options);
  CHECK(header(h, "Retry-After") == "2");
}

TEST_CASE("the IETF draft headers, when asked for") {
  header_options options;
  options.ietf_draft = true;
  auto h = render(allowed(100, 40, 29500ms), options);
  CHECK(header(h, "RateLimit-Policy") == R"("burst";q=100;w=60)");
  CHECK(header(h, "RateLimit") == R"("burst";r=40;t=30)");
  CHECK(header(h, "X-RateLimit-Limit") == "100");

  SUBCASE("no window: no w parameter") {
    header_list out;
    render_rate_limit_headers(allowed(5, 5, 0ns), "conc", 0, options, k_wall, out);
    CHECK(header(out, "RateLimit-Policy") == R"("conc";q=5)");
    CHECK(header(out, "RateLimit") == R"("conc";r=5;t=0)");
  }
  SUBCASE("names are structured-field strings") {
    header_list out;
    render_rate_limit_headers(allowed(5, 5, 0ns), "a\"b\\c\n\xc3\xa9", 10, options, k_wall, out);
    CHECK(header(out, "RateLimit-Policy") == R"("a\"b\\c???";q=5;w=10)");
  }
  SUBCASE("t stays in seconds from now even in epoch mode") {
    options.reset_epoch = true;
    auto e = render(allowed(100, 40, 29500ms), options);
    CHECK(header(e, "RateLimit") == R"("burst";r=40;t=30)");
  }
}

TEST_CASE("hidden headers: nothing but Retry-After on a denial") {
  header_options options;
  options.enabled = false;
  options.ietf_draft = true;
  CHECK(render(allowed(20, 5, 1s), options).empty());
  auto h = render(denied(20, 3s, 1500ms), options);
  REQUIRE(h.size() == 1);
  CHECK(header(h, "Retry-After") == "2");
}

TEST_CASE("a denied response carries all headers") {
  auto h = render(denied(20, 20s, 100ms));
  CHECK(header(h, "X-RateLimit-Limit") == "20");
  CHECK(header(h, "X-RateLimit-Remaining") == "0");
  CHECK(header(h, "X-RateLimit-Reset") == "20");
  CHECK(header(h, "Retry-After") == "1");
}

TEST_CASE("the 429 body is problem+json with route, policy and retry_after") {
  auto body = render_problem_body("search", "burst", denied(20, 20s, 2500ms));
  auto j = nlohmann::json::parse(body);
  CHECK(j.at("type") == "about:blank");
  CHECK(j.at("title") == "Too Many Requests");
  CHECK(j.at("status") == 429);
  CHECK(j.at("route") == "search");
  CHECK(j.at("policy") == "burst");
  CHECK(j.at("retry_after") == 3);
  CHECK(j.at("detail") == "Limit \"burst\" of route \"search\" exceeded; retry in 3 seconds.");
  CHECK(k_problem_content_type == "application/problem+json");

  SUBCASE("retry_after agrees with Retry-After, at least 1") {
    auto zero = nlohmann::json::parse(render_problem_body("r", "p", denied(1, 0ns, 0ns)));
    CHECK(zero.at("retry_after") == 1);
    CHECK(zero.at("detail") == "Limit \"p\" of route \"r\" exceeded; retry in 1 second.");
  }
  SUBCASE("names are escaped, whatever the config holds") {
    std::string odd = "we\"ird\\name\n\t\x01 \xc3\xa9 \xff";
    auto j2 = nlohmann::json::parse(render_problem_body(odd, "é", denied(1, 1s, 1s)));
    CHECK(j2.at("route") == "we\"ird\\name\n\t\x01 \xc3\xa9 \xef\xbf\xbd");
    CHECK(j2.at("policy") == "é");
  }
}

TEST_CASE("the 429 body is the same, byte for byte, whichever body this thread rendered last") {
  const std::string search =
      R"({"type":"about:blank","title":"Too Many Requests","status":429,)"
      R"("detail":"Limit \"burst\" of route \"search\" exceeded; retry in 3 seconds.",)"
      R"("route":"search","policy":"burst","retry_after":3})";
  const std::string upload =
      R"({"type":"about:blank","title":"Service Unavailable","status":503,)"
      R"("detail":"Limit \"q\\\"\" of route \"upload\" exceeded; retry in 1 second.",)"
      R"("route":"upload","policy":"q\\\"","retry_after":1})";
  for (int round = 0; round < 3; ++round) {
    CHECK(render_problem_body("search", "burst", denied(20, 20s, 2500ms)) == search);
    CHECK(render_problem_body("search", "burst", denied(20, 20s, 2500ms)) == search);
    CHECK(render_problem_body("upload", "q\\\"", denied(1, 1s, 1s), 503) == upload);
    // The same names with another status, then the first again.
    CHECK(render_problem_body("search", "burst", denied(20, 20s, 2500ms), 503)
              .find(R"("status":503)") != std::string::npos);
  }
  decision never = denied(5, 3s, k_never);
  never.impossible = true;
  CHECK(render_problem_body("search", "burst", never) ==
        R"({"type":"about:blank","title":"Too Many Requests","status":429,)"
        R"("detail":"Limit \"burst\" of route \"search\" can never admit a request of this )"
        R"(cost; retrying will not help.","route":"search","policy":"burst","retry_after":null})");
  CHECK(render_problem_body("search", "burst", denied(20, 20s, 2500ms)) == search);
}

TEST_CASE("a request no wait can admit: 429 without Retry-After, and the body says why") {
  decision d = denied(5, 3s, k_never);
  d.impossible = true;
  auto h = render(d);
  CHECK(header(h, "X-RateLimit-Limit") == "5");
  CHECK_FALSE(header(h, "Retry-After").has_value());
  auto j = nlohmann::json::parse(render_problem_body("upload", "bytes", d));
  CHECK(j.at("retry_after").is_null());
  CHECK(j.at("detail") ==
        "Limit \"bytes\" of route \"upload\" can never admit a request of this cost; retrying "
        "will not help.");
}
