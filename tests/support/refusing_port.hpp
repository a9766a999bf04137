#pragma once

// A port on 127.0.0.1 that refuses connections for as long as the object lives: a socket is
// bound to it and never listens, so a SYN to it is answered with a reset, and no server of a
// test running beside this one can be given the port meanwhile (a port merely closed again, as
// an upstream that is started and stopped leaves it, can be).

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <stdexcept>

namespace ratewall::testing {

class refusing_port {
 public:
  refusing_port() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof addr;
    if (fd_ < 0 || ::bind(fd_, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
      if (fd_ >= 0) {
        ::close(fd_);
      }
      throw std::runtime_error("refusing_port: cannot bind a socket on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
  }
  ~refusing_port() { ::close(fd_); }
  refusing_port(const refusing_port&) = delete;
  refusing_port& operator=(const refusing_port&) = delete;

  std::uint16_t port() const { return port_; }

 private:
  int fd_;
  std::uint16_t port_ = 0;
};

}  // namespace ratewall::testing
