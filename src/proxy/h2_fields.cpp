#include "ratewall/proxy/h2_fields.hpp"

#include <algorithm>
#include <array>
#include <cassert>
#include <charconv>

#include "hop_by_hop.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/reuse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

void h2_fields::add(std::string_view name, std::string_view value) {
  // Room for a usual block at once, not grown field by field: each stream's starts empty.
  if (entries_.capacity() == 0) {
    text_.reserve(k_first_text);
    entries_.reserve(k_first_entries);
  }
  const std::size_t at = text_.size();
  text_.resize(at + name.size() + value.size());
  char* out = text_.data() + at;
  for (const char c : name) {
    *out++ = ascii_lower(c);
  }
  std::copy(value.begin(), value.end(), out);  // (memcpy may not take an empty view's null)
  entries_.push_back({{at, name.size()}, {at + name.size(), value.size()}});
}

void h2_fields::extend_value(std::string_view more) {
  assert(!entries_.empty());
  text_.append(more);
  entries_.back().value.size += more.size();
}

h2_fields::field h2_fields::operator[](std::size_t i) const {
  const entry& e = entries_[i];
  return {text(e.name), text(e.value)};
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
    const std::string_view name = f.name_string();
    if (hop_by_hop(f.name()) || tokens.named(name) || named_in(extra, name)) {
      continue;
    }
    out.add(name, f.value());
  }
  // One number, as the parser read it: HTTP/1.1 lets "12, 12" or a repeated field through,
  // HTTP/2 does not; and none on a 1xx or 204, which have no content (RFC 9110 §8.6).
  if (content_length && status >= 200 && status != 204) {
    char number[20];
    const char* end = std::to_chars(number, number + sizeof number, *content_length).ptr;
    out.add("content-length", std::string_view(number, static_cast<std::size_t>(end - number)));
  }
  for (const auto& [name, value] : extra) {
    out.add(name, value);
  }
}

}  // namespace ratewall
