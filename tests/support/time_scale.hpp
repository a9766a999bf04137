#pragma once

// Integration tests that bound a latency (a Redis deadline, a load phase) scale their times by
// RATEWALL_TEST_TIME_SCALE (default 1). The sanitizer stage sets it: AddressSanitizer and
// ThreadSanitizer slow the gateway several times over, which a millisecond bound cannot absorb.

#include <chrono>
#include <cstdlib>

namespace ratewall::testing {

inline int time_scale() {
  static const int scale = [] {
    const char* text = std::getenv("RATEWALL_TEST_TIME_SCALE");
    const int value = text != nullptr ? std::atoi(text) : 1;
    return value >= 1 ? value : 1;
  }();
  return scale;
}

/// `d` times the scale.
template <class Rep, class Period>
auto scaled(std::chrono::duration<Rep, Period> d) {
  return d * time_scale();
}

}  // namespace ratewall::testing
