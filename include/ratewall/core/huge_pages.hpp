#pragma once

// Large arrays filled once, front to back (a replayed trace's million requests), fault in a
// 4 KiB page at a time: on a VM a fault costs microseconds, and the faults cost more than
// the work. Asking for transparent huge pages on the array's untouched memory makes it one
// fault per 2 MiB. Debian's default (`madvise`) gives them only to memory that asks.

#include <cstddef>
#include <vector>

namespace ratewall {

/// Asks for huge pages on the whole pages inside [data, data + bytes). A hint: nothing
/// happens where the kernel has none or the range holds no whole huge page.
void advise_huge_pages(void* data, std::size_t bytes);

/// v.reserve(count), then the hint on the new, untouched buffer.
template <class T>
void reserve_huge(std::vector<T>& v, std::size_t count) {
  v.reserve(count);
  advise_huge_pages(v.data(), v.capacity() * sizeof(T));
}

}  // namespace ratewall
