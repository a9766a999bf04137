#pragma once

// A real HTTP/1.1 server on 127.0.0.1 (port 0) running on its own thread: the upstream that
// integration tests put behind ratewall, and the demo upstream of the quick start.
//
// Paths (by their last segment, so /any/prefix/slow works too):
//   /slow?ms=N        answers after N milliseconds
//   /chunked          answers with a chunked body of several chunks
//   /crash            reads the request, then closes the connection without answering
//   /status/N         answers with status N
//   anything else     200, JSON echo: method, target, headers, body, connection, request
// Every request is recorded; the body of the echo names the upstream connection it came on.

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace ratewall::testing {

struct received_request {
  std::string method;
  std::string target;
  std::multimap<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::uint64_t connection = 0;  // 1 for the first connection accepted, and so on

  std::string header(const std::string& lower_name) const {
    auto it = headers.find(lower_name);
    return it == headers.end() ? std::string{} : it->second;
  }
};

class test_upstream {
 public:
  /// Binds 127.0.0.1:`port` (0 = any free port) and starts serving.
  explicit test_upstream(std::uint16_t port = 0, std::string address = "127.0.0.1");
  ~test_upstream();
  test_upstream(const test_upstream&) = delete;
  test_upstream& operator=(const test_upstream&) = delete;

  std::uint16_t port() const { return port_; }
  std::uint64_t connections_accepted() const { return connections_.load(); }
  std::vector<received_request> requests() const;
  std::size_t count(const std::string& method, const std::string& path_prefix) const;

  /// Stops accepting, closes every connection, joins the thread.
  void stop();

 private:
  struct impl;
  friend struct impl;
  std::unique_ptr<impl> impl_;
  std::uint16_t port_ = 0;
  std::atomic<std::uint64_t> connections_{0};
  mutable std::mutex mutex_;
  std::vector<received_request> requests_;
  std::thread thread_;
};

}  // namespace ratewall::testing
