#pragma once

// The transport (DESIGN §1): one stream type for both legs of the proxy, a TCP socket read and
// written plainly or through TLS. The session, the exchange and the tunnel are written once
// against it; which of the two a connection is was decided when it was made.

#include <openssl/ssl.h>

#include <array>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <memory>

namespace ratewall {

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
        tls_(std::make_unique<boost::asio::ssl::stream<boost::asio::ip::tcp::socket>>(
            std::move(socket), context)),
        gathered_(std::make_unique<std::array<char, 16 * 1024>>()) {}

  executor_type get_executor() { return socket().get_executor(); }

  /// The TCP layer: what cancels, waits for readability, shuts down and closes.
  boost::asio::ip::tcp::socket& socket() { return tls_ ? tls_->next_layer() : plain_; }
  const boost::asio::ip::tcp::socket& socket() const { return tls_ ? tls_->next_layer() : plain_; }

  bool secure() const { return tls_ != nullptr; }
  /// The protocol ALPN chose in the handshake ("h2", "http/1.1"), or "" (plain, or none).
  std::string_view alpn() {
    if (!tls_) {
      return {};
    }
    const unsigned char* name = nullptr;
    unsigned int length = 0;
    SSL_get0_alpn_selected(tls_->native_handle(), &name, &length);
    return std::string_view(reinterpret_cast<const char*>(name), length);
  }
  /// The TLS connection's OpenSSL handle (SNI, verification, ALPN); null when plain.
  SSL* ssl() { return tls_ ? tls_->native_handle() : nullptr; }

  /// True when bytes have been received that no read has taken yet and that the socket no longer
  /// shows: TLS records held by OpenSSL or in the BIO Asio feeds it (a reader's own buffer is the
  /// caller's to check). A plain connection keeps nothing of its own.
  bool holds_unread_input() {
    SSL* s = ssl();
    return s != nullptr && (SSL_has_pending(s) == 1 || BIO_ctrl_pending(SSL_get_rbio(s)) > 0);
  }

  /// The TLS handshake, as a server or as a client; a plain connection has none to do.
  boost::asio::awaitable<boost::system::error_code> handshake(handshake_type type);

  /// AsyncReadStream.
  template <class MutableBuffers, class Token>
  auto async_read_some(const MutableBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const MutableBuffers& b) {
          if (tls_) {
            tls_->async_read_some(b, std::move(handler));
          } else {
            plain_.async_read_some(b, std::move(handler));
          }
        },
        token, buffers);
  }

  /// AsyncWriteStream. Through TLS, several buffers are first gathered into one: the TLS layer
  /// writes only the first buffer of a sequence per call, which would make a record (and a
  /// system call) of each piece of a chunk.
  template <class ConstBuffers, class Token>
  auto async_write_some(const ConstBuffers& buffers, Token&& token) {
    return boost::asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
        [this](auto handler, const ConstBuffers& b) {
          if (!tls_) {
            plain_.async_write_some(b, std::move(handler));
            return;
          }
          const auto first = *boost::asio::buffer_sequence_begin(b);
          if (first.size() == boost::asio::buffer_size(b)) {
            tls_->async_write_some(boost::asio::buffer(first), std::move(handler));
            return;
          }
          const std::size_t n = boost::asio::buffer_copy(boost::asio::buffer(*gathered_), b);
          tls_->async_write_some(boost::asio::buffer(gathered_->data(), n), std::move(handler));
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
  std::unique_ptr<boost::asio::ssl::stream<boost::asio::ip::tcp::socket>> tls_;
  std::unique_ptr<std::array<char, 16 * 1024>> gathered_;  // TLS: one record of a gathered write
};

}  // namespace ratewall
