#include "hop_by_hop.hpp"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/rfc7230.hpp>

namespace ratewall {

namespace http = boost::beast::http;

connection_tokens::connection_tokens(const request_head& req) {
  auto range = req.equal_range(http::field::connection);
  for (auto it = range.first; it != range.second; ++it) {
    add(it->value());
  }
}

connection_tokens::connection_tokens(const upstream_response& res) {
  for (const auto& f : res) {
    if (f.name() == http::field::connection) {
      add(f.value());
    }
  }
}

void connection_tokens::add(std::string_view connection_value) {
  for (auto token : http::token_list{connection_value}) {
    if (count_ < names_.size()) {
      names_[count_++] = token;
    }
  }
}

bool connection_tokens::named(std::string_view field) const {
  for (std::size_t i = 0; i < count_; ++i) {
    if (boost::beast::iequals(names_[i], field)) {
      return true;
    }
  }
  return false;
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
