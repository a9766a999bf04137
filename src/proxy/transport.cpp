#include "ratewall/proxy/transport.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ratewall {

namespace asio = boost::asio;

asio::awaitable<boost::system::error_code> transport::handshake(handshake_type type) {
  if (!tls_) {
    co_return boost::system::error_code{};
  }
  auto [ec] = co_await tls_->async_handshake(type, asio::as_tuple(asio::use_awaitable));
  co_return ec;
}

asio::awaitable<void> transport::shutdown_send() {
  if (tls_) {
    auto token = asio::as_tuple(asio::use_awaitable);
    co_await asio::async_initiate<decltype(token), void(boost::system::error_code)>(
        [this](auto handler) {
          // SSL_shutdown returns at once, without waiting for the peer's close_notify, only when
          // that is marked as received. Asio runs the engine's first step within the initiating
          // call (asio/ssl/detail/io_op.hpp, "start"); after it there is only ours to write. So
          // the mark is taken back before anything else reads: after a half close the peer may
          // go on sending, and its records must still be read (TLS 1.3, RFC 8446 §6.1).
          SSL* ssl = tls_->native_handle();
          const int received = SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN;
          SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_RECEIVED_SHUTDOWN);
          tls_->async_shutdown(std::move(handler));
          SSL_set_shutdown(ssl, (SSL_get_shutdown(ssl) & ~SSL_RECEIVED_SHUTDOWN) | received);
        },
        token);
  }
  boost::system::error_code ignored;
  socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace ratewall
