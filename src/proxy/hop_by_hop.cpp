#include "hop_by_hop.hpp"

#include <algorithm>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace http = boost::beast::http;

namespace {

/// Orders tokens as if both were lower case: the order `more_` is sorted and searched in.
bool iless(std::string_view a, std::string_view b) {
  return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
    return ascii_lower(x) < ascii_lower(y);
  });
}

}  // namespace

connection_tokens::connection_tokens(const request_head& req) {
  auto range = req.equal_range(http::field::connection);
  for (auto it = range.first; it != range.second; ++it) {
    add(it->value());
  }
  std::sort(more_.begin(), more_.end(), iless);
}

connection_tokens::connection_tokens(const upstream_response& res) {
  for (const auto& f : res) {
    if (f.name() == http::field::connection) {
      add(f.value());
    }
  }
  std::sort(more_.begin(), more_.end(), iless);
}

void connection_tokens::add(std::string_view connection_value) {
  for (auto token : http::token_list{connection_value}) {
    if (count_ < names_.size()) {
      names_[count_++] = token;
    } else {
      more_.push_back(token);
    }
  }
}

bool connection_tokens::named(std::string_view field) const {
  for (std::size_t i = 0; i < count_; ++i) {
    if (boost::beast::iequals(names_[i], field)) {
      return true;
    }
  }
  return !more_.empty() && std::binary_search(more_.begin(), more_.end(), field, iless);
}

bool named_in(const header_list& extra, std::string_view name) {
  for (const auto& [extra_name, value] : extra) {
    if (boost::beast::iequals(extra_name, name)) {
      return true;
    }
  }
  return false;
}

}  // namespace ratewall
