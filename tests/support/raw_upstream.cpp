#include "support/raw_upstream.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <stdexcept>

namespace ratewall::testing {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto& ch : out) {
    ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return out;
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::int64_t>(0, left.count()));
}

}  // namespace

std::string raw_request::header(std::string_view lower_name) const {
  const std::string h = lower(head);
  const std::string key = "\r\n" + std::string(lower_name) + ":";
  auto pos = h.find(key);
  if (pos == std::string::npos) {
    return {};
  }
  pos += key.size();
  auto end = h.find("\r\n", pos);
  std::string value = head.substr(pos, end - pos);
  value.erase(0, value.find_first_not_of(" \t"));
  value.erase(value.find_last_not_of(" \t") + 1);
  return value;
}

bool raw_upstream::connection::fill(std::chrono::steady_clock::time_point deadline) {
  pollfd p{fd_, POLLIN, 0};
  if (::poll(&p, 1, remaining_ms(deadline)) <= 0) {
    return false;
  }
  char buf[16384];
  ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) {
    return false;
  }
  pending_.append(buf, static_cast<std::size_t>(n));
  return true;
}

raw_request raw_upstream::connection::read_head(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  raw_request r;
  std::size_t end;
  while ((end = pending_.find("\r\n\r\n")) == std::string::npos) {
    if (!fill(deadline)) {
      return r;
    }
  }
  r.head = pending_.substr(0, end + 2);
  pending_.erase(0, end + 4);
  auto sp1 = r.head.find(' ');
  auto sp2 = r.head.find(' ', sp1 + 1);
  if (sp1 == std::string::npos || sp2 == std::string::npos) {
    return r;
  }
  r.method = r.head.substr(0, sp1);
  r.target = r.head.substr(sp1 + 1, sp2 - sp1 - 1);
  r.ok = true;
  return r;
}

raw_request raw_upstream::connection::read_request(std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  raw_request r = read_head(timeout);
  if (!r.ok) {
    return r;
  }
  if (lower(r.header("transfer-encoding")).find("chunked") != std::string::npos) {
    for (;;) {
      std::size_t line_end;
      while ((line_end = pending_.find("\r\n")) == std::string::npos) {
        if (!fill(deadline)) {
          r.ok = false;
          return r;
        }
      }
      const std::size_t size = std::stoul(pending_.substr(0, line_end), nullptr, 16);
      while (pending_.size() < line_end + 2 + size + 2) {
        if (!fill(deadline)) {
          r.ok = false;
          return r;
        }
      }
      r.body += pending_.substr(line_end + 2, size);
      pending_.erase(0, line_end + 2 + size + 2);
      if (size == 0) {
        return r;
      }
    }
  }
  const std::string length = r.header("content-length");
  const std::size_t want = length.empty() ? 0 : std::stoul(length);
  while (pending_.size() < want) {
    if (!fill(deadline)) {
      r.ok = false;
      return r;
    }
  }
  r.body = pending_.substr(0, want);
  pending_.erase(0, want);
  return r;
}

bool raw_upstream::connection::read_until(std::string_view marker,
                                          std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t searched = 0;  // the marker does not start before this: look at new bytes only
  std::size_t at;
  while ((at = pending_.find(marker, searched)) == std::string::npos) {
    searched = pending_.size() >= marker.size() ? pending_.size() - marker.size() + 1 : 0;
    if (!fill(deadline)) {
      return false;
    }
  }
  pending_.erase(0, at + marker.size());
  return true;
}

bool raw_upstream::connection::write(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

void raw_upstream::connection::shutdown_send() {
  ::shutdown(fd_, SHUT_WR);
}

void raw_upstream::connection::close() {
  ::shutdown(fd_, SHUT_RDWR);
}

bool raw_upstream::connection::peer_closed() const {
  pollfd p{fd_, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

raw_upstream::raw_upstream(script s) : script_(std::move(s)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 64) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("raw_upstream: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  acceptor_ = std::thread([this] { accept_loop(); });
}

raw_upstream::~raw_upstream() {
  stopping_ = true;
  acceptor_.join();
  {
    std::lock_guard lock(mutex_);
    for (int fd : fds_) {
      ::shutdown(fd, SHUT_RDWR);  // wakes a script blocked in poll
    }
  }
  for (auto& t : threads_) {
    t.join();
  }
  for (int fd : fds_) {
    ::close(fd);
  }
  ::close(listen_fd_);
}

void raw_upstream::accept_loop() {
  while (!stopping_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) {
      continue;
    }
    int fd = ::accept(listen_fd_, nullptr, nullptr);
    if (fd < 0) {
      continue;
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    const std::uint64_t index = ++accepted_;
    std::lock_guard lock(mutex_);
    fds_.push_back(fd);
    threads_.emplace_back([this, fd, index] {
      connection c(fd, index);
      script_(c);
      c.close();
    });
  }
}

raw_upstream::script answering_early(std::string response, std::chrono::milliseconds hold) {
  return [response = std::move(response), hold](raw_upstream::connection& c) {
    if (c.read_head().ok) {
      c.write(response);
      std::this_thread::sleep_for(hold);
    }
  };
}

std::string raw_response(std::string_view body, std::string_view extra_fields) {
  std::string r = "HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  r += extra_fields;
  r += "\r\n";
  r += body;
  return r;
}

}  // namespace ratewall::testing
