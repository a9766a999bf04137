// The error log's report of an exception that ended one of the gateway's coroutines
// (log_failure, co_spawn's completion in place of asio::detached, which drops it unseen).

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <stdexcept>
#include <string>

#include "ratewall/core/log.hpp"

using namespace ratewall;

namespace {

// What `f` writes to stderr (the error log's one destination).
template <class F>
std::string stderr_of(F f) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(file), STDERR_FILENO);
  f();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string out;
  std::rewind(file);
  char buffer[512];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) {
    out.append(buffer, n);
  }
  std::fclose(file);
  return out;
}

}  // namespace

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
