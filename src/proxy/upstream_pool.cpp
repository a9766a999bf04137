#include "ratewall/proxy/upstream_pool.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/use_awaitable.hpp>

namespace ratewall {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;

namespace {

// How long a target that refused a connection is skipped (passive health check).
constexpr nanos k_down_period = std::chrono::seconds(5);
// Idle connections older than this are dropped instead of reused: most upstreams close idle
// keep-alive connections after 60 s or more, and a fresh connection is cheaper than a retry.
constexpr nanos k_max_idle_age = std::chrono::seconds(30);
constexpr nanos k_peek_after = std::chrono::milliseconds(500);

nanos monotonic_now() {
  return std::chrono::duration_cast<nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

// An idle keep-alive connection the upstream has closed shows a readable end of stream; peeking
// at it costs one non-blocking syscall and spares a request the stale-connection retry.
bool still_open(tcp::socket& s) {
  char byte;
  ssize_t n = ::recv(s.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

upstream_pool::upstream_pool(asio::any_io_executor ex, upstream_config cfg)
    : ex_(std::move(ex)), cfg_(std::move(cfg)), targets_(cfg_.targets.size()) {
  // Names are resolved once, here (start-up or reload), never on the request path.
  tcp::resolver resolver(ex_);
  for (std::size_t i = 0; i < cfg_.targets.size(); ++i) {
    boost::system::error_code ec;
    auto results = resolver.resolve(cfg_.targets[i].host, std::to_string(cfg_.targets[i].port), ec);
    if (!ec && !results.empty()) {
      targets_[i].address = results.begin()->endpoint();
      targets_[i].resolved = true;
    }
  }
}

std::size_t upstream_pool::pick_target(nanos now) {
  const std::size_t n = targets_.size();
  for (std::size_t i = 0; i < n; ++i) {
    std::size_t t = (next_ + i) % n;
    if (targets_[t].down_until <= now) {
      next_ = t + 1;
      return t;
    }
  }
  // Every target is marked down: try the next one anyway rather than fail without trying.
  return next_++ % n;
}

asio::awaitable<upstream_lease> upstream_pool::acquire(bool allow_reuse) {
  // A refused connection carried no request, so the next target may be tried whatever the
  // method: one try per target at most (nginx's proxy_next_upstream error).
  bool timed_out = false;
  for (std::size_t attempt = 0; attempt < targets_.size(); ++attempt) {
    const nanos now = monotonic_now();
    const std::size_t t = pick_target(now);
    auto& state = targets_[t];
    if (allow_reuse) {
      while (!state.idle.empty()) {
        auto c = std::move(state.idle.back());
        state.idle.pop_back();
        const nanos idle = now - c->idle_since;
        // Upstreams close idle connections after seconds, not milliseconds: a connection idle
        // for less than k_peek_after is used without the peek's syscall.
        if (idle < k_max_idle_age && (idle < k_peek_after || still_open(c->socket))) {
          c->reused = true;
          co_return upstream_lease{std::move(c), false};
        }
      }
    }
    if (!state.resolved) {
      continue;
    }
    // Connecting is rare enough for beast's per-operation timer; the socket is then used bare.
    beast::tcp_stream connecting(ex_);
    connecting.expires_after(cfg_.connect_timeout);
    auto [ec] =
        co_await connecting.async_connect(state.address, asio::as_tuple(asio::use_awaitable));
    if (!ec) {
      auto c = std::make_unique<upstream_connection>(connecting.release_socket());
      c->target = t;
      boost::system::error_code ignored;
      c->socket.set_option(tcp::no_delay(true), ignored);
      state.down_until = nanos{0};
      co_return upstream_lease{std::move(c), false};
    }
    state.down_until = now + k_down_period;
    timed_out = ec == beast::error::timeout;
  }
  co_return upstream_lease{nullptr, timed_out};
}

void upstream_pool::release(std::unique_ptr<upstream_connection> c) {
  auto& state = targets_[c->target];
  if (state.idle.size() >= cfg_.max_idle) {
    return;  // dropping it closes it
  }
  c->buffer.clear();
  c->idle_since = monotonic_now();
  state.idle.push_back(std::move(c));
}

std::size_t upstream_pool::idle_count() const {
  std::size_t n = 0;
  for (const auto& t : targets_) {
    n += t.idle.size();
  }
  return n;
}

}  // namespace ratewall
