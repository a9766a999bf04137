#include "support/websocket_upstream.hpp"

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <sstream>
#include <thread>

namespace ratewall::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace websocket = beast::websocket;
using tcp = asio::ip::tcp;

struct websocket_upstream::impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::thread accepting;
  std::mutex mutex;
  std::vector<std::thread> sessions;
};

websocket_upstream::websocket_upstream() : impl_(std::make_unique<impl>()) {
  tcp::endpoint at(asio::ip::make_address("127.0.0.1"), 0);
  impl_->acceptor.open(at.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(at);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  impl_->accepting = std::thread([this] {
    for (;;) {
      beast::error_code ec;
      tcp::socket s(impl_->ioc);
      impl_->acceptor.accept(s, ec);
      if (ec) {
        return;
      }
      std::lock_guard lock(impl_->mutex);
      impl_->sessions.emplace_back([this, s = std::move(s)]() mutable {
        beast::flat_buffer buffer;
        beast::error_code ec;
        for (;;) {
          http::request<http::string_body> req;
          http::read(s, buffer, req, ec);
          if (ec) {
            return;
          }
          {
            std::ostringstream head;
            head << req.base();
            std::lock_guard lock(mutex_);
            heads_.push_back(head.str());
          }
          if (!websocket::is_upgrade(req) || req.target() == "/refuse") {
            http::response<http::string_body> res(
                websocket::is_upgrade(req) ? http::status::forbidden : http::status::ok, 11);
            res.body() = websocket::is_upgrade(req) ? "no upgrade here" : "plain";
            res.prepare_payload();
            http::write(s, res, ec);
            if (ec) {
              return;
            }
            continue;
          }
          websocket::stream<tcp::socket&> ws(s);
          ws.read_message_max(16 * 1024 * 1024);
          ws.accept(req, ec);
          if (ec) {
            return;
          }
          ++upgraded_;
          ++open_;
          beast::flat_buffer message;
          for (;;) {
            ws.read(message, ec);
            if (ec) {
              break;  // closed (the close handshake is answered by read) or failed
            }
            ws.text(ws.got_text());
            ws.write(message.data(), ec);
            message.consume(message.size());
            if (ec) {
              break;
            }
          }
          --open_;
          return;
        }
      });
    }
  });
}

websocket_upstream::~websocket_upstream() {
  // The shutdown wakes the blocked accept; the acceptor is closed only once its thread is gone.
  ::shutdown(impl_->acceptor.native_handle(), SHUT_RDWR);
  impl_->accepting.join();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
  // Sessions end when their peer closes: the gateway under test, declared after this upstream, is
  // stopped first, and a stop closes every connection it holds. Their sockets are not touched
  // from here: once a session closed its own, the descriptor may already belong to someone else.
  for (auto& t : impl_->sessions) {
    t.join();
  }
}

std::vector<std::string> websocket_upstream::heads() const {
  std::lock_guard lock(mutex_);
  return heads_;
}

}  // namespace ratewall::testing
