#include "support/test_upstream.hpp"

#include <charconv>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <nlohmann/json.hpp>

namespace ratewall::testing {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

namespace {

// The number at the start of `text`, 0 if none. Not atoi: a target is a view into the parser's
// storage, not a C string, and atoi read on past its end into whatever digits followed (a
// `/slow?ms=2000` once slept for 2000 followed by stray digits, so its answer never came).
int number_at(std::string_view text) {
  int n = 0;
  std::from_chars(text.data(), text.data() + text.size(), n);
  return n;
}

}  // namespace

struct test_upstream::impl {
  asio::io_context ioc;
  tcp::acceptor acceptor{ioc};
  test_upstream* owner = nullptr;

  asio::awaitable<void> serve(tcp::socket socket, std::uint64_t connection_id) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    std::uint64_t request_no = 0;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(64 * 1024 * 1024);
      auto [ec, n] = co_await http::async_read(stream, buffer, parser, use_tuple);
      if (ec) {
        co_return;
      }
      auto req = parser.release();
      ++request_no;
      received_request rec{std::string(req.method_string()),
                           std::string(req.target()),
                           {},
                           req.body(),
                           connection_id};
      nlohmann::json headers = nlohmann::json::object();
      for (const auto& f : req) {
        std::string name(f.name_string());
        for (auto& ch : name) {
          ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        rec.headers.emplace(name, std::string(f.value()));
        headers[name] = std::string(f.value());
      }
      {
        std::lock_guard lock(owner->mutex_);
        owner->requests_.push_back(rec);
      }

      std::string_view target = req.target();
      // The behaviour is chosen by the last path segment, so any route prefix can reach it.
      std::string_view path = target.substr(0, target.find('?'));
      if (auto status_at = path.find("/status/"); status_at != std::string_view::npos) {
        path = path.substr(status_at);
      } else if (auto slash = path.rfind('/'); slash != std::string_view::npos) {
        path = path.substr(slash);
      }
      if (path == "/crash") {
        co_return;  // closes without an answer
      }
      if (path == "/slow") {
        auto pos = target.find("ms=");
        int ms = pos == std::string_view::npos ? 1000 : number_at(target.substr(pos + 3));
        asio::steady_timer timer(stream.get_executor(), std::chrono::milliseconds(ms));
        co_await timer.async_wait(use_tuple);
      }
      if (path == "/chunked") {
        http::response<http::empty_body> head{http::status::ok, req.version()};
        head.set(http::field::content_type, "text/plain");
        head.chunked(true);
        http::response_serializer<http::empty_body> sr{head};
        auto [hec, hn] = co_await http::async_write_header(stream, sr, use_tuple);
        if (hec) {
          co_return;
        }
        for (int i = 0; i < 5; ++i) {
          std::string part = "part-" + std::to_string(i) + ";";
          auto [cec, cn] =
              co_await asio::async_write(stream, http::make_chunk(asio::buffer(part)), use_tuple);
          if (cec) {
            co_return;
          }
        }
        auto [lec, ln] = co_await asio::async_write(stream, http::make_chunk_last(), use_tuple);
        if (lec || !req.keep_alive()) {
          co_return;
        }
        continue;
      }
      unsigned status = 200;
      if (path.starts_with("/status/")) {
        status = static_cast<unsigned>(number_at(path.substr(8)));
      }
      nlohmann::json echo = {{"method", rec.method},        {"target", rec.target},
                             {"headers", headers},          {"body", rec.body},
                             {"connection", connection_id}, {"request", request_no}};
      http::response<http::string_body> res{static_cast<http::status>(status), req.version()};
      res.set(http::field::content_type, "application/json");
      res.keep_alive(req.keep_alive());
      // Replaced, not thrown on: a header may hold any byte (obs-text), and the echo answers.
      res.body() = echo.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      res.prepare_payload();
      auto [wec, wn] = co_await http::async_write(stream, res, use_tuple);
      if (wec || !req.keep_alive()) {
        co_return;
      }
    }
  }

  asio::awaitable<void> accept_loop() {
    for (;;) {
      auto [ec, socket] = co_await acceptor.async_accept(use_tuple);
      if (ec) {
        co_return;
      }
      auto id = ++owner->connections_;
      asio::co_spawn(ioc, serve(std::move(socket), id), asio::detached);
    }
  }
};

test_upstream::test_upstream(std::uint16_t port, std::string address)
    : impl_(std::make_unique<impl>()) {
  impl_->owner = this;
  tcp::endpoint ep(asio::ip::make_address(address), port);
  impl_->acceptor.open(ep.protocol());
  impl_->acceptor.set_option(tcp::acceptor::reuse_address(true));
  impl_->acceptor.bind(ep);
  impl_->acceptor.listen();
  port_ = impl_->acceptor.local_endpoint().port();
  asio::co_spawn(impl_->ioc, impl_->accept_loop(), asio::detached);
  thread_ = std::thread([this] { impl_->ioc.run(); });
}

test_upstream::~test_upstream() {
  stop();
}

void test_upstream::stop() {
  if (!thread_.joinable()) {
    return;
  }
  impl_->ioc.stop();
  thread_.join();
}

std::vector<received_request> test_upstream::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

std::size_t test_upstream::count(const std::string& method, const std::string& path_prefix) const {
  std::lock_guard lock(mutex_);
  std::size_t n = 0;
  for (const auto& r : requests_) {
    if (r.method == method && r.target.starts_with(path_prefix)) {
      ++n;
    }
  }
  return n;
}

}  // namespace ratewall::testing
