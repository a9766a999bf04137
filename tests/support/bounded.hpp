#pragma once

#include <boost/asio/error.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/system/error_code.hpp>
#include <chrono>

namespace ratewall::testing {

/// Runs the one asynchronous operation `start` begins on `ioc` (start is handed the completion
/// handler) for at most 10 s; past that `on_timeout` closes what the operation waits on, and the
/// result is timed_out. For test clients that must be able to fail but never hang.
template <class Start, class OnTimeout>
boost::system::error_code bounded(boost::asio::io_context& ioc, Start start, OnTimeout on_timeout) {
  boost::system::error_code result;
  bool done = false;
  start([&](boost::system::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  ioc.restart();
  ioc.run_for(std::chrono::seconds(10));
  if (!done) {
    on_timeout();
    ioc.restart();
    ioc.run_for(std::chrono::seconds(1));  // the cancelled operation ends; `result` outlives it
    return boost::asio::error::timed_out;
  }
  return result;
}

}  // namespace ratewall::testing
