#pragma once

// One client connection of the HTTP/1.1 front end, as the session (session.cpp) and the exchange
// (exchange.cpp) share it: the connection's state and its watchdog deadline, the client watch,
// reading a head or a piece of body without filling a buffer first, relaying a body, the
// gateway's own answers, and the trace of a request. Internal to the proxy module.

#include <algorithm>
#include <array>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/admin/metrics.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/use_tuple.hpp"
#include "ratewall/http/response_cost.hpp"
#include "ratewall/limit/store.hpp"
#include "ratewall/proxy/http_head.hpp"
#include "ratewall/proxy/message.hpp"
#include "ratewall/proxy/request_hygiene.hpp"
#include "ratewall/proxy/transport.hpp"
#include "ratewall/proxy/upstream_response.hpp"
#include "ratewall/proxy/worker.hpp"

namespace ratewall {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using error_code = boost::system::error_code;

// Reads take what the socket has, from 16 KiB (a relay buffer's worth) up to 64 KiB.
inline constexpr std::size_t k_min_read = 16 * 1024;
inline constexpr std::size_t k_max_read = 64 * 1024;
// Beast takes a chunk's size line (with its extensions) and a trailer only whole, and bounds
// neither: body bytes it cannot take from this many buffered are one of those, longer than
// any peer sends but an attacker (RFC 9112 §7.1.1 asks for a limit; HAProxy refuses what does
// not fit its 16 KiB buffer). read_piece then fails with header_limit: a 400 for a client, as
// HAProxy answers (a head's own fields past max_header_bytes are the 431).
inline constexpr std::size_t k_max_unparsed_bytes = 64 * 1024;
// A local reply may leave a small request body behind; reading it keeps the connection usable.
// Anything larger is not worth reading: the connection is closed instead.
inline constexpr std::uint64_t k_max_discard_bytes = 1024 * 1024;

/// The scratch of one exchange (exchange.hpp), kept by the front end out of the coroutine
/// frame (Asio reuses frames only up to 1020 bytes) and reused from request to request: the
/// HTTP/1.1 connection's, or an HTTP/2 stream's.
struct exchange_state {
  std::string head;            // the head being written
  header_list extra;           // headers added to the response of the current request
  canonical_request canon;     // the current request's canonical target and host
  std::string forward_target;  // canon's path and query, as the upstream gets them
  // The upstream's answer to the current request while exchange() relays it. The head's
  // storage is reused from response to response; the parser is made for each.
  upstream_response upstream_answer;
  std::optional<upstream_response_parser> response;
  tcp::socket* upstream_ = nullptr;  // the upstream leg in use: the watchdog cancels it too
  bool client_gone_ = false;         // the client went away while the exchange waited
  // The gateway ended the client side itself (a drain's cut-off), not the client.
  bool cut_by_gateway_ = false;
  // The upstream refused the body as it went up (stop_upload): reads of it end, a read that
  // completed meanwhile included. Only while the request is sent.
  bool upload_stopped_ = false;

 protected:
  ~exchange_state() = default;  // only as the base of a connection or a stream
};

/// Per-connection state, allocated once per connection rather than per request.
///
/// Timeouts, of the client and of the upstream leg alike, use one watchdog per connection
/// instead of a timer per operation: arming a deadline is a store to `deadline_`, and the
/// watchdog wakes only when a deadline may have passed. On expiry it cancels the pending
/// operations (it does not close the client socket, so the session can still answer 408) and
/// their result is reported as beast::error::timeout.
struct connection_state final : exchange_state,
                                drainable,
                                std::enable_shared_from_this<connection_state> {
  explicit connection_state(transport t)
      : client(std::move(t)), watchdog_timer(client.get_executor()) {}

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
    if (upload_stopped_) {
      return asio::error::operation_aborted;  // the cancel may have found the read completed
    }
    return ec;
  }

  std::shared_ptr<const void> certificates;  // TLS: what made client's context; outlives it
  transport client;
  beast::flat_buffer buffer;
  std::string peer_ip;
  std::optional<ip_address> peer_address;  // peer_ip parsed, once for the connection's requests
  relay_space relay;
  asio::steady_timer watchdog_timer;
  std::chrono::steady_clock::time_point deadline_ = std::chrono::steady_clock::time_point::max();
  std::chrono::steady_clock::time_point wake_ = std::chrono::steady_clock::time_point::max();
  bool timed_out_ = false;
  bool closed_ = false;
  std::function<void()> on_hangup_;  // see client_watch
  bool idle_ = false;                // waiting for the first byte of the next request
  bool reading_head_ = true;         // a head (or the TLS handshake) is under way
  // Since when: the accept until the first head is whole, then each head's first byte.
  std::chrono::steady_clock::time_point head_since_ = std::chrono::steady_clock::now();
  bool served_ = false;   // a whole head has been read
  bool evicted_ = false;  // closed at max_connections (evict): ends without a word

  // While HTTP/2 serves the connection, its session: the drain, close and cut-off below go to it.
  drainable* protocol_ = nullptr;

  // Graceful shutdown: an idle connection stops waiting now; a busy one closes after its
  // current response, which says Connection: close.
  void drain() override {
    if (protocol_ != nullptr) {
      protocol_->drain();
      return;
    }
    close_if_idle();
  }
  bool close_if_idle() override {
    if (protocol_ != nullptr) {
      return protocol_->close_if_idle();
    }
    if (!idle_) {
      return false;
    }
    idle_ = false;  // once: the cancelled read ends the session
    error_code ignored;
    client.socket().cancel(ignored);
    return true;
  }
  bool close_if_kept_alive() override {
    if (protocol_ != nullptr) {
      return protocol_->close_if_idle();
    }
    if (!idle_ || !served_ || evicted_) {
      return false;
    }
    evict();
    return true;
  }
  std::optional<std::chrono::steady_clock::time_point> head_since() const override {
    if (protocol_ != nullptr) {
      return protocol_->head_since();
    }
    if (evicted_ || !reading_head_) {
      return std::nullopt;
    }
    return head_since_;
  }
  // The session checks evicted_ after every read that completes: one that had completed when
  // the socket was cancelled must not be served on a socket shut down both ways.
  void evict() override {
    if (protocol_ != nullptr) {
      protocol_->evict();
      return;
    }
    evicted_ = true;
    idle_ = false;
    error_code ignored;
    client.socket().shutdown(tcp::socket::shutdown_both, ignored);
    client.socket().cancel(ignored);
  }
  void cut_off() override {
    if (protocol_ != nullptr) {
      protocol_->cut_off();
      return;
    }
    error_code ignored;
    client.socket().shutdown(tcp::socket::shutdown_both, ignored);
    client.socket().cancel(ignored);
    if (upstream_ != nullptr) {
      upstream_->shutdown(tcp::socket::shutdown_both, ignored);
      upstream_->cancel(ignored);
    }
  }
};

/// While the gateway waits for the upstream, or for a delayed request's turn, a client that hangs
/// up must not keep the wait (and its concurrency slot, or its place in the queue) alive: the
/// end of the client's side (a FIN, TLS's close_notify, a reset) calls `on_hangup`, which
/// cancels the wait. What a pipelining client sends meanwhile is read into the connection's
/// buffer, where the next request's read finds it, so that an end after it is seen too (as
/// nginx sees one through EPOLLRDHUP); past `k_read_ahead` bytes the rest is left to TCP, and
/// the watch ends.
class client_watch {
 public:
  static constexpr std::size_t k_read_ahead = 16 * 1024;

  client_watch(connection_state& c, std::function<void()> on_hangup) : c_(c) {
    c_.on_hangup_ = std::move(on_hangup);
    c_.client_gone_ = false;
    arm(c_.shared_from_this());
  }
  ~client_watch() {
    c_.on_hangup_ = nullptr;
    error_code ignored;
    c_.client.socket().cancel(ignored);  // the wait, if still pending; nothing else is pending now
  }
  client_watch(const client_watch&) = delete;
  client_watch& operator=(const client_watch&) = delete;

 private:
  /// Waits until the client's socket shows something, then looks. The wait is armed again only
  /// with nothing left unread on the socket, or it would end at once, again and again.
  static void arm(std::shared_ptr<connection_state> c) {
    tcp::socket& socket = c->client.socket();
    socket.async_wait(tcp::socket::wait_read, [c = std::move(c)](error_code ec) mutable {
      if (ec || !c->on_hangup_) {
        return;
      }
      switch (c->client.look_for_end(c->buffer, k_read_ahead)) {
        case peer_end::open:
          arm(std::move(c));
          return;
        case peer_end::closed:
          c->client_gone_ = true;
          c->on_hangup_();
          return;
        case peer_end::unknown:
          return;
      }
    });
  }

  connection_state& c_;
};

/// Writes a response made by the gateway itself to a request of `version` and `method`
/// (http::verb::unknown when its head could not be read). A HEAD gets the head alone, which
/// says the length of the body a GET would get (RFC 9110 §9.3.2): a body after it would be read
/// as the start of the next response. Returns false when the write failed.
asio::awaitable<bool> send_local(connection_state& c, const worker& w, unsigned version,
                                 http::verb method, bool keep_alive, http::status status,
                                 std::string body, std::string_view content_type);
/// send_local with the problem body (problem_json) of `status` and `detail`.
asio::awaitable<bool> send_problem(connection_state& c, const worker& w, unsigned version,
                                   http::verb method, bool keep_alive, http::status status,
                                   std::string_view detail);
/// leaky_bucket with delay: waits on `timer` for the request's turn, `delay` from now; the
/// caller's hang-up watch may cancel the wait sooner. False, at once or when the drain begins,
/// if the worker's drain ends before that turn: the request is then answered 503 with a
/// Retry-After of `retry_after` seconds (the wait left) rather than cut off without an answer.
asio::awaitable<bool> wait_for_turn(worker& w, asio::steady_timer& timer, nanos delay,
                                    std::uint64_t& retry_after);
/// A request line's version that is well formed (HTTP/DIGIT.DIGIT) but not HTTP/1: the 505
/// (RFC 9110 §15.6.6) that answers it, as no error of Beast's says that.
error_code version_not_supported();
/// The status that answers a request head or body the parser refused.
http::status status_for_read_error(const error_code& ec);
/// The status that answers a request head the parser refused. Unless the parser took the
/// request line (`line_taken`), `held` is the head from its start, and a request line that does
/// not end within `max_header_bytes` is a 414, not a 431.
http::status status_for_head_error(const error_code& ec, bool line_taken, std::string_view held,
                                   std::size_t max_header_bytes);
/// The status that answers a request body the parser refused: a chunk line or trailer section
/// past k_max_unparsed_bytes is a 400.
http::status status_for_body_error(const error_code& ec);
/// The problem body's detail for a request head refused with `status`.
std::string_view head_refused_detail(http::status status);
/// The problem body's detail for a request body refused with `status`: a 408 says the body
/// did not come in time, a 413 that it was too large.
std::string_view body_refused_detail(http::status status);
/// The upstream's bytes were not HTTP (as opposed to a close, reset or timeout).
bool is_parse_error(const error_code& ec);
/// The peer went away (closed, reset, or the operation was cancelled for it).
bool is_disconnect(const error_code& ec);
/// Stops sending and reads what the client still sends for a moment, so that a reply written
/// just before closing is not destroyed by a reset (the "lingering close" of nginx).
asio::awaitable<void> linger_close(connection_state& c);
/// Whether a head holds a field line folded onto the next (obs-fold, RFC 9112 §5.2).
bool has_obs_fold(std::string_view head);
/// For a request line Beast refused for its version (`line`: the bytes held, from the line's
/// start): HTTP/1.x with x above 1 is read as HTTP/1.1 (RFC 9110 §6.2), its digit rewritten
/// in place, and true is returned; HTTP/DIGIT.DIGIT of another major version gives
/// version_not_supported in `ec` (need_more until the CRLF after it is there); anything else
/// leaves `ec` as it is (a 400). Beast refuses a version as soon as its 8 bytes are there.
bool accept_later_minor_version(std::span<char> line, error_code& ec);
/// The same for a status line Beast refused for its version: `HTTP/1.x` with x above 1 (and a
/// space after it, or nothing yet) is rewritten to HTTP/1.1 and true returned; any other stays
/// refused (a 502).
bool accept_later_minor_status_version(std::span<char> line);
/// Whether the chunk size line that `unparsed` starts with (after the CRLF that ends the chunk
/// before it, if any), which the parser did not take, cannot end: it ends in a bare LF, or a
/// quoted string in its extension is open at its end, or, after the last chunk, a line of the
/// trailer or the empty line that ends it ends in a bare LF. Beast looks only for CRLF there
/// and reads an open quoted string on past it: a client that sends either (RFC 9112 §7.1 allows
/// neither) would wait for body_timeout or k_max_unparsed_bytes instead of its 400.
bool chunk_line_cannot_end(std::string_view unparsed);
/// A request parser's on_chunk_header: refuses a chunk extension that holds a control byte
/// other than HTAB (bad_chunk_extension, a 400). Beast takes any byte in a quoted value, a bare
/// LF or a NUL included (RFC 9112 §7.1.1 allows neither), where nginx ends the chunk line at
/// that LF: a proxy in front that reads it so would see other chunk boundaries than ours.
void refuse_control_in_chunk_extension(std::uint64_t size, std::string_view extensions,
                                       error_code& ec);

/// What `buffer` holds, parsed into `p` without waiting: read_piece's result when it makes
/// progress, nullopt when it makes none (more must be read).
template <class Parser>
std::optional<error_code> take_piece(beast::flat_buffer& buffer, Parser& p) {
  if (buffer.size() == 0) {
    return std::nullopt;
  }
  const bool in_body = p.is_header_done();
  const std::size_t room = in_body ? p.get().body().size : 0;
  error_code ec;
  try {
    buffer.consume(p.put(buffer.data(), ec));
  } catch (const std::length_error&) {
    // Beast's field set holds a field of less than 64 KiB and throws past it: a request
    // trailer's field, which one read can bring whole past k_max_unparsed_bytes' check.
    return http::error::header_limit;
  }
  if (ec != http::error::need_more) {
    return ec;
  }
  if (in_body && p.get().body().size < room) {
    return error_code{};  // body bytes; what is left is the start of the next piece
  }
  // No body bytes taken: Beast waits for the end of a chunk's size line, or for the trailer's.
  if (in_body && p.chunked() &&
      chunk_line_cannot_end({static_cast<const char*>(buffer.data().data()), buffer.size()})) {
    return http::error::bad_line_ending;
  }
  return std::nullopt;
}

/// Parses what `buffer` holds into `p` and reads from `s` only when that is not enough to make
/// progress: read-some semantics, so a piece of body is handed on as soon as it arrives and never
/// held back to fill a buffer. Progress is a complete head, body bytes in p's buffer_body, or
/// the end of the message. Returns need_buffer when the body buffer is full, with `may_read`
/// false need_more when what is buffered makes no progress, and header_limit when
/// k_max_unparsed_bytes of it make none.
template <class Deadline, class Parser>
asio::awaitable<error_code> read_piece(Deadline& c, transport& s, beast::flat_buffer& buffer,
                                       Parser& p, bool may_read = true) {
  for (;;) {
    if (std::optional<error_code> progress = take_piece(buffer, p)) {
      co_return *progress;
    }
    if (!may_read) {
      co_return http::error::need_more;
    }
    if (buffer.size() >= k_max_unparsed_bytes) {
      co_return http::error::header_limit;
    }
    // No further than the bound: a line that one read would complete past it is still refused.
    const std::size_t want =
        std::min(std::clamp<std::size_t>(buffer.capacity() - buffer.size(), k_min_read, k_max_read),
                 k_max_unparsed_bytes - buffer.size());
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

/// The head `buffer` holds, parsed into `p` without waiting: its error (none when it is
/// complete), or nullopt when the head is not all there yet. Beast takes the start line and
/// each complete field as soon as they are buffered: `used` counts the head's bytes taken so
/// far, across calls, and `limit` bounds them all, exactly (Beast's own bound applies per
/// call). For a client's request, which has usually arrived whole with the read that woke its
/// connection, this saves read_head's coroutine.
template <class Parser>
std::optional<error_code> take_head(beast::flat_buffer& buffer, Parser& p, std::size_t limit,
                                    std::size_t& used) {
  p.header_limit(static_cast<std::uint32_t>(std::min<std::size_t>(limit, UINT32_MAX)));
  if (!p.got_some()) {
    // Empty lines before a request line are ignored (RFC 9112 §2.2; a client may end a POST
    // body with one CRLF more than its length), CR and LF alone too, as nginx does; before a
    // status line too, as HAProxy does (an upstream's CRLF after a body, late). They are not
    // the head's: a peer that sends them and closes gets no 400 (or 502), and the header
    // timeout (or the response timeout) bounds how long they can come.
    const std::string_view held(static_cast<const char*>(buffer.data().data()), buffer.size());
    buffer.consume(std::min(held.find_first_not_of("\r\n"), held.size()));
  }
  if (buffer.size() == 0) {
    return std::nullopt;
  }
  if constexpr (!Parser::is_request::value) {
    if (used == 0) {  // Beast takes nothing of a head until its start line can be parsed
      supply_reason_space(buffer);
    }
  }
  error_code ec;
  std::size_t n = p.put(buffer.data(), ec);
  if (ec == http::error::bad_version && used == 0) {
    const std::span<char> line(static_cast<char*>(buffer.data().data()), buffer.size());
    bool later_minor = false;
    if constexpr (Parser::is_request::value) {
      later_minor = accept_later_minor_version(line, ec);
    } else {
      later_minor = accept_later_minor_status_version(line);
    }
    if (later_minor) {
      ec = {};
      n = p.put(buffer.data(), ec);  // the start line again, now HTTP/1.1
    }
  }
  // The n bytes taken are whole lines of the head (a field with the lines folded onto it), in
  // which an obs-fold (a line that starts with a space or tab) is refused (RFC 9112 §5.2).
  const std::string_view taken(static_cast<const char*>(buffer.data().data()), n);
  const bool folded_here = used > 0 && !taken.empty() && (taken[0] == ' ' || taken[0] == '\t');
  if ((!ec || ec == http::error::need_more) && (folded_here || has_obs_fold(taken))) {
    ec = http::error::bad_field;
  }
  buffer.consume(n);
  used += n;
  // Incomplete, every buffered byte belongs to the head.
  if (used > limit || (ec == http::error::need_more && used + buffer.size() > limit)) {
    return http::error::header_limit;
  }
  if (ec != http::error::need_more) {
    return ec;
  }
  return std::nullopt;
}

/// Reads a head into `p` (take_head), from what `buffer` holds and then from `s`; `used`: the
/// bytes of it a take_head before took.
template <class Deadline, class Parser>
asio::awaitable<error_code> read_head(Deadline& c, transport& s, beast::flat_buffer& buffer,
                                      Parser& p, std::size_t limit, std::size_t used = 0) {
  for (;;) {
    if (std::optional<error_code> done = take_head(buffer, p, limit, used)) {
      co_return *done;
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

/// Which leg failed while a body was being relayed.
enum class relay_failure { none, reader, writer };

struct relay_status {
  relay_failure failed = relay_failure::none;
  error_code ec;
  bool head_sent = false;  // with send_head: `c.head` went out
};

/// relay()'s source of body pieces: a message that `p` parses from `in`, buffered in `buffer`
/// (a client's request body, an upstream's response). `read_gap` bounds each wait for a piece,
/// on `c`'s deadline (the connection's, or an HTTP/2 stream's).
template <class Deadline, class Parser>
class parser_source {
 public:
  parser_source(Deadline& c, transport& in, beast::flat_buffer& buffer, Parser& p, nanos read_gap)
      : c_(c), in_(in), buffer_(buffer), p_(p), read_gap_(read_gap) {
    p_.eager(true);  // one put() goes through chunk headers and body alike
  }

  bool done() const { return p_.is_done(); }

  /// The next piece, into `room`, from what is buffered: read_piece's result when that makes
  /// progress (need_buffer when `room` filled up), need_more when it makes none and `may_read`
  /// is false, else nullopt: read() is to be awaited. A small body usually comes with its head.
  std::optional<error_code> read_at_once(std::span<char> room, bool may_read) {
    auto& body = p_.get().body();
    body.data = room.data();
    body.size = room.size();
    std::optional<error_code> progress = take_piece(buffer_, p_);
    if (!progress && !may_read) {
      return http::error::need_more;
    }
    return progress;
  }

  /// The next piece, into `room`: read_piece's result. Not a coroutine: read_piece's frame is
  /// the only one per piece.
  asio::awaitable<error_code> read(std::span<char> room, bool may_read) {
    auto& body = p_.get().body();
    body.data = room.data();
    body.size = room.size();
    c_.expires_after(read_gap_);
    return read_piece(c_, in_, buffer_, p_, may_read);
  }

  /// How much of `room` the last read filled.
  std::size_t taken(std::span<char> room) const { return room.size() - p_.get().body().size; }

 private:
  Deadline& c_;
  transport& in_;
  beast::flat_buffer& buffer_;
  Parser& p_;
  nanos read_gap_;
};

/// How a sink's writes go out.
///  - `at_once`: what the socket takes is sent before anything waits (write_at_once, a
///    non-blocking send), and only the rest goes to a write operation. Nearly every head and
///    piece of a body fits in the socket's buffer: one system call, without an operation, a
///    handler or a turn of the loop. For the upstream leg: its response is then awaited by the
///    connection's idle watch, already armed, so nothing is read too early. An answer the
///    upstream sends while the body goes up is seen by the exchange's early_answer_watch,
///    which ends the upload. Through TLS it is `through_loop`: records go out through Asio's
///    operations (transport::send_now sends nothing).
///  - `through_loop`: asio::async_write, whose completion takes a turn of the event loop. For
///    the client leg: the next thing done there is reading the client's next request, and under
///    load that turn usually lets it arrive first. Sent at once, the read that follows finds
///    nothing nearly every time, and that `recv` costs more than the turn saves (perf and
///    callgrind, `SYSTEMS=ratewall bash scripts/bench/profile.sh`: 0.8 system calls more and
///    1.4k instructions less per request).
enum class write_path { at_once, through_loop };

/// relay()'s sink: `out`, written in `framing`, each piece in one gathered write with its chunk
/// framing, after `owner.head` when the head is still to go; a chunked body ends with the
/// trailer of `trailer_of` when given (write_client_body_end), else with the last chunk alone.
/// `write_timeout` bounds each write, on the owner's deadline. The owner (a connection, or an
/// HTTP/2 stream) gives the head, the relay buffer pieces are read into, and the deadline. The
/// gathered buffers live here while a write runs, so the sink stays where it is once made.
template <class Owner>
class transport_sink {
 public:
  transport_sink(Owner& owner, transport& out, nanos write_timeout, body_framing framing,
                 write_path path, const upstream_response* trailer_of = nullptr)
      : c_(owner),
        out_(out),
        write_timeout_(write_timeout),
        framing_(framing),
        path_(path),
        trailer_of_(trailer_of) {}
  // Moved into relay()'s frame before anything is gathered; a copy would point into this one.
  transport_sink(const transport_sink&) = delete;
  transport_sink& operator=(const transport_sink&) = delete;
  transport_sink(transport_sink&& other) noexcept
      : c_(other.c_),
        out_(other.out_),
        write_timeout_(other.write_timeout_),
        framing_(other.framing_),
        path_(other.path_),
        trailer_of_(other.trailer_of_) {}

  /// Where the source puts a piece: the owner's relay buffer.
  std::span<char> room() const { return c_.relay; }

  /// Gathers the head (`with_head`), the first `n` bytes of room() and, when `last`, the end of
  /// a chunked body. False when there is nothing to write.
  bool gather(bool with_head, std::size_t n, bool last) {
    first_ = 0;
    count_ = 0;
    if (with_head) {
      pieces_[count_++] = asio::buffer(c_.head);
    }
    if (n > 0) {
      if (framing_ == body_framing::chunked) {
        pieces_[count_++] = asio::buffer(size_line_, chunk_size_line(n, size_line_));
        pieces_[count_++] = asio::buffer(c_.relay.data(), n);
        pieces_[count_++] = asio::buffer("\r\n", 2);
      } else {
        pieces_[count_++] = asio::buffer(c_.relay.data(), n);
      }
    }
    if (last && framing_ == body_framing::chunked) {
      if (trailer_of_ != nullptr && trailer_of_->trailer_count() > 0) {
        body_end_.clear();
        write_client_body_end(*trailer_of_, c_.extra, body_end_);
        pieces_[count_++] = asio::buffer(body_end_);
      } else {
        pieces_[count_++] = asio::buffer(k_last_chunk.data(), k_last_chunk.size());
      }
    }
    return count_ > 0;
  }

  /// On the `at_once` path, sends what the socket takes of what gather() gathered: the
  /// write's error once all of it went (or the send failed), or nullopt when write() is to
  /// be awaited for the rest. Nullopt at once on the `through_loop` path.
  std::optional<error_code> write_at_once() {
    if (path_ != write_path::at_once || out_.secure()) {
      return std::nullopt;
    }
    error_code ec;
    std::size_t sent = out_.send_now(std::span(pieces_.data(), count_), ec);
    if (ec) {
      return ec;
    }
    for (; first_ < count_ && sent >= pieces_[first_].size(); ++first_) {
      sent -= pieces_[first_].size();
    }
    if (first_ == count_) {
      return error_code{};
    }
    pieces_[first_] += sent;  // the piece the socket took only part of
    return std::nullopt;
  }

  /// Writes what gather() gathered and write_at_once did not send. Not a coroutine: the
  /// operation is async_write's, run in the frame of whoever awaits it.
  auto write() {
    c_.expires_after(write_timeout_);
    return asio::async_write(
        out_, std::span<const asio::const_buffer>(pieces_.data() + first_, count_ - first_),
        use_tuple);
  }
  /// The write's error as relay() should see it (a timeout, not a cancellation).
  error_code checked(error_code ec) const { return c_.checked(ec); }

 private:
  Owner& c_;
  transport& out_;
  nanos write_timeout_;
  body_framing framing_;
  write_path path_;
  const upstream_response* trailer_of_;
  std::string body_end_;  // the last chunk and the trailer, when there is one
  std::array<asio::const_buffer, 5> pieces_;
  std::size_t first_ = 0;  // pieces_[first_, count_) are still to go
  std::size_t count_ = 0;
  char size_line_[18];
};

/// The charge of a route whose cost the response reports (request_steps.hpp).
struct response_charge;
/// Makes that charge, once: later calls do nothing.
asio::awaitable<void> settle(response_charge& charge);

/// Told by a response's relay once the upstream's answer has been read whole, before the last
/// of it is written (relay_taps): the exchange lets the upstream connection go (back to its
/// pool, or closed) and gives the request's concurrency units back.
class upstream_finish {
 public:
  virtual void answer_read() = 0;

 protected:
  ~upstream_finish() = default;
};

/// Who else a response's relay serves as it goes. `cost` is handed a copy of every piece
/// (response_cost keeps a JSON body; the piece is not held back for it). Once the last piece
/// has been read, before it is written, `cost` is told the body ended, `finish` that the
/// upstream's part is over, and `charge` charges what `cost` read (the write waits for that
/// charge, a round trip when the store is Redis). A client that has read its answer, and at once
/// sends its next request on another connection or to another gateway, then finds the cost charged
/// and, with the memory store, its concurrency unit free, however late the gateway sees its own
/// last write complete. (A concurrency limit counts requests in flight to the upstream, as Envoy's
/// circuit breakers count upstream requests. The upstream is read only as fast as the client takes
/// what is written, so a slow client holds both until the answer's last piece is read.)
struct relay_taps {
  response_cost* cost = nullptr;
  upstream_finish* finish = nullptr;
  response_charge* charge = nullptr;
};

/// Streams the body that `in` reads to `out`, each piece as soon as it is read. With
/// `send_head`, the sink's head goes out first, at once, with whatever of the body is already
/// buffered: a small message costs one write, and the head of a stream is never held back until
/// its first event. The bytes of each piece read are added to `counted` as it is handed on (the
/// access log's count, right even when the relay never ends: a drain's cut). `taps` are told
/// what the relay reads (relay_taps).
///
/// Source: `bool done()`; `awaitable<error_code> read(std::span<char> room, bool may_read)`;
/// `read_at_once(room, may_read)`, read's result as an `optional<error_code>` when it needs no
/// wait, else nullopt; `std::size_t taken(std::span<char> room)`.
/// Sink: `std::span<char> room()`; `bool gather(bool with_head, std::size_t n, bool last)`;
/// `write_at_once()`, the gathered pieces sent without waiting when the sink can, as an
/// `optional<error_code>` (nullopt: write() for the rest); `write()`, an awaitable of
/// error_code and size; `error_code checked(error_code)`.
/// Both are taken by value and live in this frame.
template <class Source, class Sink>
asio::awaitable<relay_status> relay(Source in, Sink out, bool send_head, std::uint64_t& counted,
                                    relay_taps taps = {}) {
  relay_status status;
  bool head_pending = send_head;
  const std::span<char> room = out.room();
  for (;;) {
    std::size_t n = 0;
    if (!in.done()) {
      std::optional<error_code> got = in.read_at_once(room, !head_pending);
      if (!got) {
        got = co_await in.read(room, !head_pending);
      }
      const error_code ec = *got;
      const bool progress =
          !ec || ec == http::error::need_buffer || (head_pending && ec == http::error::need_more);
      if (!progress) {
        status.failed = relay_failure::reader;
        status.ec = ec;
        co_return status;
      }
      n = in.taken(room);
      counted += n;
      if (taps.cost != nullptr && n > 0) {
        taps.cost->body_piece(std::string_view(room.data(), n));
      }
    }
    const bool last = in.done();
    if (last && taps.finish != nullptr) {
      taps.finish->answer_read();
    }
    if (last && taps.cost != nullptr) {
      taps.cost->body_end();
    }
    if (last && taps.charge != nullptr) {
      co_await settle(*taps.charge);
    }
    if (out.gather(head_pending, n, last)) {
      std::optional<error_code> sent = out.write_at_once();
      if (!sent) {
        auto [rec, ignored] = co_await out.write();
        sent = rec;
      }
      if (error_code ec = out.checked(*sent)) {
        status.failed = relay_failure::writer;
        status.ec = ec;
        co_return status;
      }
      if (head_pending) {
        status.head_sent = true;
        head_pending = false;
      }
    }
    if (last) {
      co_return status;
    }
  }
}

/// How the body of a request that `p` has the head of reaches the upstream. A declared
/// `Content-Length: 0` goes on, as nginx sends it: an upstream may answer a POST without a
/// length 411 (RFC 9110 §8.6: a client sends one where the method defines content).
inline body_framing request_framing(const request_parser& p) {
  if (p.is_done()) {
    return p.content_length() ? body_framing::length : body_framing::none;
  }
  return p.chunked() ? body_framing::chunked : body_framing::length;
}

/// What one request did. Counted in the metrics and written to the access log when the
/// request ends, however it ends (the destructor runs on every path out of serve_request).
struct request_trace {
  /// `method` and `target` are views into the request's head, which outlives the trace.
  request_trace(worker& w, std::string_view method, std::string_view target)
      : w(w), start(std::chrono::steady_clock::now()) {
    rec.method = method;
    rec.target = target;
  }
  request_trace(const request_trace&) = delete;
  request_trace& operator=(const request_trace&) = delete;

  ~request_trace() {
    const bool by_limit =
        rec.decision == request_decision::denied || rec.decision == request_decision::shadow_denied;
    decision_counters* counted = by_limit && limit_decisions != nullptr ? limit_decisions
                                 : decisions != nullptr                 ? decisions
                                                        : &process_metrics().unrouted();
    counted->count(rec.decision);
    access_log_writer& log = w.log_writer();
    if (log.enabled()) {
      rec.time = time;
      rec.request_id = request_id;
      rec.subject = subject;
      rec.plan = plan;
      rec.key = key_name;
      rec.client = client;
      rec.upstream_address = upstream_address;
      rec.duration = std::chrono::steady_clock::now() - start;
      log.write(rec);
    }
  }

  worker& w;
  std::chrono::steady_clock::time_point start;
  std::chrono::system_clock::time_point time = std::chrono::system_clock::now();
  route_metrics* route = nullptr;  // process-wide, kept across reloads (metrics registry)
  // ratewall_requests_total's counters for the route and plan (likewise process-wide): without
  // a limit label, and naming the limit that denied or would have (shadow), if one did.
  decision_counters* decisions = nullptr;
  decision_counters* limit_decisions = nullptr;
  std::string request_id;
  // Copied only when the access log is on:
  std::string subject;
  std::string plan;
  std::string key_name;
  std::string client;            // the address identity resolved (the peer's before that)
  std::string upstream_address;  // host:port of the target the request went to
  access_record rec;
};

}  // namespace ratewall
