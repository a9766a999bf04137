#pragma once

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <boost/beast/http/rfc7230.hpp>

namespace ratewall {

/// Whether the client lets its connection stay open after the request parser `p` has read the
/// head of: HTTP/1.1 unless it says `close`, HTTP/1.0 only if it says `keep-alive`, and `close`
/// in any Connection line wins in either version (RFC 9112 §9.3). Beast's header reads the
/// first Connection line alone, and its parser lets an HTTP/1.0 `keep-alive` outweigh a `close`
/// beside it; a request pipelined after the `close` would then be served. A head not read
/// whole (refused on a field, a declared length over the bound) keeps nothing: the parser's
/// reading of it is undefined.
template <class Parser>
bool client_keeps_alive(const Parser& p) {
  if (!p.is_header_done() || !p.keep_alive()) {
    return false;
  }
  const auto& req = p.get();
  auto [it, end] = req.equal_range(boost::beast::http::field::connection);
  for (; it != end; ++it) {
    for (const auto token : boost::beast::http::token_list{it->value()}) {
      if (boost::beast::iequals(token, "close")) {
        return false;
      }
    }
  }
  return true;
}

}  // namespace ratewall
