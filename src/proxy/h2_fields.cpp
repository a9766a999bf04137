#include "ratewall/proxy/h2_fields.hpp"

#include <array>

#include "hop_by_hop.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/reuse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

void h2_fields::add(std::string_view name, std::string_view value) {
  const span n{text_.size(), name.size()};
  for (const char c : name) {
    text_.push_back(ascii_lower(c));
  }
  entries_.push_back({n, {text_.size(), value.size()}});
  text_.append(value);
}

void h2_fields::extend_value(std::string_view more) {
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

void h2_response_fields(const upstream_response& res, const header_list& extra, h2_fields& out) {
  const connection_tokens tokens(res);
  const std::array<char, 3> status = status_digits(res.result_int());
  out.add(":status", std::string_view(status.data(), status.size()));
  for (const auto& f : res) {
    const std::string_view name = f.name_string();
    const bool framing_only = f.name() == http::field::content_length;
    if ((hop_by_hop(f.name()) && !framing_only) || tokens.named(name) || named_in(extra, name)) {
      continue;
    }
    out.add(name, f.value());
  }
  for (const auto& [name, value] : extra) {
    out.add(name, value);
  }
}

}  // namespace ratewall
