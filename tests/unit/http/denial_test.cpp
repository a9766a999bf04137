// routes[].deny: the status, body and content type of a denied request.

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "ratewall/http/rate_limit_headers.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

decision denied_for(nanos retry) {
  decision d;
  d.allowed = false;
  d.limit = 10;
  d.retry_after = retry;
  d.reset_after = retry;
  return d;
}

}  // namespace

TEST_CASE("the default denial is 429 with the problem body") {
  const deny_config deny;  // the result views its content type: it must outlive `out`
  denial out = render_denial(deny, "search", "burst", denied_for(1500ms));
  CHECK(out.status == 429);
  CHECK(out.content_type == "application/problem+json");
  CHECK(out.body == render_problem_body("search", "burst", denied_for(1500ms)));
  auto j = nlohmann::json::parse(out.body);
  CHECK(j["status"] == 429);
  CHECK(j["title"] == "Too Many Requests");
  CHECK(j["retry_after"] == 2);
}

TEST_CASE("another status keeps the problem body, with that status and its reason") {
  deny_config deny;
  deny.status = 503;
  denial out = render_denial(deny, "export", "in-flight", denied_for(1s));
  CHECK(out.status == 503);
  auto j = nlohmann::json::parse(out.body);
  CHECK(j["status"] == 503);
  CHECK(j["title"] == "Service Unavailable");
  CHECK(j["policy"] == "in-flight");
}

TEST_CASE("a custom body is sent as configured") {
  deny_config deny;
  deny.status = 403;
  deny.body = "quota exceeded\n";
  deny.content_type = "text/plain; charset=utf-8";
  denial out = render_denial(deny, "search", "burst", denied_for(1s));
  CHECK(out.status == 403);
  CHECK(out.content_type == "text/plain; charset=utf-8");
  CHECK(out.body == "quota exceeded\n");
}

TEST_CASE("reason phrases of denial statuses") {
  CHECK(denial_reason(429) == "Too Many Requests");
  CHECK(denial_reason(403) == "Forbidden");
  CHECK(denial_reason(418) == "Request Denied");
  CHECK(denial_reason(599) == "Request Denied");
}
