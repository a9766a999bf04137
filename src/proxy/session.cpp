#include "ratewall/proxy/session.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/ssl/error.hpp>
#include <optional>
#include <string>
#include <vector>

#include "connection.hpp"
#include "exchange.hpp"
#include "h2_connection.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/http/keep_alive.hpp"
#include "ratewall/proxy/admission.hpp"
#include "ratewall/proxy/h2_preface.hpp"
#include "ratewall/proxy/request_hygiene.hpp"
#include "ratewall/tls/server_tls.hpp"
#include "request_steps.hpp"

namespace ratewall {

namespace {

// The head string of a connection keeps its memory between requests up to this size.
constexpr std::size_t k_max_kept_head = 64 * 1024;
constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";

/// The answer to a plain HTTP request sent to the TLS listener (see tls_handshake), made once.
const std::string& plain_request_on_tls_answer() {
  static const std::string answer = [] {
    const std::string body = problem_json(
        400, "Bad Request", "a plain HTTP request was sent to the TLS port: use https://");
    std::string out;
    write_local_response_head(400, 11, false, "application/problem+json", body.size(), {}, out);
    return out + body;
  }();
  return answer;
}

asio::awaitable<void> watchdog(std::shared_ptr<connection_state> c) {
  while (!c->closed_) {
    auto now = std::chrono::steady_clock::now();
    if (c->deadline_ <= now) {
      c->timed_out_ = true;
      c->deadline_ = std::chrono::steady_clock::time_point::max();
      error_code ignored;
      c->client.socket().cancel(ignored);
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

asio::awaitable<bool> discard_body(connection_state& c, request_parser& p, nanos timeout) {
  if (p.is_done()) {
    co_return true;
  }
  auto length = p.content_length();
  if (length && *length > k_max_discard_bytes) {
    co_return false;
  }
  p.eager(true);
  std::uint64_t total = 0;
  while (!p.is_done()) {
    p.get().body().data = c.relay.data();
    p.get().body().size = c.relay.size();
    c.expires_after(timeout);
    error_code ec = co_await read_piece(c, c.client, c.buffer, p);
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

/// Reads the body of the request whose head `p` has into `out` while it fits in `limit` bytes,
/// before any upstream connection is taken (routes[].request_buffering): a client that sends
/// slowly holds none. On success `p.is_done()` says whether the whole body is in `out`; if not,
/// `out` holds its first `limit` bytes and the rest streams. `gap` bounds each wait.
asio::awaitable<error_code> buffer_body(connection_state& c, request_parser& p, std::uint64_t limit,
                                        nanos gap, std::string& out) {
  p.eager(true);
  if (auto length = p.content_length(); length && *length <= limit) {
    out.reserve(static_cast<std::size_t>(*length));
  }
  auto& body = p.get().body();
  while (!p.is_done() && out.size() < limit) {
    const std::size_t before = out.size();
    const std::size_t room =
        static_cast<std::size_t>(std::min<std::uint64_t>(limit - before, k_max_read));
    out.resize(before + room);
    body.data = out.data() + before;
    body.size = room;
    c.expires_after(gap);
    error_code ec = co_await read_piece(c, c.client, c.buffer, p);
    out.resize(before + room - body.size);
    if (ec && ec != http::error::need_buffer) {
      co_return ec;
    }
  }
  co_return error_code{};
}

/// A request the gateway refuses itself for its framing, target or expectation: the answer,
/// then nothing more is read from the connection.
asio::awaitable<bool> refuse(connection_state& c, const worker& w, const request_head& req,
                             request_trace& trace, unsigned status, std::string_view detail) {
  trace.rec.decision = request_decision::error;
  trace.rec.status = status;
  co_await send_problem(c, w, req.version(), req.method(), false, static_cast<http::status>(status),
                        detail);
  co_await linger_close(c);
  co_return false;
}

/// A request answered by the gateway (404, 401, 429, 503, ...). A body the client holds back
/// for Expect: 100-continue is not waited for: the answer goes out at once and the connection
/// closes after it (the client may send the body anyway, or may not: RFC 9110 §10.1.1). Any
/// other body is read and dropped when that keeps the connection usable.
asio::awaitable<bool> answer_locally(connection_state& c, worker& w, request_parser& p,
                                     request_trace& trace, const server_config& server,
                                     bool body_withheld, http::status status, std::string body,
                                     std::string_view content_type) {
  const unsigned version = p.get().version();
  const http::verb method = p.get().method();
  trace.rec.status = static_cast<unsigned>(status);
  if (body_withheld) {
    co_await send_local(c, w, version, method, false, status, std::move(body), content_type);
    co_await linger_close(c);
    co_return false;
  }
  const bool body_read = co_await discard_body(c, p, server.body_timeout);
  const bool stay = client_keeps_alive(p) && body_read;
  const bool ok =
      co_await send_local(c, w, version, method, stay, status, std::move(body), content_type);
  co_return ok&& stay;
}

/// leaky_bucket with delay: the request waits for its turn; the thread does not. False when it
/// is not to be forwarded: the client hung up meanwhile, or the drain ends before its turn
/// (answered 503 here).
asio::awaitable<bool> wait_turn(connection_state& c, worker& w, const request_head& req,
                                request_trace& trace, nanos delay) {
  asio::steady_timer timer(c.client.get_executor());
  std::uint64_t retry_after = 0;
  bool in_time = false;
  {
    client_watch watch(c, [&timer] { timer.cancel(); });
    in_time = co_await wait_for_turn(w, timer, delay, retry_after);
  }
  if (c.client_gone_) {
    trace.rec.decision = request_decision::error;
    co_return false;
  }
  if (!in_time) {
    c.extra.emplace_back("Retry-After", std::to_string(retry_after));
    co_await refuse(c, w, req, trace, 503,
                    "the gateway is shutting down before this request's turn");
    co_return false;
  }
  co_return true;
}

/// The access log's line for a head the gateway could not read (400, 408, 431): no method or
/// path, the peer as the client.
void log_refused_head(worker& w, const connection_state& c, unsigned status) {
  if (!w.log_writer().enabled()) {
    return;
  }
  access_record rec;
  rec.time = std::chrono::system_clock::now();
  rec.decision = request_decision::error;
  rec.status = status;
  rec.client = c.peer_ip;
  w.log_writer().write(rec);
}

/// Forwards an admitted request and relays its answer: its body first read whole where the
/// route buffers bodies, then the exchange on the route's upstream pool.
asio::awaitable<bool> forward(connection_state& c, worker& w, request_parser& p, const gateway& gw,
                              const upstream_pools& pools, admission& a,
                              std::string_view forwarded_for, request_trace& trace) {
  const config& cfg = gw.cfg();
  const route_config& route = cfg.routes[*a.route];
  auto& req = p.get();
  std::string body;
  // Trailers of a chunked body join the request's fields as the body is read (next to fields of
  // the same name): only the head was identified and checked, so the head is kept as it was.
  std::optional<request_head> head_only;
  const std::uint64_t buffer_limit = route.request_buffering ? cfg.server.request_buffer_bytes : 0;
  if (!p.is_done() && buffer_limit > 0 && p.content_length().value_or(0) <= buffer_limit) {
    if (p.chunked()) {
      head_only.emplace(req.base());
    }
    if (error_code ec = co_await buffer_body(c, p, buffer_limit, cfg.server.body_timeout, body)) {
      trace.rec.bytes_in = body.size();
      if (is_disconnect(ec)) {
        trace.rec.decision = request_decision::error;
        co_return false;
      }
      const http::status status = status_for_body_error(ec);
      co_return co_await refuse(c, w, req, trace, static_cast<unsigned>(status),
                                body_refused_detail(status));
    }
  }
  // An upgrade is forwarded for a request without a body (a WebSocket handshake has none): the
  // bytes after the head are the new protocol's once the upstream agrees.
  const std::string upgrade =
      p.is_done() && body.empty() ? upgrade_protocols(head_only ? *head_only : req.base()) : "";
  // A body read whole goes with a Content-Length (a chunked one too, as nginx does with
  // proxy_request_buffering); one larger than the buffer goes on in chunks after its start.
  const bool body_buffered = p.is_done() && (!body.empty() || p.chunked());
  const body_framing framing = body_buffered ? body_framing::length : request_framing(p);
  const std::uint64_t length = body_buffered                     ? body.size()
                               : framing == body_framing::length ? *p.content_length()
                                                                 : 0;
  // A cost read from a JSON body needs the body as it is: a client asking for gzip would
  // otherwise choose to be charged the default.
  const bool identity_encoding =
      route.cost_from_response &&
      route.cost_from_response->from == cost_from_response_config::source::json;
  // The pools of the request's own configuration: the loader guarantees the name is there.
  const auto& pool = pools.find(route.upstream)->second;
  write_forward_head(
      forward_head_input{head_only ? *head_only : req.base(), c.canon, a.who, c.peer_ip,
                         c.client.secure(), forwarded_for, trace.request_id, framing, length,
                         upgrade, identity_encoding, pool->cfg().default_host,
                         cfg.identity.user_header},
      body, c.forward_target, c.head);

  forward_plan plan{pool,
                    cfg.server.body_timeout,
                    cfg.server.idle_timeout,
                    client_keeps_alive(p),
                    a.verdict.slot.held() ? &a.verdict.slot : nullptr,
                    body_buffered,
                    body.size(),
                    upgrade,
                    cfg.server.tunnel_idle_timeout};
  std::optional<response_charge> charge;
  if (route.cost_from_response) {
    charge.emplace(*route.cost_from_response, gw, a, trace);
    plan.cost = &charge->meter;
    plan.charge = &*charge;
  }
  h1_leg leg(c, w, p);
  const bool stay = co_await exchange(leg, plan, trace);
  if (charge) {
    co_await settle(*charge);  // unless the relay did, once the answer was read whole
  }
  if (c.head.capacity() > k_max_kept_head) {
    std::string().swap(c.head);  // a large buffered body's memory is not kept while idle
  }
  co_return stay;
}

/// Serves one request whose head is in `p`, on the configuration `scope.gw` it was read with
/// (held for the whole request: a reload frees the old configuration only when the last request
/// on it ends): check the head, admit, then answer or forward. Returns whether the connection
/// stays open.
asio::awaitable<bool> serve_request(connection_state& c, worker& w,
                                    std::shared_ptr<const upstream_pools> pools, request_parser& p,
                                    request_scope& scope) {
  const std::shared_ptr<const gateway>& gw = scope.gw;
  const config& cfg = gw->cfg();
  const auto& req = p.get();
  const unsigned version = req.version();
  c.extra.clear();
  const std::string_view expect = expectation_of(req);
  // The client holds its body back until told to send it.
  const bool body_withheld =
      version >= 11 && !p.is_done() && beast::iequals(expect, "100-continue");

  request_trace& trace = scope.trace;
  const bool logged = w.log_writer().enabled();
  if (logged) {
    trace.client = c.peer_ip;
    trace.rec.user_agent = req[http::field::user_agent];
  }
  trace.request_id = request_id_of(w, req);
  c.extra.emplace_back("X-Request-Id", trace.request_id);

  const unsigned refusal = check_request_head(req, cfg.server.paths, cfg.identity, c.canon);
  trace.rec.host = c.canon.host;
  if (refusal != 0) {
    co_return co_await refuse(c, w, req, trace, refusal, c.canon.reason);
  }
  if (!expect.empty() && !beast::iequals(expect, "100-continue")) {
    // The only expectation there is (RFC 9110 §10.1.1); a client that set another may be
    // holding its body back for it.
    co_return co_await refuse(c, w, req, trace, 417,
                              "the only expectation supported is 100-continue");
  }

  const std::string forwarded_for = forwarded_for_of(req);
  admission& a = scope.a;
  a = try_admit_head(*gw, c.peer_ip, c.peer_address, c.canon, req, forwarded_for, c.extra);
  if (a.pending) {
    co_await finish_admission(gw, a, c.extra);
  }
  note_admission(trace, *gw, a, logged);
  if (!a.forward) {
    co_return co_await answer_locally(c, w, p, trace, cfg.server, body_withheld,
                                      static_cast<http::status>(a.status), std::move(a.body),
                                      a.content_type);
  }
  // Not `delay > 0 && co_await ...`: GCC 12 evaluates a co_await in the right operand of &&
  // and || whatever the left one gives.
  if (a.verdict.delay > nanos{0}) {
    if (!co_await wait_turn(c, w, req, trace, a.verdict.delay)) {
      co_return false;
    }
  }
  if (body_withheld) {
    c.expires_after(cfg.server.body_timeout);
    auto [ec, n] = co_await asio::async_write(c.client, asio::buffer(k_continue), use_tuple);
    if (ec) {
      co_return false;
    }
  }
  co_return co_await forward(c, w, p, *gw, *pools, a, forwarded_for, trace);
}

/// The TLS handshake of a connection to the TLS listener, bounded by header_timeout. False
/// when it failed: the connection is then simply closed, counted but not logged (scanners and
/// port probes fail handshakes all day).
asio::awaitable<bool> tls_handshake(connection_state& c, const server_config& server) {
  c.expires_after(server.header_timeout);
  const error_code ec = c.checked(co_await c.client.handshake(transport::handshake_type::server));
  if (ec) {
    process_metrics().tls_handshake(false);
    // A plain HTTP request on the TLS port, which OpenSSL knows by its first bytes, gets an
    // answer it can read, in plain text, as nginx gives one: `curl http://` to this port
    // would otherwise see the connection close with nothing said.
    if (ec.category() == asio::error::get_ssl_category() &&
        ERR_GET_REASON(static_cast<unsigned long>(ec.value())) == SSL_R_HTTP_REQUEST) {
      auto [wec, n] = co_await asio::async_write(
          c.client.socket(), asio::buffer(plain_request_on_tls_answer()), use_tuple);
      if (!wec) {
        co_await linger_close(c);
      }
    }
    co_return false;
  }
  process_metrics().tls_handshake(true);
  co_return true;
}

/// The client's transport: plain, or TLS with the certificates of `gw`, the configuration the
/// connection is accepted under (a reload changes them for new handshakes only:
/// `c.certificates` keeps these alive).
std::shared_ptr<connection_state> make_connection(const gateway& gw, tcp::socket socket, bool tls) {
  if (!tls) {
    return std::make_shared<connection_state>(transport(std::move(socket)));
  }
  std::shared_ptr<const server_tls> certificates = gw.tls();
  if (!certificates) {
    return nullptr;  // (a reload cannot remove server.tls: the listener is made once)
  }
  auto c =
      std::make_shared<connection_state>(transport(std::move(socket), certificates->context()));
  c->certificates = std::move(certificates);
  return c;
}

/// The connection's first steps: its peer's address, then on the TLS listener the handshake.
/// False when the connection should simply close.
asio::awaitable<bool> open_connection(connection_state& c, const tcp::endpoint& peer,
                                      const server_config& server, bool tls) {
  c.peer_ip = client_address(peer).to_string();
  c.peer_address = parse_peer_address(c.peer_ip);
  if (!tls) {
    co_return true;  // (not `!tls || co_await ...`: see serve_request)
  }
  co_return co_await tls_handshake(c, server);
}

/// The answer to a head that could not be read for `ec` (400, 408, 414, 431, 505: see
/// status_for_head_error), then the connection's end. `parsed` is the parser's method once it
/// took the request line (`line_taken`). A refused HEAD gets the head alone (RFC 9110 §9.3.2):
/// its method is the parser's, else the line's first word.
asio::awaitable<void> refuse_head(connection_state& c, worker& w, http::verb parsed,
                                  bool line_taken, const error_code& ec,
                                  std::size_t max_header_bytes) {
  const std::string_view held(static_cast<const char*>(c.buffer.data().data()), c.buffer.size());
  const http::status status = status_for_head_error(ec, line_taken, held, max_header_bytes);
  process_metrics().unrouted().count(request_decision::error);
  log_refused_head(w, c, static_cast<unsigned>(status));
  const http::verb method = parsed != http::verb::unknown ? parsed
                            : held.starts_with("HEAD ")   ? http::verb::head
                                                          : http::verb::unknown;
  co_await send_problem(c, w, 11, method, false, status, head_refused_detail(status));
  co_await linger_close(c);
}

/// Reads until the connection's first bytes tell the HTTP/2 preface from anything else, within
/// the header timeout: `partial` when the client stopped (or timed out) inside the preface.
asio::awaitable<preface_match> read_preface(connection_state& c) {
  for (;;) {
    const auto data = c.buffer.data();
    const preface_match m =
        h2_preface_match(std::string_view(static_cast<const char*>(data.data()), data.size()));
    if (m != preface_match::partial) {
      co_return m;
    }
    auto [rec, n] = co_await c.client.async_read_some(c.buffer.prepare(4096), use_tuple);
    if (rec) {
      co_return preface_match::partial;
    }
    c.buffer.commit(n);
  }
}

/// HTTP/1.1: requests one after another while the connection is kept alive, each on the
/// configuration current when its head is read. False when the connection was already ended
/// after an answer to a head that could not be read, with nothing more to send.
asio::awaitable<bool> serve_http1(connection_state& c, const std::shared_ptr<worker>& owner) {
  worker& w = *owner;
  bool first = true;
  for (;;) {
    if (w.draining()) {
      break;
    }
    if (c.buffer.size() == 0) {
      // Between requests the connection is idle; a new one gets the header timeout.
      const server_config& idle_cfg = w.current()->cfg().server;  // read before the await
      c.expires_after(first ? idle_cfg.header_timeout : idle_cfg.idle_timeout);
      c.relay.release();
      c.idle_ = true;
      auto [rec, n] = co_await c.client.async_read_some(c.buffer.prepare(4096), use_tuple);
      c.idle_ = false;
      if (rec || c.evicted_) {
        break;  // idle timeout, end of stream, reset, drain or eviction: close quietly
      }
      c.buffer.commit(n);
    }
    if (first && w.current()->cfg().server.http2.enabled && !c.client.secure()) {
      // HTTP/2 with prior knowledge (h2c) opens with the preface; anything else is HTTP/1.1.
      const preface_match m = co_await read_preface(c);
      if (c.evicted_) {
        break;
      }
      if (m == preface_match::partial) {
        // A client that stalls after "P" or "PRI * HTTP/2.0" may as well be sending HTTP/1.1
        // slowly: it gets the header timeout's 408, as it would on a listener without h2c.
        if (c.timed_out_) {
          co_await refuse_head(c, w, http::verb::unknown, false, beast::error::timeout,
                               w.current()->cfg().server.max_header_bytes);
          co_return false;
        }
        break;  // the client closed inside the preface
      }
      if (m == preface_match::yes) {
        co_await serve_h2(c.shared_from_this(), owner);
        co_return true;
      }
    }
    first = false;

    // The request owns the configuration it is read with: a reload may free the previous one
    // at any await, so nothing below borrows from w.current() across one.
    std::shared_ptr<const gateway> gw = w.current();
    std::shared_ptr<const upstream_pools> pools = w.pools();
    const server_config& server = gw->cfg().server;
    request_parser p;
    p.on_chunk_header(refuse_control_in_chunk_extension);
    // After the parser: the trace holds views into it (method, target, User-Agent) and reads
    // them when it ends, on every way out, a shutdown that destroys this frame included.
    std::optional<request_scope> scope;
    p.body_limit(server.max_body_bytes);
    c.expires_after(server.header_timeout);
    // Awaited since the accept for a first head, else since its first byte (or, pipelined, now).
    c.reading_head_ = true;
    if (c.served_) {
      c.head_since_ = c.deadline_ - server.header_timeout;
    }
    std::size_t head_used = 0;
    std::optional<error_code> head = take_head(c.buffer, p, server.max_header_bytes, head_used);
    const error_code hec =
        head ? *head
             : co_await read_head(c, c.client, c.buffer, p, server.max_header_bytes, head_used);
    if (c.evicted_) {
      break;  // room made for another at max_connections, even if the head came whole
    }
    if (hec) {
      if (hec == http::error::end_of_stream || hec == asio::error::connection_reset) {
        break;
      }
      c.extra.clear();
      const bool line_taken = !p.get().method_string().empty();
      co_await refuse_head(c, w, p.get().method(), line_taken, hec, server.max_header_bytes);
      co_return false;
    }
    c.reading_head_ = false;  // no longer among the first to go at max_connections
    c.served_ = true;
    scope.emplace(w, p.get().method_string(), p.get().target(), std::move(gw));
    const bool stay = co_await serve_request(c, w, std::move(pools), p, *scope);
    scope.reset();  // the request is over: counted and logged
    if (!stay) {
      break;
    }
  }
  co_return true;
}

/// The connection's end: on TLS a close_notify, so that the client can tell the end from a
/// cut (and the session stays resumable), one write bounded like any; then the socket closes.
/// (close() sends the FIN itself: a shutdown() before it was one more system call, which
/// failed whenever the client had gone first.)
asio::awaitable<void> close_connection(connection_state& c) {
  if (c.client.secure()) {
    c.expires_after(std::chrono::seconds(1));
    co_await c.client.close_notify();
  }
  c.client.close();
}

}  // namespace

asio::ip::address client_address(const tcp::endpoint& peer) {
  const asio::ip::address address = peer.address();
  if (address.is_v6() && address.to_v6().is_v4_mapped()) {
    return asio::ip::make_address_v4(asio::ip::v4_mapped, address.to_v6());
  }
  return address;
}

asio::awaitable<void> run_session(std::shared_ptr<worker> owner, tcp::socket socket,
                                  tcp::endpoint peer, connection_ticket ticket, bool tls) {
  worker& w = *owner;
  // The configuration the connection is accepted under: its certificates and handshake bound.
  std::shared_ptr<const gateway> accepted_under = w.current();
  auto c = make_connection(*accepted_under, std::move(socket), tls);
  if (!c) {
    co_return;
  }
  asio::co_spawn(c->client.get_executor(), watchdog(c), log_failure{"connection watchdog"});
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
  if (!co_await open_connection(*c, peer, accepted_under->cfg().server, tls)) {
    co_return;
  }
  accepted_under.reset();  // each request reads the configuration current when it starts
  if (c->client.alpn() == "h2") {
    co_await serve_h2(c, owner);
    co_await close_connection(*c);
    co_return;
  }
  if (co_await serve_http1(*c, owner)) {
    co_await close_connection(*c);
  }
}

}  // namespace ratewall
