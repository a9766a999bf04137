// The pools that keep a parsed message's field blocks and a body's relay buffers for the next
// message (message.hpp).

#include <doctest/doctest.h>

#include <boost/beast/http.hpp>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/proxy/message.hpp"

using namespace ratewall;
namespace http = boost::beast::http;

TEST_CASE("block_pool: a freed block serves the next request of its class") {
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("AddressSanitizer build: every block is its own allocation");
  void* a = block_pool::take(100);
  block_pool::give(a, 100);
  CHECK(block_pool::kept(100) == 0);
#else
  void* a = block_pool::take(100);
  const std::size_t before = block_pool::kept(100);
  block_pool::give(a, 100);
  CHECK(block_pool::kept(100) == before + 1);
  CHECK(block_pool::kept(65) == before + 1);  // the same class of 64: 65 to 128 bytes
  void* b = block_pool::take(128);
  CHECK(b == a);
  CHECK(block_pool::kept(100) == before);
  block_pool::give(b, 128);

  SUBCASE("blocks beyond the largest class are not kept") {
    void* big = block_pool::take(block_pool::k_largest + 1);
    block_pool::give(big, block_pool::k_largest + 1);
    CHECK(block_pool::kept(block_pool::k_largest + 1) == 0);
  }
  SUBCASE("a class keeps at most k_kept blocks") {
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < block_pool::k_kept + 10; ++i) {
      blocks.push_back(block_pool::take(300));
    }
    for (void* p : blocks) {
      block_pool::give(p, 300);
    }
    CHECK(block_pool::kept(300) == block_pool::k_kept);
  }
  SUBCASE("a block freed on another thread joins that thread's lists") {
    void* p = block_pool::take(200);
    std::size_t there = 0;
    std::thread other([&] {
      block_pool::give(p, 200);
      there = block_pool::kept(200);
    });
    other.join();
    CHECK(there == 1);
  }
#endif
}

TEST_CASE("relay_space: a buffer given back serves the thread's next relay") {
  relay_space a;
  const std::size_t before = relay_space::kept();
  CHECK(a.data() == a.data());  // one buffer for as long as the space holds it
  char* first = a.data();
  first[relay_space::k_size - 1] = 'x';
  const std::size_t held = relay_space::kept();  // one less when a kept buffer served
  CHECK(held <= before);
  a.release();
#if defined(__SANITIZE_ADDRESS__)
  MESSAGE("AddressSanitizer build: every buffer is its own allocation");
  CHECK(relay_space::kept() == 0);
#else
  CHECK(relay_space::kept() == held + 1);
  relay_space b;
  CHECK(b.data() == first);  // the kept buffer, not a new one
  CHECK(relay_space::kept() == held);

  SUBCASE("a space ended while it holds its buffer gives it back") {
    char* held_by_c = nullptr;
    {
      relay_space c;
      held_by_c = c.data();
    }
    relay_space d;
    CHECK(d.data() == held_by_c);
  }
  SUBCASE("a thread keeps at most k_kept buffers") {
    std::vector<relay_space> spaces(relay_space::k_kept + 5);
    for (relay_space& s : spaces) {
      s.data();
    }
    spaces.clear();
    CHECK(relay_space::kept() == relay_space::k_kept);
  }
  SUBCASE("a buffer given back on another thread is kept by that thread") {
    const std::size_t here = relay_space::kept();
    std::size_t there = 0;
    std::thread other([&] {
      b.release();
      there = relay_space::kept();
    });
    other.join();
    CHECK(there == 1);
    CHECK(relay_space::kept() == here);
  }
#endif
}

TEST_CASE("a message parsed with pooled fields reads as any other, message after message") {
  for (int round = 0; round < 3; ++round) {
    request_parser p;
    const std::string head = "GET /v1/items?x=" + std::to_string(round) +
                             " HTTP/1.1\r\nHost: a.example\r\nX-API-Key: k" +
                             std::to_string(round) + "\r\nX-Long: " + std::string(700, 'v') +
                             "\r\nContent-Length: 0\r\n\r\n";
    boost::system::error_code ec;
    p.put(boost::asio::buffer(head), ec);
    REQUIRE_FALSE(ec);
    REQUIRE(p.is_header_done());
    const auto& req = p.get();
    CHECK(req.target() == "/v1/items?x=" + std::to_string(round));
    CHECK(req[http::field::host] == "a.example");
    CHECK(req["x-api-key"] == "k" + std::to_string(round));
    CHECK(req["X-Long"] == std::string(700, 'v'));  // larger than any class: operator new
  }
}
