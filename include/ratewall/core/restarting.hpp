#pragma once

// A loop the gateway cannot do without (a listener's accept loop) started again should it ever
// end by an exception, as nginx's and HAProxy's listeners keep accepting whatever one
// connection's setup met.

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <chrono>
#include <exception>
#include <string_view>

#include "ratewall/core/log.hpp"
#include "ratewall/core/use_tuple.hpp"

namespace ratewall {

/// Awaits the coroutine `run()` makes until it returns. Should it end by an exception, logs it
/// ("<context> ended by an exception: <what()>; started again") and after `pause` awaits a new
/// one, unless `stopped()` says the loop was meant to end (its acceptor closed by a stop).
template <class Run, class Stopped>
boost::asio::awaitable<void> run_restarting(std::string_view context, Run run, Stopped stopped,
                                            std::chrono::steady_clock::duration pause) {
  for (;;) {
    std::exception_ptr failure;
    try {
      co_await run();
    } catch (...) {
      failure = std::current_exception();
    }
    if (!failure || stopped()) {
      co_return;
    }
    log_exception(context, failure, "started again");
    boost::asio::steady_timer timer(co_await boost::asio::this_coro::executor, pause);
    co_await timer.async_wait(use_tuple);
  }
}

}  // namespace ratewall
