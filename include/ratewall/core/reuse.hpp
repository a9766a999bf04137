#pragma once

#include <cstddef>

namespace ratewall {

/// Empties `c` for its next use, keeping its storage unless that holds more than `most`
/// elements: a buffer reused for every message keeps the room of a usual one, not that of the
/// largest it ever held. A template for any container with capacity(), clear() and swap().
template <class Container>
void clear_keeping(Container& c, std::size_t most) {
  if (c.capacity() > most) {
    Container().swap(c);
  } else {
    c.clear();
  }
}

}  // namespace ratewall
