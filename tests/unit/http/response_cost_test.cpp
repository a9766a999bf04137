// What an upstream's response reports as its cost (cost_from_response), including everything a
// broken or hostile upstream may send: each row the bytes and the exact answer.

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "ratewall/http/response_cost.hpp"

using namespace ratewall;

namespace {

constexpr std::uint64_t k_max64 = ~std::uint64_t{0};

cost_from_response_config header_source(std::uint64_t default_cost = 1,
                                        std::uint64_t max = 1000000) {
  cost_from_response_config c;
  c.from = cost_from_response_config::source::header;
  c.header = "X-Tokens-Used";
  c.default_cost = default_cost;
  c.max = max;
  return c;
}

cost_from_response_config json_source(std::vector<std::string> path,
                                      std::uint64_t max_body = 1024) {
  cost_from_response_config c;
  c.from = cost_from_response_config::source::json;
  c.json = std::move(path);
  c.default_cost = 7;
  c.max = 1000000;
  c.max_body = max_body;
  return c;
}

}  // namespace

TEST_CASE("a reported count: digits only, spaces around them") {
  struct row {
    const char* text;
    std::optional<std::uint64_t> value;
  };
  const row rows[] = {
      {"0", 0},
      {"42", 42},
      {" 42\t", 42},
      {"007", 7},
      {"18446744073709551615", k_max64},
      {"18446744073709551616", k_max64},  // beyond 64 bits: saturated, then clamped to max
      {"99999999999999999999999999", k_max64},
      {"", std::nullopt},
      {"   ", std::nullopt},
      {"-1", std::nullopt},
      {"+5", std::nullopt},
      {"1.5", std::nullopt},
      {"1e3", std::nullopt},
      {"0x10", std::nullopt},
      {"5 5", std::nullopt},
      {"five", std::nullopt},
      {"5;q=1", std::nullopt},
  };
  for (const row& r : rows) {
    CAPTURE(r.text);
    CHECK(parse_reported_cost(r.text) == r.value);
  }
}

TEST_CASE("a header source: the value of the final head, the default otherwise") {
  auto cost_of = [](std::vector<std::string_view> values) {
    response_cost rc(header_source(3, 5000));
    rc.header_values(values);
    return std::pair{rc.cost(), rc.reported()};
  };
  CHECK(cost_of({"120"}) == std::pair<std::uint64_t, bool>{120, true});
  CHECK(cost_of({}) == std::pair<std::uint64_t, bool>{3, false});          // missing
  CHECK(cost_of({"lots"}) == std::pair<std::uint64_t, bool>{3, false});    // garbage
  CHECK(cost_of({"-50"}) == std::pair<std::uint64_t, bool>{3, false});     // negative
  CHECK(cost_of({""}) == std::pair<std::uint64_t, bool>{3, false});        // empty
  CHECK(cost_of({"0"}) == std::pair<std::uint64_t, bool>{0, true});        // free is a value
  CHECK(cost_of({"9000"}) == std::pair<std::uint64_t, bool>{5000, true});  // clamped to max
  CHECK(cost_of({"99999999999999999999999"}) == std::pair<std::uint64_t, bool>{5000, true});
  // Twice, or as a list: the largest, when every value is a count; else nothing usable.
  CHECK(cost_of({"10", "30"}) == std::pair<std::uint64_t, bool>{30, true});
  CHECK(cost_of({"30, 10"}) == std::pair<std::uint64_t, bool>{30, true});
  CHECK(cost_of({"10", "x"}) == std::pair<std::uint64_t, bool>{3, false});
  CHECK(cost_of({"10,"}) == std::pair<std::uint64_t, bool>{3, false});
}

TEST_CASE("a JSON path: the count at it, or nothing") {
  const std::vector<std::string> path{"usage", "total_tokens"};
  struct row {
    std::string body;
    std::optional<std::uint64_t> value;
  };
  const std::string deep(100000, '[');
  const row rows[] = {
      {R"({"usage":{"total_tokens":1234}})", 1234},
      {R"({"id":"x","usage":{"prompt_tokens":5,"total_tokens":17,"extra":[1,2]},"z":null})", 17},
      {R"( {"usage" : { "total_tokens" : 0 } } )", 0},
      {R"({"total_tokens":5,"usage":{"other":{"total_tokens":9}}})", std::nullopt},  // elsewhere
      {R"({"usage":{"total_tokens":12.0}})", 12},       // an integral float counts
      {R"({"usage":{"total_tokens":1e30}})", k_max64},  // saturated, then clamped to max
      {R"({"usage":{"total_tokens":184467440737095516160}})", k_max64},
      {R"({"usage":{"total_tokens":12.5}})", std::nullopt},
      {R"({"usage":{"total_tokens":-3}})", std::nullopt},
      {R"({"usage":{"total_tokens":"12"}})", std::nullopt},
      {R"({"usage":{"total_tokens":true}})", std::nullopt},
      {R"({"usage":{"total_tokens":null}})", std::nullopt},
      {R"({"usage":{"total_tokens":{"n":3}}})", std::nullopt},  // a container, not a count
      {R"({"usage":{"total_tokens":[3]}})", std::nullopt},
      {R"({"usage":5})", std::nullopt},
      {R"({"usage":{}})", std::nullopt},
      // A duplicate key is found twice: the largest counts; any bad one spoils it.
      {R"({"usage":{"total_tokens":5,"total_tokens":40}})", 40},
      {R"({"usage":{"total_tokens":5},"usage":{"total_tokens":3}})", 5},
      {R"({"usage":{"total_tokens":5,"total_tokens":"x"}})", std::nullopt},
      {R"([{"usage":{"total_tokens":5}}])", std::nullopt},  // the root is an array
      // Not one JSON value: nothing, however much of it looked right.
      {R"({"usage":{"total_tokens":5}} trailing)", std::nullopt},
      {R"({"usage":{"total_tokens":5})", std::nullopt},
      {R"({"usage":{"total_tokens":5}}{"usage":{"total_tokens":5}})", std::nullopt},
      {"", std::nullopt},
      {"not json", std::nullopt},
      {"\xff\xfe{}", std::nullopt},
      {deep, std::nullopt},  // deeply nested: streamed, no recursion, no tree
  };
  for (const row& r : rows) {
    CAPTURE(r.body.substr(0, 80));
    CHECK(json_reported_cost(r.body, path) == r.value);
  }
}

TEST_CASE("a JSON path may index arrays") {
  const std::vector<std::string> path{"choices", "1", "tokens"};
  CHECK(json_reported_cost(R"({"choices":[{"tokens":4},{"tokens":9}]})", path) == 9);
  CHECK(json_reported_cost(R"({"choices":[{"tokens":4}]})", path) == std::nullopt);
  CHECK(json_reported_cost(R"({"choices":{"1":{"tokens":6}}})", path) == 6);
  CHECK(json_reported_cost(R"({"choices":[[1],{"tokens":2,"x":[{"tokens":8}]}]})", path) == 2);
}

TEST_CASE("a JSON source keeps only a bounded, declared-length JSON body") {
  response_cost rc(json_source({"n"}, 64));
  SUBCASE("a JSON body of declared length is read at its end") {
    CHECK(rc.keep_body(true, 8, "application/json; charset=utf-8"));
    rc.body_piece(R"({"n")");
    rc.body_piece(R"(:55})");
    CHECK(rc.cost() == 7);  // not yet: the default until the body has ended
    rc.body_end();
    CHECK(rc.reported());
    CHECK(rc.cost() == 55);
  }
  SUBCASE("+json types count") {
    CHECK(rc.keep_body(true, 7, "application/vnd.api+JSON"));
  }
  SUBCASE("anything else is not read: the default") {
    CHECK_FALSE(rc.keep_body(true, std::nullopt, "application/json"));  // streamed
    CHECK_FALSE(rc.keep_body(true, 65, "application/json"));            // above max_body
    CHECK_FALSE(rc.keep_body(true, 10, "text/plain"));
    CHECK_FALSE(rc.keep_body(true, 10, ""));
    CHECK_FALSE(rc.keep_body(false, 0, "application/json"));  // HEAD, 204, 304
    rc.body_piece(R"({"n":5})");
    rc.body_end();
    CHECK_FALSE(rc.reported());
    CHECK(rc.cost() == 7);
  }
  SUBCASE("a body longer than it declared is never kept beyond max_body") {
    REQUIRE(rc.keep_body(true, 64, "application/json"));
    rc.body_piece(std::string(100, ' '));
    rc.body_end();
    CHECK(rc.cost() == 7);
  }
  SUBCASE("a client that hangs up before the body has ended pays max, not the default") {
    REQUIRE(rc.keep_body(true, 8, "application/json"));
    rc.body_piece(R"({"n":5)");
    rc.client_gone();
    CHECK(rc.cost() == json_source({"n"}, 64).max);
  }
  SUBCASE("a client that hangs up on a body that was not kept pays the default") {
    REQUIRE_FALSE(rc.keep_body(true, std::nullopt, "application/json"));
    rc.client_gone();
    CHECK(rc.cost() == 7);
  }
  SUBCASE("a body cut short (no body_end) reports nothing") {
    REQUIRE(rc.keep_body(true, 8, "application/json"));
    rc.body_piece(R"({"n":5)");
    CHECK(rc.cost() == 7);
  }
}

TEST_CASE("JSON media types") {
  CHECK(is_json_media_type("application/json"));
  CHECK(is_json_media_type("Application/JSON ; charset=utf-8"));
  CHECK(is_json_media_type("application/problem+json"));
  CHECK_FALSE(is_json_media_type("application/jsonx"));
  CHECK_FALSE(is_json_media_type("text/json-ish"));
  CHECK_FALSE(is_json_media_type("application/x-ndjson"));
}
