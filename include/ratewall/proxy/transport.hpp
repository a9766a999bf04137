#pragma once

// The transport (DESIGN §1): one stream type for both legs of the proxy, a TCP socket read and
// written plainly or through TLS. The session, the exchange and the tunnel are written once
// against it; which of the two a connection is was decided when it was made.

#include <openssl/ssl.h>

#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/compose.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream_base.hpp>
#include <boost/asio/write.hpp>
#include <memory>
#include <string>

namespace ratewall {

/// TLS on a socket: OpenSSL reads records from, and writes them into, buffers of this object
/// through a BIO of its own, and the socket is read and written with Asio's plain operations.
///
/// This is what Asio's ssl::stream does, with less in between (the numbers are callgrind's, per
/// kept-alive HTTP/1.1 request): its engine goes through a BIO pair, so every byte is copied
/// once more each way and each call asks the pair for its state (about 1.5k instructions), and
/// it clears OpenSSL's error queue before every call (about 2.5k), where clearing it when it
/// holds something is enough. OpenSSL on the descriptor itself, as nginx does, is no better
/// under Asio: waiting for readiness re-arms the descriptor with `epoll_ctl` on every wait.
///
/// One read and one write may be in progress at once (the HTTP/2 connection and the tunnel run
/// both). Only a write sends: what OpenSSL writes while reading (a KeyUpdate's answer) waits
/// for the next write, which RFC 8446 §4.6.3 allows, as it precedes any application data.
class tls_channel {
 public:
  enum class role { server, client };

  /// `context` must outlive the channel.
  tls_channel(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context);
  ~tls_channel();
  tls_channel(const tls_channel&) = delete;
  tls_channel& operator=(const tls_channel&) = delete;

  boost::asio::ip::tcp::socket& socket() { return socket_; }
  SSL* ssl() const { return ssl_; }
  bool holds_unread_input() const { return SSL_has_pending(ssl_) == 1 || in_begin_ < in_end_; }

  boost::asio::awaitable<boost::system::error_code> handshake(role r);
  boost::asio::awaitable<void> shutdown_send();

  /// What one call into OpenSSL came to: bytes, a wish for more input, or an error.
  struct step {
    std::size_t bytes = 0;
    bool want_input = false;
    boost::system::error_code ec;
  };
  step read(void* data, std::size_t size);
  step write(const void* data, std::size_t size);
  /// Where the socket's next bytes go, and how many came (0 and `ec` at the end or a failure;
  /// the end of the stream without the peer's close_notify is `stream_truncated`).
  boost::asio::mutable_buffer input_space();
  boost::system::error_code received(const boost::system::error_code& ec, std::size_t n);
  /// The records written so far, handed to the socket in one write; `sent` when it is done.
  boost::asio::const_buffer take_output();
  void sent() { sending_.clear(); }

  /// One TLS record of plain text at most per write: what a write takes is then bounded.
  static constexpr std::size_t k_record = 16 * 1024;

 private:
  friend struct tls_bio;
  boost::asio::ip::tcp::socket socket_;
  SSL* ssl_ = nullptr;
  std::unique_ptr<char[]> in_;  // records read from the socket, not yet taken by OpenSSL
  std::size_t in_begin_ = 0;
  std::size_t in_end_ = 0;
  std::string pending_;  // records OpenSSL wrote, not yet handed to the socket
  std::string sending_;  // records being written to the socket
};

namespace detail {

template <class MutableBuffer>
struct tls_read_op {
  tls_channel& t;
  MutableBuffer buffer;
  tls_channel::step result{};
  bool done = false;  // `result` is the answer, posted (an answer found at once is not given
                      // inside the call that asked)

  template <class Self>
  void operator()(Self& self) {
    if (done) {
      self.complete(result.ec, result.bytes);
      return;
    }
    if (next(self)) {
      done = true;
      boost::asio::post(std::move(self));
    }
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code ec, std::size_t n) {
    result.ec = t.received(ec, n);
    if (result.ec || next(self)) {
      self.complete(result.ec, result.bytes);
    }
  }
  /// True when `result` is the answer; otherwise the socket is being read.
  template <class Self>
  bool next(Self& self) {
    result = t.read(buffer.data(), buffer.size());
    if (!result.want_input) {
      return true;
    }
    t.socket().async_read_some(t.input_space(), std::move(self));
    return false;
  }
};

struct tls_write_op {
  tls_channel& t;
  const void* data;
  std::size_t size;
  std::size_t written = 0;
  boost::system::error_code error;  // found at once: posted, then given

  template <class Self>
  void operator()(Self& self) {
    if (error) {
      self.complete(error, 0);
      return;
    }
    const tls_channel::step s = t.write(data, size);
    if (s.ec) {
      error = s.ec;
      boost::asio::post(std::move(self));
      return;
    }
    written = s.bytes;
    boost::asio::async_write(t.socket(), t.take_output(), std::move(self));
  }
  template <class Self>
  void operator()(Self& self, boost::system::error_code ec, std::size_t) {
    t.sent();
    self.complete(ec, ec ? 0 : written);
  }
};

}  // namespace detail

class transport {
 public:
  using executor_type = boost::asio::ip::tcp::socket::executor_type;
  using handshake_type = boost::asio::ssl::stream_base::handshake_type;

  /// A plain connection.
  explicit transport(boost::asio::ip::tcp::socket socket) : plain_(std::move(socket)) {}
  /// A TLS connection on `socket`, made with `context`, which must outlive it (its handshake is
  /// still to be done).
  transport(boost::asio::ip::tcp::socket socket, boost::asio::ssl::context& context)
      : plain_(socket.get_executor()),
        tls_(std::make_unique<tls_channel>(std::move(socket), context)),
        gathered_(std::make_unique<char[]>(tls_channel::k_record)) {}

  executor_type get_executor() { return socket().get_executor(); }

  /// The TCP layer: what cancels, waits for readability, shuts down and closes.
  boost::asio::ip::tcp::socket& socket() { return tls_ ? tls_->socket() : plain_; }
  const boost::asio::ip::tcp::socket& socket() const { return tls_ ? tls_->socket() : plain_; }

  bool secure() const { return tls_ != nullptr; }
  /// The protocol ALPN chose in the handshake ("h2", "http/1.1"), or "" (plain, or none).
  std::string_view alpn() {
    if (!tls_) {
      return {};
    }
    const unsigned char* name = nullptr;
    unsigned int length = 0;
    SSL_get0_alpn_selected(tls_->ssl(), &name, &length);
    return std::string_view(reinterpret_cast<const char*>(name), length);
  }
  /// The TLS connection's OpenSSL handle (SNI, verification, ALPN); null when plain.
  SSL* ssl() { return tls_ ? tls_->ssl() : nullptr; }

  /// True when bytes have been received that no read has taken yet and that the socket no longer
  /// shows: TLS records held by OpenSSL or read from the socket for it (a reader's own buffer is
  /// the caller's to check). A plain connection keeps nothing of its own.
  bool holds_unread_input() { return tls_ && tls_->holds_unread_input(); }

  /// The TLS handshake, as a server or as a client; a plain connection has none to do.
  boost::asio::awaitable<boost::system::error_code> handshake(handshake_type type);

  /// AsyncReadStream. Through TLS, into the first buffer of the sequence.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (!tls_) {
            plain_.async_read_some(b, std::move(handler));
            return;
          }
          boost::asio::async_compose<decltype(handler),
                                     void(boost::system::error_code, std::size_t)>(
              detail::tls_read_op<boost::asio::mutable_buffer>{
                  *tls_, *boost::asio::buffer_sequence_begin(b)},
              handler, tls_->socket());
        },
        token, buffers);
  }

  /// AsyncWriteStream. Through TLS, several buffers are first gathered into one, so that a
  /// write is one record (and one system call), not one per piece of a chunk.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!tls_) {
            plain_.async_write_some(b, std::move(handler));
            return;
          }
          const boost::asio::const_buffer first = *boost::asio::buffer_sequence_begin(b);
          detail::tls_write_op op{
              *tls_, first.data(), std::min(first.size(), tls_channel::k_record), 0, {}};
          if (op.size < tls_channel::k_record && op.size != boost::asio::buffer_size(b)) {
            op.data = gathered_.get();
            op.size = boost::asio::buffer_copy(
                boost::asio::buffer(gathered_.get(), tls_channel::k_record), b);
          }
          boost::asio::async_compose<decltype(handler),
                                     void(boost::system::error_code, std::size_t)>(
              std::move(op), handler, tls_->socket());
        },
        token, buffers);
  }

  /// Stops sending: TLS's close_notify (the peer's is not waited for), then the TCP half close.
  /// Reading goes on: what the peer still sends is read as before. The caller bounds the write.
  boost::asio::awaitable<void> shutdown_send();

  /// Closes the connection at once.
  void close() {
    boost::system::error_code ignored;
    socket().close(ignored);
  }

 private:
  boost::asio::ip::tcp::socket plain_;  // the socket of a plain connection; unused with TLS
  std::unique_ptr<tls_channel> tls_;
  std::unique_ptr<char[]> gathered_;  // TLS: one record of a gathered write
};

}  // namespace ratewall
