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
    // Sends close_notify without waiting for the peer's (as nginx does): marked as received,
    // SSL_shutdown completes once ours is written.
    SSL* ssl = tls_->native_handle();
    SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_RECEIVED_SHUTDOWN);
    co_await tls_->async_shutdown(asio::as_tuple(asio::use_awaitable));
  }
  boost::system::error_code ignored;
  socket().shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
}

}  // namespace ratewall
