#include "ratewall/proxy/h2_memory.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>

#include "ratewall/proxy/message.hpp"

namespace ratewall {

namespace {

// Before each block, the size it was asked for, in as many bytes as malloc aligns to, so that
// what nghttp2 gets keeps that alignment.
constexpr std::size_t k_prefix = alignof(std::max_align_t);
static_assert(k_prefix >= sizeof(std::size_t));
static_assert(__STDCPP_DEFAULT_NEW_ALIGNMENT__ >= k_prefix, "block_pool's blocks are aligned");

std::size_t& size_of(void* user) {
  return *reinterpret_cast<std::size_t*>(static_cast<char*>(user) - k_prefix);
}

void* take(std::size_t size) noexcept {
  if (size > SIZE_MAX - k_prefix) {
    return nullptr;
  }
  try {
    char* block = static_cast<char*>(block_pool::take(size + k_prefix));
    *reinterpret_cast<std::size_t*>(block) = size;
    return block + k_prefix;
  } catch (const std::bad_alloc&) {
    return nullptr;  // nghttp2 answers NGHTTP2_ERR_NOMEM
  }
}

void give(void* user) noexcept {
  if (user != nullptr) {
    block_pool::give(static_cast<char*>(user) - k_prefix, size_of(user) + k_prefix);
  }
}

void* on_malloc(std::size_t size, void*) {
  return take(size);
}

void on_free(void* ptr, void*) {
  give(ptr);
}

void* on_calloc(std::size_t count, std::size_t size, void*) {
  if (size != 0 && count > SIZE_MAX / size) {
    return nullptr;
  }
  void* user = take(count * size);
  if (user != nullptr) {
    std::memset(user, 0, count * size);
  }
  return user;
}

void* on_realloc(void* ptr, std::size_t size, void*) {
  if (ptr == nullptr) {
    return take(size);
  }
  void* moved = take(size);
  if (moved == nullptr) {
    return nullptr;  // the old block stays the caller's, as with realloc
  }
  std::memcpy(moved, ptr, std::min(size, size_of(ptr)));
  give(ptr);
  return moved;
}

nghttp2_mem g_memory{nullptr, on_malloc, on_free, on_calloc, on_realloc};

}  // namespace

nghttp2_mem* h2_memory() {
  return &g_memory;
}

}  // namespace ratewall
