// The error log's report of an exception that ended one of the gateway's coroutines
// (log_failure, co_spawn's completion in place of asio::detached, which drops it unseen).

#include <doctest/doctest.h>

#include <stdexcept>
#include <string>

#include "ratewall/core/log.hpp"
#include "support/stderr_of.hpp"

using namespace ratewall;
using ratewall::testing::stderr_of;

TEST_CASE("log_failure: an exception is logged as an error naming what it ended; none, nothing") {
  const log_failure completion{"HTTP/2 stream"};
  const std::string thrown =
      stderr_of([&] { completion(std::make_exception_ptr(std::runtime_error("boom"))); });
  CHECK(thrown.find(" error HTTP/2 stream ended by an exception: boom\n") != std::string::npos);
  const std::string odd = stderr_of([&] { completion(std::make_exception_ptr(42)); });
  CHECK(odd.find("HTTP/2 stream ended by an exception: (not a std::exception)") !=
        std::string::npos);
  CHECK(stderr_of([&] { completion(nullptr); }).empty());
}
