#pragma once

// An HTTP/2 client for integration tests (prior knowledge, h2c): nghttp2's client session over
// one real TCP connection to 127.0.0.1, driven by blocking reads and writes, every run bounded
// by a timeout so a test can fail but not hang. Streams are submitted, then run() exchanges
// frames until they are all closed. send_raw() writes bytes past the session, for tests of
// malformed or abusive frames.

#include <nghttp2/nghttp2.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "support/http_client.hpp"

namespace ratewall::testing {

struct h2_reply {
  unsigned status = 0;                              // the final :status; 0 if none came
  std::vector<unsigned> interim;                    // 1xx statuses, in order
  std::multimap<std::string, std::string> headers;  // of the final head
  std::set<std::string> never_indexed;  // its fields sent as HPACK never-indexed literals
  std::multimap<std::string, std::string> trailers;  // a HEADERS after the body, if any
  std::string body;
  bool closed = false;           // the stream ended (END_STREAM either way, or a reset)
  std::uint32_t reset_code = 0;  // the RST_STREAM error code, if reset (0: NO_ERROR or none)
  bool reset = false;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string{} : it->second;
  }
};

class h2_client {
 public:
  /// Connects and sends its SETTINGS: nghttp2's defaults, and `settings` over them (e.g.
  /// NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE 0: a client that lets no DATA through yet).
  explicit h2_client(std::uint16_t port, const std::vector<nghttp2_settings_entry>& settings = {});
  ~h2_client();
  h2_client(const h2_client&) = delete;
  h2_client& operator=(const h2_client&) = delete;

  /// A request on a new stream; `body` (if any) in DATA frames, END_STREAM after it. With
  /// `end_stream` false the stream stays open after its head, or after `body`: the rest of a
  /// body promised and never sent.
  std::int32_t submit(const std::string& method, const std::string& path,
                      const header_pairs& headers = {},
                      std::optional<std::string> body = std::nullopt, bool end_stream = true);
  /// Resets a stream of ours (RST_STREAM CANCEL).
  void cancel(std::int32_t id);
  /// Exchanges frames until every submitted stream is closed (true), or the connection ends
  /// or `timeout` passes first (false).
  bool run(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// One GET (or `method`) and its reply.
  h2_reply request(const std::string& method, const std::string& path,
                   const header_pairs& headers = {},
                   std::optional<std::string> body = std::nullopt);

  const h2_reply& reply(std::int32_t id) { return replies_[id]; }
  /// Writes bytes as they are, outside the session, after what it has queued, in one write:
  /// the server reads them with the frames before them.
  void send_raw(const std::string& bytes);
  /// Reads what the server sends until it closes or `timeout`: true when it closed.
  bool closed_within(std::chrono::milliseconds timeout);

  bool goaway = false;
  std::uint32_t goaway_code = 0;
  bool connection_ended = false;

 private:
  static int on_header(nghttp2_session*, const nghttp2_frame*, const std::uint8_t*, std::size_t,
                       const std::uint8_t*, std::size_t, std::uint8_t, void*);
  static int on_data(nghttp2_session*, std::uint8_t, std::int32_t, const std::uint8_t*, std::size_t,
                     void*);
  static int on_frame_recv(nghttp2_session*, const nghttp2_frame*, void*);
  static int on_close(nghttp2_session*, std::int32_t, std::uint32_t, void*);
  static ssize_t read_body(nghttp2_session*, std::int32_t, std::uint8_t*, std::size_t,
                           std::uint32_t*, nghttp2_data_source*, void*);
  bool flush();
  bool all_closed() const;
  enum class received { frames, closed, invalid, timeout };
  /// One read of what the server sent, handed to the session; waits until `end` at most.
  received receive(std::chrono::steady_clock::time_point end);

  int fd_ = -1;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, h2_reply> replies_;
  std::map<std::int32_t, std::pair<std::string, std::size_t>> bodies_;  // to send, and sent
  std::set<std::int32_t> unended_;  // bodies sent without END_STREAM after them
};

}  // namespace ratewall::testing
