#pragma once

#include <chrono>
#include <thread>

namespace ratewall::testing {

/// Polls `done` every 10 ms for at most `limit`: for what the gateway does a moment after the
/// test's own step (a slot coming back, a connection closing).
template <class F>
bool eventually(F done, std::chrono::milliseconds limit = std::chrono::seconds(5)) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < end) {
    if (done()) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done();
}

}  // namespace ratewall::testing
