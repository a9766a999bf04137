#include "ratewall/proxy/upstream_pool.hpp"

#include <doctest/doctest.h>
#include <poll.h>
#include <unistd.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>
#include <thread>

#include "support/refusing_port.hpp"

using namespace ratewall;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

std::shared_ptr<const std::vector<target_addresses>> resolved(const upstream_config& cfg) {
  return std::make_shared<const std::vector<target_addresses>>(resolve_targets(cfg, "test.yaml"));
}

/// A pool towards a listener of the test's, with one connection released into it: the test
/// holds the upstream's end of it, and the loop has not run since the release, so the idle
/// watch has seen nothing yet, as when a pipelined request, or another client's, comes next.
struct pooled_connection {
  asio::io_context ioc;
  tcp::acceptor listener{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::shared_ptr<upstream_pool> pool;
  tcp::socket upstream_end{ioc};
  int gateway_fd = -1;  // the pooled connection's descriptor, to wait until bytes reach it

  pooled_connection() {
    upstream_config cfg;
    cfg.name = "api";
    cfg.targets = {endpoint{"127.0.0.1", listener.local_endpoint().port()}};
    pool = std::make_shared<upstream_pool>(ioc.get_executor(), cfg, resolved(cfg),
                                           std::make_shared<upstream_budget>(0));
    upstream_lease lease = acquire(false);
    REQUIRE(lease.connection != nullptr);
    listener.accept(upstream_end);
    gateway_fd = lease.connection->stream.socket().native_handle();
    pool->release(std::move(lease.connection));
  }

  /// What acquire(allow_reuse) gives, the loop run until it does.
  upstream_lease acquire(bool allow_reuse) {
    upstream_lease lease;
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { lease = co_await pool->acquire(allow_reuse); },
        asio::detached);
    ioc.run();
    ioc.restart();
    return lease;
  }

  /// Whether a new connection, given back at once, is kept for reuse (an upstream caught
  /// sending bytes no request asked for has its connections carry one request each).
  bool new_one_kept() {
    upstream_lease fresh = acquire(true);
    REQUIRE(fresh.connection != nullptr);
    CHECK_FALSE(fresh.connection->reused);
    const std::size_t before = pool->idle_count();
    pool->release(std::move(fresh.connection));
    return pool->idle_count() > before;
  }

  /// Takes the idle connection and gives it back with `left` buffered after its response.
  void give_back_with(std::string_view left) {
    upstream_lease lease = pool->reuse_idle();
    REQUIRE(lease.connection != nullptr);
    auto room = lease.connection->buffer.prepare(left.size());
    std::memcpy(room.data(), left.data(), left.size());
    lease.connection->buffer.commit(left.size());
    pool->release(std::move(lease.connection));
    CHECK(pool->idle_count() == 0);
  }

  /// Waits until what the upstream sent, or its FIN, has reached the pooled connection.
  void arrived() const {
    pollfd p{gateway_fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 2000) == 1);
  }
};

}  // namespace

/// A port on 127.0.0.1 whose connections hang: a listener with a backlog of one, filled and never
/// accepted, so the kernel drops further SYNs (as a route that leads nowhere does).
class hanging_port {
 public:
  hanging_port() : listener_(testing::bound_loopback_socket(port_)) {
    REQUIRE(::listen(listener_, 0) == 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port_);
    for (int& fd : fillers_) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
      ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
    }
  }
  ~hanging_port() {
    for (int fd : fillers_) {
      ::close(fd);
    }
    ::close(listener_);
  }
  std::uint16_t port() const { return port_; }

 private:
  std::uint16_t port_ = 0;
  int listener_;
  int fillers_[4] = {-1, -1, -1, -1};
};

/// A pool whose one target, "api.test", has two addresses: 127.0.0.1:`first_port`, then
/// 127.0.0.1:`second_port` or, without one, a listener of the test's (`answers`).
struct two_address_pool {
  asio::io_context ioc;
  tcp::acceptor answers{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
  std::shared_ptr<upstream_pool> pool;

  two_address_pool(std::uint16_t first_port, std::chrono::milliseconds connect_timeout,
                   std::optional<std::uint16_t> second_port = std::nullopt) {
    upstream_config cfg;
    cfg.name = "api";
    cfg.targets = {endpoint{"api.test", first_port}};
    cfg.connect_timeout = connect_timeout;
    const auto at = [](std::uint16_t port) {
      return tcp::endpoint(asio::ip::make_address("127.0.0.1"), port);
    };
    const tcp::endpoint second = second_port ? at(*second_port) : answers.local_endpoint();
    pool = std::make_shared<upstream_pool>(
        ioc.get_executor(), cfg,
        std::make_shared<const std::vector<target_addresses>>(
            std::vector<target_addresses>{{at(first_port), second}}),
        std::make_shared<upstream_budget>(0));
  }

  /// Asks for a new connection; how long the answer took.
  std::chrono::steady_clock::duration acquire_once(upstream_lease& lease) {
    asio::co_spawn(
        ioc, [&]() -> asio::awaitable<void> { lease = co_await pool->acquire(false); },
        asio::detached);
    const auto started = std::chrono::steady_clock::now();
    ioc.run();
    ioc.restart();
    return std::chrono::steady_clock::now() - started;
  }

  /// A new connection, checked to reach `answers`; how long it took.
  std::chrono::steady_clock::duration connect_once() {
    upstream_lease lease;
    const auto took = acquire_once(lease);
    REQUIRE(lease.connection != nullptr);
    CHECK(lease.connection->stream.socket().remote_endpoint() == answers.local_endpoint());
    return took;
  }
};

// RFC 8305's Connection Attempt Delay, which the pool waits before it tries the next address.
constexpr std::chrono::milliseconds k_attempt_delay(250);

TEST_CASE("upstream pool: a target's addresses are tried in turn, as a name's are") {
  // A name may give several addresses (localhost: ::1, then 127.0.0.1): an upstream that
  // listens on one of them only is still reached, as curl reaches it; a refusal moves on at
  // once, without waiting for the attempt delay.
  testing::refusing_port refused;
  two_address_pool p(refused.port(), std::chrono::seconds(5));
  CHECK(p.connect_once() < k_attempt_delay);
}

TEST_CASE(
    "upstream pool: an address that does not answer delays a connection once, by the "
    "attempt delay, not by connect_timeout") {
  // Happy Eyeballs: an attempt that has not answered in 250 ms is joined by one to the next
  // address, and the one that answered is tried first next time. A name whose first address
  // drops connections reached its second only after connect_timeout (before that, never).
  hanging_port hangs;
  const std::chrono::seconds timeout(5);
  two_address_pool p(hangs.port(), timeout);
  const auto first = p.connect_once();
  CHECK(first >= k_attempt_delay);  // the first address was given its delay
  CHECK(first < timeout);           // and not waited out
  // Straight to the address that answered: trying the first again would take the delay.
  CHECK(p.connect_once() < k_attempt_delay);
}

TEST_CASE(
    "upstream pool: no address answers: the connection fails as timed out once each "
    "attempt's connect_timeout has passed") {
  hanging_port first;
  hanging_port second;
  const std::chrono::milliseconds timeout(500);
  two_address_pool p(first.port(), timeout, second.port());
  upstream_lease lease;
  const auto took = p.acquire_once(lease);
  CHECK(lease.connection == nullptr);
  CHECK(lease.timed_out);  // 504, not 502
  // The second attempt began 250 ms after the first and had its own 500 ms.
  CHECK(took >= k_attempt_delay + timeout);
  CHECK(took < 2 * timeout + k_attempt_delay);
}

TEST_CASE("a name's addresses take turns by family, from the resolver's first") {
  // RFC 8305 §4: with three IPv6 addresses that lead nowhere before an IPv4 one that answers,
  // the IPv4 one is tried second (after one attempt delay), not fourth.
  const auto at = [](const char* address) {
    return tcp::endpoint(asio::ip::make_address(address), 80);
  };
  CHECK(interleave_families(
            {at("2001:db8::1"), at("2001:db8::2"), at("2001:db8::3"), at("192.0.2.1")}) ==
        target_addresses{at("2001:db8::1"), at("192.0.2.1"), at("2001:db8::2"), at("2001:db8::3")});
  CHECK(interleave_families({at("192.0.2.1"), at("192.0.2.2"), at("::1"), at("2001:db8::1")}) ==
        target_addresses{at("192.0.2.1"), at("::1"), at("192.0.2.2"), at("2001:db8::1")});
  CHECK(interleave_families({at("::1"), at("2001:db8::1")}) ==
        target_addresses{at("::1"), at("2001:db8::1")});
  CHECK(interleave_families({}).empty());
}

TEST_CASE("upstream pool: an idle connection is handed out only if nothing waits on it") {
  pooled_connection c;
  REQUIRE(c.pool->idle_count() == 1);

  SUBCASE("nothing sent: it is reused") {
    const upstream_lease lease = c.pool->reuse_idle();
    REQUIRE(lease.connection != nullptr);
    CHECK(lease.connection->reused);
  }
  SUBCASE("bytes after the last response, not seen by the idle watch yet: dropped") {
    asio::write(c.upstream_end, asio::buffer(std::string_view("HTTP/1.1 200 OK\r\n"
                                                              "Content-Length: 6\r\n\r\nstolen")));
    c.arrived();
    CHECK(c.pool->reuse_idle().connection == nullptr);
    CHECK(c.pool->idle_count() == 0);
    // Caught: for a while its connections carry one request each (HTTP/1.1 cannot tell which
    // request an answer is for, so a reused one could hand a response to the wrong client).
    CHECK_FALSE(c.new_one_kept());
  }
  SUBCASE("the upstream closed it: dropped, and the others are reused as before") {
    c.upstream_end.shutdown(tcp::socket::shutdown_send);
    c.arrived();
    CHECK(c.pool->reuse_idle().connection == nullptr);
    CHECK(c.new_one_kept());
  }
  SUBCASE("a 408 and the close, as an upstream ends an idle connection: not held against it") {
    asio::write(c.upstream_end, asio::buffer(std::string_view("HTTP/1.1 408 Request Timeout\r\n"
                                                              "Connection: close\r\n\r\n")));
    c.upstream_end.shutdown(tcp::socket::shutdown_send);
    c.arrived();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the FIN behind the bytes
    CHECK(c.pool->reuse_idle().connection == nullptr);
    CHECK(c.new_one_kept());
  }
  SUBCASE("a stray CRLF after a response when it is given back: dropped, not held against it") {
    c.give_back_with("\r\n");
    CHECK(c.new_one_kept());
  }
  SUBCASE("bytes buffered after a response when it is given back: no reuse for a while") {
    c.give_back_with("HTTP/");
    CHECK_FALSE(c.new_one_kept());
  }
  SUBCASE("the upstream closed it, not seen yet: dropped, and acquire connects anew") {
    c.upstream_end.shutdown(tcp::socket::shutdown_send);
    c.arrived();
    const upstream_lease lease = c.acquire(true);
    REQUIRE(lease.connection != nullptr);
    CHECK_FALSE(lease.connection->reused);  // a new connection, not the closed one
    CHECK(c.pool->idle_count() == 0);
  }
}
