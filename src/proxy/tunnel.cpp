#include "tunnel.hpp"

#include <algorithm>
#include <array>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <vector>

namespace ratewall {

namespace {

// After one side closed its end, the other has this long (each gap) to finish what it was
// sending: a peer that never closes does not keep the tunnel, and its concurrency slot, for the
// whole idle timeout (HAProxy's "timeout client-fin" and "timeout server-fin").
constexpr nanos k_half_closed_timeout = std::chrono::seconds(5);

using time_point = std::chrono::steady_clock::time_point;

struct splice {
  connection_state& c;
  nanos idle_timeout;
  nanos write_timeout;
  bool half_closed = false;
  std::uint64_t& to_upstream;  // bytes written each way
  std::uint64_t& to_client;
  // When each direction's write under way must be done (max(): none is under way). A peer that
  // stops reading ends the tunnel write_timeout later, however busy the other direction keeps
  // it: every byte either way moves the idle deadline, never these.
  std::array<time_point, 2> write_due{time_point::max(), time_point::max()};

  void arm() {
    const time_point idle_due =
        std::chrono::steady_clock::now() + (half_closed ? k_half_closed_timeout : idle_timeout);
    c.expires_at(std::min({idle_due, write_due[0], write_due[1]}));
  }
  void writing(bool to_upstream, bool under_way) {
    write_due[to_upstream ? 1 : 0] =
        under_way ? std::chrono::steady_clock::now() + write_timeout : time_point::max();
    arm();
  }
};

/// One direction: what `from` sends, `to` gets, until `from` ends its side or fails.
asio::awaitable<void> pump(splice& s, transport& from, beast::flat_buffer& early, transport& to,
                           bool to_upstream) {
  std::vector<char> buffer(k_min_read);
  std::uint64_t& total = to_upstream ? s.to_upstream : s.to_client;
  bool failed = false;
  if (early.size() > 0) {
    s.writing(to_upstream, true);
    auto [ec, n] = co_await asio::async_write(to, early.data(), use_tuple);
    s.writing(to_upstream, false);
    total += n;
    process_metrics().tunnel_bytes(to_upstream, n);
    early.consume(early.size());
    failed = static_cast<bool>(ec);
  }
  while (!failed) {
    s.arm();
    auto [rec, n] = co_await from.async_read_some(asio::buffer(buffer), use_tuple);
    if (rec) {
      // The end of `from`'s side (or a failure, or the watchdog): pass the end on. Anything
      // but a clean end means the other direction is over too.
      failed = rec != asio::error::eof;
      break;
    }
    s.writing(to_upstream, true);
    auto [wec, written] = co_await asio::async_write(to, asio::buffer(buffer.data(), n), use_tuple);
    s.writing(to_upstream, false);
    total += written;
    process_metrics().tunnel_bytes(to_upstream, written);
    failed = static_cast<bool>(wec);
  }
  error_code ignored;
  if (failed || s.half_closed) {
    // Both directions are over: end the other one's wait too.
    from.socket().cancel(ignored);
    to.socket().cancel(ignored);
    s.half_closed = true;
    co_return;
  }
  // A half close: TLS's close_notify (written without waiting for the peer's, so it does not
  // disturb the other direction's read), then the TCP FIN.
  s.half_closed = true;
  s.arm();
  co_await to.shutdown_send();
  s.arm();
}

}  // namespace

asio::awaitable<void> tunnel(connection_state& c, upstream_connection& up, nanos idle_timeout,
                             nanos write_timeout, std::uint64_t& to_upstream,
                             std::uint64_t& to_client) {
  using namespace asio::experimental::awaitable_operators;
  process_metrics().tunnel_opened();
  struct on_end {
    ~on_end() { process_metrics().tunnel_closed(); }
  } end;
  splice s{c, idle_timeout, write_timeout, false, to_upstream, to_client};
  co_await (pump(s, c.client, c.buffer, up.stream, true) &&
            pump(s, up.stream, up.buffer, c.client, false));
}

}  // namespace ratewall
