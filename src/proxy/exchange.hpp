#pragma once

// The exchange (DESIGN §7): one admitted request forwarded on a pooled upstream connection, and
// its response relayed to the client piece by piece as it arrives. Internal to the proxy module.

#include <boost/asio/awaitable.hpp>
#include <memory>

#include "connection.hpp"
#include "ratewall/proxy/upstream_pool.hpp"

namespace ratewall {

/// How the request is forwarded: built by the session from the route and the admission.
struct forward_plan {
  std::shared_ptr<upstream_pool> pool;
  nanos body_timeout{0};  // client: each gap in the request body
  nanos send_timeout{0};  // client: each write of the response
  bool keep_alive = false;
  // The concurrency units the request holds (null: none). A client that hangs up while the
  // upstream works cancels the exchange; they are given back as soon as the upstream is done
  // with the request: its answer read whole, or its failure seen (before the client is told).
  lease* slot = nullptr;
  bool body_buffered = false;        // the whole body is in c.head: a retry may send it again
  std::uint64_t buffered_bytes = 0;  // body bytes in c.head (read before the exchange)
  // The protocols the forwarded head asks to upgrade to (empty: none). A 101 that switches to
  // them opens a tunnel; the list lives as long as the exchange.
  std::string_view upgrade;
  nanos tunnel_idle_timeout{0};
  // routes[].cost_from_response: told the final response head and, for a JSON source, the body
  // as it is relayed; charged (`charge`, the cost's owner) once the answer is read whole, before
  // its last bytes go out (relay_taps), or by the session after an exchange that ended otherwise.
  response_cost* cost = nullptr;
  response_charge* charge = nullptr;
};

/// The HTTP/1.1 side of an exchange: the client connection `c`, whose request head `p` has read
/// and whose body it may still be reading.
///
/// A leg is what exchange() needs of a front end; an HTTP/2 stream will be the other. It gives
/// the exchange's scratch (state()), the deadline that bounds the upstream leg's reads
/// (deadline(): expires_after, expires_at, checked), what a hangup_watch watches (watched()),
/// the request's version, method and whether its body is all read, and these steps:
/// send_request (the head in state().head and the body, to the upstream), send_interim (a 1xx),
/// answer (the gateway's own 502/503/504), refuse_body (a body the client could not send),
/// send_response (the head and the body of the upstream's answer), after_early_answer (an
/// upstream answered before it read the whole request) and switch_protocols (a 101).
class h1_leg {
 public:
  using hangup_watch = client_watch;

  h1_leg(connection_state& c, worker& w, request_parser& p)
      : c_(c), w_(w), p_(p), framing_(request_framing(p)) {}

  exchange_state& state() { return c_; }
  connection_state& deadline() { return c_; }
  connection_state& watched() { return c_; }
  unsigned version() const { return p_.get().version(); }
  http::verb method() const { return p_.get().method(); }
  bool request_done() const { return p_.is_done(); }

  /// The request's body bytes are added to `counted` as they go (see relay).
  asio::awaitable<relay_status> send_request(upstream_connection& up, nanos body_gap,
                                             nanos write_timeout, std::uint64_t& counted);
  /// An interim response goes to the client; the error of the write, checked.
  asio::awaitable<error_code> send_interim(const upstream_response& res, nanos write_timeout);
  /// The gateway's answer `status` with `detail`; whether it was written.
  asio::awaitable<bool> answer(http::status status, std::string_view detail, bool keep_alive);
  /// The request body could not be read (`status` says why): answered, then closed.
  asio::awaitable<void> refuse_body(http::status status);
  /// Writes the head of the upstream's final answer in `rp` and relays its body. May turn
  /// `keep_alive` off (an HTTP/1.0 client reads a body of unknown length up to the close). The
  /// body's bytes are added to `counted` as they go; `taps` are told what is read (relay_taps).
  asio::awaitable<relay_status> send_response(upstream_connection& up, upstream_response_parser& rp,
                                              bool& keep_alive, nanos read_gap, nanos write_timeout,
                                              std::uint64_t& counted, relay_taps taps);
  asio::awaitable<void> after_early_answer();
  /// The upstream refused the body while it goes up: a wait for more of it ends now (the
  /// upstream's answer is relayed instead).
  void stop_upload() {
    c_.upload_stopped_ = true;  // checked() ends a read that completed before the cancel
    if (!c_.client.writing_records()) {
      error_code ignored;
      c_.client.socket().cancel(ignored);
    }
  }
  /// The client gets the upstream's 101, then the two connections are one tunnel until it ends
  /// (tunnel.hpp: `idle_timeout` with nothing either way, `write_timeout` for each write).
  asio::awaitable<void> switch_protocols(upstream_connection& up, const upstream_response& res,
                                         nanos idle_timeout, nanos write_timeout,
                                         request_trace& trace);

 private:
  connection_state& c_;
  worker& w_;
  request_parser& p_;
  body_framing framing_;  // the request body's, towards the upstream
};

/// Forwards the request whose upstream head is in `leg.state().head` and whose body may still
/// be on its way, then relays the answer, or on a 101 carries the upgraded connection
/// (tunnel.hpp). Returns whether the client connection stays open. Defined in exchange.cpp for
/// each leg. `plan` is the caller's, which awaits the exchange: taken by reference, it is not
/// copied into the exchange's coroutine frame, which then stays small enough for Asio to
/// recycle (1,020 bytes; a frame past that is a malloc and a free per forwarded request).
template <class Leg>
asio::awaitable<bool> exchange(Leg& leg, forward_plan& plan, request_trace& trace);

}  // namespace ratewall
