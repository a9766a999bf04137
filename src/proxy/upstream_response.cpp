#include "ratewall/proxy/upstream_response.hpp"

#include <algorithm>
#include <cstring>

#include "ratewall/core/reuse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

std::string_view upstream_response::operator[](http::field id) const {
  for (const entry& e : entries_) {
    if (e.id == id) {
      return text(e.value);
    }
  }
  return {};
}

bool upstream_response::has(http::field id) const {
  return std::any_of(entries_.begin(), entries_.end(), [id](const entry& e) { return e.id == id; });
}

void upstream_response::clear() {
  clear_keeping(text_, k_kept_text);
  clear_keeping(entries_, k_kept_entries);
}

void upstream_response::start(unsigned status, std::string_view reason, unsigned version) {
  clear();
  // Room for a usual head at once, not grown field by field: an HTTP/2 stream's response
  // starts empty each time (a connection's is kept from response to response).
  if (entries_.capacity() == 0) {
    text_.reserve(k_first_text);
    entries_.reserve(k_first_entries);
  }
  status_ = status;
  version_ = version;
  reason_ = keep(reason);
}

void upstream_response::add(http::field id, std::string_view name, std::string_view value) {
  const span n = keep(name);
  entries_.push_back({id, n, keep(value)});
}

// The parser bounds the head (header_limit, at most 64 KiB), so offsets fit in 32 bits; trailers
// are not kept.
upstream_response::span upstream_response::keep(std::string_view s) {
  const span at{static_cast<std::uint32_t>(text_.size()), static_cast<std::uint32_t>(s.size())};
  text_.append(s);
  return at;
}

std::size_t upstream_response_parser::take_body(std::string_view piece, error_code& ec) {
  auto& body = r_.body();
  if (body.data == nullptr) {
    ec = http::error::need_buffer;
    return 0;
  }
  const std::size_t n = std::min(piece.size(), body.size);
  std::memcpy(body.data, piece.data(), n);
  body.data = static_cast<char*>(body.data) + n;
  body.size -= n;
  if (n < piece.size()) {
    ec = http::error::need_buffer;
  }
  return n;
}

}  // namespace ratewall
