#include "h2_connection.hpp"

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <charconv>
#include <cstring>

#include "ratewall/core/log.hpp"
#include "ratewall/core/reuse.hpp"
#include "ratewall/proxy/admission.hpp"
#include "ratewall/proxy/grpc_status.hpp"
#include "ratewall/proxy/h2_memory.hpp"
#include "ratewall/proxy/request_hygiene.hpp"

namespace ratewall {

namespace {

// mem_send is asked for frames until this much is gathered for one write; while a batch this
// large waits for the socket, the reader stops reading: a client that does not read our frames
// cannot make us queue more of them (WINDOW_UPDATEs, PING and SETTINGS acknowledgements).
constexpr std::size_t k_out_batch = 64 * 1024;
// A stream's response body waiting for the client's window: the relay stops reading the
// upstream above this, so a client that does not read holds the upstream back (TCP).
constexpr std::size_t k_stream_out_high = 64 * 1024;
// A body buffer whose consumed front is this long is shifted down, so that a stream's buffer
// stays within what waits in it, however long the body.
constexpr std::size_t k_compact = 16 * 1024;

// Stream storage a connection keeps for its next streams (h2_stream_storage): as many as a
// client usually has in flight on one connection. What each part keeps: see give_back_storage.
constexpr std::size_t k_spare_storage = 16;
// and the bytes they hold at most: an idle connection keeps about what two HTTP/1.1
// connections do, however large the heads of the streams it served.
constexpr std::size_t k_spare_bytes = 32 * 1024;
// nghttp2's name/value list kept between blocks, in entries.
constexpr std::size_t k_kept_nv = 64;
constexpr std::size_t k_kept_head = 4096;
constexpr std::size_t k_kept_extra = 16;

constexpr auto k_no_deadline = std::chrono::steady_clock::time_point::max();

nghttp2_nv make_nv(const h2_fields::field& f) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(f.name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(f.value.data())),
                    f.name.size(), f.value.size(),
                    f.indexed ? NGHTTP2_NV_FLAG_NONE : NGHTTP2_NV_FLAG_NO_INDEX};
}

/// `fields` as nghttp2's list, in `scratch` (reused from block to block).
const std::vector<nghttp2_nv>& nv_list(const h2_fields& fields, std::vector<nghttp2_nv>& scratch) {
  clear_keeping(scratch, k_kept_nv);
  for (std::size_t i = 0; i < fields.size(); ++i) {
    scratch.push_back(make_nv(fields[i]));
  }
  return scratch;
}

/// A GOAWAY frame (RFC 9113 §6.8), for when nghttp2 can no longer be asked to make one.
std::string goaway_frame(std::int32_t last_stream, std::uint32_t code) {
  std::string frame(17, '\0');
  frame[2] = 8;  // payload length; type GOAWAY, no flags, stream 0
  frame[3] = static_cast<char>(NGHTTP2_GOAWAY);
  const auto put32 = [&frame](std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) {
      frame[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xff);
    }
  };
  put32(9, static_cast<std::uint32_t>(last_stream) & 0x7fffffffu);
  put32(13, code);
  return frame;
}

/// The error code a client is told when its bytes made nghttp2 give up (`rv`, fatal).
std::uint32_t goaway_code(ssize_t rv) {
  switch (rv) {
    case NGHTTP2_ERR_FLOODED:
      return NGHTTP2_ENHANCE_YOUR_CALM;
    case NGHTTP2_ERR_NOMEM:
    case NGHTTP2_ERR_CALLBACK_FAILURE:
      return NGHTTP2_INTERNAL_ERROR;
    default:
      return NGHTTP2_PROTOCOL_ERROR;  // a bad preface, a frame it cannot parse
  }
}

/// Whether a reset we send says the client broke the protocol on that stream. Such resets are
/// counted with those the client sends: a client must not make us reset streams for it
/// faster than it may reset them itself (CVE-2025-8671, "MadeYouReset").
bool client_caused(std::uint32_t code) {
  return code != NGHTTP2_NO_ERROR && code != NGHTTP2_CANCEL && code != NGHTTP2_INTERNAL_ERROR &&
         code != NGHTTP2_REFUSED_STREAM;  // refusals have their own count
}

/// nghttp2's data source for a stream's response body: copies what the stream has buffered.
ssize_t read_body(nghttp2_session* session, std::int32_t id, std::uint8_t* buf, std::size_t length,
                  std::uint32_t* flags, nghttp2_data_source*, void*) {
  auto* s = static_cast<h2_stream*>(nghttp2_session_get_stream_user_data(session, id));
  if (s == nullptr) {
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;  // the stream is reset
  }
  const std::size_t available = s->outbound_.size() - s->outbound_sent_;
  const std::size_t n = std::min(available, length);
  std::memcpy(buf, s->outbound_.data() + s->outbound_sent_, n);
  s->outbound_sent_ += n;
  if (s->outbound_sent_ == s->outbound_.size()) {
    s->outbound_.clear();
    s->outbound_sent_ = 0;
    if (s->outbound_end_) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
      if (s->trailer_.size() > 0) {
        // The trailer's HEADERS ends the stream instead (RFC 9113 §8.1); if it cannot be
        // submitted, nghttp2 resets the stream rather than leave it open.
        *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
        if (!s->submit_trailer()) {
          return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
        }
      }
    } else if (n == 0) {
      s->data_deferred_ = true;
      return NGHTTP2_ERR_DEFERRED;
    }
  } else if (s->outbound_sent_ >= k_compact) {
    s->outbound_.erase(0, s->outbound_sent_);
    s->outbound_sent_ = 0;
  }
  if (s->outbound_.size() - s->outbound_sent_ < k_stream_out_high) {
    s->wake();  // a relay waiting for room may go on
  }
  return static_cast<ssize_t>(n);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The stream's sources and sinks for relay() (connection.hpp).

/// The request body as the client sends it in DATA frames: each read takes what has arrived
/// (the flow-control windows are handed back as it is taken), or waits `gap` for more.
class h2_body_source {
 public:
  h2_body_source(h2_stream& s, nanos gap, std::uint64_t limit) : s_(s), gap_(gap), limit_(limit) {}

  bool done() const { return s_.request_done(); }

  /// read()'s result when it needs no wait, else nullopt.
  std::optional<error_code> read_at_once(std::span<char> room, bool may_read) {
    taken_ = 0;
    const error_code ec = ready();
    if (!ec) {
      return take(room);
    }
    if (ec != http::error::need_more || !may_read) {
      return ec;
    }
    return std::nullopt;
  }

  asio::awaitable<error_code> read(std::span<char> room, bool may_read) {
    taken_ = 0;
    for (;;) {
      const error_code ec = ready();
      if (!ec) {
        co_return take(room);
      }
      if (ec != http::error::need_more || !may_read) {
        co_return ec;
      }
      if (!co_await wait()) {
        co_return waited();
      }
    }
  }

  /// Waits until body bytes have arrived or the body has ended (no error), the stream closed,
  /// or `gap` passed with nothing. Takes nothing.
  asio::awaitable<error_code> arrive() {
    for (;;) {
      if (const error_code ec = ready(); ec != http::error::need_more) {
        co_return ec;
      }
      if (!co_await wait()) {
        co_return waited();
      }
    }
  }

  /// Without waiting: no error when bytes have arrived or the body has ended, connection_reset
  /// when the stream closed, operation_aborted when the upstream refused the body, need_more
  /// when there is nothing yet.
  error_code ready() const {
    if (s_.inbound_.size() > s_.inbound_taken_ || s_.body_ended_) {
      return {};
    }
    if (s_.closed_) {
      return asio::error::connection_reset;
    }
    // The upstream refused the body (h2_stream::stop_upload): waiting for more ends.
    return s_.upload_stopped_ ? error_code(asio::error::operation_aborted)
                              : error_code(http::error::need_more);
  }

  /// Waits `gap` for the stream's next event; false when it closed or timed out.
  asio::awaitable<bool> wait() {
    s_.expires_after(gap_);
    return s_.wait();
  }
  error_code waited() const {
    return s_.timed_out_ ? error_code(beast::error::timeout)
                         : error_code(asio::error::connection_reset);
  }

  /// Takes what has arrived, up to room.size(), at once; body_limit past max_body_bytes.
  error_code take(std::span<char> room) {
    const std::size_t n = std::min(s_.inbound_.size() - s_.inbound_taken_, room.size());
    taken_ = n;
    if (n == 0) {
      return {};
    }
    std::memcpy(room.data(), s_.inbound_.data() + s_.inbound_taken_, n);
    s_.inbound_taken_ += n;
    if (s_.inbound_taken_ == s_.inbound_.size()) {
      s_.inbound_.clear();
      s_.inbound_taken_ = 0;
    } else if (s_.inbound_taken_ >= k_compact) {
      s_.inbound_.erase(0, s_.inbound_taken_);
      s_.inbound_taken_ = 0;
    }
    s_.consume(n);
    total_ += n;
    return total_ > limit_ ? error_code(http::error::body_limit) : error_code{};
  }

  std::size_t taken(std::span<char>) const { return taken_; }

 private:
  h2_stream& s_;
  nanos gap_;
  std::uint64_t limit_;
  std::uint64_t total_ = 0;
  std::size_t taken_ = 0;
};

namespace {

/// Bytes of request bodies a stream holds under request_buffering, charged to its
/// connection's budget and handed back when the stream's serving ends.
struct buffered_charge {
  h2_connection& conn;
  std::uint64_t bytes = 0;
  ~buffered_charge() { conn.buffer_budget_ += bytes; }
};

/// Reads the stream's request body into `out` while it fits in `limit` bytes and in what is
/// left of the connection's budget, before any upstream connection is taken
/// (routes[].request_buffering), handing the windows back as it goes so the client can send
/// the rest. On success `s.request_done()` says whether the whole body is in `out`; if not,
/// `out` holds its first part, and the rest streams.
asio::awaitable<error_code> buffer_body(h2_stream& s, std::uint64_t limit, nanos gap,
                                        std::uint64_t max_body, std::string& out,
                                        buffered_charge& charge) {
  h2_body_source source(s, gap, max_body);
  std::uint64_t& budget = s.conn_.buffer_budget_;
  while (!source.done() && out.size() < limit && budget > 0) {
    const error_code arrived = co_await source.arrive();
    if (arrived) {
      co_return arrived;
    }
    // The room is measured after the wait: other streams may have spent the budget meanwhile.
    const std::span<char> room(
        s.relay.data(), std::min<std::uint64_t>({s.relay.size(), limit - out.size(), budget}));
    const error_code ec = source.take(room);
    const std::size_t n = source.taken(room);
    out.append(room.data(), n);
    budget -= n;
    charge.bytes += n;
    if (ec) {
      co_return ec;
    }
  }
  co_return error_code{};
}

}  // namespace

/// The response body towards the client: each piece is handed to nghttp2's data source; a
/// client whose window is shut makes the relay wait, so the upstream is read no faster than
/// the client reads.
class h2_body_sink {
 public:
  h2_body_sink(h2_stream& s, nanos write_timeout) : s_(s), write_timeout_(write_timeout) {}

  std::span<char> room() const { return s_.relay; }

  bool gather(bool with_head, std::size_t n, bool last) {
    if (s_.closed_) {
      return true;  // write() says so
    }
    s_.outbound_.append(s_.relay.data(), n);
    s_.outbound_end_ = last;
    if (last) {
      // The parser is done: a chunked body's trailer is in. The head, submitted below or
      // before, was copied by nghttp2: trailer_ is a block of its own.
      if (s_.upstream_answer.trailer_dropped()) {
        // Over the bound: ending the stream as if whole would hide that something is missing
        // (a checksum, a status), so it is reset, as Envoy does.
        s_.reset(NGHTTP2_INTERNAL_ERROR);
        return true;  // write() says the stream is gone
      }
      h2_trailer_fields(s_.upstream_answer, s_.extra, s_.trailer_);
    }
    if (with_head) {
      s_.submit_head(!(last && s_.outbound_.empty() && s_.trailer_.size() == 0));
    } else if (s_.data_deferred_) {
      s_.data_deferred_ = false;
      nghttp2_session_resume_data(s_.conn_.session(), s_.id_);
    }
    s_.conn_.signal_write();
    return true;
  }

  /// The stream's DATA goes out through the connection's writer: nothing is sent here.
  std::optional<error_code> write_at_once() { return std::nullopt; }

  asio::awaitable<std::tuple<error_code, std::size_t>> write() {
    s_.expires_after(write_timeout_);
    bool waited = true;
    while (waited && !s_.closed_ && !s_.response_done_ &&
           s_.outbound_.size() - s_.outbound_sent_ >= k_stream_out_high) {
      waited = co_await s_.wait();
    }
    error_code ec;
    if (s_.response_done_) {
      // The last DATA went out, and then the stream closed (a reset for the request body
      // nobody wants any more): the response was delivered whole.
    } else if (s_.timed_out_) {
      ec = beast::error::timeout;
    } else if (s_.closed_) {
      ec = asio::error::connection_reset;
    }
    co_return std::make_tuple(ec, std::size_t{0});
  }

  error_code checked(error_code ec) const { return ec; }

 private:
  h2_stream& s_;
  nanos write_timeout_;
};

// ---------------------------------------------------------------------------------------------
// h2_stream

h2_stream::h2_stream(h2_connection& conn, std::int32_t id)
    : conn_(conn),
      id_(id),
      builder_(conn.max_header_bytes_),
      wake_(conn.c_->client.get_executor()) {
  conn_.live_.push_back(this);
  take_storage();
}

h2_stream::~h2_stream() {
  give_back_storage();
  // Body bytes received and never taken still count against the windows: hand them back.
  const std::size_t untaken = inbound_.size() - inbound_taken_;
  if (untaken > 0 && !conn_.done_) {
    nghttp2_session_consume_connection(conn_.session(), untaken);
    conn_.signal_write();
  }
  std::vector<h2_stream*>& live = conn_.live_;
  const auto it = std::find(live.begin(), live.end(), this);
  *it = live.back();
  live.pop_back();
  if (live.empty()) {
    conn_.idle_since_ = std::chrono::steady_clock::now();
    conn_.deadline_moved(conn_.idle_since_ + conn_.idle_timeout_);  // the idle clock starts
    conn_.streams_ended_.cancel();
  }
}

void h2_stream::take_storage() {
  std::vector<h2_stream_storage>& spare = conn_.spare_storage_;
  if (spare.empty()) {
    // Room for the usual upstream head and response fields at once, not grown piece by piece.
    head.reserve(512);
    extra.reserve(8);
    return;
  }
  h2_stream_storage& s = spare.back();
  conn_.spare_bytes_ -= s.room_bytes();
  builder_ = std::move(s.builder);
  fields_ = std::move(s.fields);
  head = std::move(s.head);
  extra = std::move(s.extra);
  upstream_answer = std::move(s.upstream_answer);
  spare.pop_back();
}

void h2_stream::give_back_storage() {
  if (conn_.done_ || conn_.spare_storage_.size() >= k_spare_storage) {
    return;
  }
  builder_.clear();
  fields_.clear();
  clear_keeping(head, k_kept_head);
  clear_keeping(extra, k_kept_extra);
  upstream_answer.clear();
  h2_stream_storage spare{std::move(builder_), std::move(fields_), std::move(head),
                          std::move(extra), std::move(upstream_answer)};
  const std::size_t bytes = spare.room_bytes();
  if (conn_.spare_bytes_ + bytes > k_spare_bytes) {
    return;  // an idle connection holds no more than this for streams to come
  }
  conn_.spare_bytes_ += bytes;
  conn_.spare_storage_.push_back(std::move(spare));
}

void h2_stream::expires_at(std::chrono::steady_clock::time_point t) {
  deadline_ = t;
  timed_out_ = false;
  conn_.deadline_moved(t);
}

asio::awaitable<bool> h2_stream::wait() {
  wake_.expires_at(deadline_);
  co_await wake_.async_wait(use_tuple);
  if (!closed_ && deadline_ != k_no_deadline && std::chrono::steady_clock::now() >= deadline_) {
    timed_out_ = true;
  }
  co_return !closed_ && !timed_out_;
}

void h2_stream::hang_up() {
  closed_ = true;
  client_gone_ = true;
  if (on_hangup_) {
    on_hangup_();
  }
  // The exchange's upstream leg has nobody to answer to: it ends (a reset stream is never a
  // reason to keep an upstream connection busy). A response already delivered whole is
  // read to its end, and its connection goes back to the pool.
  if (upstream_ != nullptr && !response_done_) {
    error_code ignored;
    upstream_->cancel(ignored);
  }
  wake();
}

h2_stream::hangup_watch::hangup_watch(h2_stream& s, std::function<void()> on_hangup) : s_(s) {
  if (s_.closed_) {
    on_hangup();  // gone already: the wait it guards ends as soon as it starts
    return;
  }
  s_.on_hangup_ = std::move(on_hangup);
}

h2_stream::hangup_watch::~hangup_watch() {
  s_.on_hangup_ = nullptr;
}

void h2_stream::consume(std::size_t n) {
  if (!conn_.done_) {
    nghttp2_session_consume(conn_.session(), id_, n);
    conn_.signal_write();
  }
}

void h2_stream::reset(std::uint32_t code) {
  if (!closed_ && !conn_.done_) {
    nghttp2_submit_rst_stream(conn_.session(), NGHTTP2_FLAG_NONE, id_, code);
    conn_.signal_write();
  }
}

void h2_stream::submit_head(bool body) {
  if (closed_ || conn_.done_) {
    return;
  }
  const std::vector<nghttp2_nv>& nva = nv_list(fields_, conn_.nv_scratch_);
  nghttp2_data_provider provider{};
  provider.read_callback = read_body;
  nghttp2_submit_response(conn_.session(), id_, nva.data(), nva.size(), body ? &provider : nullptr);
  response_submitted_ = true;
  conn_.signal_write();
}

bool h2_stream::submit_trailer() {
  const std::vector<nghttp2_nv>& nva = nv_list(trailer_, conn_.nv_scratch_);
  const int rv = nghttp2_submit_trailer(conn_.session(), id_, nva.data(), nva.size());
  trailer_.clear();
  return rv == 0;
}

void h2_stream::submit_local(unsigned status, std::string_view body, std::string_view content_type,
                             std::string_view why) {
  trailer_.clear();
  if (grpc_) {
    // A gRPC client reads grpc-status, not :status: Trailers-Only, one HEADERS that ends the
    // stream, with the rate-limit fields.
    grpc_trailers_only(grpc_code_for(status), why, extra, fields_);
    outbound_.clear();
    outbound_sent_ = 0;
    outbound_end_ = true;
    submit_head(false);
    return;
  }
  fields_.clear();
  fields_.add(":status", std::to_string(status));
  fields_.add("server", "ratewall");
  fields_.add_own(extra);
  const bool head_only = method() == http::verb::head;
  if (!body.empty()) {
    fields_.add("content-type", content_type);
  }
  fields_.add("content-length", std::to_string(body.size()));
  outbound_.assign(head_only ? std::string_view{} : body);
  outbound_sent_ = 0;
  outbound_end_ = true;
  submit_head(!outbound_.empty());
}

void h2_stream::submit_problem(unsigned status, std::string_view detail) {
  submit_local(
      status,
      problem_json(status, http::obsolete_reason(static_cast<http::status>(status)), detail),
      "application/problem+json", detail);
}

void h2_stream::submit_interim() {
  if (closed_ || conn_.done_) {
    return;
  }
  const std::vector<nghttp2_nv>& nva = nv_list(fields_, conn_.nv_scratch_);
  nghttp2_submit_headers(conn_.session(), NGHTTP2_FLAG_NONE, id_, nullptr, nva.data(), nva.size(),
                         nullptr);
  conn_.signal_write();
}

asio::awaitable<relay_status> h2_stream::send_request(upstream_connection& up, nanos body_gap,
                                                      nanos write_timeout, std::uint64_t& counted) {
  return ratewall::relay(
      h2_body_source(*this, body_gap, max_body_bytes_),
      transport_sink(*this, up.stream, write_timeout, framing_, write_path::at_once), true,
      counted);
}

asio::awaitable<error_code> h2_stream::send_interim(const upstream_response& res, nanos) {
  if (closed_ || conn_.done_) {
    co_return asio::error::connection_reset;
  }
  h2_response_fields(res, std::nullopt, header_list{}, fields_);
  submit_interim();
  co_return error_code{};
}

asio::awaitable<bool> h2_stream::answer(http::status status, std::string_view detail, bool) {
  if (closed_) {
    co_return false;
  }
  if (response_submitted_) {
    reset(NGHTTP2_INTERNAL_ERROR);
    co_return false;
  }
  submit_problem(static_cast<unsigned>(status), detail);
  co_return true;
}

asio::awaitable<void> h2_stream::refuse_body(http::status status) {
  co_await answer(status, body_refused_detail(status), false);
}

asio::awaitable<relay_status> h2_stream::send_response(upstream_connection& up,
                                                       upstream_response_parser& rp, bool&,
                                                       nanos read_gap, nanos write_timeout,
                                                       std::uint64_t& counted, relay_taps taps) {
  std::optional<std::uint64_t> length;
  if (rp.content_length()) {
    length = *rp.content_length();
  }
  h2_response_fields(rp.get(), length, extra, fields_);
  return ratewall::relay(parser_source(*this, up.stream, up.buffer, rp, read_gap),
                         h2_body_sink(*this, write_timeout), true, counted, taps);
}

asio::awaitable<void> h2_stream::after_early_answer() {
  // Nothing to do: once the answer's END_STREAM is out, on_frame_send resets the stream for
  // the body nobody reads. A reset sent now could overtake the answer, which nghttp2 drops.
  co_return;
}

namespace {

/// The request's Content-Length, if it has one. nghttp2 refuses a malformed one and holds the
/// DATA frames to it; none: the body's length is not known until END_STREAM.
std::optional<std::uint64_t> declared_length(const request_head& head) {
  const std::string_view cl = head[http::field::content_length];
  std::uint64_t n = 0;
  const auto [end, ec] = std::from_chars(cl.data(), cl.data() + cl.size(), n);
  if (cl.empty() || ec != std::errc{} || end != cl.data() + cl.size()) {
    return std::nullopt;
  }
  return n;
}

/// Holds an admitted stream until its turn (a leaky bucket's `delay`), or until it is reset:
/// wait_for_turn's answer. A coroutine of its own, which few streams run: its timer would
/// otherwise take room in every stream's frame, past the 1,020 bytes Asio recycles.
asio::awaitable<bool> wait_stream_turn(h2_stream& s, worker& w, nanos delay,
                                       std::uint64_t& retry_after) {
  asio::steady_timer timer(s.conn_.c_->client.get_executor());
  h2_stream::hangup_watch watch(s, [&timer] { timer.cancel(); });
  co_return co_await wait_for_turn(w, timer, delay, retry_after);
}

}  // namespace

/// The request's steps, as the HTTP/1.1 session's serve_request and forward take them.
asio::awaitable<void> h2_stream::serve(std::shared_ptr<h2_connection> conn,
                                       std::shared_ptr<h2_stream> self) {
  const std::shared_ptr<h2_stream> stream = std::move(self);  // see the declaration
  h2_stream& s = *stream;
  struct abandon {
    h2_stream& s;
    nanos send_timeout;
    // Whatever of the body is still to come is not read: its windows are handed back as it
    // arrives, and what is buffered now at once. What is left to send has send_timeout to
    // go; then the watchdog resets the stream.
    ~abandon() {
      s.abandoned_ = true;
      const std::size_t untaken = s.inbound_.size() - s.inbound_taken_;
      s.inbound_.clear();
      s.inbound_taken_ = 0;
      if (untaken > 0) {
        s.consume(untaken);
      }
      if (!s.closed_) {
        s.expires_after(send_timeout);
      }
    }
  } abandon_at_end{s, conn->idle_timeout_};
  worker& w = conn->w_;
  const unsigned built = s.builder_.finish(s.head_);
  std::shared_ptr<const gateway> gw = w.current();
  std::shared_ptr<const upstream_pools> pools = w.pools();
  s.scope_.emplace(w, s.head_.method_string(), s.head_.target(), gw);
  request_trace& trace = s.scope_->trace;
  const config& cfg = gw->cfg();
  s.max_body_bytes_ = cfg.server.max_body_bytes;
  s.extra.clear();
  const bool logged = w.log_writer().enabled();
  if (logged) {
    trace.client = conn->c_->peer_ip;
    trace.rec.user_agent = s.head_[http::field::user_agent];
  }
  trace.request_id = request_id_of(w, s.head_);
  s.extra.emplace_back("X-Request-Id", trace.request_id);

  auto refuse = [&](unsigned status, std::string_view detail) {
    trace.rec.decision = request_decision::error;
    trace.rec.status = status;
    s.submit_problem(status, detail);
  };
  unsigned refusal = built;
  std::string_view why = s.builder_.reason();
  if (refusal == 0) {
    refusal = check_request_head(s.head_, cfg.server.paths, cfg.identity, s.canon);
    why = s.canon.reason;
  }
  trace.rec.host = s.canon.host;
  const std::string_view expect = expectation_of(s.head_);
  if (refusal == 0 && !expect.empty() && !beast::iequals(expect, "100-continue")) {
    refusal = 417;
    why = "the only expectation supported is 100-continue";
  }
  // A declared length over the bound is refused at once, as HTTP/1.1's parser does, before
  // admission charges anything and before a byte of the body is waited for.
  const std::optional<std::uint64_t> declared = declared_length(s.head_);
  if (refusal == 0 && declared && *declared > s.max_body_bytes_) {
    refusal = 413;
    why = "the declared content-length is over max_body_bytes";
  }
  if (refusal != 0) {
    if (refusal == 413 || refusal == 417) {
      // The head itself is sound, so its route is known: a gRPC call on a grpc route is told
      // in gRPC's way (Trailers-Only), as its admission's answers are.
      const std::optional<std::size_t> route =
          gw->routes().match(s.head_.method_string(), s.canon.host, s.canon.target.path);
      s.grpc_ =
          route && cfg.routes[*route].grpc && is_grpc_request(s.head_[http::field::content_type]);
    }
    refuse(refusal, why);
    s.scope_.reset();
    co_return;
  }

  const std::string forwarded_for = forwarded_for_of(s.head_);
  admission& a = s.scope_->a;
  a = try_admit_head(*gw, conn->c_->peer_ip, conn->c_->peer_address, s.canon, s.head_,
                     forwarded_for, s.extra);
  if (a.pending) {
    co_await finish_admission(gw, a, s.extra);
  }
  note_admission(trace, *gw, a, logged);
  s.grpc_ =
      a.route && cfg.routes[*a.route].grpc && is_grpc_request(s.head_[http::field::content_type]);
  if (!a.forward) {
    trace.rec.status = a.status;
    s.submit_local(a.status, a.body, a.content_type,
                   http::obsolete_reason(static_cast<http::status>(a.status)));
    s.scope_.reset();
    co_return;
  }
  bool in_time = true;
  std::uint64_t retry_after = 0;
  if (a.verdict.delay > nanos{0} && !s.closed_) {
    in_time = co_await wait_stream_turn(s, w, a.verdict.delay, retry_after);
  }
  if (s.closed_) {  // reset while it was admitted or delayed: nothing is forwarded
    trace.rec.decision = request_decision::error;
    s.scope_.reset();
    co_return;
  }
  if (!in_time) {  // the drain ends before its turn
    trace.rec.decision = request_decision::error;
    trace.rec.status = 503;
    s.extra.emplace_back("Retry-After", std::to_string(retry_after));
    s.submit_problem(503, "the gateway is shutting down before this request's turn");
    s.scope_.reset();
    co_return;
  }
  if (!expect.empty() && !s.body_ended_) {
    s.fields_.clear();
    s.fields_.add(":status", "100");
    s.submit_interim();
  }

  // Forward: with request_buffering a body up to request_buffer_bytes, and up to what is left of
  // the connection's budget for buffered bodies, is read whole first and goes with a
  // Content-Length, as HTTP/1.1's does; else it streams as the client sends it (HTTP/2 has no
  // chunked framing: the upstream gets Content-Length when the client declared one, else
  // chunks).
  const route_config& route = cfg.routes[*a.route];
  std::string body;
  buffered_charge charge{*conn};
  const std::uint64_t buffer_limit = route.request_buffering ? cfg.server.request_buffer_bytes : 0;
  if (!s.request_done() && buffer_limit > 0 && declared.value_or(0) <= buffer_limit) {
    const error_code ec = co_await buffer_body(s, buffer_limit, cfg.server.body_timeout,
                                               s.max_body_bytes_, body, charge);
    trace.rec.bytes_in = body.size();
    if (ec && is_disconnect(ec)) {
      trace.rec.decision = request_decision::error;
      s.scope_.reset();
      co_return;
    }
    if (ec) {
      const http::status status = status_for_read_error(ec);
      refuse(static_cast<unsigned>(status), body_refused_detail(status));
      s.scope_.reset();
      co_return;
    }
    s.max_body_bytes_ -= body.size();  // what is left of it streams
  }
  const bool body_buffered = s.request_done() && !body.empty();
  // A declared content-length: 0 goes on as HTTP/1.1's does (request_framing).
  s.framing_ = body_buffered                                   ? body_framing::length
               : s.request_done() && body.empty() && !declared ? body_framing::none
               : declared                                      ? body_framing::length
                                                               : body_framing::chunked;
  const std::uint64_t length = body_buffered ? body.size() : declared.value_or(0);
  const bool identity_encoding =
      route.cost_from_response &&
      route.cost_from_response->from == cost_from_response_config::source::json;
  write_forward_head(
      forward_head_input{s.head_, s.canon, a.who, conn->c_->peer_ip, conn->c_->client.secure(),
                         forwarded_for, trace.request_id, s.framing_, length, "", identity_encoding,
                         /*default_host=*/"",  // h2_request refuses none
                         cfg.identity.user_header},
      body, s.forward_target, s.head);
  forward_plan plan{pools->find(route.upstream)->second,
                    cfg.server.body_timeout,
                    cfg.server.idle_timeout,
                    true,
                    a.verdict.slot.held() ? &a.verdict.slot : nullptr,
                    body_buffered,
                    body.size(),
                    {},
                    cfg.server.tunnel_idle_timeout};
  std::string().swap(body);  // it is in s.head now
  std::optional<response_charge> cost_charge;
  if (route.cost_from_response) {
    cost_charge.emplace(*route.cost_from_response, *gw, a, trace);
    plan.cost = &cost_charge->meter;
    plan.charge = &*cost_charge;
  }
  co_await exchange(s, plan, trace);
  // The head and any body buffered with it go before their charge is handed back: the stream
  // may live on, sending its answer, long after this. (The room of a usual head is kept.)
  clear_keeping(s.head, k_kept_head);
  if (cost_charge) {
    co_await settle(*cost_charge);  // unless the relay did, once the answer was read whole
  }
  if (!s.closed_ && !(s.response_submitted_ && s.outbound_end_)) {
    s.reset(NGHTTP2_INTERNAL_ERROR);  // the upstream's answer was cut short
  }
  s.scope_.reset();
}

// ---------------------------------------------------------------------------------------------
// h2_connection

h2_connection::h2_connection(std::shared_ptr<connection_state> c, std::shared_ptr<worker> w,
                             const server_config& server)
    : owner_(std::move(w)),
      c_(std::move(c)),
      w_(*owner_),
      idle_timeout_(server.idle_timeout),
      header_timeout_(server.header_timeout),
      max_header_bytes_(server.max_header_bytes),
      buffer_budget_(
          std::max<std::uint64_t>(server.http2.connection_window, server.request_buffer_bytes)),
      guard_(
          h2_guard_limits{server.http2.max_resets_per_second, server.http2.max_concurrent_streams}),
      writer_wake_(c_->client.get_executor()),
      reader_wake_(c_->client.get_executor()),
      watch_timer_(c_->client.get_executor()),
      streams_ended_(c_->client.get_executor()),
      idle_since_(std::chrono::steady_clock::now()),
      settings_timeout_(server.http2.settings_timeout) {
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_frame_callback(callbacks, on_begin_frame);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data_chunk);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_stream_close);
  nghttp2_session_callbacks_set_on_frame_send_callback(callbacks, on_frame_send);
  nghttp2_session_callbacks_set_on_frame_not_send_callback(callbacks, on_frame_not_send);
  nghttp2_session_callbacks_set_on_invalid_frame_recv_callback(callbacks, on_invalid_frame_recv);

  nghttp2_option* option = nullptr;
  nghttp2_option_new(&option);
  nghttp2_option_set_no_auto_window_update(option, 1);  // windows follow the upstream (consume)
  nghttp2_option_set_no_closed_streams(option, 1);
  nghttp2_option_set_max_deflate_dynamic_table_size(option, 4096);
  // A backstop four times looser than the guard's own count of resets.
  nghttp2_option_set_stream_reset_rate_limit(option, 4ull * server.http2.max_resets_per_second,
                                             4ull * server.http2.max_resets_per_second);
  nghttp2_option_set_max_continuations(option, 8);
  // nghttp2 sends no header block whose bound (its fields' bytes and 12 more per field) passes
  // 64 KiB by default, and the stream was reset: a head HTTP/1.1 relays, up to 64 KiB from the
  // upstream (at most 16 Ki fields of 4 bytes, a bound of 256 KiB), goes over HTTP/2 too.
  nghttp2_option_set_max_send_header_block_length(option, 320 * 1024);
  nghttp2_session_server_new3(&session_, callbacks, this, option, h2_memory());
  nghttp2_option_del(option);
  nghttp2_session_callbacks_del(callbacks);

  const http2_config& h = server.http2;
  const std::array<nghttp2_settings_entry, 5> settings{{
      {NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, h.max_concurrent_streams},
      {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, h.initial_window},
      {NGHTTP2_SETTINGS_HEADER_TABLE_SIZE, h.header_table_size},
      {NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
       static_cast<std::uint32_t>(std::min<std::size_t>(server.max_header_bytes, UINT32_MAX))},
      {NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1},
  }};
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
  nghttp2_session_set_local_window_size(session_, NGHTTP2_FLAG_NONE, 0,
                                        static_cast<std::int32_t>(h.connection_window));
  process_metrics().h2_connection_opened();
}

h2_connection::~h2_connection() {
  process_metrics().h2_connection_closed();
  done_ = true;
  ready_.clear();
  open_.clear();
  nghttp2_session_del(session_);
}

h2_stream* h2_connection::find(std::int32_t id) const {
  auto it = open_.find(id);
  return it == open_.end() ? nullptr : it->second.get();
}

void h2_connection::signal_write() {
  if (writer_waiting_) {
    writer_wake_.cancel();
  }
}

void h2_connection::deadline_moved(std::chrono::steady_clock::time_point t) {
  if (t < watch_wake_) {
    watch_timer_.cancel();
  }
}

bool h2_connection::wants_io() const {
  return nghttp2_session_want_read(session_) != 0 || nghttp2_session_want_write(session_) != 0;
}

bool h2_connection::count_reset() {
  if (guard_.reset(
          std::chrono::duration_cast<nanos>(std::chrono::steady_clock::now().time_since_epoch()))) {
    return true;
  }
  terminate(NGHTTP2_ENHANCE_YOUR_CALM);
  return false;
}

void h2_connection::terminate(std::uint32_t code) {
  nghttp2_session_terminate_session(session_, code);
  signal_write();
}

int h2_connection::on_begin_frame(nghttp2_session*, const nghttp2_frame_hd* hd, void* user) {
  // Every frame's header, CONTINUATION's included, whatever its stream's state: a header
  // block is open from a HEADERS without END_HEADERS to the CONTINUATION with it, and until
  // then nothing else may come on the connection (RFC 9113 §4.3). header_timeout bounds it
  // (the watchdog), a trailer's as a head's, on any stream.
  auto& self = *static_cast<h2_connection*>(user);
  const bool ends = (hd->flags & NGHTTP2_FLAG_END_HEADERS) != 0;
  if (hd->type == NGHTTP2_HEADERS && !ends) {
    self.block_deadline_ = std::chrono::steady_clock::now() + self.header_timeout_;
    self.deadline_moved(self.block_deadline_);
  } else if (hd->type == NGHTTP2_CONTINUATION && ends) {
    self.block_deadline_ = k_no_deadline;
  }
  return 0;
}

int h2_connection::on_begin_headers(nghttp2_session* session, const nghttp2_frame* frame,
                                    void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS || frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;
  }
  const std::int32_t id = frame->hd.stream_id;
  if (self.draining_) {
    // GOAWAY is on its way: a stream that crossed it is refused, and the client may retry it
    // on another connection (RFC 9113 §8.7).
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  if (!self.guard_.new_stream()) {
    // Counted with the other refusals when the RST_STREAM goes out (on_frame_send).
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, id, NGHTTP2_REFUSED_STREAM);
    return 0;
  }
  auto s = std::make_shared<h2_stream>(self, id);
  process_metrics().h2_stream_opened();
  s->expires_after(self.header_timeout_);  // the header block, CONTINUATIONs included
  nghttp2_session_set_stream_user_data(session, id, s.get());
  self.open_.emplace(id, std::move(s));
  return 0;
}

int h2_connection::on_header(nghttp2_session* session, const nghttp2_frame* frame,
                             const std::uint8_t* name, std::size_t namelen,
                             const std::uint8_t* value, std::size_t valuelen, std::uint8_t,
                             void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  h2_stream* s = frame->hd.type == NGHTTP2_HEADERS ? self.find(frame->hd.stream_id) : nullptr;
  if (s == nullptr) {
    return 0;
  }
  // nghttp2 checks every field it decodes, and a one-byte reference to its dynamic table can
  // stand for a 4 KiB field: a block that never ends would cost the gateway a thousandfold
  // what it costs the client (an HPACK bomb). Past twice max_header_bytes (the head's 431 is
  // decided at once), the stream is reset and nghttp2 decodes the rest unchecked, unseen.
  s->block_bytes_ += namelen + valuelen + 32;  // counted as RFC 9113 §6.5.2 counts a list
  if (s->block_bytes_ > 2 * self.max_header_bytes_) {
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_ENHANCE_YOUR_CALM);  // the client's doing: counted
    return NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE;
  }
  if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
    return 0;  // trailers of a request body are not forwarded (as in HTTP/1.1)
  }
  s->builder_.add(std::string_view(reinterpret_cast<const char*>(name), namelen),
                  std::string_view(reinterpret_cast<const char*>(value), valuelen));
  return 0;
}

int h2_connection::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  if (frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) {
    self.payload_read_ += frame->hd.length;
  }
  if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) != 0) {
    self.settings_deadline_ = k_no_deadline;
  }
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    process_metrics().h2_reset(false);
    if (!self.count_reset()) {
      return 0;
    }
  }
  h2_stream* s = self.find(frame->hd.stream_id);
  if (s == nullptr) {
    return 0;
  }
  const bool end_stream = (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0;
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
    s->body_ended_ = end_stream;
    s->head_whole_ = true;
    self.ready_.push_back(self.open_[frame->hd.stream_id]);
    return 0;
  }
  if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) && end_stream) {
    s->body_ended_ = true;
    s->wake();
  }
  return 0;
}

int h2_connection::on_data_chunk(nghttp2_session*, std::uint8_t, std::int32_t id,
                                 const std::uint8_t* data, std::size_t len, void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  h2_stream* s = self.find(id);
  if (s == nullptr || s->abandoned_) {
    self.pending_consume_.emplace_back(id, len);  // nobody reads it: hand the window back
    return 0;
  }
  s->inbound_.append(reinterpret_cast<const char*>(data), len);
  s->wake();
  return 0;
}

int h2_connection::on_frame_not_send(nghttp2_session* session, const nghttp2_frame* frame,
                                     int error, void* user) {
  // A response's head or trailer nghttp2 could not send (a header block over what it sends):
  // it leaves the stream open, and the client would wait for an end that never comes.
  auto& self = *static_cast<h2_connection*>(user);
  if (frame->hd.type == NGHTTP2_HEADERS && self.find(frame->hd.stream_id) != nullptr) {
    log_warn(std::string("http2: a response's header block could not be sent (") +
             nghttp2_strerror(error) + "): its stream is reset");
    nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                              NGHTTP2_INTERNAL_ERROR);
  }
  return 0;
}

int h2_connection::on_frame_send(nghttp2_session* session, const nghttp2_frame* frame, void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    process_metrics().h2_goaway(frame->goaway.error_code);
  }
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    process_metrics().h2_reset(true);
    const std::uint32_t code = frame->rst_stream.error_code;
    if (client_caused(code) && !self.count_reset()) {
      return 0;
    }
    // Refusals are counted as they go out, nghttp2's own among them: before the client
    // acknowledges our SETTINGS it refuses the streams over max_concurrent_streams itself, and
    // a client could go on opening them until settings_timeout. Those have a bound of their
    // own: a client may not have heard of the limit yet. A drain's are not the client's doing.
    if (code == NGHTTP2_REFUSED_STREAM && !self.draining_) {
      const bool settled = self.settings_deadline_ == k_no_deadline;
      if (!(settled ? self.guard_.refused() : self.guard_.refused_before_settings())) {
        self.terminate(NGHTTP2_ENHANCE_YOUR_CALM);
        return 0;
      }
    }
  }
  if (frame->hd.type == NGHTTP2_SETTINGS && (frame->hd.flags & NGHTTP2_FLAG_ACK) == 0) {
    self.settings_deadline_ = std::chrono::steady_clock::now() + self.settings_timeout_;
    self.deadline_moved(self.settings_deadline_);
  }
  // A response ended while the client still sends its body: nothing more of it is wanted
  // (RFC 9113 §8.1), as nghttpx does.
  if ((frame->hd.type == NGHTTP2_DATA || frame->hd.type == NGHTTP2_HEADERS) &&
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) != 0) {
    if (h2_stream* s = self.find(frame->hd.stream_id)) {
      s->response_done_ = true;
      s->wake();
      if (!s->body_ended_) {
        nghttp2_submit_rst_stream(session, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                  NGHTTP2_NO_ERROR);
      }
    }
  }
  return 0;
}

int h2_connection::on_invalid_frame_recv(nghttp2_session*, const nghttp2_frame* frame, int,
                                         void* user) {
  // A stream error: nghttp2 resets the stream when it next sends. Until then it is as good as
  // closed: one whose header block came in the same read is not started.
  auto& self = *static_cast<h2_connection*>(user);
  if (h2_stream* s = self.find(frame->hd.stream_id)) {
    s->hang_up();
  }
  return 0;
}

int h2_connection::on_stream_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
  auto& self = *static_cast<h2_connection*>(user);
  auto it = self.open_.find(id);
  if (it == self.open_.end()) {
    return 0;
  }
  std::shared_ptr<h2_stream> s = std::move(it->second);
  self.open_.erase(it);
  s->hang_up();
  if (self.open_.empty()) {
    self.idle_since_ = std::chrono::steady_clock::now();
  }
  return 0;  // `s` goes here unless its coroutine holds it
}

void h2_connection::start_ready_streams() {
  for (auto& s : ready_) {
    if (!s->closed_) {
      s->started_ = true;
      s->deadline_ = k_no_deadline;  // the header block's is met; each step sets its own
      asio::co_spawn(c_->client.get_executor(), h2_stream::serve(shared_from_this(), s),
                     log_failure{"HTTP/2 stream"});
    }
  }
  ready_.clear();
  for (const auto& [id, n] : pending_consume_) {
    nghttp2_session_consume(session_, id, n);
  }
  pending_consume_.clear();
}

asio::awaitable<void> h2_connection::read_loop() {
  for (;;) {
    while (!done_ && out_.size() >= k_out_batch) {
      reader_waiting_ = true;
      reader_wake_.expires_at(k_no_deadline);
      co_await reader_wake_.async_wait(use_tuple);
      reader_waiting_ = false;
    }
    if (done_) {
      break;
    }
    if (c_->buffer.size() == 0) {
      const std::size_t want =
          std::clamp<std::size_t>(c_->buffer.capacity(), k_min_read, k_max_read);
      auto [ec, n] = co_await c_->client.async_read_some(c_->buffer.prepare(want), use_tuple);
      if (ec) {
        break;
      }
      c_->buffer.commit(n);
    }
    guard_.read_start();
    const auto data = c_->buffer.data();
    const ssize_t rv = nghttp2_session_mem_recv(
        session_, static_cast<const std::uint8_t*>(data.data()), data.size());
    bytes_read_ += data.size();
    c_->buffer.consume(data.size());
    if (rv < 0) {
      // The session cannot go on (a flood, a bad preface): nothing more is asked of it. The
      // client is told why in a GOAWAY made here, after what was already gathered to send,
      // then the connection closes.
      log_info(std::string("http2: connection ended: ") + nghttp2_strerror(static_cast<int>(rv)));
      fatal_ = true;
      const std::uint32_t code = goaway_code(rv);
      last_words_ = goaway_frame(nghttp2_session_get_last_proc_stream_id(session_), code);
      process_metrics().h2_goaway(code);
      signal_write();
      break;
    }
    if (!guard_.traffic(bytes_read_, payload_read_)) {
      terminate(NGHTTP2_ENHANCE_YOUR_CALM);
    }
    start_ready_streams();
    signal_write();
    if (!wants_io()) {
      break;
    }
  }
}

asio::awaitable<void> h2_connection::write_loop() {
  for (;;) {
    while (!fatal_ && out_.size() < k_out_batch) {
      const std::uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session_, &data);
      if (n < 0) {
        fatal_ = true;
        break;
      }
      if (n == 0) {
        break;
      }
      out_.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
    }
    if (fatal_ && !last_words_.empty()) {
      out_.append(last_words_);
      last_words_.clear();
    }
    if (out_.empty()) {
      if (done_ || fatal_ || !wants_io()) {
        break;
      }
      writer_waiting_ = true;
      writer_wake_.expires_at(k_no_deadline);
      co_await writer_wake_.async_wait(use_tuple);
      writer_waiting_ = false;
      continue;
    }
    c_->expires_after(idle_timeout_);
    auto [ec, n] = co_await asio::async_write(c_->client, asio::buffer(out_), use_tuple);
    c_->expires_at(k_no_deadline);
    out_.clear();
    if (reader_waiting_) {
      reader_wake_.cancel();
    }
    if (ec) {
      break;
    }
  }
  // Nothing more will be written: the reader stops too.
  done_ = true;
  error_code ignored;
  c_->client.socket().cancel(ignored);
  if (reader_waiting_) {
    reader_wake_.cancel();
  }
  writer_done_ = true;
  streams_ended_.cancel();
}

asio::awaitable<void> h2_connection::watchdog() {
  // Until the last stream ends: one closed with the connection may still wait on its upstream.
  while (!done_ || !live_.empty()) {
    const auto now = std::chrono::steady_clock::now();
    auto next = k_no_deadline;
    for (h2_stream* s : live_) {
      if (s->deadline_ > now) {
        next = std::min(next, s->deadline_);
        continue;
      }
      s->timed_out_ = true;
      s->deadline_ = k_no_deadline;
      error_code ignored;
      if (s->upstream_ != nullptr) {
        s->upstream_->cancel(ignored);
      }
      s->wake();
      if (!s->head_whole_) {
        // A header block never finished. Nothing else may come on the connection until it
        // does (RFC 9113 §4.3), so the connection ends, as nginx ends it on a client's read
        // timeout: GOAWAY PROTOCOL_ERROR. (A reset of the stream alone left the connection
        // held until idle_timeout.)
        terminate(NGHTTP2_PROTOCOL_ERROR);
      } else if (!s->started_ || s->abandoned_) {
        // An answer the client would not take in time: no coroutine is left to end the
        // stream, so the watchdog does.
        s->reset(NGHTTP2_CANCEL);
      }
    }
    if (done_) {
      // The session is over; only the streams still ending are watched.
    } else if (block_deadline_ <= now) {
      // As for a stream's head that never ends (above), for any header block, a trailer's or
      // one on a stream already closed: the connection can carry nothing else.
      terminate(NGHTTP2_PROTOCOL_ERROR);
      block_deadline_ = k_no_deadline;
    } else if (settings_deadline_ <= now) {
      terminate(NGHTTP2_SETTINGS_TIMEOUT);  // RFC 9113 §6.5.3
      settings_deadline_ = k_no_deadline;
    } else {
      next = std::min({next, settings_deadline_, block_deadline_});
    }
    if (!done_ && open_.empty() && live_.empty()) {
      const auto idle_end = idle_since_ + idle_timeout_;
      if (idle_end <= now) {
        terminate(NGHTTP2_NO_ERROR);  // GOAWAY; the loops end once it is out
        idle_since_ = k_no_deadline - idle_timeout_;
      } else {
        next = std::min(next, idle_end);
      }
    }
    watch_wake_ = next;
    watch_timer_.expires_at(next);
    co_await watch_timer_.async_wait(use_tuple);
    watch_wake_ = std::chrono::steady_clock::time_point::min();
  }
}

asio::awaitable<void> h2_connection::run() {
  auto self = shared_from_this();
  // The HTTP/1.1 deadline the preface was read under ends here: this connection's own
  // watchdog bounds its idleness, its SETTINGS and its streams; c_'s bounds each write only.
  c_->expires_at(k_no_deadline);
  auto ex = c_->client.get_executor();
  asio::co_spawn(
      ex, [self]() { return self->write_loop(); }, log_failure{"HTTP/2 writer"});
  asio::co_spawn(
      ex, [self]() { return self->watchdog(); }, log_failure{"HTTP/2 watchdog"});
  co_await read_loop();
  // The client is gone or the session is over: every stream still open ends now.
  done_ = true;
  auto open = std::move(open_);
  open_.clear();
  for (auto& [id, s] : open) {
    nghttp2_session_set_stream_user_data(session_, id, nullptr);
    s->hang_up();
  }
  open.clear();
  ready_.clear();
  signal_write();
  while (!live_.empty() || !writer_done_) {
    streams_ended_.expires_at(k_no_deadline);
    co_await streams_ended_.async_wait(use_tuple);
  }
  done_ = true;
  watch_timer_.cancel();
}

void h2_connection::drain() {
  if (!draining_ && !done_) {
    draining_ = true;
    nghttp2_submit_goaway(session_, NGHTTP2_FLAG_NONE,
                          nghttp2_session_get_last_proc_stream_id(session_), NGHTTP2_NO_ERROR,
                          nullptr, 0);
    signal_write();
  }
}

bool h2_connection::close_if_idle() {
  if (!open_.empty() || !live_.empty() || done_ || closing_) {
    return false;
  }
  closing_ = true;  // yes once: a second caller finds another connection to close
  terminate(NGHTTP2_NO_ERROR);
  return true;
}

std::optional<std::chrono::steady_clock::time_point> h2_connection::head_since() const {
  // Streams, and all of them still in their header blocks: nothing is served yet, and the
  // client may be sending its heads as slowly as header_timeout lets it. (Without streams the
  // connection is idle, and close_if_idle's.)
  if (done_ || closing_ || open_.empty() || live_.size() != open_.size()) {
    return std::nullopt;
  }
  auto since = std::chrono::steady_clock::time_point::max();
  for (const auto& [id, s] : open_) {
    if (s->head_whole_) {
      return std::nullopt;
    }
    since = std::min(since, s->head_since_);
  }
  return since;
}

void h2_connection::evict() {
  closing_ = true;
  cut_off();  // at once, without a word: its place is another client's now
}

void h2_connection::cut_off() {
  error_code ignored;
  c_->client.socket().shutdown(tcp::socket::shutdown_both, ignored);
  c_->client.socket().cancel(ignored);
  for (auto& [id, s] : open_) {
    s->cut_by_gateway_ = true;  // its streams end as hung up, by the gateway's doing
    if (s->upstream_ != nullptr) {
      s->upstream_->shutdown(tcp::socket::shutdown_both, ignored);
      s->upstream_->cancel(ignored);
    }
  }
}

asio::awaitable<void> serve_h2(std::shared_ptr<connection_state> c, std::shared_ptr<worker> w) {
  // The settings are copied now: nothing of this configuration is held across an await.
  std::shared_ptr<const gateway> gw = w->current();
  const bool draining = w->draining();
  auto conn = std::make_shared<h2_connection>(std::move(c), std::move(w), gw->cfg().server);
  gw.reset();
  connection_state& cs = *conn->c_;
  cs.protocol_ = conn.get();
  struct unhook {
    connection_state& c;
    ~unhook() { c.protocol_ = nullptr; }
  } unhook_at_end{cs};
  if (draining) {
    conn->drain();  // the worker drains already: GOAWAY at once, no stream admitted
  }
  co_await conn->run();
}

}  // namespace ratewall
