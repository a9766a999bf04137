// The TLS side of the transport (transport.hpp): ratewall's channel on one end of a real TCP
// connection on 127.0.0.1, an OpenSSL client on the other, run by a thread of the test. The
// client works through memory BIOs so the test decides how its bytes reach the socket: one at
// a time, or two records in one write.

// GCC 12's false positive on Asio's coroutine frames (see src/proxy/exchange.cpp).
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <doctest/doctest.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include <poll.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/buffers_to_string.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/proxy/transport.hpp"
#include "support/test_pki.hpp"

using namespace ratewall;
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

namespace {

constexpr auto k_token = asio::as_tuple(asio::use_awaitable);

/// An OpenSSL client on a blocking socket, its records passed by hand between the socket and
/// memory BIOs.
class memory_client {
 public:
  memory_client(tcp::endpoint server, int max_version = 0)
      : ctx_(SSL_CTX_new(TLS_client_method())), socket_(io_) {
    SSL_CTX_set_verify(ctx_, SSL_VERIFY_NONE, nullptr);
    if (max_version != 0) {
      SSL_CTX_set_max_proto_version(ctx_, max_version);
    }
    SSL_CTX_set_msg_callback(ctx_, &memory_client::on_message);
    ssl_ = SSL_new(ctx_);
    SSL_set_app_data(ssl_, this);
    in_ = BIO_new(BIO_s_mem());
    out_ = BIO_new(BIO_s_mem());
    SSL_set_bio(ssl_, in_, out_);
    SSL_set_connect_state(ssl_);
    socket_.connect(server);
    socket_.set_option(tcp::no_delay(true));
  }
  ~memory_client() {
    SSL_free(ssl_);
    SSL_CTX_free(ctx_);
  }

  /// The handshake; false with OpenSSL's reason when it failed.
  bool handshake(std::string& reason) {
    for (;;) {
      const int r = SSL_do_handshake(ssl_);
      send_all();
      if (r == 1) {
        return true;
      }
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ || !receive()) {
        reason = ERR_reason_error_string(ERR_peek_last_error()) != nullptr
                     ? ERR_reason_error_string(ERR_peek_last_error())
                     : "no reason";
        ERR_clear_error();
        return false;
      }
    }
  }
  /// Writes `text` as one record, into the output; send() takes it to the socket.
  void write(const std::string& text) { CHECK(SSL_write(ssl_, text.data(), int(text.size())) > 0); }
  void send_all() { send(SIZE_MAX); }
  /// The output, `chunk` bytes per system call, with a pause between so the other end sees
  /// records in pieces.
  void send(std::size_t chunk) {
    char buf[4096];
    int n = 0;
    std::string all;
    while ((n = BIO_read(out_, buf, sizeof buf)) > 0) {
      all.append(buf, std::size_t(n));
    }
    for (std::size_t at = 0; at < all.size(); at += chunk) {
      asio::write(socket_, asio::buffer(all.data() + at, std::min(chunk, all.size() - at)));
      if (chunk != SIZE_MAX) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }
  /// Reads until `size` bytes of text came (or the stream ended).
  std::string read(std::size_t size) {
    std::string text;
    char buf[4096];
    while (text.size() < size) {
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (n > 0) {
        text.append(buf, std::size_t(n));
        continue;
      }
      send_all();  // e.g. the answer to a KeyUpdate
      if (SSL_get_error(ssl_, n) != SSL_ERROR_WANT_READ || !receive()) {
        break;
      }
    }
    return text;
  }
  /// Reads records until the server's KeyUpdate has come; false if none came.
  bool wait_key_update() {
    char buf[64];
    for (;;) {
      const int n = SSL_read(ssl_, buf, sizeof buf);
      if (key_updates_received_ > 0) {
        return true;
      }
      if (n <= 0 && (SSL_get_error(ssl_, n) != SSL_ERROR_WANT_READ || !receive())) {
        return false;
      }
    }
  }
  /// TLS 1.2: asks for a new handshake and reads until the server answers; OpenSSL's reason.
  std::string renegotiate() {
    SSL_renegotiate(ssl_);
    std::string reason;
    for (int i = 0; i < 10; ++i) {
      const int r = SSL_do_handshake(ssl_);
      send_all();
      if (r == 1) {
        return "renegotiated";
      }
      if (SSL_get_error(ssl_, r) != SSL_ERROR_WANT_READ) {
        const char* text = ERR_reason_error_string(ERR_peek_last_error());
        reason = text != nullptr ? text : "no reason";
        ERR_clear_error();
        return reason;
      }
      if (!receive()) {
        return "nothing came";
      }
    }
    return "no end";
  }
  void close_notify() {
    SSL_shutdown(ssl_);
    send_all();
  }
  /// A KeyUpdate that asks for one back, sent at once.
  void send_key_update() {
    CHECK(SSL_key_update(ssl_, SSL_KEY_UPDATE_REQUESTED) == 1);
    CHECK(SSL_do_handshake(ssl_) == 1);
    send_all();
  }
  /// A FIN without close_notify; then waits for the server to close (closing with its session
  /// tickets unread would be a reset, not an end).
  void end_tcp() {
    socket_.shutdown(tcp::socket::shutdown_send);
    char buf[4096];
    error_code ec;
    while (!ec) {
      socket_.read_some(asio::buffer(buf), ec);
    }
  }
  int key_updates_received() const { return key_updates_received_; }

 private:
  /// False at the end, on an error, or when nothing came for 5 s: an answer that never comes
  /// fails the test instead of hanging it.
  bool receive() {
    pollfd p{socket_.native_handle(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) {
      return false;
    }
    char buf[4096];
    error_code ec;
    const std::size_t n = socket_.read_some(asio::buffer(buf), ec);
    if (ec) {
      return false;
    }
    BIO_write(in_, buf, int(n));
    return true;
  }
  static void on_message(int write_p, int, int content_type, const void* buf, std::size_t len,
                         SSL* ssl, void*) {
    // A handshake message received after the handshake: TLS 1.3's KeyUpdate is type 24.
    if (write_p == 0 && content_type == SSL3_RT_HANDSHAKE && len > 0 &&
        static_cast<const unsigned char*>(buf)[0] == SSL3_MT_KEY_UPDATE) {
      ++static_cast<memory_client*>(SSL_get_app_data(ssl))->key_updates_received_;
    }
  }

  SSL_CTX* ctx_;
  SSL* ssl_ = nullptr;
  BIO* in_ = nullptr;
  BIO* out_ = nullptr;
  asio::io_context io_;
  tcp::socket socket_;
  int key_updates_received_ = 0;
};

/// The gateway's end: a TLS server transport on the connection accepted, given to `serve`.
struct server_end {
  testing::test_pki pki;
  asio::io_context ioc;
  asio::ssl::context ctx{asio::ssl::context::tls_server};
  tcp::acceptor acceptor{ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};

  explicit server_end(int min_version = TLS1_3_VERSION) {
    const auto leaf = pki.issue("localhost", {"localhost"}, {"127.0.0.1"});
    ctx.use_certificate_chain_file(leaf.cert);
    ctx.use_private_key_file(leaf.key, asio::ssl::context::pem);
    SSL_CTX_set_min_proto_version(ctx.native_handle(), min_version);
    SSL_CTX_set_options(ctx.native_handle(), SSL_OP_NO_RENEGOTIATION);  // as server_tls
  }
  tcp::endpoint endpoint() const { return acceptor.local_endpoint(); }

  /// Accepts one connection, hands it to `serve` as a TLS transport, and runs the loop until it
  /// is done (bounded: the test fails rather than hangs).
  void run(std::function<asio::awaitable<void>(transport&)> serve) {
    asio::co_spawn(
        ioc,
        [&]() -> asio::awaitable<void> {
          tcp::socket s = co_await acceptor.async_accept(asio::use_awaitable);
          transport t(std::move(s), ctx);
          co_await serve(t);
        },
        asio::detached);
    ioc.run_for(std::chrono::seconds(10));
  }
};

/// Reads through the transport until `text` holds `size` bytes or the read fails.
asio::awaitable<error_code> read_text(transport& t, std::string& text, std::size_t size,
                                      std::size_t piece = 4096) {
  std::vector<char> buf(piece);
  while (text.size() < size) {
    auto [ec, n] = co_await t.async_read_some(asio::buffer(buf), k_token);
    if (ec) {
      co_return ec;
    }
    text.append(buf.data(), n);
  }
  co_return error_code{};
}

}  // namespace

TEST_CASE(
    "TLS transport: records that arrive a byte at a time are read whole; a long answer "
    "crosses in records; the peer's close_notify is the end of the stream") {
  server_end server;
  const std::string request =
      "GET / HTTP/1.1\r\nHost: a\r\nX-Padding: " + std::string(3000, 'p') + "\r\n\r\n";
  std::string answer;
  for (int i = 0; answer.size() < 100'000; ++i) {
    answer += std::to_string(i) + ",";
  }
  std::string got_request;
  std::string got_answer;
  std::string reason;
  error_code after;
  std::thread client([&] {
    memory_client c(server.endpoint());
    if (!c.handshake(reason)) {
      return;
    }
    c.write(request);
    c.send(1);  // one byte per system call
    got_answer = c.read(answer.size());
    c.close_notify();
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    REQUIRE_FALSE(co_await read_text(t, got_request, request.size()));
    auto [wec, n] = co_await asio::async_write(t, asio::buffer(answer), k_token);
    REQUIRE_FALSE(wec);
    CHECK(n == answer.size());
    std::string rest;
    after = co_await read_text(t, rest, 1);
    CHECK(rest.empty());
  });
  client.join();
  CHECK(reason.empty());
  CHECK(got_request == request);
  CHECK(got_answer == answer);
  CHECK(after == asio::error::eof);
}

TEST_CASE("TLS transport: a peer that closes TCP without close_notify is a truncated stream") {
  server_end server;
  error_code after;
  std::string reason;
  std::thread client([&] {
    memory_client c(server.endpoint());
    if (!c.handshake(reason)) {
      return;
    }
    c.write("partial");
    c.send_all();
    c.end_tcp();
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    std::string text;
    after = co_await read_text(t, text, 100);
    CHECK(text == "partial");
  });
  client.join();
  CHECK(after == asio::ssl::error::stream_truncated);
}

TEST_CASE("TLS transport: KeyUpdates that ask for one are answered while the gateway reads") {
  // OpenSSL answers one KeyUpdate with our next write, and writes the answer to the one before
  // while it reads the next: those must go out then, not pile up while the peer floods them.
  server_end server;
  std::string reason;
  std::string pong;
  bool answered = false;
  std::thread client([&] {
    memory_client c(server.endpoint());
    if (!c.handshake(reason)) {
      return;
    }
    for (int i = 0; i < 3; ++i) {
      c.send_key_update();
    }
    c.write("ping");
    c.send_all();
    answered = c.wait_key_update();  // before the server has written anything
    c.write("more");
    c.send_all();
    pong = c.read(4);
    c.close_notify();
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    std::string text;
    REQUIRE_FALSE(co_await read_text(t, text, 8));
    CHECK(text == "pingmore");
    auto [ec, n] = co_await asio::async_write(t, asio::buffer(std::string_view("pong")), k_token);
    CHECK_FALSE(ec);
  });
  client.join();
  CHECK(reason.empty());
  CHECK(answered);
  CHECK(pong == "pong");  // read with the keys the server moved to
}

TEST_CASE("TLS transport: a TLS 1.2 renegotiation is refused at once, while reading") {
  server_end server(TLS1_2_VERSION);
  std::string reason;
  std::string renegotiated;
  std::thread client([&] {
    memory_client c(server.endpoint(), TLS1_2_VERSION);
    if (!c.handshake(reason)) {
      return;
    }
    renegotiated = c.renegotiate();
    c.close_notify();
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    std::string text;
    co_await read_text(t, text, 1);  // the refusal is sent from inside this read
  });
  client.join();
  CHECK(reason.empty());
  CHECK(renegotiated == "no renegotiation");  // the server's alert, within the 5 s
}

TEST_CASE("TLS transport: two records in one segment; a small read leaves the second held") {
  server_end server;
  std::string reason;
  std::thread client([&] {
    memory_client c(server.endpoint());
    if (!c.handshake(reason)) {
      return;
    }
    c.write("a");
    c.write("b");
    c.send_all();  // both records in one write
    c.read(1);     // until the server ends
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    char one = 0;
    auto [ec, n] = co_await t.async_read_some(asio::buffer(&one, 1), k_token);
    REQUIRE_FALSE(ec);
    CHECK(one == 'a');
    // The second record came in the same segment: it is held here, where a wait on the socket
    // would not see it.
    CHECK(t.holds_unread_input());
    auto [ec2, n2] = co_await t.async_read_some(asio::buffer(&one, 1), k_token);
    REQUIRE_FALSE(ec2);
    CHECK(one == 'b');
    CHECK_FALSE(t.holds_unread_input());
    co_await t.shutdown_send();
  });
  client.join();
}

TEST_CASE("TLS transport: a refused handshake sends its alert before it fails") {
  server_end server;
  std::string reason;
  bool shook = true;
  error_code server_ec;
  std::thread client([&] {
    memory_client c(server.endpoint(), TLS1_2_VERSION);  // the server wants 1.3
    shook = c.handshake(reason);
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    server_ec = co_await t.handshake(transport::handshake_type::server);
  });
  client.join();
  CHECK(server_ec);
  CHECK_FALSE(shook);
  CHECK(reason == "tlsv1 alert protocol version");  // the alert, not a reset
}

TEST_CASE(
    "TLS transport: a look for the end takes the text into the reader's buffer; a close_notify "
    "after text is the end") {
  server_end server;
  std::string reason;
  std::string heard;
  std::thread client([&] {
    memory_client c(server.endpoint());
    if (!c.handshake(reason)) {
      return;
    }
    c.write("next");
    c.send_all();
    heard = c.read(2);  // the server took "next"
    c.write("last");
    c.close_notify();  // "last" and close_notify in one write, no FIN
    c.read(1);         // until the server ends
  });
  server.run([&](transport& t) -> asio::awaitable<void> {
    REQUIRE_FALSE(co_await t.handshake(transport::handshake_type::server));
    boost::beast::flat_buffer ahead;
    const auto text = [&] { return boost::beast::buffers_to_string(ahead.data()); };
    // Looks until one sees more than an open stream, or text has come (bounded).
    const auto look = [&](bool until_text) -> asio::awaitable<peer_end> {
      peer_end seen = t.look_for_end(ahead, 1024);
      for (int i = 0; i < 50 && seen == peer_end::open && !(until_text && ahead.size() > 0); ++i) {
        co_await t.socket().async_wait(tcp::socket::wait_read, k_token);
        seen = t.look_for_end(ahead, 1024);
      }
      co_return seen;
    };
    CHECK(co_await look(true) == peer_end::open);
    CHECK(text() == "next");
    CHECK_FALSE(t.holds_unread_input());  // taken, not left in the channel
    ahead.consume(ahead.size());
    co_await asio::async_write(t, asio::buffer("ok", 2), k_token);
    // The close_notify behind text: seen, and the text before it kept.
    CHECK(co_await look(false) == peer_end::closed);
    CHECK(text() == "last");
    std::string rest;
    CHECK(co_await read_text(t, rest, 1) == asio::error::eof);
    CHECK(rest.empty());
  });
  client.join();
  CHECK(reason.empty());
  CHECK(heard == "ok");
}

TEST_CASE("plain transport: a look for the end takes what came into the reader's buffer") {
  asio::io_context ioc;
  tcp::acceptor acceptor(ioc, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket peer(ioc);
  peer.connect(acceptor.local_endpoint());
  transport t(acceptor.accept());
  const auto readable = [&] {
    pollfd p{t.socket().native_handle(), POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
  };
  boost::beast::flat_buffer buffer;
  const auto ahead = [&] { return boost::beast::buffers_to_string(buffer.data()); };
  // The end may come after the bytes before it have been taken: looks until one sees more.
  const auto look_past_open = [&] {
    peer_end seen = peer_end::open;
    for (int i = 0; i < 10 && seen == peer_end::open; ++i) {
      readable();
      seen = t.look_for_end(buffer, 8);
    }
    return seen;
  };

  CHECK(t.look_for_end(buffer, 8) == peer_end::open);  // nothing came
  asio::write(peer, asio::buffer("abc", 3));
  readable();
  CHECK(t.look_for_end(buffer, 8) == peer_end::open);
  CHECK(ahead() == "abc");

  SUBCASE("bytes, then the end: both taken") {
    asio::write(peer, asio::buffer("de", 2));
    peer.shutdown(tcp::socket::shutdown_send);
    CHECK(look_past_open() == peer_end::closed);
    CHECK(ahead() == "abcde");
  }
  SUBCASE("more than the reader's buffer may hold: as much as fits, then no answer") {
    asio::write(peer, asio::buffer("defghij", 7));
    CHECK(look_past_open() == peer_end::unknown);
    CHECK(ahead() == "abcdefgh");
  }
  SUBCASE("the reader's buffer is full and the end comes alone: seen") {
    asio::write(peer, asio::buffer("defgh", 5));
    readable();
    CHECK(t.look_for_end(buffer, 8) == peer_end::open);
    peer.shutdown(tcp::socket::shutdown_send);
    CHECK(look_past_open() == peer_end::closed);
    CHECK(ahead() == "abcdefgh");
  }
}
