#pragma once

// An upstream's response as the exchange relays it (DESIGN §1): its head kept as it came, the
// fields in order in one reused string, and a buffer_body's window for the body. Beast's own
// parser files each field into a case-insensitive ordered set, with an allocation per field;
// the relay reads the fields once, in order, and looks up three by name, so a flat array
// does: the framing stays Beast's (basic_parser parses and checks Content-Length,
// Transfer-Encoding and Connection before any field reaches the array).

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/buffer_body.hpp>
#include <boost/beast/http/field.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ratewall {

/// A response head and the window its body is read into. Made once per client connection and
/// reused for every response: its storage keeps its capacity.
class upstream_response {
 public:
  /// One field as it came, as Beast's fields' value_type shows it.
  struct field_view {
    boost::beast::http::field id;
    std::string_view name_text;
    std::string_view value_text;

    boost::beast::http::field name() const { return id; }
    std::string_view name_string() const { return name_text; }
    std::string_view value() const { return value_text; }
  };

  class const_iterator {
   public:
    const_iterator(const upstream_response& r, std::size_t i) : r_(&r), i_(i) {}
    field_view operator*() const { return r_->at(i_); }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const const_iterator& other) const { return i_ == other.i_; }

   private:
    const upstream_response* r_;
    std::size_t i_;
  };

  unsigned result_int() const { return status_; }
  std::string_view reason() const { return text(reason_); }
  unsigned version() const { return version_; }

  const_iterator begin() const { return {*this, 0}; }
  const_iterator end() const { return {*this, head_fields_}; }
  std::size_t size() const { return head_fields_; }

  /// The trailer fields of a chunked body, in order, once the body has ended: none if there
  /// were none, or if they were more than k_max_trailer_bytes (trailer_dropped(): a part of
  /// them could mislead, a checksum without the field that says what it covers).
  std::size_t trailer_count() const { return entries_.size() - head_fields_; }
  field_view trailer(std::size_t i) const { return at(head_fields_ + i); }
  bool trailer_dropped() const { return trailer_dropped_; }
  /// The trailer kept at most, counted as RFC 9113 §6.5.2 counts a header list: each field's
  /// name and value and 32 bytes (at most 256 fields).
  static constexpr std::size_t k_max_trailer_bytes = 8 * 1024;

  /// The value of the first field `id` of the head; empty when there is none.
  std::string_view operator[](boost::beast::http::field id) const;
  /// Whether a field `id` came in the head.
  bool has(boost::beast::http::field id) const;

  boost::beast::http::buffer_body::value_type& body() { return body_; }

  /// Forgets the response, keeping the room of a usual head (not that of a large one: an idle
  /// keep-alive connection holds at most a few KiB).
  void clear();
  /// The memory it holds for its fields, kept or in use.
  std::size_t room_bytes() const { return text_.capacity() + entries_.capacity() * sizeof(entry); }

  // For the parser.
  void start(unsigned status, std::string_view reason, unsigned version);
  void add(boost::beast::http::field id, std::string_view name, std::string_view value);
  void add_trailer(boost::beast::http::field id, std::string_view name, std::string_view value);

 private:
  struct span {
    std::uint32_t at = 0;
    std::uint32_t size = 0;
  };
  struct entry {
    boost::beast::http::field id;
    span name;
    span value;
  };

  static constexpr std::size_t k_kept_text = 2048;
  static constexpr std::size_t k_kept_entries = 32;
  static constexpr std::size_t k_first_text = 512;
  static constexpr std::size_t k_first_entries = 16;

  span keep(std::string_view s);
  /// Where the trailer fields' text starts in text_.
  std::size_t trailer_text_at() const;
  std::string_view text(span s) const { return std::string_view(text_).substr(s.at, s.size); }
  field_view at(std::size_t i) const {
    const entry& e = entries_[i];
    return {e.id, text(e.name), text(e.value)};
  }

  unsigned status_ = 0;
  unsigned version_ = 11;
  span reason_;
  std::string text_;            // the reason and every name and value, one after the other
  std::vector<entry> entries_;  // the head's fields, then the trailer's
  std::size_t head_fields_ = 0;
  std::size_t trailer_bytes_ = 0;
  bool trailer_dropped_ = false;
  boost::beast::http::buffer_body::value_type body_;
};

/// Whether a chunk extension holds a control byte other than HTAB, which RFC 9112 §7.1.1 allows
/// nowhere in it (Beast takes any byte in a quoted value, a bare LF or a NUL included).
bool chunk_extension_has_control(std::string_view extensions);

/// Beast's basic_parser for a response, writing into an upstream_response: the head's fields
/// in order, the body into the window `get().body()` gives (buffer_body's contract: data and
/// size name the room left; need_buffer when it is full). One parser per response, as Beast's.
class upstream_response_parser final : public boost::beast::http::basic_parser<false> {
 public:
  /// Starts a new response in `r`, which must outlive the parser.
  explicit upstream_response_parser(upstream_response& r) : r_(r) {
    r_.start(0, {}, 11);
    r_.body() = {};
  }

  upstream_response& get() { return r_; }
  const upstream_response& get() const { return r_; }

 private:
  using error_code = boost::system::error_code;

  // Beast's string_view (boost::core's) in the signatures, as the base declares them.
  using beast_view = boost::beast::string_view;

  void on_request_impl(boost::beast::http::verb, beast_view, beast_view, int,
                       error_code&) override {}
  void on_response_impl(int code, beast_view reason, int version, error_code&) override {
    r_.start(static_cast<unsigned>(code), reason, static_cast<unsigned>(version));
  }
  // Trailer fields come here too, after the head: kept apart, within their own bound (they end
  // an HTTP/2 client's stream, or an HTTP/1.1 client's chunked body).
  void on_field_impl(boost::beast::http::field id, beast_view name, beast_view value,
                     error_code&) override {
    if (!is_header_done()) {
      r_.add(id, name, value);
    } else {
      r_.add_trailer(id, name, value);
    }
  }
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(const boost::optional<std::uint64_t>&, error_code&) override {}
  std::size_t on_body_impl(beast_view piece, error_code& ec) override {
    return take_body(piece, ec);
  }
  // Its extension is refused for a control byte, as a client's is (connection.hpp): a bare LF
  // in a quoted value would end the line for a client that reads it as nginx does.
  void on_chunk_header_impl(std::uint64_t, beast_view extensions, error_code& ec) override {
    if (chunk_extension_has_control(extensions)) {
      ec = boost::beast::http::error::bad_chunk_extension;
    }
  }
  std::size_t on_chunk_body_impl(std::uint64_t, beast_view piece, error_code& ec) override {
    return take_body(piece, ec);
  }
  void on_finish_impl(error_code&) override {}

  std::size_t take_body(std::string_view piece, error_code& ec);

  upstream_response& r_;
};

/// Gives an upstream's status line with no reason, "HTTP/1.1 200" and its CRLF (or its CR, so
/// far) at the front of `buffer`, the space RFC 9112 §4 puts before the reason: "HTTP/1.1 200 ".
/// Beast refuses the line without it (a 502), where nginx and HAProxy take it and some small
/// servers send it. Call it before a response head is parsed; it looks at one byte unless the
/// line is that one.
void supply_reason_space(boost::beast::flat_buffer& buffer);

}  // namespace ratewall
