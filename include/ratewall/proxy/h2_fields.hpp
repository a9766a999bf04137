#pragma once

// HTTP/2 header blocks as the gateway sends them to a client (DESIGN §12): the fields of one
// HEADERS frame, in order, names in lower case (RFC 9113 §8.2.1), ready to be handed to nghttp2
// as name/value pointers.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewall/http/rate_limit_headers.hpp"
#include "ratewall/proxy/upstream_response.hpp"

namespace ratewall {

/// The fields of one header block, in order, in one string: after the first few blocks a
/// reused list allocates nothing. Names are stored in lower case whatever case they are added
/// in; values as given. The views it returns stay valid until the next add, extend_value or
/// clear.
class h2_fields {
 public:
  struct field {
    std::string_view name;
    std::string_view value;
    bool indexed = true;  // HPACK may put it in the client's dynamic table
  };

  /// Appends a field; `name` is lower-cased.
  void add(std::string_view name, std::string_view value) { append(name, value, true); }
  /// Appends a field whose `name` is in lower case already (an HTTP/2 client's, as nghttp2
  /// checks them, or one of the gateway's own): copied as it is.
  void add_lowercase(std::string_view name, std::string_view value);
  /// Appends the gateway's own fields (request id, rate-limit fields), names lower-cased. Those
  /// whose value is new in nearly every response (X-Request-Id, X-RateLimit-Remaining,
  /// RateLimit) HPACK never indexes (RFC 7541 §6.2.3): each would take a place in the client's
  /// dynamic table, push out fields that do repeat, and lengthen every later lookup of its name.
  /// X-RateLimit-Reset and Retry-After are indexed when they are one digit: at most ten entries,
  /// found again in every response of a limit that refills within seconds (a literal costs the
  /// encoder a Huffman coding of name and value each time). Longer, they count down through
  /// many values, and are never indexed.
  void add_own(const header_list& extra);
  /// Appends `more` to the value of the last field added (a value written in pieces).
  void extend_value(std::string_view more);

  std::size_t size() const { return entries_.size(); }
  field operator[](std::size_t i) const {
    const entry& e = entries_[i];
    return {text(e.name), text(e.value), e.indexed};
  }
  /// The bytes of storage held.
  std::size_t room_bytes() const { return text_.capacity() + entries_.capacity() * sizeof(entry); }

  /// Forgets the fields, keeping the room of a usual block (not that of a large one: a
  /// connection that keeps its list between responses holds at most a few KiB).
  void clear();

 private:
  struct span {
    std::size_t at = 0;
    std::size_t size = 0;
  };
  struct entry {
    span name;
    span value;
    bool indexed = true;
  };

  /// Bytes appended in pieces, each written where it lands: a std::string would fill the room
  /// first (resize) or check and copy each piece apart (append), about 80 instructions a field.
  class text_bytes {
   public:
    text_bytes() = default;
    text_bytes(text_bytes&& o) noexcept
        : data_(std::move(o.data_)),
          size_(std::exchange(o.size_, 0)),
          capacity_(std::exchange(o.capacity_, 0)) {}
    text_bytes& operator=(text_bytes&& o) noexcept {
      data_ = std::move(o.data_);
      size_ = std::exchange(o.size_, 0);
      capacity_ = std::exchange(o.capacity_, 0);
      return *this;
    }

    /// `n` more bytes at the end, for the caller to write.
    char* extend(std::size_t n) {
      if (capacity_ - size_ < n) {
        grow(size_ + n);
      }
      char* at = data_.get() + size_;
      size_ += n;
      return at;
    }
    const char* data() const { return data_.get(); }
    std::size_t size() const { return size_; }
    std::size_t capacity() const { return capacity_; }
    /// Empties it, keeping its storage unless that is larger than `most`.
    void clear_keeping(std::size_t most);

   private:
    void grow(std::size_t least);
    std::unique_ptr<char[]> data_;
    std::size_t size_ = 0;
    std::size_t capacity_ = 0;
  };

  static constexpr std::size_t k_kept_text = 2048;
  static constexpr std::size_t k_kept_entries = 32;
  static constexpr std::size_t k_first_text = 512;
  static constexpr std::size_t k_first_entries = 16;

  void append(std::string_view name, std::string_view value, bool indexed);
  /// Appends name and value as they are; where the name now lies.
  char* start(std::string_view name, std::string_view value, bool indexed);
  std::string_view text(span s) const { return {text_.data() + s.at, s.size}; }

  text_bytes text_;  // every name and value, one after the other
  std::vector<entry> entries_;
};

/// Makes `out` the head of an upstream's response as an HTTP/2 client gets it: `:status` (the
/// pseudo-header first, RFC 9113 §8.3), then the upstream's fields but those HTTP/2 forbids or
/// that are the hop's own (Connection, Keep-Alive, Proxy-Connection, Transfer-Encoding, Upgrade,
/// TE, Trailer, the Proxy-Authenticate and -Authorization pair, and every field Connection
/// names) and those `extra` overrides, then `content-length`, then `extra`. The same rules as
/// write_client_response_head but one: the length the parser read (`content_length`) is kept
/// as one number, except on a 1xx or 204. HTTP/2 delimits the body itself (END_STREAM); the
/// length tells the client its size up front.
void h2_response_fields(const upstream_response& res, std::optional<std::uint64_t> content_length,
                        const header_list& extra, h2_fields& out);

/// Makes `out` the trailer of an upstream's chunked body as an HTTP/2 client gets it (RFC 9113
/// §8.1: a HEADERS frame after the DATA, which ends the stream): the trailer fields in order,
/// but those HTTP/2 forbids or that are the hop's own (as for the head), those `extra` names
/// (the gateway's own), and those a trailer may not change (RFC 9110 §6.5.1: framing, Host,
/// the content's type and coding, cookies, redirects, caching). Empty when none is left.
void h2_trailer_fields(const upstream_response& res, const header_list& extra, h2_fields& out);

}  // namespace ratewall
