#pragma once

#include <memory>
#include <mutex>
#include <utility>

namespace ratewall {

/// A shared_ptr<const T> that threads read and replace: load() gives the current value, which
/// stays alive as long as the caller holds it; store() replaces it for later loads.
///
/// Not std::atomic<std::shared_ptr>: libstdc++ 12's load() reads the pointer under a lock bit
/// that it then clears with a relaxed store, so a store() on another thread, which writes the
/// pointer after taking that bit, is not ordered after the read. That is a data race by the C++
/// memory model, and ThreadSanitizer reports it. A mutex held for a pointer copy costs about
/// as much as the lock bit did.
template <class T>
class shared_value {
 public:
  std::shared_ptr<const T> load() const {
    std::lock_guard lock(mutex_);
    return value_;
  }

  void store(std::shared_ptr<const T> value) {
    std::lock_guard lock(mutex_);
    value_.swap(value);
    // The old value, now in `value`, is released after the lock: its destructor may be long.
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const T> value_;
};

}  // namespace ratewall
