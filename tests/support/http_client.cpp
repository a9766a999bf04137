#include "support/http_client.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <stdexcept>

namespace ratewall::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

struct http_client::impl {
  asio::io_context ioc;
  tcp::socket socket{ioc};
  beast::flat_buffer buffer;
  std::chrono::milliseconds timeout;
  bool head_request = false;  // the reply to read answers a HEAD: no body follows its head

  // Runs the pending asynchronous operation for at most `timeout`; cancels it after that.
  void run() {
    ioc.restart();
    ioc.run_for(timeout);
    if (!ioc.stopped()) {
      boost::system::error_code ignored;
      socket.cancel(ignored);
      ioc.restart();
      ioc.run_for(std::chrono::seconds(1));
    }
  }
};

http_client::http_client(std::uint16_t port, std::chrono::milliseconds timeout)
    : impl_(std::make_unique<impl>()) {
  impl_->timeout = timeout;
  impl_->socket.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), port));
  impl_->socket.set_option(tcp::no_delay(true));
}

http_client::~http_client() = default;

void http_client::send_raw(const std::string& bytes) {
  boost::system::error_code ec;
  asio::async_write(impl_->socket, asio::buffer(bytes),
                    [&](boost::system::error_code e, std::size_t) { ec = e; });
  impl_->run();
}

http_reply http_client::read_reply() {
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 * 1024 * 1024);
  parser.skip(impl_->head_request);
  boost::system::error_code ec = asio::error::timed_out;
  http::async_read(impl_->socket, impl_->buffer, parser,
                   [&](boost::system::error_code e, std::size_t) { ec = e; });
  impl_->run();
  http_reply reply;
  if (ec) {
    return reply;
  }
  auto res = parser.release();
  reply.status = res.result_int();
  reply.keep_alive = res.keep_alive();
  for (const auto& f : res) {
    std::string name(f.name_string());
    for (auto& ch : name) {
      ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    }
    reply.headers.emplace(std::move(name), std::string(f.value()));
  }
  reply.body = std::move(res.body());
  return reply;
}

http_reply http_client::request(const std::string& method, const std::string& target,
                                const header_pairs& headers, const std::string& body,
                                bool chunked) {
  std::string head = method + " " + target + " HTTP/1.1\r\nHost: localhost\r\n";
  for (const auto& [name, value] : headers) {
    head += name + ": " + value + "\r\n";
  }
  std::string payload;
  if (chunked) {
    head += "Transfer-Encoding: chunked\r\n\r\n";
    // Several chunks, so the gateway has to stream them rather than see one block.
    std::size_t pos = 0;
    while (pos < body.size()) {
      std::size_t n = std::min<std::size_t>(7, body.size() - pos);
      char size[16];
      std::snprintf(size, sizeof size, "%zx\r\n", n);
      payload += size;
      payload += body.substr(pos, n) + "\r\n";
      pos += n;
    }
    payload += "0\r\n\r\n";
  } else {
    if (!body.empty() || method == "POST" || method == "PUT") {
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    }
    head += "\r\n";
    payload = body;
  }
  send_raw(head + payload);
  impl_->head_request = method == "HEAD";
  http_reply reply = read_reply();
  impl_->head_request = false;
  return reply;
}

std::string http_client::read_some() {
  if (impl_->buffer.size() > 0) {
    std::string held = beast::buffers_to_string(impl_->buffer.data());
    impl_->buffer.consume(impl_->buffer.size());
    return held;
  }
  char bytes[16384];
  std::size_t got = 0;
  impl_->socket.async_read_some(asio::buffer(bytes),
                                [&](boost::system::error_code e, std::size_t n) {
                                  if (!e) {
                                    got = n;
                                  }
                                });
  impl_->run();
  return std::string(bytes, got);
}

std::string http_client::read_until_closed(int reads) {
  std::string bytes;
  for (int i = 0; i < reads; ++i) {
    const std::string more = read_some();
    if (more.empty()) {
      break;
    }
    bytes += more;
  }
  return bytes;
}

bool http_client::closed_by_peer() {
  boost::system::error_code ec = asio::error::timed_out;
  char byte;
  impl_->socket.async_read_some(asio::buffer(&byte, 1),
                                [&](boost::system::error_code e, std::size_t) { ec = e; });
  impl_->run();
  return ec == asio::error::eof || ec == asio::error::connection_reset;
}

}  // namespace ratewall::testing
