#include "ratewall/proxy/transport.hpp"

#include <openssl/bio.h>
#include <openssl/err.h>

#include <algorithm>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/system/system_error.hpp>
#include <cerrno>
#include <cstring>

#include <sys/socket.h>
#include <sys/uio.h>

#include "ratewall/core/use_tuple.hpp"

namespace ratewall {

namespace asio = boost::asio;
using boost::system::error_code;

namespace {

// Room for one whole TLS record as received: 2^14 bytes of text, 256 of expansion, 5 of header
// (RFC 8446 §5.2), so a record's start can always be moved to the front and the rest read.
constexpr std::size_t k_input = 17 * 1024;

/// OpenSSL's error queue is per thread and one call's error must not be taken for the next's.
/// Clearing it costs about 1.2k instructions even when empty (it walks all its slots); looking
/// costs a tenth of that.
void clear_errors() {
  if (ERR_peek_error() != 0) {
    ERR_clear_error();
  }
}

error_code ssl_error(unsigned long code) {
  error_code ec(static_cast<int>(code), asio::error::get_ssl_category());
  ERR_clear_error();
  return ec;
}

}  // namespace

/// The BIO OpenSSL reads and writes records through: reads come from the channel's input, writes
/// go to its pending output. A read of an empty input asks to be retried, which SSL_read reports
/// as SSL_ERROR_WANT_READ.
struct tls_bio {
  static tls_channel& of(BIO* b) { return *static_cast<tls_channel*>(BIO_get_data(b)); }

  static int write(BIO* b, const char* data, std::size_t n, std::size_t* written) {
    of(b).pending_.append(data, n);
    *written = n;
    return 1;
  }
  static int read(BIO* b, char* data, std::size_t n, std::size_t* got) {
    BIO_clear_retry_flags(b);
    tls_channel& t = of(b);
    const std::size_t have = t.in_end_ - t.in_begin_;
    if (have == 0) {
      BIO_set_retry_read(b);
      *got = 0;
      return 0;
    }
    n = std::min(n, have);
    std::memcpy(data, t.in_.get() + t.in_begin_, n);
    t.in_begin_ += n;
    if (t.in_begin_ == t.in_end_) {
      t.in_begin_ = t.in_end_ = 0;
    }
    *got = n;
    return 1;
  }
  static long ctrl(BIO* b, int cmd, long /*num*/, void* /*ptr*/) {
    switch (cmd) {
      case BIO_CTRL_FLUSH:
        return 1;
      case BIO_CTRL_PENDING:
        return static_cast<long>(of(b).in_end_ - of(b).in_begin_);
      case BIO_CTRL_WPENDING:
        return static_cast<long>(of(b).pending_.size());
      default:
        return 0;
    }
  }
  static int create(BIO* b) {
    BIO_set_init(b, 1);
    return 1;
  }

  static BIO_METHOD* method() {
    static BIO_METHOD* const m = [] {
      BIO_METHOD* made = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "ratewall");
      if (made == nullptr || BIO_meth_set_write_ex(made, &write) != 1 ||
          BIO_meth_set_read_ex(made, &read) != 1 || BIO_meth_set_ctrl(made, &ctrl) != 1 ||
          BIO_meth_set_create(made, &create) != 1) {
        throw std::bad_alloc();
      }
      return made;
    }();
    return m;
  }
};

tls_channel::tls_channel(asio::ip::tcp::socket socket, asio::ssl::context& context)
    : socket_(std::move(socket)),
      ssl_(SSL_new(context.native_handle())),
      in_(std::make_unique_for_overwrite<char[]>(k_input)),
      writer_done_(socket_.get_executor(), std::chrono::steady_clock::time_point::max()) {
  BIO* bio = ssl_ != nullptr ? BIO_new(tls_bio::method()) : nullptr;
  if (bio == nullptr) {
    const error_code ec = ssl_error(ERR_get_error());
    SSL_free(ssl_);
    throw boost::system::system_error(ec, "a TLS connection");
  }
  BIO_set_data(bio, this);
  SSL_set_bio(ssl_, bio, bio);  // the SSL object owns it now
  // As Asio's engine: a write may end after a record, and idle connections give their record
  // buffers back.
  SSL_set_mode(ssl_, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER |
                         SSL_MODE_RELEASE_BUFFERS);
}

tls_channel::~tls_channel() {
  SSL_free(ssl_);
}

namespace {

tls_channel::step outcome(SSL* ssl, int result) {
  switch (SSL_get_error(ssl, result)) {
    case SSL_ERROR_WANT_READ:
      return {0, true, {}};
    case SSL_ERROR_ZERO_RETURN:
      return {0, false, asio::error::eof};  // the peer's close_notify
    case SSL_ERROR_SSL:
      return {0, false, ssl_error(ERR_get_error())};
    case SSL_ERROR_SYSCALL:
      if (const unsigned long code = ERR_get_error(); code != 0) {
        return {0, false, ssl_error(code)};
      }
      return {0, false, asio::ssl::error::unspecified_system_error};
    default:  // the BIO never refuses a write, so never SSL_ERROR_WANT_WRITE
      clear_errors();
      return {0, false, asio::ssl::error::unexpected_result};
  }
}

}  // namespace

tls_channel::step tls_channel::read(void* data, std::size_t size) {
  if (size == 0) {
    return {};
  }
  clear_errors();
  std::size_t n = 0;
  const int ok = SSL_read_ex(ssl_, data, size, &n);
  return ok == 1 ? step{n, false, {}} : outcome(ssl_, ok);
}

tls_channel::step tls_channel::write(const void* data, std::size_t size) {
  if (size == 0) {
    return {};
  }
  clear_errors();
  std::size_t n = 0;
  const int ok = SSL_write_ex(ssl_, data, size, &n);
  return ok == 1 ? step{n, false, {}} : outcome(ssl_, ok);
}

asio::mutable_buffer tls_channel::input_space() {
  if (in_begin_ > 0) {  // the start of a record: move it to the front
    std::memmove(in_.get(), in_.get() + in_begin_, in_end_ - in_begin_);
    in_end_ -= in_begin_;
    in_begin_ = 0;
  }
  return asio::buffer(in_.get() + in_end_, k_input - in_end_);
}

error_code tls_channel::received(const error_code& ec, std::size_t n) {
  if (ec == asio::error::eof) {
    // The end of the TCP stream is a clean end only after the peer's close_notify.
    return (SSL_get_shutdown(ssl_) & SSL_RECEIVED_SHUTDOWN) != 0
               ? ec
               : error_code(asio::ssl::error::stream_truncated);
  }
  if (!ec) {
    in_end_ += n;
  }
  return ec;
}

asio::const_buffer tls_channel::begin_write() {
  writing_ = true;
  sending_.swap(pending_);  // pending_ gets sending_'s emptied storage back
  return asio::buffer(sending_);
}

void tls_channel::end_write(const error_code& ec) {
  writing_ = false;
  sending_.clear();
  if (ec && !write_error_) {
    write_error_ = ec;
  }
  writer_done_.cancel();  // whoever waits for the socket may write now
}

asio::awaitable<error_code> tls_channel::handshake(role r) {
  if (r == role::server) {
    SSL_set_accept_state(ssl_);
  } else {
    SSL_set_connect_state(ssl_);
  }
  for (;;) {
    clear_errors();
    const int result = SSL_do_handshake(ssl_);
    const step s = result == 1 ? step{} : outcome(ssl_, result);
    // What OpenSSL wrote goes out first, an alert that ends a failed handshake included.
    if (!pending_.empty()) {  // nothing else runs during the handshake
      auto [wec, n] = co_await asio::async_write(socket_, begin_write(), use_tuple);
      end_write(wec);
      if (wec && !s.ec) {
        co_return wec;
      }
    }
    if (result == 1 || !s.want_input) {
      co_return s.ec;
    }
    auto [rec, n] = co_await socket_.async_read_some(input_space(), use_tuple);
    if (const error_code ec = received(rec, n)) {
      co_return ec;
    }
  }
}

asio::awaitable<void> tls_channel::shutdown_send() {
  // The first SSL_shutdown writes close_notify and returns without reading the peer's; the
  // peer may go on sending and its records are still read (TLS 1.3, RFC 8446 §6.1).
  clear_errors();
  if (SSL_shutdown(ssl_) < 0) {
    clear_errors();  // e.g. the handshake never ended: there is nothing to close
  }
  while (writing_ && !write_error_) {             // a read sending what OpenSSL answered
    co_await writer_done_.async_wait(use_tuple);  // never expires: ends when that write does
  }
  if (!pending_.empty() && !write_error_) {
    auto [ec, n] = co_await asio::async_write(socket_, begin_write(), use_tuple);
    end_write(ec);
  }
}

detail::taken_now detail::take_now(asio::ip::tcp::socket& socket, asio::mutable_buffer into) {
  char byte = 0;
  const bool look = into.size() == 0;
  for (;;) {
    const ssize_t n = look ? ::recv(socket.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT)
                           : ::recv(socket.native_handle(), into.data(), into.size(), MSG_DONTWAIT);
    if (n > 0) {
      const auto got = look ? 0 : static_cast<std::size_t>(n);
      // Less than asked for: that was all there was (a look after it would find nothing).
      return {got, got < into.size() ? taken_now::drained : taken_now::more};
    }
    if (n == 0) {
      return {0, taken_now::end};
    }
    if (errno != EINTR) {
      return {0, errno == EAGAIN || errno == EWOULDBLOCK ? taken_now::drained : taken_now::failed};
    }
  }
}

std::size_t detail::send_now(asio::ip::tcp::socket& socket,
                             std::span<const asio::const_buffer> pieces, error_code& ec) {
  constexpr std::size_t k_most = 8;  // a head, a chunk's three pieces and the last chunk fit
  std::array<iovec, k_most> iov;
  const std::size_t count = std::min(pieces.size(), k_most);
  for (std::size_t i = 0; i < count; ++i) {
    iov[i] = iovec{const_cast<void*>(pieces[i].data()), pieces[i].size()};
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = count;
  for (;;) {
    const ssize_t n = ::sendmsg(socket.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0) {
      return static_cast<std::size_t>(n);
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return 0;
    }
    if (errno != EINTR) {
      ec.assign(errno, boost::system::system_category());
      return 0;
    }
  }
}

char* detail::gather_space() {
  thread_local std::array<char, tls_channel::k_record> space;
  return space.data();
}

detail::taken_now tls_channel::take_records() {
  detail::taken_now taken = detail::take_now(socket_, input_space());
  in_end_ += taken.bytes;
  return taken;
}

asio::awaitable<error_code> transport::handshake(handshake_type type) {
  if (!tls_) {
    co_return error_code{};
  }
  co_return co_await tls_->handshake(type == handshake_type::server ? tls_channel::role::server
                                                                    : tls_channel::role::client);
}

asio::awaitable<void> transport::close_notify() {
  if (tls_) {
    co_await tls_->shutdown_send();
  }
}

asio::awaitable<void> transport::shutdown_send() {
  co_await close_notify();
  error_code ignored;
  socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace ratewall
