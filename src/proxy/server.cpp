#include "ratewall/proxy/server.hpp"

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <optional>
#include <system_error>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/restarting.hpp"
#include "ratewall/core/use_tuple.hpp"
#include "ratewall/proxy/session.hpp"
#include "ratewall/proxy/worker.hpp"

namespace ratewall {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using reuse_port = asio::detail::socket_option::boolean<SOL_SOCKET, SO_REUSEPORT>;

struct server::thread_state {
  // One thread runs the io_context, and only it touches the io_context's sockets and timers
  // (reloads, drains and stops are posted to it; the Redis store closes its connections there):
  // Asio may skip the lock around each socket operation. Posting from other threads stays safe.
  explicit thread_state(std::shared_ptr<const gateway> gw)
      : ioc(BOOST_ASIO_CONCURRENCY_HINT_UNSAFE_IO),
        acceptor(ioc),
        tls_acceptor(ioc),
        work(std::move(gw)) {}
  ~thread_state() {
    // Sessions still suspended are destroyed with the io_context; they hold the worker (and
    // its pooled sockets) alive until then, so the sockets go before the io_context does.
    w.reset();
  }

  asio::io_context ioc;
  tcp::acceptor acceptor;      // plain HTTP (server.listen); closed when `listen: off`
  tcp::acceptor tls_acceptor;  // server.tls.listen; closed without server.tls
  std::shared_ptr<worker> w;
  std::shared_ptr<const gateway> work;  // handed to the worker when its thread starts
  std::thread thread;
};

namespace {

tcp::endpoint resolve_listen(const endpoint& e) {
  boost::system::error_code ec;
  auto address = asio::ip::make_address(e.host, ec);
  if (ec) {
    throw std::system_error(ec, "listen address " + e.host);
  }
  return {address, e.port};
}

/// The client address a per-client cap counts by (an IPv4 peer on a dual-stack socket as
/// IPv4); "" when no per-client cap is set, so nothing is formatted for nothing.
std::string cap_address(const tcp::endpoint& peer, std::uint64_t per_client) {
  if (per_client == 0) {
    return {};  // nothing to count by
  }
  return client_address(peer).to_string();
}

/// Whether a new connection may stay (server.max_connections, max_connections_per_client). At
/// the process cap an idle keep-alive connection of this worker is closed to make room first:
/// clients that are being served keep being served.
bool admit(const tcp::endpoint& peer, worker& w, connection_gate& gate, connection_ticket& ticket) {
  const server_config& s = w.current()->cfg().server;  // read here, no await in between
  const std::uint64_t max_total =
      s.max_connections != 0 ? s.max_connections : connection_gate::default_max_connections();
  const std::string address = cap_address(peer, s.max_connections_per_client);
  auto verdict = gate.admit(address, max_total, s.max_connections_per_client, false, ticket);
  if (verdict == connection_gate::verdict::over_total && w.close_idle_connection()) {
    process_metrics().idle_connection_evicted();
    verdict = gate.admit(address, max_total, s.max_connections_per_client, true, ticket);
  }
  if (verdict == connection_gate::verdict::admitted) {
    return true;
  }
  process_metrics().connection_refused(verdict == connection_gate::verdict::over_client);
  return false;
}

asio::awaitable<void> accept_loop(tcp::acceptor& acceptor, std::shared_ptr<worker> w,
                                  connection_gate& gate, bool tls) {
  auto last_report = std::chrono::steady_clock::time_point{};
  std::uint64_t failures = 0;
  for (;;) {
    tcp::endpoint peer;
    auto [ec, socket] = co_await acceptor.async_accept(peer, use_tuple);
    if (ec == asio::error::operation_aborted || !acceptor.is_open()) {
      co_return;
    }
    if (ec) {
      // Out of descriptors or memory: give sessions time to end, and say so at most once a
      // second, with how often it happened.
      ++failures;
      const auto now = std::chrono::steady_clock::now();
      if (now - last_report >= std::chrono::seconds(1)) {
        log_error("accept failed: " + ec.message() + " (" + std::to_string(failures) +
                  " times since the last report)");
        last_report = now;
        failures = 0;
      }
      asio::steady_timer pause(acceptor.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(use_tuple);
      continue;
    }
    connection_ticket ticket;
    if (!admit(peer, *w, gate, ticket)) {
      boost::system::error_code ignored;
      socket.close(ignored);
      continue;
    }
    boost::system::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    asio::co_spawn(acceptor.get_executor(),
                   run_session(w, std::move(socket), peer, std::move(ticket), tls),
                   log_failure{"connection"});
  }
}

/// accept_loop, started again a second after an exception (an allocation that failed while a
/// connection was set up): a listener must not stop accepting for the rest of the process's
/// life over one connection. It ends when the acceptor is closed (a stop).
asio::awaitable<void> keep_accepting(tcp::acceptor& acceptor, std::shared_ptr<worker> w,
                                     connection_gate& gate, bool tls) {
  co_await run_restarting(
      tls ? "TLS accept loop" : "accept loop", [&] { return accept_loop(acceptor, w, gate, tls); },
      [&] { return !acceptor.is_open(); }, std::chrono::seconds(1));
}

// Access log lines wait in each worker's buffer at most this long (or until it is full).
asio::awaitable<void> flush_log_loop(std::shared_ptr<worker> w) {
  asio::steady_timer timer(w->context());
  for (;;) {
    timer.expires_after(k_log_flush_interval);
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) {
      co_return;
    }
    w->log_writer().flush();
  }
}

/// Opens `acceptor` and binds it to `at`'s address, port `port`, past TIME_WAIT. `shared`: with
/// SO_REUSEPORT too, so that each worker thread binds the port.
boost::system::error_code bind_acceptor(tcp::acceptor& acceptor, const endpoint& at,
                                        std::uint16_t port, bool shared) {
  const tcp::endpoint bind_to(resolve_listen(at).address(), port);
  boost::system::error_code ec;
  acceptor.open(bind_to.protocol(), ec);
  if (!ec) {
    acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  }
  if (!ec && shared) {
    acceptor.set_option(reuse_port(true), ec);
  }
  if (!ec) {
    acceptor.bind(bind_to, ec);
  }
  return ec;
}

/// Throws when another socket holds `at`'s port (not 0): SO_REUSEPORT, which lets each worker
/// thread bind the port, would let a second gateway bind it too, and the kernel would split the
/// connections between two processes whose limits each count half the traffic. A bind without
/// it, before any of this process's own, finds any listener there.
void refuse_taken_port(const endpoint& at) {
  if (at.port == 0) {
    return;
  }
  asio::io_context ioc(1);
  tcp::acceptor probe(ioc);
  if (const auto ec = bind_acceptor(probe, at, at.port, false)) {
    throw std::system_error(ec, "listen on " + at.host + ":" + std::to_string(at.port) +
                                    (ec == asio::error::address_in_use
                                         ? " (another process holds the port, perhaps another "
                                           "gateway: each would count its own share of the "
                                           "traffic against the limits)"
                                         : ""));
  }
}

/// Opens one thread's acceptor on `at`, port `port` (0: any; the first thread's choice is then
/// shared by the others through SO_REUSEPORT). Returns the bound port.
std::uint16_t open_acceptor(tcp::acceptor& acceptor, const endpoint& at, std::uint16_t port) {
  boost::system::error_code ec = bind_acceptor(acceptor, at, port, true);
  if (!ec) {
    acceptor.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    throw std::system_error(ec, "listen on " + at.host + ":" + std::to_string(port));
  }
  return acceptor.local_endpoint().port();
}

}  // namespace

server::server(std::shared_ptr<const gateway> gw) : current_(gw) {
  const auto& cfg = gw->cfg().server;
  unsigned n = cfg.threads == 0 ? 1 : cfg.threads;
  if (cfg.plain_listener) {
    refuse_taken_port(cfg.listen);
  }
  if (cfg.tls) {
    refuse_taken_port(cfg.tls->listen);
  }
  for (unsigned i = 0; i < n; ++i) {
    auto t = std::make_unique<thread_state>(gw);
    if (cfg.plain_listener) {
      port_ = open_acceptor(t->acceptor, cfg.listen, i == 0 ? cfg.listen.port : port_);
    }
    if (cfg.tls) {
      tls_port_ = open_acceptor(t->tls_acceptor, cfg.tls->listen,
                                i == 0 ? cfg.tls->listen.port : tls_port_);
    }
    threads_.push_back(std::move(t));
  }
}

server::~server() {
  stop();
}

void server::start() {
  if (started_) {
    return;
  }
  started_ = true;
  for (auto& t : threads_) {
    t->w = std::make_shared<worker>(t->ioc, std::move(t->work));
    if (t->acceptor.is_open()) {
      asio::co_spawn(t->ioc, keep_accepting(t->acceptor, t->w, gate_, false),
                     log_failure{"accept loop"});
    }
    if (t->tls_acceptor.is_open()) {
      asio::co_spawn(t->ioc, keep_accepting(t->tls_acceptor, t->w, gate_, true),
                     log_failure{"TLS accept loop"});
    }
    asio::co_spawn(t->ioc, flush_log_loop(t->w), log_failure{"access log flush"});
    t->thread = std::thread([state = t.get()] { state->ioc.run(); });
  }
  // Expired limiter state equals no state; dropping it once a second bounds memory by the
  // subjects active in the last window. Adaptive windows (at least 1 s) end within a quarter of
  // a second of their due time. On its own thread, so no worker's loop stalls for either.
  sweeper_ = std::thread([this] {
    constexpr auto k_tick = std::chrono::milliseconds(250);
    constexpr unsigned k_ticks_per_sweep = 4;
    std::unique_lock lock(mutex_);
    for (unsigned tick = 1; !stopping_; ++tick) {
      if (sweep_wakeup_.wait_for(lock, k_tick, [this] { return stopping_; })) {
        break;
      }
      auto gw = current_;
      lock.unlock();
      gw->tick_adaptive();
      if (tick % k_ticks_per_sweep == 0) {
        gw->limits().sweep();
      }
      gw.reset();  // an old configuration is freed here rather than under the lock
      lock.lock();
    }
  });
}

void server::stop() {
  stopping_flag_ = true;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  sweep_wakeup_.notify_all();
  if (sweeper_.joinable()) {
    sweeper_.join();
  }
  for (auto& t : threads_) {
    asio::post(t->ioc, [state = t.get()] {
      boost::system::error_code ignored;
      state->acceptor.close(ignored);
      state->tls_acceptor.close(ignored);
      if (state->w) {
        state->w->cut_off_all();
      }
      state->ioc.stop();
    });
  }
  wait();
}

bool server::drain(nanos timeout) {
  stopping_flag_ = true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& t : threads_) {
    asio::post(t->ioc, [state = t.get(), deadline] {
      boost::system::error_code ignored;
      state->acceptor.close(ignored);
      state->tls_acceptor.close(ignored);
      if (state->w) {
        state->w->begin_drain(deadline);
      }
    });
  }
  bool drained = false;
  while (!(drained = open_connections() == 0) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop();
  return drained;
}

std::uint64_t server::open_connections() const {
  std::uint64_t n = 0;
  for (const auto& t : threads_) {
    if (t->w) {
      n += t->w->open_connections();
    }
  }
  return n;
}

void server::wait() {
  for (auto& t : threads_) {
    if (t->thread.joinable()) {
      t->thread.join();
    }
  }
}

void server::reload(std::shared_ptr<const gateway> gw) {
  {
    std::lock_guard lock(mutex_);
    current_ = gw;
  }
  for (auto& t : threads_) {
    asio::post(t->ioc, [state = t.get(), gw] {
      if (state->w) {
        state->w->set_gateway(gw);
      }
    });
  }
}

}  // namespace ratewall
