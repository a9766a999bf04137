#pragma once

// The HTTP messages the gateway parses, and where their fields and body pieces live (DESIGN §3).
//
// Beast keeps each field of a parsed message, and its start line, in a block of its own: a
// proxied request parses about nine, every one a malloc and a free. Their blocks come from
// `block_pool` instead, which keeps freed ones per thread for the next message. A body goes
// through a `relay_space`, whose 16 KiB buffers are kept the same way.

#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>

namespace ratewall {

/// Blocks of up to k_largest bytes, in classes of k_granule, kept for reuse by the thread that
/// freed them (at most k_kept a class; the rest, and larger blocks, go back to operator delete).
/// A block freed on another thread than the one that took it simply joins that thread's lists.
class block_pool {
 public:
  static constexpr std::size_t k_granule = 64;
  static constexpr std::size_t k_largest = 512;
  static constexpr std::size_t k_kept = 256;

  static void* take(std::size_t bytes);
  static void give(void* block, std::size_t bytes) noexcept;
  /// Blocks this thread keeps in the class that serves `bytes` (for tests).
  static std::size_t kept(std::size_t bytes);
};

/// A stateless allocator over block_pool: every instance is interchangeable.
template <class T>
struct pooled_allocator {
  using value_type = T;

  pooled_allocator() noexcept = default;
  template <class U>
  pooled_allocator(const pooled_allocator<U>&) noexcept {}  // NOLINT: rebinding is implicit

  static_assert(alignof(T) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__, "blocks have new's alignment");

  T* allocate(std::size_t n) {
    if (n > SIZE_MAX / sizeof(T)) {
      throw std::bad_array_new_length();
    }
    return static_cast<T*>(block_pool::take(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { block_pool::give(p, n * sizeof(T)); }

  template <class U>
  bool operator==(const pooled_allocator<U>&) const noexcept {
    return true;
  }
};

/// The 16 KiB a body is relayed (or discarded) through, taken when first used and given back
/// when the connection goes idle between requests: a kept-alive connection that waits for its
/// next request does not hold it, and one whose requests are answered by the gateway itself
/// (429) never takes one. Given-back buffers are kept by the thread for the next exchange
/// (at most k_kept; the rest are freed), so forwarding a request does not malloc and free
/// 16 KiB each time.
class relay_space {
 public:
  static constexpr std::size_t k_size = 16 * 1024;
  static constexpr std::size_t k_kept = 64;  // 1 MiB a thread at most

  char* data() {
    if (!buffer_) {
      buffer_.reset(take());
    }
    return buffer_.get();
  }
  static constexpr std::size_t size() { return k_size; }
  operator std::span<char>() { return {data(), k_size}; }
  void release() { buffer_.reset(); }

  /// Buffers this thread keeps (for tests).
  static std::size_t kept();

 private:
  struct give_back {
    void operator()(char* buffer) const noexcept;
  };
  static char* take();

  std::unique_ptr<char[], give_back> buffer_;
};

using fields = boost::beast::http::basic_fields<pooled_allocator<char>>;
using request_head = boost::beast::http::request_header<fields>;
using request_message = boost::beast::http::request<boost::beast::http::buffer_body, fields>;
using request_parser =
    boost::beast::http::parser<true, boost::beast::http::buffer_body, pooled_allocator<char>>;

}  // namespace ratewall
