#pragma once

// What one HTTP/2 client connection is allowed to cost the gateway beyond its requests (DESIGN
// §12): the frames that make work without making requests. nghttp2 frames the connection; the
// h2 session asks this guard at each step and, on a `false`, refuses the stream or ends the
// connection with GOAWAY. Pure: no socket, no clock (time is passed in), one per connection,
// not thread-safe (a connection lives on one thread).

#include <cstdint>

#include "ratewall/core/clock.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

struct h2_guard_limits {
  std::uint32_t resets_per_second = 0;  // at least 1 (the constructor throws otherwise)
  std::uint32_t max_concurrent_streams = 0;
};

class h2_guard {
 public:
  /// The bytes read that a connection may spend on frames with no payload before the traffic
  /// ratio applies (nginx's allowance).
  static constexpr std::uint64_t k_traffic_allowance = 1024 * 1024;
  /// The refusals a connection may collect whatever its stream limit.
  static constexpr std::uint64_t k_least_refusals = 100;

  /// Throws std::invalid_argument when limits.resets_per_second is 0.
  explicit h2_guard(h2_guard_limits limits);

  /// A stream reset at `now` (a monotonic time): an RST_STREAM received, or one the gateway
  /// sends for a client's stream error. A token bucket of resets_per_second per second, as deep
  /// as one second's worth. false: over budget (a rapid reset attack, CVE-2023-44487), GOAWAY.
  bool reset(nanos now);

  /// A new socket read begins: the count of streams opened by one read starts again.
  void read_start() { streams_in_read_ = 0; }

  /// A stream opened by the current read. false past 2 × max_concurrent_streams in one read:
  /// refuse the stream (RST_STREAM REFUSED_STREAM) and count it with refused().
  bool new_stream();

  /// A stream refused. false once the connection's refusals exceed max(max_concurrent_streams,
  /// k_least_refusals): a client that keeps opening what it is refused, GOAWAY. Counted over
  /// the connection's life, never forgotten: a client that keeps to the stream limit is never
  /// refused (it cannot open twice the limit in one read), however long it stays.
  bool refused();

  /// A stream refused before the client acknowledged our SETTINGS: nghttp2 refuses the streams
  /// over max_concurrent_streams itself, and a client that has not seen the limit yet may open
  /// more (RFC 9113 §5.1.2 lets it assume none). Counted apart, and false only past ten times
  /// refused()'s bound: a first flight larger than that is a flood, not a client that has not
  /// heard of the limit yet.
  bool refused_before_settings();

  /// The connection's totals so far: every byte read, and the bytes of them that were payload
  /// (DATA payload, header block fragments). false when bytes_read / 8 > payload +
  /// k_traffic_allowance in integer division, nginx's rule (ngx_http_v2_read_handler): a flood
  /// of small frames (PING, SETTINGS, empty DATA, PRIORITY) that each cost a little work and
  /// carry nothing, GOAWAY.
  bool traffic(std::uint64_t bytes_read, std::uint64_t payload) const;

 private:
  policy resets_;
  gcra::state reset_bucket_;
  std::uint64_t streams_per_read_;
  std::uint64_t max_refusals_;
  std::uint64_t streams_in_read_ = 0;
  std::uint64_t refusals_ = 0;
  std::uint64_t early_refusals_ = 0;
};

}  // namespace ratewall
