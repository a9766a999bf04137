#include "ratewall/proxy/upstream_response.hpp"

#include <algorithm>
#include <cstring>

#include "ratewall/core/reuse.hpp"

namespace ratewall {

bool chunk_extension_has_control(std::string_view extensions) {
  return std::any_of(extensions.begin(), extensions.end(),
                     [](unsigned char c) { return (c < 0x20 && c != '\t') || c == 0x7f; });
}

namespace http = boost::beast::http;

std::string_view upstream_response::operator[](http::field id) const {
  const auto head_end = entries_.begin() + static_cast<std::ptrdiff_t>(head_fields_);
  const auto it =
      std::find_if(entries_.begin(), head_end, [id](const entry& e) { return e.id == id; });
  return it == head_end ? std::string_view{} : text(it->value);
}

bool upstream_response::has(http::field id) const {
  return std::any_of(entries_.begin(), entries_.begin() + static_cast<std::ptrdiff_t>(head_fields_),
                     [id](const entry& e) { return e.id == id; });
}

void upstream_response::clear() {
  clear_keeping(text_, k_kept_text);
  clear_keeping(entries_, k_kept_entries);
  head_fields_ = 0;
  trailer_bytes_ = 0;
  trailer_dropped_ = false;
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
  head_fields_ = entries_.size();
}

void upstream_response::add_trailer(http::field id, std::string_view name, std::string_view value) {
  if (trailer_dropped_) {
    return;
  }
  // Counted as RFC 9113 §6.5.2 counts a header list: 32 bytes a field besides its text, so
  // that many empty fields cannot make a block larger than nghttp2 will send.
  trailer_bytes_ += name.size() + value.size() + 32;
  if (trailer_bytes_ > k_max_trailer_bytes) {
    // All or none: what was kept of the trailer goes too.
    text_.resize(trailer_text_at());
    entries_.resize(head_fields_);
    trailer_dropped_ = true;
    return;
  }
  const span n = keep(name);
  entries_.push_back({id, n, keep(value)});
}

std::size_t upstream_response::trailer_text_at() const {
  if (entries_.size() == head_fields_) {
    return text_.size();
  }
  return entries_[head_fields_].name.at;  // the first trailer field's text starts there
}

// The parser bounds the head (header_limit, at most 64 KiB) and the trailer is kept within
// k_max_trailer_bytes, so offsets fit in 32 bits.
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

void supply_reason_space(boost::beast::flat_buffer& buffer) {
  constexpr std::string_view k_example = "HTTP/1.1 200";
  constexpr std::size_t k_line = k_example.size();  // where its CRLF starts
  const std::size_t size = buffer.size();
  // From the CR on: Beast judges the byte after the code as soon as it is there, without
  // waiting for the line's LF (a read may end between the two).
  if (size < k_line + 1 || static_cast<const char*>(buffer.data().data())[k_line] != '\r' ||
      buffer.max_size() - size < 1) {
    return;
  }
  const std::string_view line(static_cast<const char*>(buffer.data().data()),
                              std::min(size, k_line + 2));
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  if (!line.starts_with("HTTP/1.") || !digit(line[7]) || line[8] != ' ' || !digit(line[9]) ||
      !digit(line[10]) || !digit(line[11]) ||
      (line.size() > k_line + 1 && line[k_line + 1] != '\n')) {
    return;  // not that line: Beast judges it
  }
  buffer.prepare(1);  // the room just past the bytes held, which stay where they are or move
  char* at = static_cast<char*>(buffer.data().data());
  std::memmove(at + k_line + 1, at + k_line, size - k_line);
  at[k_line] = ' ';
  buffer.commit(1);
}

}  // namespace ratewall
