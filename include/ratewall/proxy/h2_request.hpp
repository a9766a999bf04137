#pragma once

// An HTTP/2 request's header block as the HTTP/1.1 pipeline reads a request (DESIGN §12): each
// stream is forwarded to an HTTP/1.1 upstream, so its fields become a request_head that
// check_request_head, admission and the upstream head writer take unchanged. Socket-free and
// session-free: nghttp2's on_header callback feeds it one field at a time.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ratewall/proxy/h2_fields.hpp"
#include "ratewall/proxy/message.hpp"

namespace ratewall {

/// Collects one request's header block and checks what HTTP/1.1's parser would have checked
/// (RFC 9113 §8.2 and §8.3): nghttp2 refuses most of it already, but the builder does not rely
/// on that for anything that could reach the upstream's request line or split a field.
///
/// The header list is counted as RFC 9113 §6.5.2 does (name + value + 32 a field, pseudo-headers
/// included); once it is over `max_header_bytes`, or once a field is refused, nothing more is
/// stored, only counted: a client cannot make it hold more than about `max_header_bytes`.
///
/// Reusable: clear() forgets the request, keeping the room of a usual head (as h2_fields::clear
/// does), so a connection can keep builders for its streams. Not thread-safe.
class h2_request_builder {
 public:
  explicit h2_request_builder(std::size_t max_header_bytes) : max_bytes_(max_header_bytes) {}

  /// One field of the block, as nghttp2 decoded it.
  void add(std::string_view name, std::string_view value);

  /// Makes `out` the request (anew: what it held is dropped) and returns 0, or returns the
  /// refusal: 431 (the header list is over max_header_bytes), 501 (CONNECT), else 400. The first
  /// refusal found stands. Fields: Host (from :authority, else host), then the others as they
  /// came, names as given, then one Cookie of every crumb joined by "; " (RFC 9113 §8.2.3).
  /// `te: trailers` is not among them (see te_trailers). Version 11: the upstream leg's.
  unsigned finish(request_head& out);

  /// Why finish refused the request (fixed text, for the problem body); "" when it did not.
  std::string_view reason() const { return reason_; }
  /// The client sent `te: trailers` (a gRPC client does); the field itself is not forwarded.
  bool te_trailers() const { return te_trailers_; }
  /// The header list's size so far, as RFC 9113 §6.5.2 counts it.
  std::uint64_t header_bytes() const { return bytes_; }
  /// The bytes of storage held (for tests of the bound).
  std::size_t room_bytes() const { return fields_.room_bytes() + cookie_.capacity(); }

  /// Forgets the request, keeping the room of a usual one.
  void clear();

 private:
  static constexpr std::size_t k_none = SIZE_MAX;
  static constexpr std::size_t k_kept_cookie = 1024;

  void refuse(unsigned status, std::string_view reason);
  void add_pseudo(std::string_view name, std::string_view value);
  void add_regular(std::string_view name, std::string_view value);
  std::string_view stored(std::size_t i) const { return fields_[i].value; }

  std::size_t max_bytes_;
  std::uint64_t bytes_ = 0;
  unsigned status_ = 0;  // the first refusal; nothing is stored after it
  std::string_view reason_;
  bool te_trailers_ = false;
  bool regular_seen_ = false;
  h2_fields fields_;             // pseudo-headers first, then the fields forwarded as they are
  std::string cookie_;           // the crumbs so far, joined
  std::size_t method_ = k_none;  // indices into fields_
  std::size_t scheme_ = k_none;
  std::size_t authority_ = k_none;
  std::size_t path_ = k_none;
  std::size_t host_ = k_none;
};

}  // namespace ratewall
