#include "ratewall/proxy/message.hpp"

#include <array>
#include <new>

namespace ratewall {

namespace {

constexpr std::size_t k_classes = block_pool::k_largest / block_pool::k_granule;

/// One thread's free blocks: a singly linked list per class, the link in the block itself.
struct free_lists {
  struct node {
    node* next;
  };
  std::array<node*, k_classes> head{};
  std::array<std::size_t, k_classes> count{};

  free_lists() = default;
  free_lists(const free_lists&) = delete;
  free_lists& operator=(const free_lists&) = delete;
  ~free_lists() {
    for (std::size_t c = 0; c < k_classes; ++c) {
      while (node* n = head[c]) {
        head[c] = n->next;
        ::operator delete(n);
      }
      count[c] = block_pool::k_kept;  // a block freed later on this thread is deleted at once
    }
  }
};

thread_local free_lists t_free;

// Under AddressSanitizer every block and relay buffer is its own allocation, so that a field
// used after its message is gone, or a buffer after its connection gave it back, is still
// reported.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool k_pooling = false;
#else
constexpr bool k_pooling = true;
#endif

/// One thread's relay buffers given back, each linking to the next through its first bytes.
struct kept_relays {
  struct node {
    node* next;
  };
  node* head = nullptr;
  std::size_t count = 0;

  kept_relays() = default;
  kept_relays(const kept_relays&) = delete;
  kept_relays& operator=(const kept_relays&) = delete;
  ~kept_relays() {
    while (node* n = head) {
      head = n->next;
      delete[] reinterpret_cast<char*>(n);
    }
    count = relay_space::k_kept;  // a buffer given back later on this thread is freed at once
  }
};

thread_local kept_relays t_relays;

std::size_t class_of(std::size_t bytes) {
  return bytes == 0 ? 0 : (bytes - 1) / block_pool::k_granule;
}

}  // namespace

void* block_pool::take(std::size_t bytes) {
  if (!k_pooling || bytes > k_largest) {
    return ::operator new(bytes);
  }
  const std::size_t c = class_of(bytes);
  free_lists& lists = t_free;
  if (free_lists::node* n = lists.head[c]) {
    lists.head[c] = n->next;
    --lists.count[c];
    return n;
  }
  return ::operator new((c + 1) * k_granule);
}

void block_pool::give(void* block, std::size_t bytes) noexcept {
  if (block == nullptr) {
    return;
  }
  if (!k_pooling || bytes > k_largest) {
    ::operator delete(block);
    return;
  }
  const std::size_t c = class_of(bytes);
  free_lists& lists = t_free;
  if (lists.count[c] >= k_kept) {
    ::operator delete(block);
    return;
  }
  lists.head[c] = ::new (block) free_lists::node{lists.head[c]};
  ++lists.count[c];
}

std::size_t block_pool::kept(std::size_t bytes) {
  return bytes > k_largest ? 0 : t_free.count[class_of(bytes)];
}

char* relay_space::take() {
  kept_relays& kept = t_relays;
  if (kept_relays::node* n = kept.head) {
    kept.head = n->next;
    --kept.count;
    return reinterpret_cast<char*>(n);
  }
  return new char[k_size];  // not zeroed: a piece is written before it is read
}

void relay_space::give_back::operator()(char* buffer) const noexcept {
  kept_relays& kept = t_relays;
  if (!k_pooling || kept.count >= k_kept) {
    delete[] buffer;
    return;
  }
  kept.head = ::new (buffer) kept_relays::node{kept.head};
  ++kept.count;
}

std::size_t relay_space::kept() {
  return t_relays.count;
}

}  // namespace ratewall
