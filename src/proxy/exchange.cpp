#include "exchange.hpp"

// GCC 12 warns that Asio's coroutine frame is freed by its own operator delete after an
// allocation it cannot see through (awaitable_frame_base recycles frames through the thread's
// cache): a known false positive of -Wmismatched-new-delete with coroutines, raised here only
// because of how exchange() happens to be inlined.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

#include <charconv>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "h2_connection.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/parse.hpp"
#include "tunnel.hpp"

namespace ratewall {

namespace {

constexpr std::size_t k_max_upstream_header_bytes = 64 * 1024;
// An upstream that sends interim responses without end is answered 502 after this many.
constexpr unsigned k_max_interim_responses = 16;
static_assert(k_max_interim_responses == 16, "read_final_head's refusal names the bound");

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

/// The status of the first response in `bytes` that is not interim (100, 102-199: their heads
/// are passed over whole): nullopt until its status line has come; 0 for bytes that are not
/// an HTTP/1.x response.
std::optional<unsigned> first_final_status(std::string_view bytes) {
  constexpr std::string_view k_version = "HTTP/1.";
  for (;;) {
    const std::string_view line = bytes.substr(0, 13);  // "HTTP/1.1 200 "
    if (line.size() < 13) {
      const std::size_t n = std::min(line.size(), k_version.size());
      return line.substr(0, n) == k_version.substr(0, n) ? std::nullopt : std::optional(0u);
    }
    unsigned status = 0;
    const auto [end, ec] = std::from_chars(line.data() + 9, line.data() + 12, status);
    if (line.substr(0, 7) != k_version || line[8] != ' ' || ec != std::errc{} ||
        end != line.data() + 12 || (line[12] != ' ' && line[12] != '\r') || status < 100) {
      return 0;
    }
    if (status / 100 != 1 || status == 101) {
      return status;
    }
    const std::size_t head_end = bytes.find("\r\n\r\n");
    if (head_end == std::string_view::npos) {
      return std::nullopt;
    }
    bytes.remove_prefix(head_end + 4);
  }
}

/// RFC 9112 §9.3: an upstream may refuse a request's body before it has read it (401, 413) and
/// stop reading. While the body goes up, what the upstream sends is read into the connection's
/// buffer, where the exchange's reading of the response finds it (through TLS, its records are
/// read and their text goes there: transport::look_for_end). A final
/// answer that refuses (300 and up, or bytes that are not a response) ends the upload: the
/// gateway closes its sending side, so that a write waiting on the upstream's full window fails
/// at once (EPIPE) instead of at its timeout, and the connection is not reused after
/// (cut_off()). Interim responses are passed over; a 2xx ends the watch and the upload goes on
/// (the upstream may go on reading; its answer is relayed once the body is sent, as the
/// exchange reads no response while it sends); so does the upstream's close without an answer,
/// left to the write and the retry rules as before. A 101 during an upload is a refusal too:
/// nothing upgrades in the middle of a body. Records with no text (a TLS 1.3 session ticket)
/// leave nothing to look at, and the watch goes on. The TLS channel takes this read beside the
/// upload's write: what OpenSSL answers while reading waits for the next write.
class early_answer_watch {
 public:
  /// `stop_upload` ends the leg's wait for more of the body, when the upstream refuses it.
  early_answer_watch(upstream_connection& up, std::function<void()> stop_upload) {
    state_->stop_upload = std::move(stop_upload);
    arm(up, state_);
  }
  early_answer_watch(const early_answer_watch&) = delete;
  early_answer_watch& operator=(const early_answer_watch&) = delete;
  ~early_answer_watch() { state_->watching = false; }

  /// Whether the upload was ended by the upstream's refusal.
  bool cut_off() const { return state_->cut_off; }

 private:
  struct shared {
    bool watching = true;
    bool cut_off = false;
    std::function<void()> stop_upload;
  };

  // The connection is touched only while the watch is: the exchange, and the connection it
  // uses, are then alive.
  static void arm(upstream_connection& up, std::shared_ptr<shared> state) {
    up.stream.socket().async_wait(tcp::socket::wait_read, [&up, state](error_code ec) {
      if (ec || !state->watching) {
        return;
      }
      const peer_end after = up.stream.look_for_end(up.buffer, k_max_upstream_header_bytes);
      if (after == peer_end::unknown) {
        return;  // the watch ends; the exchange reads these heads and bounds them itself
      }
      const auto* data = static_cast<const char*>(up.buffer.data().data());
      const std::optional<unsigned> status =
          first_final_status(std::string_view(data, up.buffer.size()));
      if (!status) {
        if (after == peer_end::open) {
          arm(up, state);  // the rest of a status line, or of an interim head, is to come
        }
        return;
      }
      if (*status >= 200 && *status < 300) {
        return;  // a 2xx while the body goes up: the upload goes on
      }
      state->cut_off = true;
      error_code ignored;
      up.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
      // A client that paused its upload would otherwise hold the answer until body_timeout,
      // and then get a 408 instead of it (RFC 9112 §9.5: the refusal is what it should get).
      state->stop_upload();
    });
  }

  std::shared_ptr<shared> state_ = std::make_shared<shared>();
};

/// The framing of the response towards the client, given the upstream's. May turn
/// `keep_alive` off: an HTTP/1.0 client gets a body it can read only up to the close.
body_framing response_framing(const upstream_response_parser& rp, unsigned client_version,
                              bool& keep_alive) {
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

/// Whether the transfer coding of a response with a body is one the gateway can pass on: none,
/// or chunked alone, which it decodes and frames anew on the client's leg. Another coding
/// ("gzip, chunked", or "gzip" ended by the close) would reach the client as the content
/// itself: Transfer-Encoding is the hop's own and is never copied (RFC 9112 §6.1), and the
/// gateway does not decode gzip. nginx answers these 502 too ("upstream sent unknown
/// Transfer-Encoding"), as the gateway answers such a request 501. A Transfer-Encoding that
/// names no coding ("" or ",") is faulty framing, not none: the length is then unknown,
/// whatever Content-Length says (RFC 9112 §6.3); so is any in an HTTP/1.0 response (§6.1).
bool passable_transfer_coding(const upstream_response& res) {
  bool present = false;
  std::size_t codings = 0;
  bool chunked_only = true;
  for (const auto& f : res) {
    if (f.name() != http::field::transfer_encoding) {
      continue;
    }
    present = true;
    for_each_list_element(f.value(), [&](std::string_view coding) {
      ++codings;
      chunked_only = chunked_only && beast::iequals(coding, "chunked");
    });
  }
  if (present && (codings == 0 || res.version() < 11)) {
    return false;
  }
  return codings <= 1 && chunked_only;
}

/// The largest Content-Length passed on: what a signed 64-bit count holds.
constexpr std::uint64_t k_max_content_length = std::numeric_limits<std::int64_t>::max();

/// How the upstream's answer began.
struct response_head {
  error_code ec;                // reading failed or timed out: nothing final arrived
  std::string_view unexpected;  // why the answer is not one (fixed text); empty: it is
  bool interim_sent = false;    // an interim response went to the client
};

/// Reads the upstream's response heads until the final one (status 200 and up) is in `rp`.
/// Interim responses are read whole, never taken for the answer (RFC 9110 §15.2): 103 Early
/// Hints and the other 1xx go on to an HTTP/1.1 client as they come; 100 is dropped, since the
/// gateway answered the client's Expect itself; 101 is final when an upgrade was asked for
/// (`upgrade`, the protocols offered) and names what it switches to, and unexpected otherwise.
/// `deadline` (response_timeout) bounds them all.
template <class Leg>
asio::awaitable<response_head> read_final_head(Leg& leg, upstream_connection& up,
                                               std::optional<upstream_response_parser>& rp,
                                               bool head_request, std::string_view upgrade,
                                               std::chrono::steady_clock::time_point deadline,
                                               nanos client_write_timeout) {
  response_head result;
  for (unsigned interim = 0;; ++interim) {
    rp.emplace(leg.state().upstream_answer);
    rp->body_limit(boost::none);
    if (head_request) {
      rp->skip(true);
    }
    leg.deadline().expires_at(deadline);
    result.ec =
        co_await read_head(leg.deadline(), up.stream, up.buffer, *rp, k_max_upstream_header_bytes);
    if (result.ec) {
      co_return result;
    }
    const unsigned status = rp->get().result_int();
    if (status >= 200 && status <= 599) {
      co_return result;
    }
    if (status == 101 && !upgrade.empty()) {
      // Anything else would splice the client onto a connection that speaks what nobody
      // asked for, or, with no Upgrade at all, that may still speak HTTP: the client's next
      // requests would reach the upstream unrouted and unlimited.
      if (!switches_to_asked(rp->get(), upgrade)) {
        result.unexpected = "upstream switched to a protocol that was not asked for";
      }
      co_return result;
    }
    // 000-099 and 600-999 are not status codes (RFC 9110 §15): an invalid response.
    if (status < 100 || status > 599) {
      result.unexpected = "upstream sent an invalid status code";
      co_return result;
    }
    if (status == 101) {
      result.unexpected = "upstream switched protocols though no upgrade was asked for";
      co_return result;
    }
    if (interim >= k_max_interim_responses) {
      result.unexpected = "upstream sent more than 16 interim responses";
      co_return result;
    }
    if (status == 100 || leg.version() < 11) {
      continue;
    }
    if (error_code ec = co_await leg.send_interim(rp->get(), client_write_timeout)) {
      result.ec = ec;
      leg.state().client_gone_ = true;
      co_return result;
    }
    result.interim_sent = true;
  }
}

/// Answers `status` (502, 503 or 504) for an upstream that failed, or could not be given the
/// request, before any of its response reached the client. Returns whether the connection stays
/// open. The request's concurrency units go back first: the upstream is done with it.
template <class Leg>
asio::awaitable<bool> upstream_refused(Leg& leg, forward_plan& plan, request_trace& trace,
                                       bool keep_alive, http::status status,
                                       std::string_view detail) {
  if (plan.slot != nullptr) {
    plan.slot->release();  // the upstream is done with the request (relay_taps)
  }
  trace.rec.status = static_cast<unsigned>(status);
  trace.route->upstream_failure(trace.rec.status);
  const bool stay = keep_alive && leg.request_done();
  const bool ok = co_await leg.answer(status, detail, stay);
  co_return ok&& stay;
}

/// The status of an upstream that failed: 504 when it did not answer in time, else 502.
http::status failure_status(bool timed_out) {
  return timed_out ? http::status::gateway_timeout : http::status::bad_gateway;
}

/// The attempt's upstream connection: named in the leg's state while in use (a drain or a
/// reset cancels it there) until let_go() hands it back to its pool or closes it, and gives the
/// request's concurrency units back after it: a unit is free only once its upstream connection
/// is, or one client could hold many connections (a drop of the attempt closes it, as the
/// lease goes).
struct upstream_hold {
  upstream_hold(exchange_state& state, upstream_lease& l) : x(state), lease(l) {
    x.upstream_ = &lease.connection->stream.socket();
  }
  upstream_hold(const upstream_hold&) = delete;
  upstream_hold& operator=(const upstream_hold&) = delete;
  ~upstream_hold() { x.upstream_ = nullptr; }

  void let_go(upstream_pool& pool, bool reuse, lease* slot) {
    x.upstream_ = nullptr;
    if (reuse) {
      pool.release(std::move(lease.connection));
    } else {
      lease.connection.reset();
    }
    if (slot != nullptr) {
      slot->release();
    }
  }

  exchange_state& x;
  upstream_lease& lease;
};

/// Why the exchange answers for the upstream (upstream_refused): set where it fails, and
/// answered after the attempt, from one place. (Each `co_await` of the exchange's coroutine
/// takes room in its frame for the call's arguments: one call instead of seven keeps the frame
/// under the 1,020 bytes Asio recycles.)
struct upstream_refusal {
  http::status status = http::status::bad_gateway;
  bool keep_alive = false;
  std::string_view detail;  // fixed text
};

/// Hands `cost` what it reads of the final response head: the values of its header, or
/// whether the body is a JSON document it should keep.
void read_cost_head(response_cost& cost, const upstream_response_parser& rp) {
  const cost_from_response_config& cfg = cost.config();
  const upstream_response& res = rp.get();
  if (cfg.from == cost_from_response_config::source::header) {
    std::vector<std::string_view> values;
    for (const auto& f : res) {
      if (beast::iequals(f.name_string(), cfg.header)) {
        values.push_back(f.value());
      }
    }
    cost.header_values(values);
    return;
  }
  // A compressed body is relayed as it is and never decoded here: it reports nothing.
  const std::string_view encoding = res[http::field::content_encoding];
  const bool encoded = !encoding.empty() && !beast::iequals(encoding, "identity");
  cost.keep_body(!rp.is_done() && !encoded,
                 rp.content_length() ? std::optional(*rp.content_length()) : std::nullopt,
                 res[http::field::content_type]);
}

}  // namespace

// The HTTP/1.1 leg. send_request, answer, send_response and after_early_answer are not
// coroutines: each returns the awaitable of the one operation it starts, so the common path
// adds no coroutine frame.

asio::awaitable<relay_status> h1_leg::send_request(upstream_connection& up, nanos body_gap,
                                                   nanos write_timeout, std::uint64_t& counted) {
  return relay(parser_source(c_, c_.client, c_.buffer, p_, body_gap),
               transport_sink(c_, up.stream, write_timeout, framing_, write_path::at_once), true,
               counted);
}

asio::awaitable<error_code> h1_leg::send_interim(const upstream_response& res,
                                                 nanos write_timeout) {
  std::string head;
  write_interim_response_head(res, head);
  c_.expires_after(write_timeout);
  auto [rec, n] = co_await asio::async_write(c_.client, asio::buffer(head), use_tuple);
  co_return c_.checked(rec);
}

asio::awaitable<bool> h1_leg::answer(http::status status, std::string_view detail,
                                     bool keep_alive) {
  return send_problem(c_, w_, version(), method(), keep_alive, status, detail);
}

asio::awaitable<void> h1_leg::refuse_body(http::status status) {
  co_await send_problem(c_, w_, version(), method(), false, status, body_refused_detail(status));
  co_await linger_close(c_);
}

asio::awaitable<relay_status> h1_leg::send_response(upstream_connection& up,
                                                    upstream_response_parser& rp, bool& keep_alive,
                                                    nanos read_gap, nanos write_timeout,
                                                    std::uint64_t& counted, relay_taps taps) {
  const body_framing out_framing = response_framing(rp, version(), keep_alive);
  c_.head.clear();
  write_client_response_head(rp.get(), version(), keep_alive, out_framing,
                             rp.content_length().value_or(0), c_.extra, c_.head);
  return relay(parser_source(c_, up.stream, up.buffer, rp, read_gap),
               transport_sink(c_, c_.client, write_timeout, out_framing, write_path::through_loop,
                              &rp.get()),
               true, counted, taps);
}

asio::awaitable<void> h1_leg::after_early_answer() {
  return linger_close(c_);  // the client may still be sending the body nobody reads
}

asio::awaitable<void> h1_leg::switch_protocols(upstream_connection& up,
                                               const upstream_response& res, nanos idle_timeout,
                                               nanos write_timeout, request_trace& trace) {
  c_.head.clear();
  write_switching_response_head(res, c_.extra, c_.head);
  c_.expires_after(write_timeout);
  auto [ec, n] = co_await asio::async_write(c_.client, asio::buffer(c_.head), use_tuple);
  if (ec) {
    co_return;
  }
  trace.rec.bytes_out = 0;
  co_await tunnel(c_, up, idle_timeout, write_timeout, trace.rec.bytes_in, trace.rec.bytes_out);
}

/// A connection from `pool`, made or waited for. A client that hangs up while its request waits
/// for one of max_connections leaves the queue, and nothing is forwarded for it. (A coroutine
/// of its own: its locals stay out of the exchange's frame, see exchange.hpp.)
template <class Leg>
asio::awaitable<upstream_lease> acquire_watched(Leg& leg, upstream_pool& pool, bool allow_reuse) {
  budget_wait wait;
  std::optional<typename Leg::hangup_watch> watch;
  if (pool.bounded()) {
    watch.emplace(leg.watched(), [&wait] { wait.cancel(); });
  }
  co_return co_await pool.acquire(allow_reuse, &wait);
}

/// The exchange: forwards the request whose upstream head is in the leg's state, on a pooled
/// upstream connection, then relays the answer piece by piece.
template <class Leg>
asio::awaitable<bool> exchange(Leg& leg, forward_plan& plan, request_trace& trace) {
  exchange_state& x = leg.state();
  const bool request_has_body = !leg.request_done() || plan.buffered_bytes > 0;
  const bool idempotent = is_idempotent(leg.method());
  const bool head_request = leg.method() == http::verb::head;
  const upstream_config& up_cfg = plan.pool->cfg();  // owned by the pool, which plan owns

  // Each way out of an attempt returns, or retries, except a failure the gateway answers for
  // the upstream: it sets `refusal` and leaves the loop, which closes the upstream connection
  // (the lease goes with the attempt) before the answer is written.
  upstream_refusal refusal;
  for (int attempt = 0;; ++attempt) {
    if (x.client_gone_) {  // an HTTP/2 stream reset before it was forwarded
      trace.rec.decision = request_decision::error;
      co_return false;
    }
    // Most requests find a pooled connection and a free unit at once: no coroutine for them.
    upstream_lease lease = attempt == 0 ? plan.pool->reuse_idle() : upstream_lease{};
    if (!lease.connection) {
      lease = co_await acquire_watched(leg, *plan.pool, attempt == 0);
    }
    if (x.client_gone_) {
      trace.rec.decision = request_decision::error;
      co_return false;
    }
    if (lease.queue_full) {
      x.extra.emplace_back("Retry-After", "1");
      refusal = {http::status::service_unavailable, plan.keep_alive,
                 "upstream busy: all of its connections are in use"};
      break;
    }
    if (!lease.connection) {
      refusal = {failure_status(lease.timed_out), plan.keep_alive,
                 lease.timed_out ? "upstream connect timed out" : "upstream unavailable"};
      break;
    }
    // `up` is the attempt's until hold.let_go(): nothing touches it after that.
    auto& up = *lease.connection;
    if (trace.w.log_writer().enabled()) {
      trace.upstream_address = to_string(up_cfg.targets[up.target]);
    }
    upstream_hold hold(x, lease);
    // A retry is safe only where nothing can be applied twice: an idempotent request whose body
    // (if any) is held whole, sent on a pooled connection the upstream may have closed meanwhile.
    const bool may_retry =
        up.reused && attempt == 0 && idempotent && (!request_has_body || plan.body_buffered);

    std::optional<early_answer_watch> early;
    if (request_has_body) {
      early.emplace(up, [&leg] { leg.stop_upload(); });
    }
    // One status for both relays, the request's and then the response's: a frame slot less.
    trace.rec.bytes_in = plan.buffered_bytes;  // and what is relayed, as it goes
    relay_status relayed =
        co_await leg.send_request(up, plan.body_timeout, up_cfg.read_timeout, trace.rec.bytes_in);
    const bool cut_off = early && early->cut_off();
    early.reset();
    x.upload_stopped_ = false;
    // response_timeout bounds the wait for the head once the request is out, however long a
    // slow client took to upload its body.
    const auto sent_at = std::chrono::steady_clock::now();
    // After the watch's cut, the read it ended fails with operation_aborted; any other
    // disconnect is the client's own, and nobody is left to answer.
    const bool client_left =
        is_disconnect(relayed.ec) && relayed.ec != asio::error::operation_aborted;
    if (relayed.failed == relay_failure::reader && (!cut_off || client_left)) {
      trace.rec.decision = request_decision::error;
      if (is_disconnect(relayed.ec)) {
        co_return false;
      }
      const http::status status = status_for_body_error(relayed.ec);
      trace.rec.status = static_cast<unsigned>(status);
      // Nothing more goes upstream: the half-sent request is ended before the client is told
      // (which may linger), and only then is its unit given back.
      hold.let_go(*plan.pool, false, plan.slot);
      co_await leg.refuse_body(status);
      co_return false;
    }
    // The upstream stopped reading the request: it may have answered early (413, 401) and
    // closed, and then its answer is what the client should get.
    // When the watch saw the answer, the failed write, or the client's read it ended, is its
    // doing: never retried. (An answer that came as the body's last piece went out leaves the
    // body whole: the client's connection stays, the upstream's is not reused.)
    const bool answered_early = relayed.failed == relay_failure::reader ||
                                (relayed.failed == relay_failure::writer &&
                                 (cut_off || (!may_retry && relayed.ec != beast::error::timeout)));
    if (relayed.failed == relay_failure::writer && !answered_early) {
      if (may_retry) {
        continue;
      }
      refusal = {failure_status(relayed.ec == beast::error::timeout), false,
                 "upstream failed while receiving the request"};
      break;
    }

    if (x.client_gone_) {  // reset while its body went up: nobody waits for the answer
      trace.rec.decision = request_decision::error;
      if (plan.cost != nullptr && !x.cut_by_gateway_) {
        plan.cost->client_left_before_head();
      }
      co_return false;
    }
    // The response's parser lives in the leg's state, out of this frame (see request_scope),
    // and goes when the attempt ends.
    std::optional<upstream_response_parser>& rp = x.response;
    struct parser_reset {
      std::optional<upstream_response_parser>& rp;
      upstream_response& answer;
      ~parser_reset() {
        rp.reset();
        answer.clear();
      }
    } reset_at_end{rp, x.upstream_answer};
    response_head head;
    {
      // Watching costs a syscall per request, so only requests holding concurrency slots do it.
      std::optional<typename Leg::hangup_watch> watch;
      if (plan.slot != nullptr) {
        watch.emplace(leg.watched(), [&up] {
          error_code ignored;
          up.stream.socket().cancel(ignored);
        });
      }
      head = co_await read_final_head(leg, up, rp, head_request, plan.upgrade,
                                      sent_at + up_cfg.response_timeout, plan.send_timeout);
    }
    if (x.client_gone_) {
      // The default would let a client choose its price by leaving (a drain's cut is not its).
      if (plan.cost != nullptr && !x.cut_by_gateway_) {
        plan.cost->client_left_before_head();
      }
      co_return false;
    }
    if (head.ec) {
      const bool timed_out = head.ec == beast::error::timeout;
      if (may_retry && !head.interim_sent && !rp->got_some() && !timed_out) {
        continue;
      }
      const bool invalid = is_parse_error(head.ec);
      refusal = {failure_status(timed_out), plan.keep_alive && !answered_early,
                 answered_early ? "upstream failed while receiving the request"
                 : timed_out    ? "upstream did not answer in time"
                 : invalid      ? "upstream sent an invalid response"
                                : "upstream closed the connection"};
      break;
    }
    if (!head.unexpected.empty()) {
      refusal = {http::status::bad_gateway, plan.keep_alive && !answered_early, head.unexpected};
      break;
    }
    // A body to relay (not a HEAD's answer, a 204 or a 304, which have none whatever their
    // head says, nor a 101's tunnel) must come in a coding the gateway can pass on. The
    // connection, mid-message, is not reused.
    const unsigned final_status = rp->get().result_int();
    if (!head_request && final_status != 101 && final_status != 204 && final_status != 304 &&
        !passable_transfer_coding(rp->get())) {
      refusal = {http::status::bad_gateway, plan.keep_alive && !answered_early,
                 "upstream sent a transfer coding other than chunked, or a faulty one"};
      break;
    }
    // A length past 2^63 - 1, which Beast's unsigned count takes, is one a client's signed count
    // may read as negative; nginx refuses it too ("upstream sent invalid Content-Length").
    if (rp->content_length() && *rp->content_length() > k_max_content_length) {
      refusal = {http::status::bad_gateway, plan.keep_alive && !answered_early,
                 "upstream sent a Content-Length past 2^63 - 1"};
      break;
    }
    const nanos upstream_time = std::chrono::steady_clock::now() - sent_at;
    trace.rec.upstream = upstream_time;
    trace.rec.status = final_status;
    trace.route->upstream_response(final_status);
    trace.route->upstream_latency(upstream_time);
    if (plan.cost != nullptr) {
      read_cost_head(*plan.cost, *rp);  // a 101's head reports its cost too
    }
    if (final_status == 101) {
      co_await leg.switch_protocols(up, rp->get(), plan.tunnel_idle_timeout, plan.send_timeout,
                                    trace);
      co_return false;
    }

    // After an early answer the rest of the request body is still on its way: close after.
    bool client_keep_alive = plan.keep_alive && !trace.w.draining() && !answered_early;
    // The upstream connection is reused only when the exchange ends exactly at a message
    // boundary on both legs (bytes buffered after the response: release() drops the
    // connection, and stops reusing the target's for a while). A 204 that declared a body is a
    // confused upstream: its body may still come.
    const bool upstream_until_close = !rp->is_done() && !rp->content_length() && !rp->chunked();
    const bool declared_body_204 =
        final_status == 204 && (rp->content_length().value_or(0) > 0 || rp->chunked());
    struct at_answer_end final : upstream_finish {
      at_answer_end(Leg& leg, forward_plan& plan, upstream_hold& hold,
                    const upstream_response_parser& rp, bool reusable)
          : leg(leg), plan(plan), hold(hold), rp(rp), reusable(reusable) {}
      void answer_read() override {
        hold.let_go(*plan.pool, reusable && leg.request_done() && rp.keep_alive(), plan.slot);
      }
      Leg& leg;
      forward_plan& plan;
      upstream_hold& hold;
      const upstream_response_parser& rp;
      bool reusable;
    } at_end(leg, plan, hold, *rp,
             !answered_early && !upstream_until_close && !declared_body_204 && !cut_off);
    trace.rec.bytes_out = 0;  // counted as it goes
    relayed = co_await leg.send_response(up, *rp, client_keep_alive, up_cfg.read_timeout,
                                         plan.send_timeout, trace.rec.bytes_out,
                                         relay_taps{plan.cost, &at_end, plan.charge});
    if (relayed.failed == relay_failure::reader && x.client_gone_ && !x.cut_by_gateway_) {
      // An HTTP/2 client's reset cancels the upstream read its stream waits on: the client
      // left, the upstream did not fail. (A drain's cut-off is the gateway's doing.)
      relayed.failed = relay_failure::writer;
    }
    if (plan.cost != nullptr && relayed.failed == relay_failure::writer) {
      // max: a client must not choose its price by hanging up (a no-op once the relay read the
      // answer whole and told `cost` so)
      plan.cost->client_gone();
    }  // the upstream cut its body short: nothing reported, the default is charged
    if (relayed.failed == relay_failure::reader && !relayed.head_sent) {
      // What came with the head was already unreadable (a bad chunk, a bad trailer): nothing
      // has reached the client, which can still be told so.
      refusal = {http::status::bad_gateway, plan.keep_alive && !answered_early,
                 "upstream sent an invalid response"};
      break;
    }
    if (relayed.failed == relay_failure::reader) {
      // The head is out: all the client can be told is that the body is incomplete, by a close
      // before the last chunk or before Content-Length is reached.
      trace.route->upstream_aborted();
      log_warn("upstream " + up_cfg.name + " failed mid-response (" + relayed.ec.message() +
               ") after " + std::to_string(trace.rec.bytes_out) + " body bytes; request " +
               trace.request_id + " cut short");
      co_return false;
    }
    if (relayed.failed == relay_failure::writer) {
      co_return false;  // the client is gone or too slow; the upstream leg is mid-message
    }
    if (answered_early) {
      co_await leg.after_early_answer();
      co_return false;
    }
    co_return client_keep_alive;  // the upstream connection went at the answer's end
  }
  co_return co_await upstream_refused(leg, plan, trace, refusal.keep_alive, refusal.status,
                                      refusal.detail);
}

template asio::awaitable<bool> exchange<h1_leg>(h1_leg& leg, forward_plan& plan,
                                                request_trace& trace);
template asio::awaitable<bool> exchange<h2_stream>(h2_stream& leg, forward_plan& plan,
                                                   request_trace& trace);

}  // namespace ratewall
