#pragma once

// The cost a response reports (routes[].cost_from_response): read from a header of the final
// response head, or from a field of a JSON body that is not streamed. Pure: the exchange hands
// it the head's values and the body's pieces as it relays them, and asks for the cost at the end.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

namespace ratewall {

/// A count as an upstream writes it: decimal digits, with optional spaces or tabs around them.
/// Anything else ("", "-1", "+5", "1.5", "1e3", "0x10", "5 5") is nullopt. A value too large
/// for 64 bits reads as UINT64_MAX (the caller clamps it).
std::optional<std::uint64_t> parse_reported_cost(std::string_view text);

/// What a JSON text holds at `path` (object keys, or array indexes written as decimal digits):
/// the largest value found there (a duplicate key is found twice), when every value found is a
/// non-negative integer (a float with an integral value counts; one beyond 64 bits reads as
/// UINT64_MAX). nullopt when nothing is there, a value is anything else, or the text is not
/// one JSON value. Parsed as a stream (nlohmann SAX): no tree is built, and memory stays bounded
/// by the path however deeply the text nests.
std::optional<std::uint64_t> json_reported_cost(std::string_view body,
                                                std::span<const std::string> path);

/// application/json, or any type with a +json suffix (application/problem+json), parameters
/// and case ignored.
bool is_json_media_type(std::string_view content_type);

/// The cost one response reports, per cost_from_response. Usage (the exchange):
///   response_cost rc(cfg);
///   rc.header_values(...)             // the final head (not 1xx), header source
///   if (rc.keep_body(...)) { rc.body_piece(piece)...; rc.body_end(); }   // json source
///   rc.cost()                         // what to charge, whatever happened before
class response_cost {
 public:
  explicit response_cost(const cost_from_response_config& cfg) : cfg_(cfg) {}

  /// Header source: every value of the named field in the final head, in order (none: nothing
  /// reported). Several values, or a comma-separated list, count as the largest of them when
  /// every one is a count (parse_reported_cost); otherwise nothing usable is reported.
  void header_values(std::span<const std::string_view> values);

  /// JSON source: whether the body is to be kept for body_end: a declared length of at most
  /// max_body, a JSON media type, and a body at all. A streamed (chunked, or read until close)
  /// or larger body is not read: the default is charged.
  bool keep_body(bool has_body, std::optional<std::uint64_t> content_length,
                 std::string_view content_type);
  /// A piece of the kept body, as relayed. Never keeps more than max_body bytes.
  void body_piece(std::string_view piece);
  /// The whole body has been relayed: the cost is read from it.
  void body_end();
  /// The client went away while a kept body was being relayed, so what it cost cannot be
  /// read: `max` is charged. The default would let a client choose its price by hanging up
  /// (the upstream did the work all the same).
  void client_gone();
  /// The client went away once the request had gone upstream, before the response's head came
  /// (an HTTP/2 stream reset, its connection closed): the upstream may do the work
  /// all the same, and nothing says what it cost: `max` is charged, as by client_gone().
  void client_left_before_head() { reported_ = cfg_.max; }

  /// The cost to charge: the reported value clamped to max, or the default when none was
  /// usable (missing, malformed, the body cut short or not read, an upstream failure).
  std::uint64_t cost() const;
  /// Whether the response reported a usable value.
  bool reported() const { return reported_.has_value(); }
  const cost_from_response_config& config() const { return cfg_; }

 private:
  cost_from_response_config cfg_;
  std::optional<std::uint64_t> reported_;
  bool keeping_ = false;
  std::string body_;
};

}  // namespace ratewall
