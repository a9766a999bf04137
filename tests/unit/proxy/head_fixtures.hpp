#pragma once

// Heads the proxy's unit tests share: upstream responses parsed as the exchange parses them,
// and HTTP/2 header blocks as lists that doctest can compare and print.

#include <doctest/doctest.h>

#include <boost/asio/buffer.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewall/proxy/h2_fields.hpp"
#include "ratewall/proxy/upstream_response.hpp"

namespace ratewall::testing {

/// `head`, an upstream's response head, parsed into `r`.
inline void parse_head(upstream_response& r, std::string_view head) {
  upstream_response_parser p(r);
  boost::system::error_code ec;
  p.put(boost::asio::buffer(head.data(), head.size()), ec);
  REQUIRE_FALSE(ec);
  REQUIRE(p.is_header_done());
}

using field_pairs = std::vector<std::pair<std::string, std::string>>;

/// The fields of `block`, in order.
inline field_pairs listed(const h2_fields& block) {
  field_pairs out;
  for (std::size_t i = 0; i < block.size(); ++i) {
    out.emplace_back(block[i].name, block[i].value);
  }
  return out;
}

}  // namespace ratewall::testing
