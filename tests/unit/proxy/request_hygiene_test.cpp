// What the gateway accepts at all (DESIGN §5a), as a hostile table (STYLE 12): each row a
// request head as a client may send it, and the refusal, or the host and target that routing
// and forwarding both use.

#include <doctest/doctest.h>

#include <boost/beast/http.hpp>
#include <string>

#include "ratewall/proxy/request_hygiene.hpp"

using namespace ratewall;
namespace http = boost::beast::http;

namespace {

struct verdict {
  unsigned status = 0;  // 0 accepted; 400/501 refused; 1 the parser itself refused
  std::string host;
  std::string target;
  std::string reason;  // why it was refused
};

verdict check(const std::string& head, const path_options& paths = {}) {
  http::parser<true, http::empty_body, pooled_allocator<char>> p;  // the gateway's fields
  boost::system::error_code ec;
  p.put(boost::asio::buffer(head), ec);
  if (ec || !p.is_header_done()) {
    return {1, {}, {}, {}};
  }
  canonical_request out;
  verdict v;
  v.status = check_request_head(p.get().base(), paths, identity_config{}, out);
  if (v.status == 0) {
    v.host = out.host;
    v.target = out.target.path + out.target.query;
  } else {
    CHECK_FALSE(out.reason.empty());
    v.reason = out.reason;
  }
  return v;
}

}  // namespace

TEST_CASE("Transfer-Encoding: only a final chunked in HTTP/1.1") {
  struct row {
    const char* te;
    unsigned status;
  };
  const row rows[] = {
      {"chunked", 0},
      {"Chunked", 0},
      {"chunked, identity", 400},
      {"xchunked", 400},
      {"\"chunked\"", 400},
      {"chunked, chunked", 400},
      {"identity", 400},
      {"gzip", 400},
      {"gzip, chunked", 501},
      {"x-custom, chunked", 501},
      {"chunked;q=1", 400},
      {" , chunked", 0},  // empty list elements are ignored (RFC 9110 §5.6.1)
      {"", 400},          // present, so Content-Length does not count; no chunked either
      {" , ", 400},
  };
  for (const auto& r : rows) {
    CAPTURE(r.te);
    const std::string head =
        std::string("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: ") + r.te + "\r\n\r\n";
    CHECK(check(head).status == r.status);
  }
  SUBCASE("split over two fields: the same list") {
    CHECK(check("POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip\r\n"
                "Transfer-Encoding: chunked\r\n\r\n")
              .status == 501);
  }
  SUBCASE("in HTTP/1.0") {
    CHECK(check("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n").status == 400);
  }
}

TEST_CASE("a method with a lower-case letter is refused: an upstream may upper-case it") {
  for (const char* method : {"post", "Post", "gET", "delete", "x-lower"}) {
    CAPTURE(method);
    CHECK(check(std::string(method) + " / HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);
  }
  for (const char* method : {"POST", "PROPFIND", "X-CUSTOM", "M_SEARCH"}) {
    CAPTURE(method);
    CHECK(check(std::string(method) + " / HTTP/1.1\r\nHost: h\r\n\r\n").status == 0);
  }
}

TEST_CASE("CONNECT is refused, whatever its target: the gateway opens no tunnels") {
  CHECK(check("CONNECT /x HTTP/1.1\r\nHost: h\r\n\r\n").status == 501);
  CHECK(check("CONNECT h:443 HTTP/1.1\r\nHost: h:443\r\n\r\n").status >= 400);
}

TEST_CASE("a method override is refused: the request line's method chose route and cost") {
  for (const char* name :
       {"X-HTTP-Method-Override", "x-http-method-override", "X_HTTP_Method_Override",
        "X-HTTP-Method", "X-Method-Override", "X-Forwarded-Method", "X-Original-Method"}) {
    CAPTURE(name);
    const auto r = check("POST / HTTP/1.1\r\nHost: h\r\n" + std::string(name) + ": DELETE\r\n\r\n");
    CHECK(r.status == 400);
    CHECK(r.reason == "a method override (the request line's method is the method)");
  }
  CHECK(check("POST / HTTP/1.1\r\nHost: h\r\nX-HTTP-Method-Overrides: x\r\n\r\n").status == 0);
  // The line's own method changes nothing.
  CHECK(check("POST / HTTP/1.1\r\nHost: h\r\nX-HTTP-Method-Override: POST\r\n\r\n").status == 0);
}

TEST_CASE("a method override in the query is refused: Symfony, Laravel and ASP.NET MVC run it") {
  for (const char* query : {"_method=DELETE", "a=1&_method=PUT", "_m%65thod=PUT", ".method=PUT",
                            "+_method=PUT", "_method%5B%5D=PUT", "x=1;_method=PATCH", "_METHOD=PUT",
                            "X-HTTP-Method-Override=DELETE", "x-http-method-override=DELETE",
                            "a=1&X-HTTP-METHOD-OVERRIDE=PUT", "X-HTTP-M%65thod-Override=PUT"}) {
    CAPTURE(query);
    const auto r = check("POST /items/1?" + std::string(query) + " HTTP/1.1\r\nHost: h\r\n\r\n");
    CHECK(r.status == 400);
    CHECK(r.reason == "a method override (the request line's method is the method)");
  }
  for (const char* query : {"method=x", "_methods=x", "a_method=x", "q=_method", "Method=x",
                            "X-HTTP-Method=x", "q=X-HTTP-Method-Override"}) {
    CAPTURE(query);
    CHECK(check("POST /items/1?" + std::string(query) + " HTTP/1.1\r\nHost: h\r\n\r\n").status ==
          0);
  }
}

TEST_CASE("Host: exactly one, required in HTTP/1.1; an absolute-form authority replaces it") {
  CHECK(check("GET / HTTP/1.1\r\n\r\n").status == 400);
  CHECK(check("GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n").status == 400);
  CHECK(check("GET / HTTP/1.1\r\nHost: a, b\r\n\r\n").status == 400);
  CHECK(check("GET / HTTP/1.1\r\nHost: a b\r\n\r\n").status == 400);
  CHECK(check("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n").status == 400);
  // Empty: it would go upstream as no Host at all, unless an absolute-form authority stands in.
  CHECK(check("GET / HTTP/1.1\r\nHost: \r\n\r\n").status == 400);
  CHECK(check("GET http://a.example/ HTTP/1.1\r\nHost: \r\n\r\n").status == 0);
  CHECK(check("GET / HTTP/1.0\r\n\r\n").status == 0);
  auto v = check("GET / HTTP/1.1\r\nHost: api.example:8080\r\n\r\n");
  CHECK(v.host == "api.example:8080");
  v = check("GET http://a.example/x?y HTTP/1.1\r\nHost: b.example\r\n\r\n");
  CHECK(v.status == 0);
  CHECK(v.host == "a.example");
  CHECK(v.target == "/x?y");
  // RFC 9112 §3.2: HTTP/1.1 needs Host whatever the target's form; in HTTP/1.0 the
  // authority serves as Host.
  CHECK(check("GET http://a.example/x HTTP/1.1\r\n\r\n").status == 400);
  v = check("GET http://a.example/x HTTP/1.0\r\n\r\n");
  CHECK(v.status == 0);
  CHECK(v.host == "a.example");
}

TEST_CASE("Connection cannot strip a field the upstream must get") {
  // Identity reads X_API_Key as X-API-Key: Connection may not drop either spelling.
  for (const char* token : {"Host", "content-length", "Transfer-Encoding", "Authorization",
                            "X-API-Key", "x-user-id", "X_API_Key", "x_user-ID"}) {
    CAPTURE(token);
    CHECK(check(std::string("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, ") + token +
                "\r\n\r\n")
              .status == 400);
  }
  CHECK(check("GET / HTTP/1.1\r\nHost: h\r\nConnection: keep-alive, X-Hop\r\n\r\n").status == 0);
}

TEST_CASE("the target is made canonical, or refused") {
  auto v = check("GET /API//x/../search?q=1 HTTP/1.1\r\nHost: h\r\n\r\n");
  CHECK(v.status == 0);
  CHECK(v.target == "/API/search?q=1");
  CHECK(check("GET /api%2Fsearch HTTP/1.1\r\nHost: h\r\n\r\n").status == 400);
  CHECK(check("GET /a\\b HTTP/1.1\r\nHost: h\r\n\r\n").status != 0);
}
