#include "ratewall/proxy/session.hpp"

#include <sys/socket.h>

#include <cerrno>

#include <algorithm>
#include <array>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/proxy/http_head.hpp"
#include "ratewall/proxy/request_hygiene.hpp"
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
// Reads take what the socket has, from 16 KiB (a relay buffer's worth) up to 64 KiB.
constexpr std::size_t k_min_read = 16 * 1024;
constexpr std::size_t k_max_read = 64 * 1024;
// An upstream that sends interim responses without end is answered 502 after this many.
constexpr unsigned k_max_interim_responses = 16;
// The head string of a connection keeps its memory between requests up to this size.
constexpr std::size_t k_max_kept_head = 64 * 1024;
constexpr std::string_view k_continue = "HTTP/1.1 100 Continue\r\n\r\n";

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

  void expires_after(nanos d) { expires_at(std::chrono::steady_clock::now() + d); }
  void expires_at(std::chrono::steady_clock::time_point t) {
    deadline_ = t;
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
  tcp::socket* upstream_ = nullptr;  // the upstream leg in use: the watchdog cancels it too
  std::function<void()> on_hangup_;  // see client_watch
  bool client_gone_ = false;
  std::string head;            // the head being written, reused from request to request
  canonical_request canon;     // the current request's canonical target and host
  std::string forward_target;  // canon's path and query, as the upstream gets them
  bool idle_ = false;          // waiting for the first byte of the next request

  // Graceful shutdown: an idle connection stops waiting now; a busy one closes after its
  // current response, which says Connection: close.
  void drain() override { close_if_idle(); }
  bool close_if_idle() override {
    if (!idle_) {
      return false;
    }
    idle_ = false;  // once: the cancelled read ends the session
    error_code ignored;
    client.cancel(ignored);
    return true;
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

/// While the gateway waits for the upstream, or for a delayed request's turn, a client that hangs
/// up must not keep the wait (and its concurrency slot, or its place in the queue) alive: an end
/// of stream on the client socket calls `on_hangup`, which cancels the wait. Data from a
/// pipelining client is left where it is.
class client_watch {
 public:
  client_watch(connection_state& c, std::function<void()> on_hangup) : c_(c) {
    c_.on_hangup_ = std::move(on_hangup);
    c_.client_gone_ = false;
    c_.client.async_wait(tcp::socket::wait_read, [self = c_.shared_from_this()](error_code ec) {
      if (ec || !self->on_hangup_) {
        return;
      }
      char byte;
      ssize_t n = ::recv(self->client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        self->client_gone_ = true;
        self->on_hangup_();
      }
    });
  }
  ~client_watch() {
    c_.on_hangup_ = nullptr;
    error_code ignored;
    c_.client.cancel(ignored);  // the wait, if still pending; nothing else is pending now
  }
  client_watch(const client_watch&) = delete;
  client_watch& operator=(const client_watch&) = delete;

 private:
  connection_state& c_;
};

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

/// The upstream's bytes were not HTTP (as opposed to a close, reset or timeout).
bool is_parse_error(const error_code& ec) {
  static const auto& http_errors = make_error_code(http::error::bad_version).category();
  return ec.category() == http_errors && ec != http::error::partial_message &&
         ec != http::error::end_of_stream;
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

/// Parses what `buffer` holds into `p` and reads from `s` only when that is not enough to make
/// progress: read-some semantics, so a piece of body is handed on as soon as it arrives and never
/// held back to fill a buffer. Progress is a complete head, body bytes in p's buffer_body, or
/// the end of the message. Returns need_buffer when the body buffer is full, and with
/// `may_read` false, need_more when what is buffered makes no progress.
template <class Parser>
asio::awaitable<error_code> read_piece(connection_state& c, tcp::socket& s,
                                       beast::flat_buffer& buffer, Parser& p,
                                       bool may_read = true) {
  for (;;) {
    if (buffer.size() > 0) {
      const bool in_body = p.is_header_done();
      const std::size_t room = in_body ? p.get().body().size : 0;
      error_code ec;
      buffer.consume(p.put(buffer.data(), ec));
      if (ec != http::error::need_more) {
        co_return ec;
      }
      if (in_body && p.get().body().size < room) {
        co_return error_code{};  // body bytes; what is left is the start of the next piece
      }
    }
    if (!may_read) {
      co_return http::error::need_more;
    }
    const std::size_t want =
        std::clamp<std::size_t>(buffer.capacity() - buffer.size(), k_min_read, k_max_read);
    auto [rec, n] = co_await s.async_read_some(buffer.prepare(want), use_tuple);
    error_code ec = c.checked(rec);
    if (ec == asio::error::eof) {
      if (!p.got_some()) {
        co_return http::error::end_of_stream;
      }
      ec = {};
      p.put_eof(ec);  // ends a body delimited by the close; anything else is a partial message
      co_return ec;
    }
    if (ec) {
      co_return ec;
    }
    buffer.commit(n);
  }
}

bool has_obs_fold(std::string_view head) {
  for (std::size_t i = head.find('\n'); i != std::string_view::npos && i + 1 < head.size();
       i = head.find('\n', i + 1)) {
    if (head[i + 1] == ' ' || head[i + 1] == '\t') {
      return true;
    }
  }
  return false;
}

/// Reads a head into `p`; the body, if any, stays in `buffer` for the relay. `limit` bounds
/// the whole head, start line and fields together, exactly (Beast's header_limit bounds each
/// of the two on its own).
template <class Parser>
asio::awaitable<error_code> read_head(connection_state& c, tcp::socket& s,
                                      beast::flat_buffer& buffer, Parser& p, std::size_t limit) {
  p.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX)));
  std::size_t used = 0;
  for (;;) {
    if (buffer.size() > 0) {
      error_code ec;
      const std::size_t n = p.put(buffer.data(), ec);
      // Beast takes a head whole, once it is all there: the n bytes are the head, in which an
      // obs-fold (a line that starts with a space or tab) is refused (RFC 9112 §5.2).
      if (!ec &&
          has_obs_fold(std::string_view(static_cast<const char*>(buffer.data().data()), n))) {
        ec = http::error::bad_field;
      }
      buffer.consume(n);
      used += n;
      // Incomplete, every buffered byte belongs to the head.
      if (used > limit || (ec == http::error::need_more && used + buffer.size() > limit)) {
        co_return http::error::header_limit;
      }
      if (ec != http::error::need_more) {
        co_return ec;
      }
    }
    const std::size_t want =
        std::clamp<std::size_t>(buffer.capacity() - buffer.size(), k_min_read, k_max_read);
    auto [rec, n] = co_await s.async_read_some(buffer.prepare(want), use_tuple);
    error_code ec = c.checked(rec);
    if (ec == asio::error::eof) {
      co_return p.got_some() || used > 0 ? http::error::partial_message
                                         : http::error::end_of_stream;
    }
    if (ec) {
      co_return ec;
    }
    buffer.commit(n);
  }
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
asio::awaitable<error_code> buffer_body(connection_state& c,
                                        http::request_parser<http::buffer_body>& p,
                                        std::uint64_t limit, nanos gap, std::string& out) {
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

/// Which leg failed while a body was being relayed.
enum class relay_failure { none, reader, writer };

struct relay_status {
  relay_failure failed = relay_failure::none;
  error_code ec;
  std::uint64_t body_bytes = 0;  // read from `in` and handed on
};

/// Streams the body that `p` reads from `in` to `out` in `framing`, each piece in one gathered
/// write with its chunk framing as soon as it is read. With `send_head`, `c.head` goes out
/// first, at once, with whatever of the body is already buffered: a small message costs one
/// write, and the head of a stream is never held back until its first event.
/// `read_gap` bounds each wait for the next piece, `write_timeout` each write.
template <class Parser>
asio::awaitable<relay_status> relay(connection_state& c, tcp::socket& in,
                                    beast::flat_buffer& in_buffer, Parser& p, nanos read_gap,
                                    tcp::socket& out, nanos write_timeout, body_framing framing,
                                    bool send_head) {
  auto& body = p.get().body();
  p.eager(true);  // one put() goes through chunk headers and body alike
  relay_status status;
  bool head_pending = send_head;
  for (;;) {
    std::size_t n = 0;
    if (!p.is_done()) {
      body.data = c.relay.data();
      body.size = c.relay.size();
      c.expires_after(read_gap);
      error_code ec = co_await read_piece(c, in, in_buffer, p, !head_pending);
      const bool progress =
          !ec || ec == http::error::need_buffer || (head_pending && ec == http::error::need_more);
      if (!progress) {
        status.failed = relay_failure::reader;
        status.ec = ec;
        co_return status;
      }
      n = c.relay.size() - body.size;
      status.body_bytes += n;
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
        status.failed = relay_failure::writer;
        status.ec = ec;
        co_return status;
      }
      head_pending = false;
    }
    if (last) {
      co_return status;
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
    // No body follows (HEAD, 204, 304, or Content-Length: 0); say so where a length is due, but
    // never on a 204 (RFC 9110 §8.6).
    const bool no_content = rp.get().result_int() == 204;
    return rp.content_length() && !no_content ? body_framing::length : body_framing::none;
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
  route_metrics* route = nullptr;  // process-wide, kept across reloads (metrics registry)
  std::string request_id;
  std::string subject;  // copied only when the access log is on
  access_record rec;
};

using upstream_response_parser = http::response_parser<http::buffer_body>;

/// How the upstream's answer began.
struct response_head {
  error_code ec;              // reading failed or timed out: nothing final arrived
  bool unexpected = false;    // no status code, a 101 nobody asked for, or 1xx without end
  bool interim_sent = false;  // an interim response went to the client
};

/// Reads the upstream's response heads until the final one (status 200 and up) is in `rp`.
/// Interim responses are read whole, never taken for the answer (RFC 9110 §15.2): 103 Early
/// Hints and the other 1xx go on to an HTTP/1.1 client as they come; 100 is dropped, since the
/// gateway answered the client's Expect itself; 101 only ends an upgrade, and none was asked
/// for. `deadline` (response_timeout) bounds them all.
asio::awaitable<response_head> read_final_head(connection_state& c, upstream_connection& up,
                                               std::optional<upstream_response_parser>& rp,
                                               bool head_request, unsigned client_version,
                                               std::chrono::steady_clock::time_point deadline,
                                               nanos client_write_timeout) {
  response_head result;
  for (unsigned interim = 0;; ++interim) {
    rp.emplace();
    rp->body_limit(boost::none);
    if (head_request) {
      rp->skip(true);
    }
    c.expires_at(deadline);
    result.ec = co_await read_head(c, up.socket, up.buffer, *rp, k_max_upstream_header_bytes);
    if (result.ec) {
      co_return result;
    }
    const unsigned status = rp->get().result_int();
    if (status >= 200 && status <= 599) {
      co_return result;
    }
    // 000-099 and 600-999 are not status codes (RFC 9110 §15): an invalid response.
    if (status < 100 || status > 599 || status == 101 || interim >= k_max_interim_responses) {
      result.unexpected = true;
      co_return result;
    }
    if (status == 100 || client_version < 11) {
      continue;
    }
    std::string head;
    write_interim_response_head(rp->get(), head);
    c.expires_after(client_write_timeout);
    auto [rec, n] = co_await asio::async_write(c.client, asio::buffer(head), use_tuple);
    if (rec) {
      result.ec = c.checked(rec);
      c.client_gone_ = true;
      co_return result;
    }
    result.interim_sent = true;
  }
}

/// What admission hands to the exchange: everything it needs, owned, since a reload may free
/// the configuration at any await.
struct forward_plan {
  std::shared_ptr<upstream_pool> pool;
  nanos body_timeout{0};  // client: each gap in the request body
  nanos send_timeout{0};  // client: each write of the response
  bool keep_alive = false;
  bool watch_client = false;         // a concurrency slot is held: a client that hangs up cancels
  bool body_buffered = false;        // the whole body is in c.head: a retry may send it again
  std::uint64_t buffered_bytes = 0;  // body bytes in c.head (read before the exchange)
};

/// Answers `status` (502, 503 or 504) for an upstream that failed, or could not be given the
/// request, before any of its response reached the client. Returns whether the connection stays
/// open.
asio::awaitable<bool> upstream_refused(connection_state& c, worker& w,
                                       http::request_parser<http::buffer_body>& p,
                                       request_trace& trace, bool keep_alive, http::status status,
                                       std::string_view detail) {
  trace.rec.status = static_cast<unsigned>(status);
  trace.route->upstream_failure(trace.rec.status);
  const bool stay = keep_alive && p.is_done();
  const bool ok = co_await send_problem(c, w, p.get().version(), stay, status, detail);
  co_return ok&& stay;
}

asio::awaitable<bool> upstream_failed(connection_state& c, worker& w,
                                      http::request_parser<http::buffer_body>& p,
                                      request_trace& trace, bool keep_alive, bool timed_out,
                                      std::string_view detail) {
  const http::status status = timed_out ? http::status::gateway_timeout : http::status::bad_gateway;
  co_return co_await upstream_refused(c, w, p, trace, keep_alive, status, detail);
}

/// The exchange: forwards the request whose upstream head is in `c.head` and whose body `p` may
/// still be reading, on a pooled upstream connection, then relays the answer piece by piece.
/// Returns whether the client connection stays open.
asio::awaitable<bool> exchange(connection_state& c, worker& w,
                               http::request_parser<http::buffer_body>& p, forward_plan plan,
                               request_trace& trace) {
  const auto& req = p.get();
  const unsigned version = req.version();
  const bool request_has_body = !p.is_done() || plan.buffered_bytes > 0;
  const bool idempotent = is_idempotent(req.method());
  const bool head_request = req.method() == http::verb::head;
  const body_framing framing = request_framing(p);
  const upstream_config& up_cfg = plan.pool->cfg();  // owned by the pool, which plan owns

  for (int attempt = 0;; ++attempt) {
    upstream_lease lease;
    {
      // A client that hangs up while its request waits for one of max_connections leaves the
      // queue, and nothing is forwarded for it.
      budget_wait wait;
      std::optional<client_watch> watch;
      if (plan.pool->bounded()) {
        watch.emplace(c, [&wait] { wait.cancel(); });
      }
      lease = co_await plan.pool->acquire(attempt == 0, &wait);
    }
    if (c.client_gone_) {
      trace.rec.decision = request_decision::error;
      co_return false;
    }
    if (lease.queue_full) {
      c.extra.emplace_back("Retry-After", "1");
      co_return co_await upstream_refused(c, w, p, trace, plan.keep_alive,
                                          http::status::service_unavailable,
                                          "upstream busy: all of its connections are in use");
    }
    if (!lease.connection) {
      co_return co_await upstream_failed(
          c, w, p, trace, plan.keep_alive, lease.timed_out,
          lease.timed_out ? "upstream connect timed out" : "upstream unavailable");
    }
    auto& up = *lease.connection;
    struct upstream_in_use {
      connection_state& c;
      upstream_in_use(connection_state& state, tcp::socket& s) : c(state) { c.upstream_ = &s; }
      ~upstream_in_use() { c.upstream_ = nullptr; }
    } in_use(c, up.socket);
    // A retry is safe only where nothing can be applied twice: an idempotent request whose body
    // (if any) is held whole, sent on a pooled connection the upstream may have closed meanwhile.
    const bool may_retry =
        up.reused && attempt == 0 && idempotent && (!request_has_body || plan.body_buffered);

    relay_status sent = co_await relay(c, c.client, c.buffer, p, plan.body_timeout, up.socket,
                                       up_cfg.read_timeout, framing, true);
    // response_timeout bounds the wait for the head once the request is out, however long a
    // slow client took to upload its body.
    const auto sent_at = std::chrono::steady_clock::now();
    trace.rec.bytes_in = plan.buffered_bytes + sent.body_bytes;
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
    // The upstream stopped reading the request: it may have answered early (413, 401) and
    // closed, and then its answer is what the client should get.
    const bool answered_early =
        sent.failed == relay_failure::writer && !may_retry && sent.ec != beast::error::timeout;
    if (sent.failed == relay_failure::writer && !answered_early) {
      if (may_retry) {
        continue;
      }
      co_return co_await upstream_failed(c, w, p, trace, false, sent.ec == beast::error::timeout,
                                         "upstream failed while receiving the request");
    }

    std::optional<upstream_response_parser> rp;
    response_head head;
    {
      // Watching costs a syscall per request, so only requests holding concurrency slots do it.
      std::optional<client_watch> watch;
      if (plan.watch_client) {
        watch.emplace(c, [&up] {
          error_code ignored;
          up.socket.cancel(ignored);
        });
      }
      head = co_await read_final_head(c, up, rp, head_request, version,
                                      sent_at + up_cfg.response_timeout, plan.send_timeout);
    }
    if (c.client_gone_) {
      co_return false;
    }
    if (head.ec) {
      const bool timed_out = head.ec == beast::error::timeout;
      if (may_retry && !head.interim_sent && !rp->got_some() && !timed_out) {
        continue;
      }
      const bool invalid = is_parse_error(head.ec);
      co_return co_await upstream_failed(
          c, w, p, trace, plan.keep_alive && !answered_early, timed_out,
          answered_early ? "upstream failed while receiving the request"
          : timed_out    ? "upstream did not answer in time"
          : invalid      ? "upstream sent an invalid response"
                         : "upstream closed the connection");
    }
    if (head.unexpected) {
      co_return co_await upstream_failed(c, w, p, trace, plan.keep_alive && !answered_early, false,
                                         "upstream sent an invalid or unexpected status");
    }
    const nanos upstream_time = std::chrono::steady_clock::now() - sent_at;
    trace.rec.upstream = upstream_time;
    trace.rec.status = rp->get().result_int();
    trace.route->upstream_response(trace.rec.status);
    trace.route->upstream_latency(upstream_time);

    // After an early answer the rest of the request body is still on its way: close after.
    bool client_keep_alive = plan.keep_alive && !w.draining() && !answered_early;
    const bool upstream_until_close = !rp->is_done() && !rp->content_length() && !rp->chunked();
    const body_framing out_framing = response_framing(*rp, version, client_keep_alive);
    c.head.clear();
    write_client_response_head(rp->get(), version, client_keep_alive, out_framing,
                               rp->content_length().value_or(0), c.extra, c.head);
    relay_status relayed = co_await relay(c, up.socket, up.buffer, *rp, up_cfg.read_timeout,
                                          c.client, plan.send_timeout, out_framing, true);
    trace.rec.bytes_out = relayed.body_bytes;
    if (relayed.failed == relay_failure::reader) {
      // The head is out: all the client can be told is that the body is incomplete, by a close
      // before the last chunk or before Content-Length is reached.
      trace.route->upstream_aborted();
      log_warn("upstream " + up_cfg.name + " failed mid-response (" + relayed.ec.message() +
               ") after " + std::to_string(relayed.body_bytes) + " body bytes; request " +
               trace.request_id + " cut short");
      co_return false;
    }
    if (relayed.failed == relay_failure::writer) {
      co_return false;  // the client is gone or too slow; the upstream leg is mid-message
    }
    if (answered_early) {
      co_await linger_close(c);  // the client may still be sending the body nobody reads
      co_return false;
    }
    // Reused only when the exchange ended exactly at a message boundary on both legs. A 204
    // that declared a body is a confused upstream: its body may still come.
    const bool declared_body_204 =
        rp->get().result_int() == 204 && (rp->content_length().value_or(0) > 0 || rp->chunked());
    if (!answered_early && p.is_done() && rp->is_done() && rp->keep_alive() &&
        !upstream_until_close && up.buffer.size() == 0 && !declared_body_204) {
      plan.pool->release(std::move(lease.connection));
    }
    co_return client_keep_alive;
  }
}

/// Serves one request whose head is in `p`, on the configuration `gw` it was read with (held
/// for the whole request: a reload frees the old configuration only when the last request on
/// it ends). Returns whether the connection stays open.
asio::awaitable<bool> serve_request(connection_state& c, worker& w,
                                    std::shared_ptr<const gateway> gw,
                                    std::shared_ptr<const upstream_pools> pools,
                                    http::request_parser<http::buffer_body>& p) {
  const auto& cfg = gw->cfg();
  auto& req = p.get();
  const unsigned version = req.version();
  bool keep_alive = req.keep_alive();
  c.extra.clear();
  // A client that sent Expect: 100-continue holds its body back until told to send it. A local
  // answer goes out at once, without waiting for that body, and the connection closes after it
  // (the client may send the body anyway, or may not: RFC 9110 §10.1.1).
  const std::string_view expect = req[http::field::expect];
  const bool body_withheld =
      version >= 11 && !p.is_done() && beast::iequals(expect, "100-continue");

  request_trace trace(w, req);
  std::string& request_id = trace.request_id;
  if (auto it = req.find("X-Request-Id"); it != req.end() && acceptable_request_id(it->value())) {
    request_id = std::string(it->value());
  } else {
    request_id = w.next_request_id();
  }
  c.extra.emplace_back("X-Request-Id", request_id);

  auto answer_locally = [&](http::status status, std::string body,
                            std::string_view content_type) -> asio::awaitable<bool> {
    trace.rec.status = static_cast<unsigned>(status);
    if (body_withheld) {
      co_await send_local(c, w, version, false, status, std::move(body), content_type);
      co_await linger_close(c);
      co_return false;
    }
    bool body_read = co_await discard_body(c, p, cfg.server.body_timeout);
    bool stay = keep_alive && body_read;
    bool ok = co_await send_local(c, w, version, stay, status, std::move(body), content_type);
    co_return ok&& stay;
  };
  auto reply = [&](http::status status, std::string_view detail) {
    return answer_locally(
        status, problem_json(static_cast<unsigned>(status), http::obsolete_reason(status), detail),
        "application/problem+json");
  };

  if (const unsigned refusal = check_request_head(req, cfg.server.paths, cfg.identity, c.canon)) {
    // The framing or the target cannot be trusted: nothing more is read from this connection.
    trace.rec.decision = request_decision::error;
    trace.rec.status = refusal;
    co_await send_problem(c, w, version, false, static_cast<http::status>(refusal), c.canon.reason);
    co_await linger_close(c);
    co_return false;
  }
  if (!expect.empty() && !beast::iequals(expect, "100-continue")) {
    // The only expectation there is (RFC 9110 §10.1.1); a client that set another may be
    // holding its body back for it, so the connection closes after the answer.
    trace.rec.decision = request_decision::error;
    trace.rec.status = 417;
    co_await send_problem(c, w, version, false, http::status::expectation_failed,
                          "the only expectation supported is 100-continue");
    co_await linger_close(c);
    co_return false;
  }
  auto route_index = gw->routes().match(req.method_string(), c.canon.host, c.canon.target.path);
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
    // Wrong keys cost a client its reject_limit: keys cannot be guessed at line rate.
    const decision d = gw->reject_limit().take(who.subject, gw->time().now());
    if (!d.allowed) {
      c.extra.emplace_back("Retry-After", std::to_string(retry_after_seconds(d)));
      co_return co_await reply(http::status::too_many_requests,
                               "too many requests with unknown API keys");
    }
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
  if (verdict.store_full) {
    // No room to track the client (store.on_full: deny): the gateway's capacity, not the
    // client's limit, so a 503 without quota headers rather than a 429.
    trace.rec.decision = request_decision::error;
    c.extra.emplace_back("Retry-After", std::to_string(retry_after_seconds(verdict.headline)));
    co_return co_await reply(http::status::service_unavailable,
                             "the rate limiter is at capacity and cannot track this client");
  }
  if (verdict.has_limits) {
    const limit_config& limit = route.limits[verdict.limit_index];
    // The window of the plan's own values where it overrides them, as the quota already is.
    const auto plan = limit.plans.find(who.plan);
    const limit_override* override = plan == limit.plans.end() ? nullptr : &plan->second;
    render_rate_limit_headers(verdict.headline, limit.name, policy_window_seconds(limit, override),
                              route.headers, gw->time().wall_now(), c.extra);
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
    co_return co_await answer_locally(static_cast<http::status>(answer.status),
                                      std::move(answer.body), answer.content_type);
  }
  if (verdict.delay > nanos{0}) {
    // leaky_bucket with delay: the request waits for its turn; the thread does not. A client
    // that hangs up meanwhile is never forwarded.
    asio::steady_timer timer(c.client.get_executor(), verdict.delay);
    {
      client_watch watch(c, [&timer] { timer.cancel(); });
      co_await timer.async_wait(use_tuple);
    }
    if (c.client_gone_) {
      trace.rec.decision = request_decision::error;
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

  // X-Forwarded-For: a trusted proxy's chain is extended; anyone else's is replaced, so an
  // upstream that reads it is never handed a client's own claim. The same for -Proto/-Host.
  std::string chain;
  if (who.peer_trusted && !forwarded_for.empty()) {
    chain = forwarded_for;
    chain += ", ";
  }
  chain += c.peer_ip;
  std::string_view proto = "http";
  std::string_view host = c.canon.host;
  if (who.peer_trusted) {
    if (auto it = req.find("X-Forwarded-Proto"); it != req.end()) {
      proto = it->value();
    }
    if (auto it = req.find("X-Forwarded-Host"); it != req.end()) {
      host = it->value();
    }
  }
  std::string body;
  // Trailers of a chunked body join the request's fields as the body is read (next to fields of
  // the same name): only the head was identified and checked, so the head is kept as it was.
  std::optional<http::request_header<>> head_only;
  const std::uint64_t buffer_limit = route.request_buffering ? cfg.server.request_buffer_bytes : 0;
  if (!p.is_done() && buffer_limit > 0 && p.content_length().value_or(0) <= buffer_limit) {
    if (p.chunked()) {
      head_only.emplace(req.base());
    }
    if (error_code ec = co_await buffer_body(c, p, buffer_limit, cfg.server.body_timeout, body)) {
      trace.rec.decision = request_decision::error;
      trace.rec.bytes_in = body.size();
      if (is_disconnect(ec)) {
        co_return false;
      }
      const http::status status = status_for_read_error(ec);
      trace.rec.status = static_cast<unsigned>(status);
      co_await send_problem(c, w, version, false, status, "request body refused");
      co_await linger_close(c);
      co_return false;
    }
  }
  // A body read whole goes with a Content-Length (a chunked one too, as nginx does with
  // proxy_request_buffering); one larger than the buffer goes on in chunks after its start.
  const bool body_buffered = p.is_done() && (!body.empty() || p.chunked());
  const body_framing framing = body_buffered ? body_framing::length : request_framing(p);
  const std::uint64_t length = body_buffered                     ? body.size()
                               : framing == body_framing::length ? *p.content_length()
                                                                 : 0;
  c.head.clear();
  c.forward_target = c.canon.target.path;
  c.forward_target += c.canon.target.query;
  write_upstream_request_head(
      head_only ? *head_only : req.base(), framing, length,
      forwarding_headers{c.forward_target, c.canon.host, chain, proto, host, request_id}, c.head);
  if (!body.empty()) {
    if (framing == body_framing::chunked) {
      char size_line[18];
      c.head.append(size_line, chunk_size_line(body.size(), size_line));
      c.head.append(body);
      c.head.append("\r\n");
    } else {
      c.head.append(body);
    }
  }

  // The pools of the request's own configuration: the loader guarantees the name is there.
  forward_plan plan{pools->find(route.upstream)->second,
                    cfg.server.body_timeout,
                    cfg.server.idle_timeout,
                    keep_alive,
                    verdict.slot.held(),
                    body_buffered,
                    body.size()};
  const bool stay = co_await exchange(c, w, p, std::move(plan), trace);
  if (c.head.capacity() > k_max_kept_head) {
    std::string().swap(c.head);  // a large buffered body's memory is not kept while idle
  }
  co_return stay;
}

}  // namespace

asio::awaitable<void> run_session(std::shared_ptr<worker> owner, tcp::socket socket,
                                  connection_ticket ticket) {
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
    if (w.draining()) {
      break;
    }
    if (c->buffer.size() == 0) {
      // Between requests the connection is idle; a new one gets the header timeout.
      const server_config& idle_cfg = w.current()->cfg().server;  // read before the await
      c->expires_after(first ? idle_cfg.header_timeout : idle_cfg.idle_timeout);
      c->idle_ = true;
      auto [rec, n] = co_await c->client.async_read_some(c->buffer.prepare(4096), use_tuple);
      c->idle_ = false;
      if (rec) {
        break;  // idle timeout, end of stream, reset or drain: close quietly
      }
      c->buffer.commit(n);
    }
    first = false;

    // The request owns the configuration it is read with: a reload may free the previous one
    // at any await, so nothing below borrows from w.current() across one.
    std::shared_ptr<const gateway> gw = w.current();
    std::shared_ptr<const upstream_pools> pools = w.pools();
    const server_config& server = gw->cfg().server;
    http::request_parser<http::buffer_body> p;
    p.body_limit(server.max_body_bytes);
    c->expires_after(server.header_timeout);
    error_code hec = co_await read_head(*c, c->client, c->buffer, p, server.max_header_bytes);
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
    if (!co_await serve_request(*c, w, std::move(gw), std::move(pools), p)) {
      break;
    }
  }
  error_code ignored;
  c->client.shutdown(tcp::socket::shutdown_both, ignored);
  c->client.close(ignored);
}

}  // namespace ratewall
