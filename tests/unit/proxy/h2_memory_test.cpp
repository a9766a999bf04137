// The allocator nghttp2 sessions are created with (h2_memory.hpp).

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "ratewall/proxy/h2_memory.hpp"
#include "ratewall/proxy/message.hpp"

using namespace ratewall;

namespace {

void* mem_malloc(std::size_t n) {
  return h2_memory()->malloc(n, h2_memory()->mem_user_data);
}
void mem_free(void* p) {
  h2_memory()->free(p, h2_memory()->mem_user_data);
}
void* mem_calloc(std::size_t n, std::size_t size) {
  return h2_memory()->calloc(n, size, h2_memory()->mem_user_data);
}
void* mem_realloc(void* p, std::size_t n) {
  return h2_memory()->realloc(p, n, h2_memory()->mem_user_data);
}

}  // namespace

TEST_CASE("h2_memory: blocks are aligned as malloc's, and a freed one serves the next stream") {
  void* a = mem_malloc(152);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % alignof(std::max_align_t) == 0);
  std::memset(a, 0x5a, 152);
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("AddressSanitizer build: every block is its own allocation");
  mem_free(a);
#else
  const std::size_t before = block_pool::kept(152 + alignof(std::max_align_t));
  mem_free(a);
  CHECK(block_pool::kept(152 + alignof(std::max_align_t)) == before + 1);
  void* b = mem_malloc(150);  // the same class
  CHECK(b == a);
  mem_free(b);
#endif
  mem_free(nullptr);  // as free(NULL)
}

TEST_CASE("h2_memory: calloc zeroes a reused block, and refuses a size that overflows") {
  void* dirty = mem_malloc(200);
  REQUIRE(dirty != nullptr);
  std::memset(dirty, 0xab, 200);
  mem_free(dirty);
  auto* zeroed = static_cast<unsigned char*>(mem_calloc(10, 20));
  REQUIRE(zeroed != nullptr);
  for (std::size_t i = 0; i < 200; ++i) {
    REQUIRE(zeroed[i] == 0);
  }
  mem_free(zeroed);
  CHECK(mem_calloc(SIZE_MAX / 2, 3) == nullptr);
  CHECK(mem_malloc(SIZE_MAX - 4) == nullptr);
}

TEST_CASE(
    "h2_memory: realloc keeps the contents, growing past a class and the pool and shrinking") {
  void* empty = mem_realloc(nullptr, 0);  // as malloc(0): a block that can be freed
  CHECK(empty != nullptr);
  mem_free(empty);
  auto* p = static_cast<char*>(mem_realloc(nullptr, 40));
  REQUIRE(p != nullptr);
  const std::string text = "HPACK's table grows as it must";
  std::memcpy(p, text.data(), text.size());
  for (std::size_t size : {100U, 700U, 5000U, 20U}) {
    p = static_cast<char*>(mem_realloc(p, size));
    REQUIRE(p != nullptr);
    const std::size_t kept = std::min(text.size(), static_cast<std::size_t>(size));
    CHECK(std::string(p, kept) == text.substr(0, kept));
  }
  mem_free(p);
}
