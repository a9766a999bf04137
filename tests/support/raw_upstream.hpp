#pragma once

// An upstream whose every byte the test writes: each accepted connection runs the test's script
// on a thread of its own, with blocking calls that are each bounded by a timeout, so a test can
// misbehave exactly as a broken upstream would (interim responses, bytes after a response,
// a close or a stall mid-body) without ever hanging. Listens on 127.0.0.1, port 0.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace ratewall::testing {

/// One request as the upstream received it.
struct raw_request {
  bool ok = false;  // false: the peer closed, the timeout passed, or the bytes were not HTTP
  std::string method;
  std::string target;
  std::string head;  // request line and fields, as received
  std::string body;  // decoded (chunked framing removed)
  std::string header(std::string_view lower_name) const;
};

class raw_upstream {
 public:
  class connection {
   public:
    connection(int fd, std::uint64_t index) : fd_(fd), index_(index) {}
    /// Reads one request: its head, then a Content-Length or chunked body.
    raw_request read_request(std::chrono::milliseconds timeout = std::chrono::seconds(5));
    /// Reads the head only (the body is left to read_until).
    raw_request read_head(std::chrono::milliseconds timeout = std::chrono::seconds(5));
    /// Reads until `marker` has arrived; false on close or timeout.
    bool read_until(std::string_view marker,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));
    /// Writes all of `bytes`; false when the peer is gone.
    bool write(std::string_view bytes);
    /// Ends this side of the connection (a FIN); the peer may go on sending.
    void shutdown_send();
    void close();
    /// Whether the peer has ended its side (a FIN or a reset), whatever is still unread.
    bool peer_closed() const;
    /// 1 for the first connection accepted, and so on.
    std::uint64_t index() const { return index_; }

   private:
    bool fill(std::chrono::steady_clock::time_point deadline);
    int fd_;
    std::uint64_t index_;
    std::string pending_;  // received, not yet consumed
  };
  using script = std::function<void(connection&)>;

  explicit raw_upstream(script s);
  ~raw_upstream();
  raw_upstream(const raw_upstream&) = delete;
  raw_upstream& operator=(const raw_upstream&) = delete;

  std::uint16_t port() const { return port_; }
  std::uint64_t connections_accepted() const { return accepted_.load(); }

 private:
  void accept_loop();

  script script_;
  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::atomic<std::uint64_t> accepted_{0};
  std::mutex mutex_;
  std::vector<int> fds_;
  std::vector<std::thread> threads_;
  std::thread acceptor_;
};

/// "HTTP/1.1 200 OK\r\nContent-Length: N\r\n\r\n<body>".
std::string raw_response(std::string_view body, std::string_view extra_fields = {});

/// An upstream that writes `response` as soon as a request's head is in, then reads nothing
/// more and keeps the connection open for `hold`: an early answer (RFC 9112 §9.3) that no
/// close or reset follows.
raw_upstream::script answering_early(std::string response, std::chrono::milliseconds hold);

}  // namespace ratewall::testing
