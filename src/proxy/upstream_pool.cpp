#include "ratewall/proxy/upstream_pool.hpp"

#include <algorithm>
#include <optional>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "ratewall/core/log.hpp"
#include "ratewall/core/use_tuple.hpp"

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
// How long the connections of a target caught sending bytes no request asked for are used once
// (caught again after it, the period starts again): HTTP/1.1 cannot tell which request an answer is
// for, so a reused connection of such an upstream may hand one client's response to another.
constexpr nanos k_no_reuse_period = std::chrono::seconds(10);

nanos monotonic_now() {
  return std::chrono::duration_cast<nanos>(std::chrono::steady_clock::now().time_since_epoch());
}

// Whether bytes an upstream sent beyond its responses are an answer no request asked for:
// not when they are empty (a TLS record begun: dropped, nothing to blame), nor a stray CRLF.
bool unsolicited_bytes(const boost::beast::flat_buffer& b) {
  const auto data = b.data();
  const std::string_view text(static_cast<const char*>(data.data()), data.size());
  return text.find_first_not_of("\r\n") != std::string_view::npos;
}

// What waits on an idle connection: nothing (it may carry a new request), its upstream's close,
// or bytes its upstream sent since its last response, which no request asked for. The idle watch
// answers that only once the loop next asks the reactor, so bytes that arrived since (an upstream
// that sent more than its response framed, in a later segment) would be read as the next request's
// answer, another client's. One look at the socket, without waiting, settles it: a one-byte
// MSG_PEEK on a plain socket; through TLS, what records wait are read, and one byte of data in
// them, or a record begun and not ended, is enough to drop the connection (a whole record that
// carries none, a session ticket, passes). It costs a system call per reused connection; nginx's
// keepalive module looks only when its event loop reports the idle connection readable
// (ngx_http_upstream_keepalive_close_handler), as the watch does.
idle_look look_at(upstream_connection& c) {
  const std::size_t look = c.tls ? 1 : 0;
  peer_end end = c.stream.look_for_end(c.buffer, look);
  // A record begun and not ended (holds_unread_input): its data is to come.
  if (end == peer_end::open && c.buffer.size() == 0 && !c.stream.holds_unread_input()) {
    return idle_look::nothing;
  }
  // Something waits (rare): read what is there to tell bytes followed by a close (an upstream's
  // 408 as it ends an idle connection: nothing to be out of step with) or a stray CRLF from an
  // answer no request asked for.
  // (A read that takes less than it could returns before the close behind it: a second one
  // sees it.)
  constexpr std::size_t k_enough = 64 * 1024;
  for (int look_again = 0; look_again < 2 && end != peer_end::closed; ++look_again) {
    end = c.stream.look_for_end(c.buffer, k_enough);
  }
  return end != peer_end::closed && unsolicited_bytes(c.buffer) ? idle_look::unsolicited
                                                                : idle_look::closed;
}

}  // namespace

upstream_pool::upstream_pool(asio::any_io_executor ex, upstream_config cfg,
                             std::shared_ptr<const std::vector<target_addresses>> addresses,
                             std::shared_ptr<upstream_budget> budget,
                             std::shared_ptr<const upstream_tls> tls)
    : ex_(std::move(ex)),
      cfg_(std::move(cfg)),
      addresses_(std::move(addresses)),
      budget_(std::move(budget)),
      tls_(std::move(tls)),
      targets_(cfg_.targets.size()) {}

std::size_t upstream_pool::next_target(nanos now) const {
  const std::size_t n = targets_.size();
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t t = (next_ + i) % n;
    if (targets_[t].down_until <= now) {
      return t;
    }
  }
  // Every target is marked down: try the next one anyway rather than fail without trying.
  return next_ % n;
}

std::size_t upstream_pool::pick_target(nanos now) {
  const std::size_t t = next_target(now);
  next_ = t + 1;
  return t;
}

std::unique_ptr<upstream_connection> upstream_pool::take_idle(target_state& state, nanos now,
                                                              budget_unit& unit) {
  while (!state.idle.empty()) {
    // The idle watch stays armed while the connection is in use: the response's read then
    // queues behind it in Asio's reactor instead of trying recv() at once, which fails with
    // EAGAIN every time (the upstream has not answered yet): a system call per request saved.
    // The watch completes when the response arrives and finds the connection in no idle list.
    auto c = std::move(state.idle.back());
    state.idle.pop_back();
    if (now - c->idle_since >= k_max_idle_age) {
      continue;
    }
    const idle_look look = look_at(*c);
    if (look == idle_look::nothing) {
      c->reused = true;
      c->unit = std::move(unit);
      return c;
    }
    if (look == idle_look::unsolicited) {
      caught_unsolicited(c->target, now);
    }
  }
  return nullptr;
}

upstream_lease upstream_pool::reuse_idle() {
  const nanos now = monotonic_now();
  const std::size_t t = next_target(now);
  auto& state = targets_[t];
  // The newest idle connection is at the back: when it is too old, so are all the others.
  // (While the target may not reuse connections, none is kept idle.)
  if (state.idle.empty() || now - state.idle.back()->idle_since >= k_max_idle_age) {
    return {};
  }
  budget_unit unit = budget_->try_take();
  if (!unit) {
    return {};
  }
  auto c = take_idle(state, now, unit);
  if (!c) {
    return {};  // the ones there had an answer nobody asked for waiting, or were closed
  }
  pick_target(now);
  return upstream_lease{std::move(c), false};
}

asio::awaitable<upstream_lease> upstream_pool::acquire(bool allow_reuse, budget_wait* wait) {
  // A refused connection carried no request, so the next target may be tried whatever the
  // method: one try per target at most (nginx's proxy_next_upstream error).
  budget_unit unit = co_await budget_->take(ex_, cfg_.queue_timeout, wait);
  if (!unit) {
    upstream_lease full;
    full.queue_full = true;
    co_return full;
  }
  bool timed_out = false;
  for (std::size_t attempt = 0; attempt < targets_.size(); ++attempt) {
    const nanos now = monotonic_now();
    const std::size_t t = pick_target(now);
    auto& state = targets_[t];
    if (allow_reuse) {
      if (auto c = take_idle(state, now, unit)) {
        co_return upstream_lease{std::move(c), false};
      }
    }
    if (auto c = co_await connect(t, timed_out)) {
      c->unit = std::move(unit);
      state.down_until = nanos{0};
      co_return upstream_lease{std::move(c), false};
    }
    state.down_until = now + k_down_period;
  }
  co_return upstream_lease{nullptr, timed_out};
}

namespace {

// RFC 8305's Connection Attempt Delay: how long an attempt to connect goes unanswered before
// one to the next address joins it.
constexpr auto k_attempt_delay = std::chrono::milliseconds(250);

// The attempts to connect to one target's addresses, shared by them and the connect that
// started them (each attempt is a coroutine of its own).
struct connect_race {
  explicit connect_race(const asio::any_io_executor& ex) : wake(ex) {}

  asio::steady_timer wake;                  // cancelled as each attempt ends
  std::vector<beast::tcp_stream*> running;  // attempts under way, closed once the race is over
  std::optional<tcp::socket> won;
  std::size_t won_address = 0;
  std::chrono::steady_clock::time_point won_deadline;
  bool over = false;  // decided or given up: an attempt that connects later closes
  bool timed_out = false;
};

asio::awaitable<void> attempt_connect(std::shared_ptr<connect_race> race, tcp::endpoint to,
                                      std::size_t address, nanos timeout) {
  beast::tcp_stream stream(race->wake.get_executor());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  stream.expires_at(deadline);
  race->running.push_back(&stream);
  auto [ec] = co_await stream.async_connect(to, use_tuple);
  std::erase(race->running, &stream);
  if (ec) {
    race->timed_out = race->timed_out || ec == beast::error::timeout;
  } else if (!race->over) {
    race->over = true;
    race->won = stream.release_socket();
    race->won_address = address;
    race->won_deadline = deadline;
  }
  race->wake.cancel();
}

}  // namespace

// Happy Eyeballs (RFC 8305 §5), as curl and browsers connect: the target's addresses in turn,
// from the one that answered last, an attempt that has not answered in 250 ms joined by one to
// the next address, and one refused followed by the next at once. The first to connect is kept
// and the others closed. Each attempt has connect_timeout of its own (as nginx gives each
// server its own). So an address that drops connections (an IPv6 route that leads nowhere)
// delays a connection by 250 ms, once: the address that answered is then tried first.
asio::awaitable<std::optional<tcp::socket>> upstream_pool::race_addresses(
    target_state& state, const target_addresses& addresses,
    std::chrono::steady_clock::time_point& deadline, bool& timed_out) {
  auto race = std::make_shared<connect_race>(ex_);
  std::size_t started = 0;
  const auto start_next = [&] {
    const std::size_t a = (state.answered + started++) % addresses.size();
    asio::co_spawn(ex_, attempt_connect(race, addresses[a], a, cfg_.connect_timeout),
                   asio::detached);
  };
  start_next();
  for (;;) {
    const bool all_started = started == addresses.size();
    if (all_started) {
      race->wake.expires_at(asio::steady_timer::time_point::max());  // each attempt has a timer
    } else {
      race->wake.expires_after(k_attempt_delay);
    }
    co_await race->wake.async_wait(use_tuple);  // an attempt ended, or the delay passed
    if (race->won || (all_started && race->running.empty())) {
      break;
    }
    if (!all_started) {
      start_next();
    }
  }
  race->over = true;
  for (beast::tcp_stream* losing : race->running) {
    losing->cancel();
  }
  if (!race->won) {
    timed_out = race->timed_out;
    co_return std::nullopt;
  }
  state.answered = race->won_address;
  deadline = race->won_deadline;
  co_return std::move(race->won);
}

asio::awaitable<std::unique_ptr<upstream_connection>> upstream_pool::connect(std::size_t t,
                                                                             bool& timed_out) {
  using namespace asio::experimental::awaitable_operators;
  // Connecting is rare enough for beast's per-operation timer; the socket is then used bare.
  const target_addresses& addresses = (*addresses_)[t];
  target_state& state = targets_[t];
  std::optional<tcp::socket> socket;
  std::chrono::steady_clock::time_point deadline;
  if (addresses.size() == 1) {
    // Nothing to race: no shared state, no second coroutine, no second timer.
    beast::tcp_stream stream(ex_);
    deadline = std::chrono::steady_clock::now() + cfg_.connect_timeout;
    stream.expires_at(deadline);
    auto [ec] = co_await stream.async_connect(addresses.front(), use_tuple);
    if (ec) {
      timed_out = ec == beast::error::timeout;
      co_return nullptr;
    }
    socket = stream.release_socket();
  } else {
    socket = co_await race_addresses(state, addresses, deadline, timed_out);
    if (!socket) {
      co_return nullptr;
    }
  }
  std::unique_ptr<upstream_connection> c;
  if (!tls_) {
    c = std::make_unique<upstream_connection>(transport(std::move(*socket)));
  } else {
    c = std::make_unique<upstream_connection>(transport(std::move(*socket), tls_->context()));
    c->tls = tls_;
    const endpoint& target = cfg_.targets[t];
    if (!tls_->prepare(c->stream.ssl(), target.host, target.port)) {
      log_tls_failure(t, "the TLS settings were refused");
      co_return nullptr;
    }
    // The rest of connect_timeout bounds the handshake: whichever ends first cancels the other.
    asio::steady_timer timer(ex_, deadline);
    auto ended = co_await (c->stream.handshake(transport::handshake_type::client) ||
                           timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (ended.index() == 1) {
      timed_out = true;
      log_tls_failure(t, "TLS handshake timed out");
      co_return nullptr;
    }
    if (const auto hec = std::get<0>(ended)) {
      log_tls_failure(t, upstream_tls::failure_reason(c->stream.ssl(), hec));
      co_return nullptr;
    }
  }
  c->target = t;
  boost::system::error_code ignored;
  c->stream.socket().set_option(tcp::no_delay(true), ignored);
  co_return c;
}

// A failing upstream fails every request: one line a second at most, with how many it stands for.
void upstream_pool::log_tls_failure(std::size_t t, const std::string& reason) {
  ++tls_failures_unreported_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_tls_report_ < std::chrono::seconds(1)) {
    return;
  }
  const endpoint& target = cfg_.targets[t];
  log_warn("upstream " + cfg_.name + " (" + target.host + ":" + std::to_string(target.port) +
           "): " + reason + " (" + std::to_string(tls_failures_unreported_) +
           " failed connection(s) since the last report)");
  last_tls_report_ = now;
  tls_failures_unreported_ = 0;
}

void upstream_pool::release(std::unique_ptr<upstream_connection> c) {
  c->unit.reset();  // an idle connection is not in use
  auto& state = targets_[c->target];
  const nanos now = monotonic_now();
  // Bytes after the response are bytes no request asked for: any doubt closes the connection.
  // Through TLS they may sit in the TLS layer, where the idle watch (the socket) cannot see them.
  if (c->buffer.size() != 0 || c->stream.holds_unread_input()) {
    if (unsolicited_bytes(c->buffer)) {
      caught_unsolicited(c->target, now);
    }
    return;  // dropping it closes it
  }
  if (retired_ || state.idle.size() >= cfg_.max_idle || now < state.no_reuse_until) {
    return;
  }
  c->idle_since = now;
  c->idle_generation = ++generation_;
  watch_idle(*c);
  state.idle.push_back(std::move(c));
}

// nginx's keepalive module does the same (ngx_http_upstream_keepalive_close_handler): an idle
// connection that becomes readable has either been closed by the upstream or carries bytes no
// request asked for; either way it is never used again.
//
// The watch waits for readiness, which costs an epoll_ctl each time (Asio re-arms the socket for
// a wait). A read instead, ended when the connection is taken, costs more: Asio 1.81 tries a
// read at once unless the last one found the end of the stream, so the watch's read and the
// response's would each fail with EAGAIN first (measured: 4.26 recv() per request against 3,
// one epoll_ctl fewer).
void upstream_pool::watch_idle(upstream_connection& c) {
  c.stream.socket().async_wait(
      tcp::socket::wait_read, [pool = weak_from_this(), conn = &c, target = c.target,
                               generation = c.idle_generation](boost::system::error_code ec) {
        if (ec) {
          return;  // cancelled: closed (with its pool), or cut off while in use
        }
        if (auto p = pool.lock()) {
          p->drop_idle(conn, target, generation);
        }
      });
}

// `c` is compared, never dereferenced, until it is found in an idle list: the connection may be
// gone (or its address reused) by the time a completed watch runs. A reused connection's watch
// completes when its response arrives (see take_idle), so this runs for most requests: the
// target's list is ordered by generation (release appends with a newer one), and a binary
// search finds the place.
void upstream_pool::drop_idle(const upstream_connection* c, std::size_t target,
                              std::uint64_t generation) {
  auto& idle = targets_[target].idle;
  auto it =
      std::lower_bound(idle.begin(), idle.end(), generation,
                       [](const auto& conn, std::uint64_t g) { return conn->idle_generation < g; });
  if (it != idle.end() && it->get() == c && (*it)->idle_generation == generation) {
    const bool unsolicited = look_at(**it) == idle_look::unsolicited;
    idle.erase(it);
    if (unsolicited) {
      caught_unsolicited(target, monotonic_now());
    }
  }
}

// An upstream that sends what no request asked for (a Content-Length too short, a body after a
// HEAD or a 304, a second response) can be out of step on a connection without anything here
// seeing it: a stray answer read as the next request's, and that request's real one as the
// request after it, each a client's response handed to another, for as long as the connection
// is reused before each answer arrives. So once caught, its connections carry one request each
// for a while, and the idle ones go. (The mark is this thread's pool's: each worker thread, and
// each configuration after a reload, catches its own.)
void upstream_pool::caught_unsolicited(std::size_t target, nanos now) {
  auto& state = targets_[target];
  if (state.no_reuse_until <= now) {
    const endpoint& t = cfg_.targets[target];
    log_warn("upstream " + cfg_.name + " (" + t.host + ":" + std::to_string(t.port) +
             ") sent bytes no request asked for: its connections carry one request each for " +
             std::to_string(
                 std::chrono::duration_cast<std::chrono::seconds>(k_no_reuse_period).count()) +
             " s");
  }
  state.no_reuse_until = now + k_no_reuse_period;
  state.idle.clear();
}

void upstream_pool::retire() {
  retired_ = true;
  for (auto& t : targets_) {
    t.idle.clear();  // each closes; its idle watch ends, cancelled
  }
}

std::size_t upstream_pool::idle_count() const {
  std::size_t n = 0;
  for (const auto& t : targets_) {
    n += t.idle.size();
  }
  return n;
}

}  // namespace ratewall
