#include "ratewall/proxy/session.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <span>
#include <string>
#include <vector>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/proxy/http_head.hpp"
#include "ratewall/proxy/worker.hpp"

namespace ratewall {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

namespace {

constexpr auto use_tuple = asio::as_tuple(asio::use_awaitable);

// A local reply may leave a small request body behind; reading it keeps the connection usable.
// Anything larger is not worth reading: the connection is closed instead.
constexpr std::uint64_t k_max_discard_bytes = 1024 * 1024;
constexpr std::size_t k_max_upstream_header_bytes = 64 * 1024;

/// Per-connection state, allocated once per connection rather than per request.
///
/// Timeouts, of the client and of the upstream leg alike, use one watchdog per connection
/// instead of a timer per operation: arming a deadline is a store to `deadline_`, and the
/// watchdog wakes only when a deadline may have passed. On expiry it cancels the pending
/// operations (it does not close the client socket, so the session can still answer 408) and
/// their result is reported as beast::error::timeout.
struct connection_state final : drainable, std::enable_shared_from_this<connection_state> {
  explicit connection_state(tcp::socket s)
      : client(std::move(s)), watchdog_timer(client.get_executor()) {}

  void expires_after(nanos d) {
    deadline_ = std::chrono::steady_clock::now() + d;
    timed_out_ = false;
    if (deadline_ < wake_) {
      watchdog_timer.cancel();  // it sleeps past the new deadline: wake it to look again
    }
  }
  /// `ec` as the session should see it: an operation the watchdog cancelled timed out.
  error_code checked(error_code ec) const {
    if (ec == asio::error::operation_aborted && timed_out_) {
      return beast::error::timeout;
    }
    return ec;
  }

  tcp::socket client;
  beast::flat_buffer buffer;
  std::string peer_ip;
  std::array<char, 16 * 1024> relay{};
  header_list extra;  // headers added to the response of the current request
  asio::steady_timer watchdog_timer;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point wake_ = std::chrono::steady_clock::time_point::max();
  bool timed_out_ = false;
  bool closed_ = false;
  tcp::socket* upstream_ = nullptr;         // the upstream leg in use: the watchdog cancels it too
  upstream_connection* watched_ = nullptr;  // see client_watch
  bool client_gone_ = false;
  std::string head;    // the head being written, reused from request to request
  bool idle_ = false;  // waiting for the first byte of the next request

  // Graceful shutdown: an idle connection stops waiting now; a busy one closes after its
  // current response, which says Connection: close.
  void drain() override {
    if (idle_) {
      error_code ignored;
      client.cancel(ignored);
    }
  }
};

asio::awaitable<void> watchdog(std::shared_ptr<connection_state> c) {
  while (!c->closed_) {
    auto now = std::chrono::steady_clock::now();
    if (c->deadline_ <= now) {
      c->timed_out_ = true;
      c->deadline_ = std::chrono::steady_clock::time_point::max();
      error_code ignored;
      c->client.cancel(ignored);
      if (c->upstream_ != nullptr) {
        c->upstream_->cancel(ignored);
      }
      continue;
    }
    // Sleep until the deadline, or a while if there is none; a deadline moved later in the
    // meantime just costs one more turn of this loop.
    auto wake = c->deadline_ == std::chrono::steady_clock::time_point::max()
                    ? now + std::chrono::seconds(3600)
                    : c->deadline_;
    c->wake_ = wake;
    c->watchdog_timer.expires_at(wake);
    co_await c->watchdog_timer.async_wait(use_tuple);
    c->wake_ = std::chrono::steady_clock::time_point::min();
  }
}

/// While the gateway waits for the upstream, a client that hangs up must not keep the upstream
/// request (and its concurrency slot) alive: an end of stream on the client socket cancels the
/// upstream operations. Data from a pipelining client is left where it is.
class client_watch {
 public:
  client_watch(connection_state& c, upstream_connection& up) : c_(c) {
    c_.watched_ = &up;
    c_.client_gone_ = false;
    c_.client.async_wait(tcp::socket::wait_read, [self = c_.shared_from_this()](error_code ec) {
      if (ec || self->watched_ == nullptr) {
        return;
      }
      char byte;
      ssize_t n = ::recv(self->client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        self->client_gone_ = true;
        error_code ignored;
        self->watched_->socket.cancel(ignored);
      }
    });
  }
  ~client_watch() {
    c_.watched_ = nullptr;
    error_code ignored;
    c_.client.cancel(ignored);  // the wait, if still pending; nothing else is pending now
  }
  client_watch(const client_watch&) = delete;
  client_watch& operator=(const client_watch&) = delete;

 private:
  connection_state& c_;
};

/// The window a limit speaks of in RateLimit-Policy: the time a full quota takes to refill for
/// the buckets, the window for the window algorithms, none for concurrency.
std::uint64_t window_seconds(const limit_config& limit) {
  switch (limit.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket: {
      if (limit.rate.count == 0) {
        return 0;
      }
      auto burst = std::max<std::uint64_t>(limit.burst, 1);
      return ceil_seconds(limit.rate.period * static_cast<std::int64_t>(burst) /
                          static_cast<std::int64_t>(limit.rate.count));
    }
    case algorithm::fixed_window:
    case algorithm::sliding_window_log:
    case algorithm::sliding_window_counter:
      return ceil_seconds(limit.window);
    case algorithm::concurrency:
      break;
  }
  return 0;
}

bool is_idempotent(http::verb v) {
  switch (v) {
    case http::verb::get:
    case http::verb::head:
    case http::verb::options:
    case http::verb::put:
    case http::verb::delete_:
    case http::verb::trace:
      return true;
    default:
      return false;
  }
}

std::string problem_json(unsigned status, std::string_view title, std::string_view detail) {
  std::string body = "{\"type\":\"about:blank\",\"title\":\"";
  body += title;
  body += "\",\"status\":";
  body += std::to_string(status);
  body += ",\"detail\":\"";
  body += detail;  // only fixed text of ours, never request data
  body += "\"}\n";
  return body;
}

/// A request id from the client is kept when it is short and plain; anything else is replaced.
bool acceptable_request_id(std::string_view id) {
  if (id.empty() || id.size() > 128) {
    return false;
  }
  for (char c : id) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '-' || c == '_' || c == '.';
    if (!ok) {
      return false;
    }
  }
  return true;
}

/// Writes a response made by the gateway itself. Returns false when the write failed.
asio::awaitable<bool> send_local(connection_state& c, const worker& w, unsigned version,
                                 bool keep_alive, http::status status, std::string body,
                                 std::string_view content_type) {
  c.head.clear();
  write_local_response_head(static_cast<unsigned>(status), version, keep_alive && !w.draining(),
                            body.empty() ? std::string_view{} : content_type, body.size(), c.extra,
                            c.head);
  std::array<asio::const_buffer, 2> pieces{asio::buffer(c.head), asio::buffer(body)};
  c.expires_after(w.current()->cfg().server.idle_timeout);
  auto [ec, n] = co_await asio::async_write(c.client, pieces, use_tuple);
  co_return !ec;
}

asio::awaitable<bool> send_problem(connection_state& c, const worker& w, unsigned version,
                                   bool keep_alive, http::status status, std::string_view detail) {
  auto code = static_cast<unsigned>(status);
  co_return co_await send_local(c, w, version, keep_alive, status,
                                problem_json(code, http::obsolete_reason(status), detail),
                                "application/problem+json");
}

/// The status that answers a request head or body the parser refused.
http::status status_for_read_error(const error_code& ec) {
  if (ec == http::error::header_limit) {
    return http::status::request_header_fields_too_large;
  }
  if (ec == http::error::body_limit) {
    return http::status::payload_too_large;
  }
  if (ec == beast::error::timeout) {
    return http::status::request_timeout;
  }
  return http::status::bad_request;
}

bool is_disconnect(const error_code& ec) {
  return ec == http::error::end_of_stream || ec == asio::error::eof ||
         ec == asio::error::connection_reset || ec == asio::error::broken_pipe ||
         ec == asio::error::operation_aborted || ec == http::error::partial_message;
}

/// Stops sending and reads what the client still sends for a moment, so that a reply written
/// just before closing is not destroyed by a reset (the "lingering close" of nginx).
asio::awaitable<void> linger_close(connection_state& c) {
  error_code ec;
  c.client.shutdown(tcp::socket::shutdown_send, ec);
  c.expires_after(std::chrono::seconds(1));
  std::size_t drained = 0;
  while (drained < k_max_discard_bytes) {
    auto [rec, n] = co_await c.client.async_read_some(asio::buffer(c.relay), use_tuple);
    if (rec) {
      break;
    }
    drained += n;
  }
  c.client.close(ec);
}

/// Reads and drops the rest of a request body so the next request can follow. False when the
/// body is too large to be worth it or reading failed.
asio::awaitable<bool> discard_body(connection_state& c, http::request_parser<http::buffer_body>& p,
                                   nanos timeout) {
  if (p.is_done()) {
    co_return true;
  }
  auto length = p.content_length();
  if (length && *length > k_max_discard_bytes) {
    co_return false;
  }
  std::uint64_t total = 0;
  while (!p.is_done()) {
    p.get().body().data = c.relay.data();
    p.get().body().size = c.relay.size();
    c.expires_after(timeout);
    auto [ec, n] = co_await http::async_read(c.client, c.buffer, p, use_tuple);
    if (ec && ec != http::error::need_buffer) {
      co_return false;
    }
    total += c.relay.size() - p.get().body().size;
    if (total > k_max_discard_bytes) {
      co_return false;
    }
  }
  co_return true;
}

/// Which leg failed while a body was being relayed.
enum class relay_failure { none, reader, writer };

struct relay_status {
  relay_failure failed = relay_failure::none;
  error_code ec;
  std::uint64_t body_bytes = 0;  // read from `in` and handed on
};

/// Writes `c.head`, then streams the body that `p` reads from `in` to `out` in `framing`,
/// each piece in one gathered write with its chunk framing. The head goes out with the first
/// piece of the body, so a small exchange costs one write per leg.
template <class Parser>
asio::awaitable<relay_status> relay(connection_state& c, tcp::socket& in,
                                    beast::flat_buffer& in_buffer, Parser& p, nanos read_timeout,
                                    tcp::socket& out, nanos write_timeout, body_framing framing) {
  auto& body = p.get().body();
  bool head_pending = true;
  std::uint64_t total = 0;
  for (;;) {
    std::size_t n = 0;
    if (!p.is_done()) {
      body.data = c.relay.data();
      body.size = c.relay.size();
      c.expires_after(read_timeout);
      auto [rec, ignored] = co_await http::async_read(in, in_buffer, p, use_tuple);
      error_code ec = c.checked(rec);
      if (ec && ec != http::error::need_buffer) {
        co_return relay_status{relay_failure::reader, ec, total};
      }
      n = c.relay.size() - body.size;
      total += n;
    }
    const bool last = p.is_done();
    std::array<asio::const_buffer, 5> pieces;
    std::size_t count = 0;
    if (head_pending) {
      pieces[count++] = asio::buffer(c.head);
    }
    char size_line[18];
    if (n > 0) {
      if (framing == body_framing::chunked) {
        pieces[count++] = asio::buffer(size_line, chunk_size_line(n, size_line));
        pieces[count++] = asio::buffer(c.relay.data(), n);
        pieces[count++] = asio::buffer("\r\n", 2);
      } else {
        pieces[count++] = asio::buffer(c.relay.data(), n);
      }
    }
    if (last && framing == body_framing::chunked) {
      pieces[count++] = asio::buffer(k_last_chunk.data(), k_last_chunk.size());
    }
    if (count > 0) {
      c.expires_after(write_timeout);
      auto [rec, ignored] = co_await asio::async_write(
          out, std::span<const asio::const_buffer>(pieces.data(), count), use_tuple);
      if (error_code ec = c.checked(rec)) {
        co_return relay_status{relay_failure::writer, ec, total};
      }
      head_pending = false;
    }
    if (last) {
      co_return relay_status{relay_failure::none, {}, total};
    }
  }
}

/// How the body of a request that `p` has the head of reaches the upstream.
body_framing request_framing(const http::request_parser<http::buffer_body>& p) {
  if (p.is_done()) {
    return body_framing::none;
  }
  return p.chunked() ? body_framing::chunked : body_framing::length;
}

/// The framing of the response towards the client, given the upstream's. May turn
/// `keep_alive` off: an HTTP/1.0 client gets a body it can read only up to the close.
body_framing response_framing(const http::response_parser<http::buffer_body>& rp,
                              unsigned client_version, bool& keep_alive) {
  if (rp.is_done()) {
    // No body follows (HEAD, 204, 304, or Content-Length: 0); say so where a length is due.
    return rp.content_length() ? body_framing::length : body_framing::none;
  }
  if (rp.content_length()) {
    return body_framing::length;
  }
  if (client_version >= 11) {
    return body_framing::chunked;  // chunked, or ended by close upstream: chunked to the client
  }
  keep_alive = false;
  return body_framing::until_close;
}

/// What one request did. Counted in the metrics and written to the access log when the
/// request ends, however it ends (the destructor runs on every path out of serve_request).
struct request_trace {
  request_trace(worker& w, const http::request<http::buffer_body>& req)
      : w(w), start(std::chrono::steady_clock::now()) {
    rec.method = req.method_string();
    rec.target = req.target();
  }
  request_trace(const request_trace&) = delete;
  request_trace& operator=(const request_trace&) = delete;

  ~request_trace() {
    route_metrics& m = route != nullptr ? *route : process_metrics().unrouted();
    m.count(rec.decision);
    access_log_writer& log = w.log_writer();
    if (log.enabled()) {
      rec.time = time;
      rec.request_id = request_id;
      rec.subject = subject;
      rec.duration = std::chrono::steady_clock::now() - start;
      log.write(rec);
    }
  }

  worker& w;
  std::chrono::steady_clock::time_point start;
  std::chrono::system_clock::time_point time = std::chrono::system_clock::now();
  route_metrics* route = nullptr;
  std::string request_id;
  std::string subject;  // copied only when the access log is on
  access_record rec;
};

/// Serves one request whose head is in `p`. Returns whether the connection stays open.
asio::awaitable<bool> serve_request(connection_state& c, worker& w,
                                    http::request_parser<http::buffer_body>& p) {
  auto gw = w.current();  // this request finishes on the configuration it started with
  const auto& cfg = gw->cfg();
  auto& req = p.get();
  const unsigned version = req.version();
  bool keep_alive = req.keep_alive();
  c.extra.clear();

  request_trace trace(w, req);
  std::string& request_id = trace.request_id;
  if (auto it = req.find("X-Request-Id"); it != req.end() && acceptable_request_id(it->value())) {
    request_id = std::string(it->value());
  } else {
    request_id = w.next_request_id();
  }
  c.extra.emplace_back("X-Request-Id", request_id);

  auto reply = [&](http::status status, std::string_view detail) -> asio::awaitable<bool> {
    trace.rec.status = static_cast<unsigned>(status);
    bool body_read = co_await discard_body(c, p, cfg.server.body_timeout);
    bool stay = keep_alive && body_read;
    bool ok = co_await send_problem(c, w, version, stay, status, detail);
    co_return ok&& stay;
  };

  auto route_index = gw->routes().match(req.method_string(), req[http::field::host], req.target());
  if (!route_index) {
    trace.rec.decision = request_decision::no_route;
    co_return co_await reply(http::status::not_found, "no route matches this request");
  }
  const route_config& route = cfg.routes[*route_index];
  trace.route = &gw->metrics(*route_index);
  trace.rec.route = route.name;

  std::string forwarded_for;
  for (auto it = req.find("X-Forwarded-For");
       it != req.end() && beast::iequals(it->name_string(), "X-Forwarded-For"); ++it) {
    if (!forwarded_for.empty()) {
      forwarded_for += ',';
    }
    forwarded_for += it->value();
  }
  identity_input in{c.peer_ip, req[cfg.identity.api_key_header], req[http::field::authorization],
                    req[cfg.identity.user_header], forwarded_for};
  identity_result who = gw->identity().resolve(route, in);
  if (who.rejected) {
    trace.rec.decision = request_decision::rejected;
    co_return co_await reply(http::status::unauthorized, "unknown API key");
  }
  if (w.log_writer().enabled()) {
    trace.subject = who.subject;
  }

  limit_request lr{*route_index, who.subject, who.plan, std::string_view(req.method_string())};
  const auto decide_start = std::chrono::steady_clock::now();
  std::optional<route_decision> maybe = gw->limits().try_check(lr);
  if (!maybe) {
    maybe.emplace(co_await gw->limits().check(lr));
  }
  process_metrics().observe_decision(std::chrono::steady_clock::now() - decide_start);
  route_decision& verdict = *maybe;
  if (verdict.has_limits) {
    const limit_config& limit = route.limits[verdict.limit_index];
    render_rate_limit_headers(verdict.headline, limit.name, window_seconds(limit), route.headers,
                              gw->time().wall_now(), c.extra);
  }
  if (verdict.shadow_denied) {
    // Shadow mode: what would have been denied is counted and logged, and nothing else.
    trace.rec.decision = request_decision::shadow_denied;
    trace.rec.limit = route.limits[verdict.shadow_limit_index].name;
  }
  if (!verdict.allowed) {
    const limit_config& limit = route.limits[verdict.limit_index];
    trace.rec.decision = request_decision::denied;
    trace.rec.limit = limit.name;
    denial answer = render_denial(route.deny, route.name, limit.name, verdict.headline);
    trace.rec.status = answer.status;
    bool body_read = co_await discard_body(c, p, cfg.server.body_timeout);
    bool stay = keep_alive && body_read;
    bool ok = co_await send_local(c, w, version, stay, static_cast<http::status>(answer.status),
                                  std::move(answer.body), answer.content_type);
    co_return ok&& stay;
  }
  if (verdict.delay > nanos{0}) {
    // leaky_bucket with delay: the request waits for its turn; the thread does not.
    asio::steady_timer timer(c.client.get_executor(), verdict.delay);
    co_await timer.async_wait(use_tuple);
  }

  if (req[http::field::expect] == "100-continue" && !p.is_done()) {
    http::response<http::empty_body> cont{http::status::continue_, version};
    c.expires_after(cfg.server.body_timeout);
    auto [ec, n] = co_await http::async_write(c.client, cont, use_tuple);
    if (ec) {
      co_return false;
    }
  }

  const bool request_has_body = !p.is_done();
  const bool idempotent = is_idempotent(req.method());
  const bool head_request = req.method() == http::verb::head;

  // X-Forwarded-For: a trusted proxy's chain is extended; anyone else's is replaced, so an
  // upstream that reads it is never handed a client's own claim. The same for -Proto/-Host.
  std::string chain;
  if (who.peer_trusted && !forwarded_for.empty()) {
    chain = forwarded_for;
    chain += ", ";
  }
  chain += c.peer_ip;
  std::string_view proto = "http";
  std::string_view host = req[http::field::host];
  if (who.peer_trusted) {
    if (auto it = req.find("X-Forwarded-Proto"); it != req.end()) {
      proto = it->value();
    }
    if (auto it = req.find("X-Forwarded-Host"); it != req.end()) {
      host = it->value();
    }
  }
  const body_framing framing = request_framing(p);
  c.head.clear();
  write_upstream_request_head(req, framing,
                              framing == body_framing::length ? *p.content_length() : 0,
                              forwarding_headers{chain, proto, host, request_id}, c.head);

  auto pool = w.pool(route.upstream);
  const nanos upstream_timeout = pool->cfg().response_timeout;
  for (int attempt = 0;; ++attempt) {
    upstream_lease lease = co_await pool->acquire(attempt == 0);
    if (!lease.connection) {
      const auto status =
          lease.timed_out ? http::status::gateway_timeout : http::status::bad_gateway;
      trace.route->upstream_failure(static_cast<unsigned>(status));
      co_return co_await reply(
          status, lease.timed_out ? "upstream connect timed out" : "upstream unavailable");
    }
    auto& up = *lease.connection;
    struct upstream_in_use {
      connection_state& c;
      upstream_in_use(connection_state& state, tcp::socket& s) : c(state) { c.upstream_ = &s; }
      ~upstream_in_use() { c.upstream_ = nullptr; }
    } in_use(c, up.socket);
    // A retry is safe only where nothing can be applied twice: an idempotent request without a
    // body, sent on a pooled connection the upstream may have closed meanwhile.
    const bool may_retry = up.reused && attempt == 0 && idempotent && !request_has_body;

    const auto sent_at = std::chrono::steady_clock::now();
    relay_status sent = co_await relay(c, c.client, c.buffer, p, cfg.server.body_timeout, up.socket,
                                       upstream_timeout, framing);
    trace.rec.bytes_in = sent.body_bytes;
    if (sent.failed == relay_failure::reader) {
      trace.rec.decision = request_decision::error;
      if (is_disconnect(sent.ec)) {
        co_return false;
      }
      const http::status status = status_for_read_error(sent.ec);
      trace.rec.status = static_cast<unsigned>(status);
      co_await send_problem(c, w, version, false, status, "request body refused");
      co_await linger_close(c);
      co_return false;
    }
    if (sent.failed == relay_failure::writer) {
      if (may_retry) {
        continue;
      }
      const http::status status = sent.ec == beast::error::timeout ? http::status::gateway_timeout
                                                                   : http::status::bad_gateway;
      trace.rec.status = static_cast<unsigned>(status);
      trace.route->upstream_failure(trace.rec.status);
      co_await send_problem(c, w, version, false, status,
                            "upstream failed while receiving the request");
      co_return false;
    }

    // Watching costs a syscall per request, so only requests holding concurrency slots do it.
    std::optional<client_watch> watch;
    if (verdict.slot.held()) {
      watch.emplace(c, up);
    }
    http::response_parser<http::buffer_body> rp;
    rp.body_limit(boost::none);
    rp.header_limit(k_max_upstream_header_bytes);
    if (head_request) {
      rp.skip(true);
    }
    c.expires_after(upstream_timeout);
    auto [rec, n] = co_await http::async_read_header(up.socket, up.buffer, rp, use_tuple);
    error_code ec = c.checked(rec);
    if (c.client_gone_) {
      co_return false;
    }
    if (ec) {
      if (may_retry && !rp.got_some() && ec != beast::error::timeout) {
        continue;
      }
      bool stay = keep_alive && p.is_done();
      bool timeout = ec == beast::error::timeout;
      const http::status status =
          timeout ? http::status::gateway_timeout : http::status::bad_gateway;
      trace.rec.status = static_cast<unsigned>(status);
      trace.route->upstream_failure(trace.rec.status);
      bool ok = co_await send_problem(
          c, w, version, stay, status,
          timeout ? "upstream did not answer in time" : "upstream closed the connection");
      co_return ok&& stay;
    }
    const nanos upstream_time = std::chrono::steady_clock::now() - sent_at;
    trace.rec.upstream = upstream_time;
    trace.rec.status = rp.get().result_int();
    trace.route->upstream_response(trace.rec.status);
    trace.route->upstream_latency(upstream_time);

    bool client_keep_alive = keep_alive && !w.draining();
    const bool upstream_until_close = !rp.is_done() && !rp.content_length() && !rp.chunked();
    const body_framing out_framing = response_framing(rp, version, client_keep_alive);
    c.head.clear();
    write_client_response_head(rp.get(), version, client_keep_alive, out_framing,
                               rp.content_length().value_or(0), c.extra, c.head);
    relay_status relayed = co_await relay(c, up.socket, up.buffer, rp, upstream_timeout, c.client,
                                          cfg.server.idle_timeout, out_framing);
    trace.rec.bytes_out = relayed.body_bytes;
    if (relayed.failed != relay_failure::none) {
      co_return false;  // the head may be out: all that is left is to close
    }
    if (rp.keep_alive() && !upstream_until_close) {
      pool->release(std::move(lease.connection));
    }
    co_return client_keep_alive;
  }
}

}  // namespace

asio::awaitable<void> run_session(std::shared_ptr<worker> owner, tcp::socket socket) {
  worker& w = *owner;
  auto c = std::make_shared<connection_state>(std::move(socket));
  asio::co_spawn(c->client.get_executor(), watchdog(c), asio::detached);
  w.connection_opened(*c);
  process_metrics().connection_opened();
  struct on_end {
    worker& w;
    connection_state& c;
    ~on_end() {
      process_metrics().connection_closed();
      w.connection_closed(c);
      c.closed_ = true;
      c.watchdog_timer.cancel();
    }
  } end{w, *c};
  error_code ec;
  auto peer = c->client.remote_endpoint(ec);
  if (ec) {
    co_return;
  }
  auto address = peer.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    address = asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  c->peer_ip = address.to_string();

  bool first = true;
  for (;;) {
    const auto& server = w.current()->cfg().server;
    if (w.draining()) {
      break;
    }
    if (c->buffer.size() == 0) {
      // Between requests the connection is idle; a new one gets the header timeout.
      c->expires_after(first ? server.header_timeout : server.idle_timeout);
      c->idle_ = true;
      auto [rec, n] = co_await c->client.async_read_some(c->buffer.prepare(4096), use_tuple);
      c->idle_ = false;
      if (rec) {
        break;  // idle timeout, end of stream, reset or drain: close quietly
      }
      c->buffer.commit(n);
    }
    first = false;

    http::request_parser<http::buffer_body> p;
    p.header_limit(static_cast<std::uint32_t>(server.max_header_bytes));
    p.body_limit(server.max_body_bytes);
    c->expires_after(server.header_timeout);
    auto [rec, hn] = co_await http::async_read_header(c->client, c->buffer, p, use_tuple);
    error_code hec = c->checked(rec);
    if (hec) {
      if (hec == http::error::end_of_stream || hec == asio::error::connection_reset) {
        break;
      }
      c->extra.clear();
      auto status = status_for_read_error(hec);
      process_metrics().unrouted().count(request_decision::error);
      co_await send_problem(*c, w, 11, false, status,
                            status == http::status::request_timeout
                                ? "request head not received in time"
                                : "request head refused");
      co_await linger_close(*c);
      co_return;
    }
    if (!co_await serve_request(*c, w, p)) {
      break;
    }
  }
  error_code ignored;
  c->client.shutdown(tcp::socket::shutdown_both, ignored);
  c->client.close(ignored);
}

}  // namespace ratewall
