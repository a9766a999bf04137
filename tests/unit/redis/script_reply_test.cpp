// The limiter script's replies as the Redis store reads them: Redis is outside input, so every
// value is checked, and anything the script cannot produce is a store error (on_store_error
// decides), never a decision.

#include <doctest/doctest.h>

#include <optional>
#include <string>
#include <vector>

#include "ratewall/redis/reply.hpp"
#include "ratewall/redis/scripts.hpp"

using namespace ratewall;
using namespace ratewall::redis;

namespace {

reply parse(const std::string& bytes) {
  reply_reader reader;
  reader.feed(bytes.data(), bytes.size());
  reply r;
  REQUIRE(reader.next(r) == reply_reader::status::reply);
  return r;
}

std::string integer(long long v) {
  return ":" + std::to_string(v) + "\r\n";
}
// An array of the RESP values in `parts` (each part holds one or more whole values).
std::string array(const std::vector<std::string>& parts) {
  std::string body;
  for (const std::string& p : parts) {
    body += p;
  }
  reply_reader reader;
  reader.feed(body.data(), body.size());
  std::size_t n = 0;
  for (reply r; reader.next(r) == reply_reader::status::reply;) {
    ++n;
  }
  return "*" + std::to_string(n) + "\r\n" + body;
}
std::string row(long long packed, long long reset_us, long long wait_us) {
  return integer(packed) + integer(reset_us) + integer(wait_us);
}

// As the store reads the reply to one request: an array of its decisions.
std::optional<std::vector<decision>> decisions_of(const reply& r, std::span<const policy> limits,
                                                  std::size_t rows) {
  if (r.type != reply::kind::array) {
    return std::nullopt;
  }
  return decode_decisions(r.elements, limits, rows);
}

policy limit_of(std::uint64_t limit) {
  policy p;
  p.algo = algorithm::fixed_window;
  p.limit = limit;
  p.window = std::chrono::seconds(1);
  return p;
}

constexpr long long k_span = 1LL << 50;  // k_max_reply_span_us
constexpr long long k_int64_max = 9'223'372'036'854'775'807LL;
constexpr long long k_int64_min = -k_int64_max - 1;

}  // namespace

TEST_CASE("script replies: hostile values are store errors, the script's own are decisions") {
  static_assert(k_span == k_max_reply_span_us);
  const policy five = limit_of(5);
  const std::vector<policy> one{five};
  const std::vector<policy> two{five, limit_of(2)};

  struct decoded {
    bool allowed;
    bool impossible;
    std::uint64_t remaining;
    nanos reset_after;
    nanos retry_after;
    nanos delay;
  };
  struct row_case {
    const char* what;
    std::string bytes;                  // the reply, as Redis would send it
    const std::vector<policy>* limits;  // of the request
    std::size_t rows;                   // per limit: 1 to check, 2 for status
    std::optional<decoded> expect;      // nullopt: a store error
  };
  using std::chrono::microseconds;
  const auto us = [](long long v) { return nanos{microseconds(v)}; };
  const std::vector<row_case> table{
      // What the script sends.
      {"allowed, 4 left", array({row(4 * 4 + 1, 1000, 0)}), &one, 1,
       decoded{true, false, 4, us(1000), nanos{0}, nanos{0}}},
      {"allowed with a delay (leaky bucket)", array({row(1, 10, 250)}), &one, 1,
       decoded{true, false, 0, us(10), nanos{0}, us(250)}},
      {"denied, retry in 1 ms", array({row(0, 5000, 1000)}), &one, 1,
       decoded{false, false, 0, us(5000), us(1000), nanos{0}}},
      {"impossible: never", array({row(5 * 4 + 2, 0, -1)}), &one, 1,
       decoded{false, true, 5, nanos{0}, k_never, nanos{0}}},
      {"the longest spans", array({row(0, k_span, k_span)}), &one, 1,
       decoded{false, false, 0, us(k_span), us(k_span), nanos{0}}},
      {"remaining = limit", array({row(5 * 4 + 1, 0, 0)}), &one, 1,
       decoded{true, false, 5, nanos{0}, nanos{0}, nanos{0}}},
      {"two limits", array({row(1, 1, 0), row(2 * 4 + 1, 1, 0)}), &two, 1,
       decoded{true, false, 0, us(1), nanos{0}, nanos{0}}},
      {"status: two rows", array({row(5 * 4 + 1, 0, 0), row(4 * 4 + 1, 9, 0)}), &one, 2,
       decoded{true, false, 5, nanos{0}, nanos{0}, nanos{0}}},

      // Numbers the script cannot produce.
      {"packed negative", array({row(-1, 0, 0)}), &one, 1, std::nullopt},
      {"packed INT64_MIN", array({row(k_int64_min, 0, 0)}), &one, 1, std::nullopt},
      {"remaining above the limit", array({row(6 * 4 + 1, 0, 0)}), &one, 1, std::nullopt},
      {"remaining huge", array({row(k_int64_max, 0, 0)}), &one, 1, std::nullopt},
      {"allowed and impossible", array({row(3, 0, -1)}), &one, 1, std::nullopt},
      {"reset negative", array({row(1, -1, 0)}), &one, 1, std::nullopt},
      {"reset past the longest span", array({row(1, k_span + 1, 0)}), &one, 1, std::nullopt},
      {"reset INT64_MAX (ns overflow)", array({row(0, k_int64_max, 5)}), &one, 1, std::nullopt},
      {"denied, retry -1 but not impossible", array({row(0, 0, -1)}), &one, 1, std::nullopt},
      {"denied, retry -2", array({row(0, 0, -2)}), &one, 1, std::nullopt},
      {"denied, retry past the longest span", array({row(0, 0, k_span + 1)}), &one, 1,
       std::nullopt},
      {"denied, retry INT64_MAX", array({row(0, 0, k_int64_max)}), &one, 1, std::nullopt},
      {"impossible with a retry time", array({row(2, 0, 1000)}), &one, 1, std::nullopt},
      {"impossible with retry 0", array({row(2, 0, 0)}), &one, 1, std::nullopt},
      {"allowed, delay negative", array({row(1, 0, -5)}), &one, 1, std::nullopt},
      {"allowed, delay INT64_MIN", array({row(1, 0, k_int64_min)}), &one, 1, std::nullopt},
      {"allowed, delay past the longest span", array({row(1, 0, k_span + 1)}), &one, 1,
       std::nullopt},
      {"the second limit's remaining above its limit", array({row(1, 1, 0), row(3 * 4 + 1, 1, 0)}),
       &two, 1, std::nullopt},

      // Not three integers per decision.
      {"a bulk string for an integer", array({"$1\r\n5\r\n" + integer(0) + integer(0)}), &one, 1,
       std::nullopt},
      {"a status for an integer", array({integer(1) + "+OK\r\n" + integer(0)}), &one, 1,
       std::nullopt},
      {"nil for an integer", array({integer(1) + integer(0) + "$-1\r\n"}), &one, 1, std::nullopt},
      {"an error for an integer", array({integer(1) + "-ERR no\r\n" + integer(0)}), &one, 1,
       std::nullopt},
      {"an array for an integer", array({array({integer(1)}) + integer(0) + integer(0)}), &one, 1,
       std::nullopt},
      {"two values", array({integer(1) + integer(0)}), &one, 1, std::nullopt},
      {"four values", array({row(1, 0, 0) + integer(0)}), &one, 1, std::nullopt},
      {"empty", "*0\r\n", &one, 1, std::nullopt},
      {"one decision for two limits", array({row(1, 0, 0)}), &two, 1, std::nullopt},
      {"status: one row of two", array({row(1, 0, 0)}), &one, 2, std::nullopt},
      {"not an array: nil", "$-1\r\n", &one, 1, std::nullopt},
      {"not an array: nil array", "*-1\r\n", &one, 1, std::nullopt},
      {"not an array: an integer", integer(1), &one, 1, std::nullopt},
      {"not an array: an error", "-ERR boom\r\n", &one, 1, std::nullopt},
      {"not an array: a string", "$3\r\nabc\r\n", &one, 1, std::nullopt},
  };
  for (const row_case& c : table) {
    INFO(c.what);
    const std::optional<std::vector<decision>> got =
        decisions_of(parse(c.bytes), *c.limits, c.rows);
    if (!c.expect) {
      CHECK_FALSE(got.has_value());
      continue;
    }
    REQUIRE(got.has_value());
    REQUIRE(got->size() == c.limits->size() * c.rows);
    const decision& d = got->front();
    CHECK(d.allowed == c.expect->allowed);
    CHECK(d.impossible == c.expect->impossible);
    CHECK(d.limit == c.limits->front().limit);
    CHECK(d.remaining == c.expect->remaining);
    CHECK(d.reset_after == c.expect->reset_after);
    CHECK(d.retry_after == c.expect->retry_after);
    CHECK(d.delay == c.expect->delay);
  }
}
