// run_restarting: a loop the gateway cannot do without (a listener's accept loop) is started
// again after an exception, and ends when it returns or is meant to stop.

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <chrono>
#include <stdexcept>
#include <string>

#include "ratewall/core/restarting.hpp"
#include "support/stderr_of.hpp"

using namespace ratewall;
using ratewall::testing::stderr_of;
namespace asio = boost::asio;

namespace {

// A loop that throws on its first `failures` runs, then returns.
asio::awaitable<void> failing_run(int& runs, int failures) {
  ++runs;
  if (runs <= failures) {
    throw std::runtime_error("allocation failed");
  }
  co_return;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

}  // namespace

TEST_CASE("run_restarting: a loop ended by an exception is logged and started again") {
  asio::io_context ioc;
  int runs = 0;
  bool finished = false;
  const std::string log = stderr_of([&] {
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          co_await run_restarting(
              "accept loop", [&] { return failing_run(runs, 2); }, [] { return false; },
              std::chrono::milliseconds(1));
          finished = true;
        },
        asio::detached);
    ioc.run();
  });
  CHECK(runs == 3);
  CHECK(finished);
  CHECK(count(log,
              " error accept loop ended by an exception: allocation failed; started again\n") == 2);
}

TEST_CASE("run_restarting: a loop that returns, or fails once it is meant to stop, ends") {
  for (const bool stopped : {false, true}) {
    CAPTURE(stopped);
    asio::io_context ioc;
    int runs = 0;
    const int failures = stopped ? 1 : 0;
    const std::string log = stderr_of([&] {
      asio::co_spawn(ioc,
                     run_restarting(
                         "TLS accept loop", [&] { return failing_run(runs, failures); },
                         [stopped] { return stopped; }, std::chrono::milliseconds(1)),
                     asio::detached);
      ioc.run();
    });
    CHECK(runs == 1);
    CHECK(log.empty());
  }
}
