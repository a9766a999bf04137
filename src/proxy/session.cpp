#include "ratewall/proxy/session.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <string>
#include <vector>

#include "ratewall/core/log.hpp"
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
/// Client timeouts use one watchdog per connection instead of a timer per operation: arming a
/// deadline is a store to `deadline_`, and the watchdog wakes only when a deadline may have
/// passed. On expiry it cancels the socket's operations (it does not close the socket, so the
/// session can still answer 408) and the next result is reported as beast::error::timeout.
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
  upstream_connection* watched_ = nullptr;  // see watch_client
  bool client_gone_ = false;
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
        self->watched_->stream.socket().cancel(ignored);
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

/// Removes the hop-by-hop headers (RFC 9110 §7.6.1), including those named by Connection.
template <class Fields>
void remove_hop_by_hop(Fields& fields) {
  std::vector<std::string> named;
  for (auto it = fields.find(http::field::connection);
       it != fields.end() && it->name() == http::field::connection; ++it) {
    for (auto token : http::token_list{it->value()}) {
      named.emplace_back(token);
    }
  }
  for (const auto& n : named) {
    fields.erase(n);
  }
  fields.erase(http::field::connection);
  fields.erase(http::field::keep_alive);
  fields.erase("Proxy-Connection");
  fields.erase(http::field::te);
  fields.erase(http::field::trailer);
  fields.erase(http::field::upgrade);
  fields.erase(http::field::proxy_authorization);
  fields.erase(http::field::proxy_authenticate);
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
  http::response<http::string_body> res{status, version};
  res.set(http::field::server, "ratewall");
  for (const auto& [name, value] : c.extra) {
    res.set(name, value);
  }
  if (!body.empty()) {
    res.set(http::field::content_type, content_type);
  }
  res.body() = std::move(body);
  res.keep_alive(keep_alive && !w.draining());
  res.prepare_payload();
  c.expires_after(w.current()->cfg().server.idle_timeout);
  auto [ec, n] = co_await http::async_write(c.client, res, use_tuple);
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

enum class send_outcome { sent, client_failed, upstream_failed };

struct send_result {
  send_outcome outcome = send_outcome::sent;
  error_code ec;
};

/// Sends the request head and streams its body from the client to the upstream.
asio::awaitable<send_result> send_request(connection_state& c,
                                          http::request_parser<http::buffer_body>& p,
                                          upstream_connection& up, nanos body_timeout,
                                          nanos upstream_timeout) {
  auto& req = p.get();
  http::request_serializer<http::buffer_body> sr{req};
  do {
    if (!p.is_done()) {
      req.body().data = c.relay.data();
      req.body().size = c.relay.size();
      c.expires_after(body_timeout);
      auto [rec, n] = co_await http::async_read(c.client, c.buffer, p, use_tuple);
      error_code ec = c.checked(rec);
      if (ec && ec != http::error::need_buffer) {
        co_return send_result{send_outcome::client_failed, ec};
      }
      req.body().size = c.relay.size() - req.body().size;
      req.body().data = c.relay.data();
      req.body().more = !p.is_done();
    } else {
      req.body().data = nullptr;
      req.body().size = 0;
      req.body().more = false;
    }
    up.stream.expires_after(upstream_timeout);
    auto [ec, n] = co_await http::async_write(up.stream, sr, use_tuple);
    if (ec && ec != http::error::need_buffer) {
      co_return send_result{send_outcome::upstream_failed, ec};
    }
  } while (!p.is_done() || !sr.is_done());
  co_return send_result{};
}

/// Prepares the request for the upstream: hop-by-hop headers out, forwarding headers in.
void rewrite_request(http::request<http::buffer_body>& req, const connection_state& c,
                     bool peer_trusted, std::string_view request_id) {
  // X-Forwarded-For: a trusted proxy's chain is extended; anyone else's is replaced, so an
  // upstream that reads it is never handed a client's own claim.
  std::string xff;
  if (peer_trusted) {
    for (auto it = req.find("X-Forwarded-For");
         it != req.end() && beast::iequals(it->name_string(), "X-Forwarded-For"); ++it) {
      if (!xff.empty()) {
        xff += ", ";
      }
      xff += it->value();
    }
  }
  if (!xff.empty()) {
    xff += ", ";
  }
  xff += c.peer_ip;
  std::string proto = "http";
  if (peer_trusted) {
    if (auto it = req.find("X-Forwarded-Proto"); it != req.end()) {
      proto = std::string(it->value());
    }
  }
  std::string host(req[http::field::host]);
  if (peer_trusted) {
    if (auto it = req.find("X-Forwarded-Host"); it != req.end()) {
      host = std::string(it->value());
    }
  }

  remove_hop_by_hop(req);
  // Expect: 100-continue was answered by the gateway (or not at all); the upstream gets the
  // body without waiting.
  req.erase(http::field::expect);
  req.set("X-Forwarded-For", xff);
  req.set("X-Forwarded-Proto", proto);
  if (!host.empty()) {
    req.set("X-Forwarded-Host", host);
  }
  req.set("X-Request-Id", request_id);
  req.version(11);
  req.keep_alive(true);
}

/// Relays the response head and body from the upstream to the client. Returns whether the
/// client connection may stay open; `reusable` says whether the upstream one may.
struct relay_result {
  bool client_ok = false;
  bool upstream_reusable = false;
};

asio::awaitable<relay_result> relay_response(connection_state& c,
                                             http::response_parser<http::buffer_body>& rp,
                                             upstream_connection& up, unsigned client_version,
                                             bool client_keep_alive, nanos upstream_timeout,
                                             nanos client_timeout) {
  auto& res = rp.get();
  remove_hop_by_hop(res);
  for (const auto& [name, value] : c.extra) {
    res.set(name, value);
  }
  const bool body_follows = !rp.is_done();
  const bool framed = res.has_content_length() || res.chunked();
  if (client_version < 11 && res.chunked()) {
    // An HTTP/1.0 client cannot read chunks: the body ends when the connection does.
    res.chunked(false);
    client_keep_alive = false;
  } else if (body_follows && !framed) {
    // The upstream ends the body by closing; a 1.1 client gets it chunked and stays connected.
    if (client_version >= 11) {
      res.chunked(true);
    } else {
      client_keep_alive = false;
    }
  }
  res.version(client_version);
  res.keep_alive(client_keep_alive);

  http::response_serializer<http::buffer_body> sr{res};
  do {
    if (!rp.is_done()) {
      res.body().data = c.relay.data();
      res.body().size = c.relay.size();
      up.stream.expires_after(upstream_timeout);
      auto [ec, n] = co_await http::async_read(up.stream, up.buffer, rp, use_tuple);
      if (ec && ec != http::error::need_buffer) {
        co_return relay_result{};  // the head is out: all we can do is close
      }
      res.body().size = c.relay.size() - res.body().size;
      res.body().data = c.relay.data();
      res.body().more = !rp.is_done();
    } else {
      res.body().data = nullptr;
      res.body().size = 0;
      res.body().more = false;
    }
    c.expires_after(client_timeout);
    auto [ec, n] = co_await http::async_write(c.client, sr, use_tuple);
    if (ec && ec != http::error::need_buffer) {
      co_return relay_result{};
    }
  } while (!rp.is_done() || !sr.is_done());
  co_return relay_result{client_keep_alive, rp.keep_alive() && framed};
}

/// Serves one request whose head is in `p`. Returns whether the connection stays open.
asio::awaitable<bool> serve_request(connection_state& c, worker& w,
                                    http::request_parser<http::buffer_body>& p) {
  auto gw = w.current();  // this request finishes on the configuration it started with
  const auto& cfg = gw->cfg();
  auto& req = p.get();
  const unsigned version = req.version();
  bool keep_alive = req.keep_alive();
  c.extra.clear();

  std::string request_id;
  if (auto it = req.find("X-Request-Id"); it != req.end() && acceptable_request_id(it->value())) {
    request_id = std::string(it->value());
  } else {
    request_id = w.next_request_id();
  }
  c.extra.emplace_back("X-Request-Id", request_id);

  auto reply = [&](http::status status, std::string_view detail) -> asio::awaitable<bool> {
    bool body_read = co_await discard_body(c, p, cfg.server.body_timeout);
    bool stay = keep_alive && body_read;
    bool ok = co_await send_problem(c, w, version, stay, status, detail);
    co_return ok&& stay;
  };

  auto route_index = gw->routes().match(req.method_string(), req[http::field::host], req.target());
  if (!route_index) {
    co_return co_await reply(http::status::not_found, "no route matches this request");
  }
  const route_config& route = cfg.routes[*route_index];

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
    co_return co_await reply(http::status::unauthorized, "unknown API key");
  }

  limit_request lr{*route_index, who.subject, who.plan, std::string_view(req.method_string())};
  std::optional<route_decision> maybe = gw->limits().try_check(lr);
  if (!maybe) {
    maybe.emplace(co_await gw->limits().check(lr));
  }
  route_decision& verdict = *maybe;
  if (verdict.has_limits) {
    const limit_config& limit = route.limits[verdict.limit_index];
    render_rate_limit_headers(verdict.headline, limit.name, window_seconds(limit), header_options{},
                              gw->time().wall_now(), c.extra);
  }
  if (!verdict.allowed) {
    const limit_config& limit = route.limits[verdict.limit_index];
    bool body_read = co_await discard_body(c, p, cfg.server.body_timeout);
    bool stay = keep_alive && body_read;
    bool ok = co_await send_local(c, w, version, stay, http::status::too_many_requests,
                                  render_problem_body(route.name, limit.name, verdict.headline),
                                  "application/problem+json");
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
  const bool peer_trusted = who.peer_trusted;
  rewrite_request(req, c, peer_trusted, request_id);

  auto pool = w.pool(route.upstream);
  const nanos upstream_timeout = pool->cfg().response_timeout;
  for (int attempt = 0;; ++attempt) {
    upstream_lease lease = co_await pool->acquire(attempt == 0);
    if (!lease.connection) {
      co_return co_await reply(
          lease.timed_out ? http::status::gateway_timeout : http::status::bad_gateway,
          lease.timed_out ? "upstream connect timed out" : "upstream unavailable");
    }
    auto& up = *lease.connection;
    // A retry is safe only where nothing can be applied twice: an idempotent request without a
    // body, sent on a pooled connection the upstream may have closed meanwhile.
    const bool may_retry = up.reused && attempt == 0 && idempotent && !request_has_body;

    send_result sent = co_await send_request(c, p, up, cfg.server.body_timeout, upstream_timeout);
    if (sent.outcome == send_outcome::client_failed) {
      if (is_disconnect(sent.ec)) {
        co_return false;
      }
      co_await send_problem(c, w, version, false, status_for_read_error(sent.ec),
                            "request body refused");
      co_await linger_close(c);
      co_return false;
    }
    if (sent.outcome == send_outcome::upstream_failed) {
      if (may_retry) {
        continue;
      }
      co_await send_problem(c, w, version, false,
                            sent.ec == beast::error::timeout ? http::status::gateway_timeout
                                                             : http::status::bad_gateway,
                            "upstream failed while receiving the request");
      co_return false;
    }

    client_watch watch(c, up);
    http::response_parser<http::buffer_body> rp;
    rp.body_limit(boost::none);
    rp.header_limit(k_max_upstream_header_bytes);
    if (head_request) {
      rp.skip(true);
    }
    up.stream.expires_after(upstream_timeout);
    auto [ec, n] = co_await http::async_read_header(up.stream, up.buffer, rp, use_tuple);
    if (c.client_gone_) {
      co_return false;
    }
    if (ec) {
      if (may_retry && !rp.got_some() && ec != beast::error::timeout) {
        continue;
      }
      bool stay = keep_alive && p.is_done();
      bool timeout = ec == beast::error::timeout;
      bool ok = co_await send_problem(
          c, w, version, stay, timeout ? http::status::gateway_timeout : http::status::bad_gateway,
          timeout ? "upstream did not answer in time" : "upstream closed the connection");
      co_return ok&& stay;
    }

    relay_result relayed = co_await relay_response(c, rp, up, version, keep_alive && !w.draining(),
                                                   upstream_timeout, cfg.server.idle_timeout);
    if (relayed.upstream_reusable) {
      pool->release(std::move(lease.connection));
    }
    co_return relayed.client_ok;
  }
}

}  // namespace

asio::awaitable<void> run_session(std::shared_ptr<worker> owner, tcp::socket socket) {
  worker& w = *owner;
  auto c = std::make_shared<connection_state>(std::move(socket));
  asio::co_spawn(c->client.get_executor(), watchdog(c), asio::detached);
  w.connection_opened(*c);
  struct on_end {
    worker& w;
    connection_state& c;
    ~on_end() {
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
