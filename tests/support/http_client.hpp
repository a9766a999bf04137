#pragma once

// A small HTTP/1.1 client for integration tests: one real TCP connection to 127.0.0.1, kept
// alive across requests, every operation bounded by a timeout so a test can fail but not hang.

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ratewall::testing {

struct http_reply {
  unsigned status = 0;                              // 0: no reply (closed or timed out)
  std::multimap<std::string, std::string> headers;  // names lower-cased
  std::string body;
  bool keep_alive = false;

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string{} : it->second;
  }
  bool has(const std::string& lower_name) const { return headers.count(lower_name) > 0; }
};

using header_pairs = std::vector<std::pair<std::string, std::string>>;

class http_client {
 public:
  explicit http_client(std::uint16_t port,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~http_client();

  /// Sends a request (Content-Length body, or chunked when `chunked`) and reads the reply.
  http_reply request(const std::string& method, const std::string& target,
                     const header_pairs& headers = {}, const std::string& body = "",
                     bool chunked = false);
  http_reply get(const std::string& target, const header_pairs& headers = {}) {
    return request("GET", target, headers);
  }

  /// Writes bytes as they are (malformed requests, partial heads).
  void send_raw(const std::string& bytes);
  /// Reads one reply; status 0 when the connection closed or the timeout passed first.
  http_reply read_reply();
  /// The bytes that have arrived (waiting up to the timeout for the first); "" when the
  /// connection closed or nothing came in time. For asserting on raw bytes and their timing.
  std::string read_some();
  /// Every byte until the server closes (at most `reads` reads, each within the timeout).
  std::string read_until_closed(int reads = 50);
  /// True when the server closes the connection within the timeout.
  bool closed_by_peer();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace ratewall::testing
