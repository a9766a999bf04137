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

void copy_to(char* out, std::string_view s) {
  if (!s.empty()) {
    std::memcpy(out, s.data(), s.size());
  }
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
  char* lowered = start(name, value, indexed);
  // Lowered where it now lies, with plain stores (through iterators it cost about 190
  // instructions a field, a dozen fields a response).
  for (std::size_t i = 0; i < name.size(); ++i) {
    lowered[i] = ascii_lower(lowered[i]);
  }
}

void h2_fields::add_lowercase(std::string_view name, std::string_view value) {
  start(name, value, true);
}

char* h2_fields::start(std::string_view name, std::string_view value, bool indexed) {
  // Room for a usual block at once, not grown field by field: each stream's starts empty.
  if (entries_.capacity() == 0) {
    entries_.reserve(k_first_entries);
  }
  const std::size_t at = text_.size();
  char* out = text_.extend(name.size() + value.size());
  copy_to(out, name);
  copy_to(out + name.size(), value);
  entries_.push_back({{at, name.size()}, {at + name.size(), value.size()}, indexed});
  return out;
}

void h2_fields::text_bytes::grow(std::size_t least) {
  const std::size_t capacity = std::max({least, 2 * capacity_, k_first_text});
  auto bigger = std::make_unique_for_overwrite<char[]>(capacity);
  copy_to(bigger.get(), std::string_view(data_.get(), size_));
  data_ = std::move(bigger);
  capacity_ = capacity;
}

void h2_fields::text_bytes::clear_keeping(std::size_t most) {
  size_ = 0;
  if (capacity_ > most) {
    data_.reset();
    capacity_ = 0;
  }
}

void h2_fields::extend_value(std::string_view more) {
  assert(!entries_.empty());
  copy_to(text_.extend(more.size()), more);
  entries_.back().value.size += more.size();
}

void h2_fields::clear() {
  text_.clear_keeping(k_kept_text);
  clear_keeping(entries_, k_kept_entries);
}

void h2_response_fields(const upstream_response& res, std::optional<std::uint64_t> content_length,
                        const header_list& extra, h2_fields& out) {
  out.clear();
  const connection_tokens tokens(res);
  const unsigned status = res.result_int();
  const std::array<char, 3> digits = status_digits(status);
  out.add_lowercase(":status", std::string_view(digits.data(), digits.size()));
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
    out.add_lowercase("content-length",
                      std::string_view(number, static_cast<std::size_t>(end - number)));
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
