// shared_value: threads that load while another replaces see whole values, in the order they
// were stored, each alive while held. Under ThreadSanitizer (scripts/sanitize.sh tsan) this is
// also the race test: with std::atomic<std::shared_ptr> from libstdc++ 12 in its place, TSan
// reports the store's write of the pointer racing with a load's read.

#include "ratewall/core/shared_value.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

using namespace ratewall;

namespace {

// Two copies of one number: a reader that saw them differ saw a value half written or freed.
struct numbered {
  explicit numbered(std::uint64_t n) : first(n), second(n) {}
  ~numbered() { first = second + 1; }
  std::uint64_t first;
  std::uint64_t second;
};

}  // namespace

TEST_CASE("shared_value starts empty and gives back what was stored") {
  shared_value<numbered> v;
  CHECK(v.load() == nullptr);
  auto one = std::make_shared<const numbered>(1);
  v.store(one);
  CHECK(v.load() == one);
  v.store(nullptr);
  CHECK(v.load() == nullptr);
  CHECK(one->first == 1);  // the caller's copy outlives the replacement
}

TEST_CASE("shared_value: loads racing a writer see whole values, never going back") {
  constexpr std::uint64_t k_stores = 20'000;
  shared_value<numbered> v;
  v.store(std::make_shared<const numbered>(0));
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> torn{0};
  std::atomic<std::uint64_t> backwards{0};
  std::atomic<std::uint64_t> loads{0};
  std::atomic<int> started{0};

  auto reader = [&] {
    std::uint64_t last = 0;
    bool counted = false;
    while (!done.load(std::memory_order_acquire)) {
      std::shared_ptr<const numbered> p = v.load();
      if (p->first != p->second) {
        torn.fetch_add(1, std::memory_order_relaxed);
      }
      if (p->first < last) {
        backwards.fetch_add(1, std::memory_order_relaxed);
      }
      last = p->first;
      loads.fetch_add(1, std::memory_order_relaxed);
      if (!counted) {
        started.fetch_add(1, std::memory_order_release);  // it has loaded once
        counted = true;
      }
    }
  };
  std::vector<std::thread> readers;
  readers.emplace_back(reader);
  readers.emplace_back(reader);
  // The stores start once each reader has loaded: on a busy machine (CI runs tests two at a
  // time on two cores) the writer could otherwise finish before either was scheduled.
  while (started.load(std::memory_order_acquire) < 2) {
    std::this_thread::yield();
  }
  for (std::uint64_t n = 1; n <= k_stores; ++n) {
    v.store(std::make_shared<const numbered>(n));
  }
  done.store(true, std::memory_order_release);
  for (auto& t : readers) {
    t.join();
  }
  CHECK(torn.load() == 0);
  CHECK(backwards.load() == 0);
  CHECK(loads.load() > 0);
  CHECK(v.load()->first == k_stores);
}
