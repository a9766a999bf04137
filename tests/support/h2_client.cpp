#include "support/h2_client.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace ratewall::testing {

namespace {

nghttp2_nv nv(std::string_view name, std::string_view value) {
  return nghttp2_nv{reinterpret_cast<std::uint8_t*>(const_cast<char*>(name.data())),
                    reinterpret_cast<std::uint8_t*>(const_cast<char*>(value.data())), name.size(),
                    value.size(), NGHTTP2_NV_FLAG_NONE};
}

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::send(fd, data, size, MSG_NOSIGNAL);
    if (n <= 0) {
      return false;
    }
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

h2_client::h2_client(std::uint16_t port, const std::vector<nghttp2_settings_entry>& settings) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    throw std::runtime_error("h2_client: cannot connect");
  }
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_frame_recv);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_close);
  nghttp2_session_client_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, settings.data(), settings.size());
}

h2_client::~h2_client() {
  nghttp2_session_del(session_);
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

std::int32_t h2_client::submit(const std::string& method, const std::string& path,
                               const header_pairs& headers, std::optional<std::string> body,
                               bool end_stream) {
  const std::string scheme = "http";
  const std::string authority = "localhost";
  std::vector<nghttp2_nv> nva{nv(":method", method), nv(":scheme", scheme), nv(":path", path)};
  bool has_authority = false;
  for (const auto& [name, value] : headers) {
    has_authority = has_authority || name == ":authority";
  }
  if (!has_authority) {
    nva.push_back(nv(":authority", authority));
  }
  for (const auto& [name, value] : headers) {
    nva.push_back(nv(name, value));
  }
  nghttp2_data_provider provider{};
  provider.read_callback = read_body;
  const std::int32_t id = body || end_stream
                              ? nghttp2_submit_request(session_, nullptr, nva.data(), nva.size(),
                                                       body ? &provider : nullptr, nullptr)
                              : nghttp2_submit_headers(session_, NGHTTP2_FLAG_NONE, -1, nullptr,
                                                       nva.data(), nva.size(), nullptr);
  if (id < 0) {
    throw std::runtime_error("h2_client: submit failed");
  }
  replies_[id];
  if (body) {
    bodies_[id] = {std::move(*body), 0};
    if (!end_stream) {
      unended_.insert(id);
    }
  }
  return id;
}

void h2_client::cancel(std::int32_t id) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL);
}

bool h2_client::flush() {
  for (;;) {
    const std::uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n < 0) {
      return false;
    }
    if (n == 0) {
      return true;
    }
    if (!write_all(fd_, reinterpret_cast<const char*>(data), static_cast<std::size_t>(n))) {
      return false;
    }
  }
}

bool h2_client::all_closed() const {
  for (const auto& [id, r] : replies_) {
    if (!r.closed) {
      return false;
    }
  }
  return true;
}

h2_client::received h2_client::receive(std::chrono::steady_clock::time_point end) {
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
  pollfd p{fd_, POLLIN, 0};
  if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) {
    return received::timeout;
  }
  char buf[16384];
  const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
  if (n <= 0) {
    connection_ended = true;
    return received::closed;
  }
  if (nghttp2_session_mem_recv(session_, reinterpret_cast<const std::uint8_t*>(buf),
                               static_cast<std::size_t>(n)) < 0) {
    return received::invalid;
  }
  return received::frames;
}

bool h2_client::run(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (!flush()) {
      connection_ended = true;
      return false;
    }
    if (all_closed()) {
      return true;
    }
    switch (receive(end)) {
      case received::frames:
        break;
      case received::closed:
        return all_closed();
      case received::invalid:
        connection_ended = true;
        return false;
      case received::timeout:
        return false;
    }
  }
}

h2_reply h2_client::request(const std::string& method, const std::string& path,
                            const header_pairs& headers, std::optional<std::string> body) {
  const std::int32_t id = submit(method, path, headers, std::move(body));
  run();
  return replies_[id];
}

void h2_client::send_raw(const std::string& bytes) {
  std::string out;
  for (;;) {
    const std::uint8_t* data = nullptr;
    const ssize_t n = nghttp2_session_mem_send(session_, &data);
    if (n <= 0) {
      break;
    }
    out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n));
  }
  out += bytes;
  write_all(fd_, out.data(), out.size());
}

bool h2_client::closed_within(std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    switch (receive(end)) {
      case received::frames:
      case received::invalid:  // what the server sends may be anything here: read on
        break;
      case received::closed:
        return true;
      case received::timeout:
        return false;
    }
  }
}

int h2_client::on_header(nghttp2_session*, const nghttp2_frame* frame, const std::uint8_t* name,
                         std::size_t namelen, const std::uint8_t* value, std::size_t valuelen,
                         std::uint8_t flags, void* user) {
  auto& self = *static_cast<h2_client*>(user);
  if (frame->hd.type != NGHTTP2_HEADERS) {
    return 0;
  }
  h2_reply& r = self.replies_[frame->hd.stream_id];
  const std::string n(reinterpret_cast<const char*>(name), namelen);
  const std::string v(reinterpret_cast<const char*>(value), valuelen);
  if (n == ":status") {
    const unsigned status = static_cast<unsigned>(std::stoul(v));
    if (status < 200) {
      r.interim.push_back(status);
    } else {
      r.status = status;
      r.headers.clear();
      r.never_indexed.clear();
    }
    return 0;
  }
  if (r.status >= 200 && frame->headers.cat == NGHTTP2_HCAT_HEADERS) {
    r.trailers.emplace(n, v);  // a HEADERS after the final head's: the trailer
    return 0;
  }
  if (r.status != 0) {
    r.headers.emplace(n, v);
    if ((flags & NGHTTP2_NV_FLAG_NO_INDEX) != 0) {
      r.never_indexed.insert(n);
    }
  }
  return 0;
}

int h2_client::on_data(nghttp2_session*, std::uint8_t, std::int32_t id, const std::uint8_t* data,
                       std::size_t len, void* user) {
  auto& self = *static_cast<h2_client*>(user);
  self.replies_[id].body.append(reinterpret_cast<const char*>(data), len);
  return 0;
}

int h2_client::on_frame_recv(nghttp2_session*, const nghttp2_frame* frame, void* user) {
  auto& self = *static_cast<h2_client*>(user);
  if (frame->hd.type == NGHTTP2_GOAWAY) {
    self.goaway = true;
    self.goaway_code = frame->goaway.error_code;
  }
  if (frame->hd.type == NGHTTP2_RST_STREAM) {
    h2_reply& r = self.replies_[frame->hd.stream_id];
    r.reset = true;
    r.reset_code = frame->rst_stream.error_code;
  }
  return 0;
}

int h2_client::on_close(nghttp2_session*, std::int32_t id, std::uint32_t, void* user) {
  auto& self = *static_cast<h2_client*>(user);
  self.replies_[id].closed = true;
  return 0;
}

ssize_t h2_client::read_body(nghttp2_session*, std::int32_t id, std::uint8_t* buf,
                             std::size_t length, std::uint32_t* flags, nghttp2_data_source*,
                             void* user) {
  auto& self = *static_cast<h2_client*>(user);
  auto& [body, sent] = self.bodies_[id];
  const std::size_t n = std::min(length, body.size() - sent);
  std::memcpy(buf, body.data() + sent, n);
  sent += n;
  if (sent == body.size()) {
    if (self.unended_.count(id) == 0) {
      *flags |= NGHTTP2_DATA_FLAG_EOF;
    } else if (n == 0) {
      return NGHTTP2_ERR_DEFERRED;  // the rest of the body never comes
    }
  }
  return static_cast<ssize_t>(n);
}

}  // namespace ratewall::testing
