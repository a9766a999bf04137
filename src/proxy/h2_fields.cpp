#include "ratewall/proxy/h2_fields.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>
#include <cstring>

#include "hop_by_hop.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/reuse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

namespace {

// Whether the gateway's field `lowered` (a name in lower case, as the list stores it) carries
// `value`, a value HPACK should never index (h2_fields::add_own).
bool never_indexed(std::string_view lowered, std::string_view value) {
  if (lowered == "x-request-id" || lowered == "x-ratelimit-remaining" || lowered == "ratelimit") {
    return true;
  }
  if (lowered == "x-ratelimit-reset" || lowered == "retry-after") {
    return value.size() > 1;
  }
  return false;
}

}  // namespace

void h2_fields::add_own(const header_list& extra) {
  for (const auto& [name, value] : extra) {
    append(name, value, true);
    entry& e = entries_.back();
    e.indexed = !never_indexed(text(e.name), value);
  }
}

void h2_fields::append(std::string_view name, std::string_view value, bool indexed) {
  // Room for a usual block at once, not grown field by field: each stream's starts empty.
  if (entries_.capacity() == 0) {
    text_.reserve(k_first_text);
    entries_.reserve(k_first_entries);
  }
  // One growth for both, then plain stores: appending each and lowering through iterators
  // cost about 190 instructions a field, a dozen fields a response.
  const std::size_t at = text_.size();
  text_.resize(at + name.size() + value.size());
  char* out = text_.data() + at;
  for (const char c : name) {
    *out++ = ascii_lower(c);
  }
  if (!value.empty()) {
    std::memcpy(out, value.data(), value.size());
  }
  entries_.push_back({{at, name.size()}, {at + name.size(), value.size()}, indexed});
}

void h2_fields::extend_value(std::string_view more) {
  assert(!entries_.empty());
  text_.append(more);
  entries_.back().value.size += more.size();
}

void h2_fields::clear() {
  clear_keeping(text_, k_kept_text);
  clear_keeping(entries_, k_kept_entries);
}

void h2_response_fields(const upstream_response& res, std::optional<std::uint64_t> content_length,
                        const header_list& extra, h2_fields& out) {
  out.clear();
  const connection_tokens tokens(res);
  const unsigned status = res.result_int();
  const std::array<char, 3> digits = status_digits(status);
  out.add(":status", std::string_view(digits.data(), digits.size()));
  for (const auto& f : res) {
    if (passes_on(f, tokens, extra)) {
      out.add(f.name_string(), f.value());
    }
  }
  // One number, as the parser read it: HTTP/1.1 lets "12, 12" or a repeated field through,
  // HTTP/2 does not; and none on a 1xx or 204, which have no content (RFC 9110 §8.6).
  if (content_length && status >= 200 && status != 204) {
    char number[20];
    const char* end = std::to_chars(number, number + sizeof number, *content_length).ptr;
    out.add("content-length", std::string_view(number, static_cast<std::size_t>(end - number)));
  }
  out.add_own(extra);
}

void h2_trailer_fields(const upstream_response& res, const header_list& extra, h2_fields& out) {
  out.clear();
  if (res.trailer_count() == 0) {
    return;
  }
  const connection_tokens tokens(res);  // the head's Connection names hop fields here too
  for (std::size_t i = 0; i < res.trailer_count(); ++i) {
    const upstream_response::field_view f = res.trailer(i);
    // The gateway's own fields are its alone, as in the head.
    if (passes_on_in_trailer(f, tokens, extra)) {
      out.add(f.name_string(), f.value());
    }
  }
}

}  // namespace ratewall
