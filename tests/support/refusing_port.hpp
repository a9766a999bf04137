#pragma once

// A port on 127.0.0.1 that refuses connections for as long as the object lives (refusing_port),
// or takes them and never answers (silent_port). refusing_port: a socket is
// bound to it and never listens, so a SYN to it is answered with a reset, and no server of a
// test running beside this one can be given the port meanwhile (a port merely closed again, as
// an upstream that is started and stopped leaves it, can be).

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>

namespace ratewall::testing {

/// A socket bound to a free port on 127.0.0.1; throws when there is none.
inline int bound_loopback_socket(std::uint16_t& port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    if (fd >= 0) {
      ::close(fd);
    }
    throw std::runtime_error("cannot bind a socket on 127.0.0.1");
  }
  port = ntohs(addr.sin_port);
  return fd;
}

class refusing_port {
 public:
  refusing_port() : fd_(bound_loopback_socket(port_)) {}
  ~refusing_port() { ::close(fd_); }
  refusing_port(const refusing_port&) = delete;
  refusing_port& operator=(const refusing_port&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  std::uint16_t port_ = 0;
  int fd_;
};

/// A port on 127.0.0.1 where connections are made (the kernel completes them into the
/// backlog) but nothing is ever read or answered: a server that hangs.
class silent_port {
 public:
  silent_port() : fd_(bound_loopback_socket(port_)) {
    if (::listen(fd_, 64) != 0) {
      ::close(fd_);
      throw std::runtime_error("silent_port: listen failed");
    }
  }
  ~silent_port() { ::close(fd_); }
  silent_port(const silent_port&) = delete;
  silent_port& operator=(const silent_port&) = delete;

  std::uint16_t port() const { return port_; }
  /// Whether a connection is waiting to be accepted (never will be) within `timeout`.
  bool connected(std::chrono::milliseconds timeout) const {
    pollfd p{fd_, POLLIN, 0};
    return ::poll(&p, 1, static_cast<int>(timeout.count())) == 1;
  }

 private:
  std::uint16_t port_ = 0;
  int fd_;
};

}  // namespace ratewall::testing
