// The pipelined Redis connection against a real redis-server: coalesced writes, a late reply
// dropped (never handed to the next call), AUTH and SELECT from the URL, a handshake that
// never ends bounded by connect_timeout, and reconnection after the server comes back.

#include <doctest/doctest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_future.hpp>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/redis/connection.hpp"
#include "support/redis_server.hpp"

using namespace ratewall;
using namespace ratewall::redis;
using namespace ratewall::testing;
using namespace std::chrono_literals;
namespace asio = boost::asio;
using steady = std::chrono::steady_clock;

namespace {

template <class T>
T run_on(asio::io_context& ioc, asio::awaitable<T> work) {
  std::future<T> f = asio::co_spawn(ioc, std::move(work), asio::use_future);
  while (f.wait_for(0s) != std::future_status::ready) {
    ioc.run_one_for(10ms);
  }
  return f.get();
}

std::shared_ptr<connection> connect_to(asio::io_context& ioc, std::uint16_t port,
                                       connection_options options,
                                       std::shared_ptr<connection_counters> counters) {
  return connection::create(ioc.get_executor(), {"127.0.0.1", port}, std::move(options),
                            std::move(counters));
}

}  // namespace

TEST_CASE("redis connection: calls of one loop turn share one write; replies come in order") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  asio::io_context ioc(1);
  auto counters = std::make_shared<connection_counters>();
  auto c = connect_to(ioc, server.port(), {}, counters);
  REQUIRE(run_on(ioc, c->call(format_command({"PING"}), 1, steady::now() + 2s)).status ==
          call_status::ok);
  const auto writes_before = counters->writes.load();

  // 200 calls started in the same turn of the loop.
  std::vector<std::future<call_result>> results;
  for (int i = 0; i < 200; ++i) {
    results.push_back(asio::co_spawn(
        ioc, c->call(format_command({"ECHO", std::to_string(i)}), 1, steady::now() + 2s),
        asio::use_future));
  }
  while (results.back().wait_for(0s) != std::future_status::ready) {
    ioc.run_one_for(10ms);
  }
  for (int i = 0; i < 200; ++i) {
    call_result r = results[static_cast<std::size_t>(i)].get();
    REQUIRE(r.status == call_status::ok);
    CHECK(r.replies[0].str == std::to_string(i));
  }
  CHECK(counters->writes.load() - writes_before <= 2);

  SUBCASE("several commands in one call: their replies together") {
    std::string two = format_command({"SET", "a", "1"});
    two += format_command({"GET", "a"});
    call_result r = run_on(ioc, c->call(std::move(two), 2, steady::now() + 2s));
    REQUIRE(r.status == call_status::ok);
    REQUIRE(r.replies.size() == 2);
    CHECK(r.replies[0].str == "OK");
    CHECK(r.replies[1].str == "1");
  }
}

TEST_CASE("redis connection: a call past its deadline times out; its late reply is dropped") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  asio::io_context ioc(1);
  auto counters = std::make_shared<connection_counters>();
  auto c = connect_to(ioc, server.port(), {}, counters);
  REQUIRE(
      run_on(ioc, c->call(format_command({"SET", "k", "first"}), 1, steady::now() + 2s)).status ==
      call_status::ok);

  // Another client freezes the server's answers to everyone else for 300 ms.
  server.call({"CLIENT", "PAUSE", "300", "ALL"});
  const auto start = steady::now();
  call_result slow = run_on(ioc, c->call(format_command({"GET", "k"}), 1, start + 50ms));
  CHECK(slow.status == call_status::timeout);
  CHECK(steady::now() - start < 250ms);
  CHECK(counters->timeouts.load() == 1);

  // The next call gets its own reply, not the GET's that arrives first.
  call_result next = run_on(ioc, c->call(format_command({"ECHO", "mine"}), 1, steady::now() + 2s));
  REQUIRE(next.status == call_status::ok);
  CHECK(next.replies[0].str == "mine");
  CHECK(counters->late_replies.load() == 1);
}

TEST_CASE("redis connection: AUTH and SELECT from the URL; a wrong password is refused") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server(redis_server::options{false, "s3cret"});
  asio::io_context ioc(1);
  auto counters = std::make_shared<connection_counters>();
  connection_options options;
  options.password = "s3cret";
  options.db = 3;
  auto c = connect_to(ioc, server.port(), options, counters);
  REQUIRE(
      run_on(ioc, c->call(format_command({"SET", "where", "db3"}), 1, steady::now() + 2s)).status ==
      call_status::ok);
  CHECK(server.call({"SELECT", "3"}).str == "OK");
  redis_client check(server.port());
  check.call({"AUTH", "s3cret"});
  check.call({"SELECT", "3"});
  CHECK(check.call({"GET", "where"}).str == "db3");

  options.password = "wrong";
  auto bad = connect_to(ioc, server.port(), options, counters);
  call_result r = run_on(ioc, bad->call(format_command({"PING"}), 1, steady::now() + 2s));
  CHECK(r.status == call_status::unavailable);
  CHECK(counters->connect_failures.load() == 1);
}

TEST_CASE(
    "redis connection: a server that accepts but never answers is bounded by the "
    "deadline, then by connect_timeout") {
  asio::io_context ioc(1);
  // Accepts connections and reads nothing: the AUTH of the handshake never gets a reply.
  asio::ip::tcp::acceptor silent(ioc, {asio::ip::make_address("127.0.0.1"), 0});
  std::vector<asio::ip::tcp::socket> held;
  std::function<void()> accept = [&] {
    silent.async_accept([&](boost::system::error_code ec, asio::ip::tcp::socket s) {
      if (!ec) {
        held.push_back(std::move(s));
        accept();
      }
    });
  };
  accept();
  auto counters = std::make_shared<connection_counters>();
  connection_options options;
  options.password = "x";
  options.connect_timeout = 300ms;
  auto c = connect_to(ioc, silent.local_endpoint().port(), options, counters);
  const auto start = steady::now();
  call_result r = run_on(ioc, c->call(format_command({"PING"}), 1, start + 50ms));
  CHECK(r.status == call_status::timeout);
  CHECK(steady::now() - start < 250ms);
  // The attempt itself gives up at connect_timeout, and calls are then refused at once.
  while (counters->connect_failures.load() == 0 && steady::now() - start < 3s) {
    ioc.run_one_for(10ms);
  }
  CHECK(counters->connect_failures.load() == 1);
  CHECK(steady::now() - start >= 300ms);
  call_result refused = run_on(ioc, c->call(format_command({"PING"}), 1, steady::now() + 1s));
  CHECK(refused.status == call_status::unavailable);
}

TEST_CASE("redis connection: the server killed and restarted: calls fail, then succeed again") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server server;
  asio::io_context ioc(1);
  auto counters = std::make_shared<connection_counters>();
  auto c = connect_to(ioc, server.port(), {}, counters);
  REQUIRE(run_on(ioc, c->call(format_command({"PING"}), 1, steady::now() + 2s)).status ==
          call_status::ok);
  server.kill();
  call_result down = run_on(ioc, c->call(format_command({"PING"}), 1, steady::now() + 2s));
  CHECK(down.status != call_status::ok);
  server.start();
  bool back = false;
  for (int i = 0; i < 200 && !back; ++i) {
    back = run_on(ioc, c->call(format_command({"PING"}), 1, steady::now() + 1s, true)).status ==
           call_status::ok;
    if (!back) {
      ioc.run_for(10ms);
    }
  }
  CHECK(back);
  CHECK(counters->connects.load() == 2);
}
