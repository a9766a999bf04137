// Hostile clients on raw sockets (STYLE 12): each row the bytes sent, the status the gateway
// answers and exactly what the upstream received. DESIGN §5a.

#include <doctest/doctest.h>

#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/raw_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

const std::string k_config = R"(
server:
  threads: 1
  max_header_bytes: 1024
  header_timeout: 2s
  body_timeout: 2s
identity:
  unknown_api_key: allow
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: internal
    match: { host: internal.example }
    upstream: api
    limits:
      - { name: once, rate: 1/m, burst: 1 }
  - name: search
    match: { path_prefix: /api/search, methods: [GET] }
    upstream: api
    limits:
      - { name: three, rate: 1/m, burst: 3 }
  - name: exact
    match: { path_exact: /api/exact }
    upstream: api
    limits:
      - { name: three, rate: 1/m, burst: 3 }
  - name: open
    match: { path_prefix: / }
    upstream: api
)";

/// A body timeout too long for a test to wait for: what answers in time is not the timeout.
const std::string k_long_body_timeout = R"(
server:
  threads: 1
  body_timeout: 30s
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: limited
    match: { path_prefix: /limited }
    upstream: api
    limits:
      - { name: none, rate: 1/m, burst: 1 }
  - name: open
    match: { path_prefix: / }
    upstream: api
)";

/// Records every request it receives and answers each with 200 "ok".
class recording_upstream {
 public:
  recording_upstream()
      : upstream_([this](raw_upstream::connection& c) {
          for (;;) {
            raw_request r = c.read_request();
            if (!r.ok) {
              return;
            }
            {
              std::lock_guard lock(mutex_);
              received_.push_back(r);
            }
            if (!c.write(raw_response("ok"))) {
              return;
            }
          }
        }) {}

  std::uint16_t port() const { return upstream_.port(); }
  std::vector<raw_request> received() {
    std::lock_guard lock(mutex_);
    return received_;
  }

 private:
  std::mutex mutex_;
  std::vector<raw_request> received_;
  raw_upstream upstream_;
};

/// Sends `bytes` on a new connection; the status of the first reply (0: none) and whether the
/// gateway then closed the connection.
struct answer {
  unsigned status = 0;
  bool closed = false;
};
answer send(std::uint16_t port, const std::string& bytes) {
  http_client client(port, 2s);
  client.send_raw(bytes);
  answer a;
  a.status = client.read_reply().status;
  a.closed = client.closed_by_peer();
  return a;
}

/// The status of `count` GETs of `target` on one connection, as "200 200 429".
std::string statuses(std::uint16_t port, const std::string& method, const std::string& target,
                     int count) {
  http_client client(port, 2s);
  std::string out;
  for (int i = 0; i < count; ++i) {
    out += (out.empty() ? "" : " ") + std::to_string(client.request(method, target).status);
  }
  return out;
}

/// Each of `refused`, as the chunked body of a POST, gets 400 and a closed connection and
/// reaches no upstream; then `taken` is served, and the upstream gets `forwarded` as its body.
void check_chunked_bodies(std::uint16_t port, recording_upstream& upstream,
                          std::initializer_list<std::string> refused, const std::string& taken,
                          const std::string& forwarded) {
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (const std::string& body : refused) {
    CAPTURE(body);
    const answer a = send(port, head + body);
    CHECK(a.status == 400);
    CHECK(a.closed);
  }
  CHECK(upstream.received().empty());
  http_client client(port, 5s);
  client.send_raw(head + taken);
  CHECK(client.read_reply().status == 200);
  REQUIRE(upstream.received().size() == 1);
  CHECK(upstream.received()[0].body == forwarded);
}

}  // namespace

TEST_CASE("framing that another parser could read differently: refused, nothing forwarded") {
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  struct row {
    std::string name;
    std::string bytes;
    unsigned status;
  };
  static constexpr char k_nul[] = "GET /x HTTP/1.1\r\nHost: h\r\nX-A: a\0b\r\n\r\n";
  const std::string body = "5\r\nhello\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: h\r\n\r\n";
  const row rows[] = {
      {"chunked, identity",
       "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, identity"
       "\r\n\r\n" +
           body,
       400},
      {"xchunked", "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: xchunked\r\n\r\n" + body,
       400},
      {"quoted", "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \"chunked\"\r\n\r\n" + body,
       400},
      {"twice", "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked, chunked\r\n\r\n" + body,
       400},
      {"gzip, chunked",
       "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: gzip, chunked\r\n\r\n" + body, 501},
      {"HTTP/1.0", "POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n" + body, 400},
      {"CL and TE",
       "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n"
       "Transfer-Encoding: chunked\r\n\r\n" +
           body,
       400},
      {"two lengths",
       "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 6\r\n"
       "\r\nhello!",
       400},
      {"an empty Transfer-Encoding beside Content-Length",
       "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: \r\nContent-Length: 3\r\n\r\nabc", 400},
      {"a lower-case method", "post /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi", 400},
      {"no Host", "GET /x HTTP/1.1\r\n\r\n", 400},
      {"two Hosts", "GET /x HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"Host list", "GET /x HTTP/1.1\r\nHost: a, b\r\n\r\n", 400},
      {"an empty Host", "GET /x HTTP/1.1\r\nHost:\r\n\r\n", 400},
      {"an empty Host, HTTP/1.0", "GET /x HTTP/1.0\r\nHost: \r\n\r\n", 400},
      {"Connection: Host", "GET /x HTTP/1.1\r\nHost: h\r\nConnection: Host\r\n\r\n", 400},
      {"Connection: Content-Length",
       "POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n"
       "Connection: Content-Length\r\n\r\nhi",
       400},
      {"obs-fold", "GET /x HTTP/1.1\r\nHost: h\r\nX-A: a\r\n b\r\n\r\n", 400},
      {"bare LF", "GET /x HTTP/1.1\nHost: h\n\n", 400},
      {"NUL", std::string(k_nul, sizeof k_nul - 1), 400},
  };
  for (const auto& r : rows) {
    CAPTURE(r.name);
    answer a = send(gw.port(), r.bytes);
    CHECK(a.status == r.status);
    CHECK(a.closed);
  }
  CHECK(upstream.received().empty());
}

TEST_CASE("targets with bytes outside RFC 3986: 400") {
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  for (std::string target : {"/a\"b", "/a<b", "/a>b", "/a\\b", "/a^b", "/a`b", "/a{b", "/a|b",
                             "/a}b", "/a#b", "/caf\xc3\xa9", "/a\x01", "/%zz", "*"}) {
    CAPTURE(target);
    answer a = send(gw.port(), "GET " + target + " HTTP/1.1\r\nHost: h\r\n\r\n");
    CHECK(a.status == 400);
  }
  CHECK(upstream.received().empty());
}

TEST_CASE("max_header_bytes bounds the whole head exactly") {
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());  // max_header_bytes: 1024
  const std::string start = "GET /x HTTP/1.1\r\nHost: h\r\nX-Pad: ";
  const std::size_t pad = 1024 - start.size() - 4;  // "\r\n\r\n" ends the head
  CHECK(send(gw.port(), start + std::string(pad, 'p') + "\r\n\r\n").status == 200);
  CHECK(send(gw.port(), start + std::string(pad + 1, 'p') + "\r\n\r\n").status == 431);
  // A long request line counts too.
  const std::string long_line = "GET /" + std::string(1000, 'a') + " HTTP/1.1\r\nHost: h\r\n";
  CHECK(send(gw.port(), long_line + "X-B: " + std::string(100, 'b') + "\r\n\r\n").status == 431);
}

TEST_CASE("a request line that does not end within max_header_bytes: 414, not 431") {
  // RFC 9112 §3: a server MUST answer 414 to a request-target longer than it will parse (nginx
  // does). A line that ends within the bound and fields past it stay 431.
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());  // max_header_bytes: 1024
  const std::string long_target = "/" + std::string(1100, 'a');
  SUBCASE("whole, in pieces, after empty lines") {
    CHECK(send(gw.port(), "GET " + long_target + " HTTP/1.1\r\nHost: h\r\n\r\n").status == 414);
    {
      http_client client(gw.port(), 2s);
      client.send_raw("GET " + long_target.substr(0, 500));
      std::this_thread::sleep_for(30ms);
      client.send_raw(long_target.substr(500) + " HTTP/1.1\r\nHost: h\r\n\r\n");
      const http_reply r = client.read_reply();
      CHECK(r.status == 414);
      CHECK(r.body.find("request target too long") != std::string::npos);
      CHECK(client.closed_by_peer());
    }
    CHECK(send(gw.port(), "\r\n\r\nGET " + long_target).status == 414);
    // The line ends just past the bound: still the line's fault.
    const std::string line = "GET /" + std::string(1024 - 15, 'a') + " HTTP/1.1";
    CHECK(send(gw.port(), line + "\r\nHost: h\r\n\r\n").status == 414);
    CHECK(send(gw.port(), line.substr(1) + "\r\nHost: h\r\n\r\n").status == 431);
  }
  SUBCASE("a HEAD gets the head alone") {
    http_client client(gw.port(), 2s);
    client.send_raw("HEAD " + long_target + " HTTP/1.1\r\nHost: h\r\n\r\n");
    const std::string received = client.read_until_closed();
    CHECK(received.starts_with("HTTP/1.1 414 "));
    CHECK(received.ends_with("\r\n\r\n"));  // no body after the head
  }
  CHECK(upstream.received().empty());
}

TEST_CASE("a head in pieces: parsed across reads, bounded by max_header_bytes as a whole") {
  // The first read parses without suspending; the rest of the head comes in later reads.
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());  // max_header_bytes: 1024
  const std::string start = "GET /x HTTP/1.1\r\nHost: h\r\nX-Pad: ";
  const std::size_t pad = 1024 - start.size() - 4;
  auto in_pieces = [&](const std::string& head) {
    http_client client(gw.port(), 2s);
    const std::size_t cut1 = 7;  // inside the request line
    const std::size_t cut2 = start.size() + 300;
    client.send_raw(head.substr(0, cut1));
    std::this_thread::sleep_for(30ms);
    client.send_raw(head.substr(cut1, cut2 - cut1));
    std::this_thread::sleep_for(30ms);
    client.send_raw(head.substr(cut2));
    return client.read_reply().status;
  };
  CHECK(in_pieces(start + std::string(pad, 'p') + "\r\n\r\n") == 200);
  CHECK(in_pieces(start + std::string(pad + 1, 'p') + "\r\n\r\n") == 431);
  CHECK(upstream.received().size() == 1);
}

TEST_CASE("a head cut after whole field lines: bounded as a whole, an early obs-fold refused") {
  // Beast takes the start line and each complete field line as soon as they are there: a
  // piece that ends just into the next field line leaves the lines before it parsed, in an
  // earlier read than the one that ends the head. The bound and the obs-fold check count them.
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());  // max_header_bytes: 1024
  auto head_of = [](std::size_t total) {
    std::string head = "GET /x HTTP/1.1\r\nHost: h\r\n";
    while (head.size() + 100 + 4 <= total) {
      head += "X-F" + std::to_string(head.size()) + ": ";
      head += std::string(100 - 7 - std::to_string(head.size()).size(), 'v') + "\r\n";
    }
    head += "X-Last: " + std::string(total - head.size() - 8 - 4, 'l') + "\r\n\r\n";
    REQUIRE(head.size() == total);
    return head;
  };
  // Pieces that each end one byte into a field line.
  auto in_pieces = [&](const std::string& head, int pieces) {
    http_client client(gw.port(), 2s);
    std::size_t at = 0;
    for (int i = 1; i < pieces; ++i) {
      const std::size_t line = head.find("\r\nX-", head.size() * i / pieces);
      REQUIRE(line != std::string::npos);
      const std::size_t cut = line + 3;
      client.send_raw(head.substr(at, cut - at));
      at = cut;
      std::this_thread::sleep_for(30ms);
    }
    client.send_raw(head.substr(at));
    return client.read_reply().status;
  };
  CHECK(in_pieces(head_of(1024), 3) == 200);
  CHECK(in_pieces(head_of(1025), 3) == 431);
  CHECK(in_pieces(head_of(3000), 3) == 431);
  CHECK(in_pieces(head_of(1025), 8) == 431);
  const std::string folded = "GET /fold HTTP/1.1\r\nHost: h\r\nX-A: 1\r\n folded\r\nX-B: 2\r\n\r\n";
  CHECK(in_pieces(folded, 2) == 400);
  CHECK(upstream.received().size() == 1);
}

TEST_CASE("an absolute-form target: its authority routes and is forwarded as Host") {
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  const std::string sent = "GET http://internal.example/x/../y?z HTTP/1.1\r\nHost: public\r\n\r\n";
  CHECK(send(gw.port(), sent).status == 200);
  CHECK(send(gw.port(), sent).status == 429);  // the internal route's limit, not the open route's
  auto received = upstream.received();
  REQUIRE(received.size() == 1);
  CHECK(received[0].method == "GET");
  CHECK(received[0].target == "/y?z");
  CHECK(received[0].header("host") == "internal.example");
  CHECK(received[0].head.find("public") == std::string::npos);
  // RFC 9112 §3.2: an HTTP/1.1 request without Host is a 400 whatever its target's form; an
  // HTTP/1.0 one is routed by the target's authority.
  const answer no_host = send(gw.port(), "GET http://internal.example/y HTTP/1.1\r\n\r\n");
  CHECK(no_host.status == 400);
  CHECK(no_host.closed);
  CHECK(send(gw.port(), "GET http://public.example/y HTTP/1.0\r\n\r\n").status == 200);
  received = upstream.received();
  REQUIRE(received.size() == 2);
  CHECK(received[1].header("host") == "public.example");
}

TEST_CASE("a Host with an empty label is refused, not routed around its host's limit") {
  recording_upstream upstream;
  gateway_harness gw(k_config, upstream.port());
  CHECK(send(gw.port(), "GET /x HTTP/1.1\r\nHost: internal.example.\r\n\r\n").status == 200);
  // The internal route's one request is spent: its host, however written, gets 429.
  CHECK(send(gw.port(), "GET /x HTTP/1.1\r\nHost: Internal.Example:80\r\n\r\n").status == 429);
  for (const std::string host : {"internal.example..", "internal..example", ".", "..",
                                 ".internal.example", ".internal.example.:80"}) {
    CAPTURE(host);
    const answer a = send(gw.port(), "GET /x HTTP/1.1\r\nHost: " + host + "\r\n\r\n");
    CHECK(a.status == 400);
    CHECK(a.closed);
    CHECK(send(gw.port(), "GET http://" + host + "/x HTTP/1.1\r\nHost: a\r\n\r\n").status == 400);
  }
  CHECK(upstream.received().size() == 1);
}

TEST_CASE("one meaning for every path: each way around a limited route is closed") {
  recording_upstream upstream;
  struct row {
    std::string name;
    std::string method;
    std::string target;
    std::string paths;      // server.paths options that close it ("" = the defaults)
    std::string expected;   // statuses of 4 requests
    std::string forwarded;  // the target the upstream got ("" = nothing forwarded)
  };
  const row rows[] = {
      {"case", "GET", "/API/search", "{ case_insensitive: true }", "200 200 200 429",
       "/API/search"},
      {"escaped slash", "GET", "/api%2Fsearch", "", "400", ""},
      {"escaped slash decoded", "GET", "/api%2Fsearch", "{ escaped_slashes: decode }",
       "200 200 200 429", "/api/search"},
      {"dot-dot behind an escaped slash", "GET", "/x/..%2Fapi/search", "", "400", ""},
      {"dot-dot behind an escaped slash, decoded", "GET", "/x/..%2Fapi/search",
       "{ escaped_slashes: decode }", "200 200 200 429", "/api/search"},
      {"semicolon", "GET", "/api;/search", "{ semicolons: strip_params }", "200 200 200 429",
       "/api/search"},
      {"semicolon refused", "GET", "/api;/search", "{ semicolons: reject }", "400", ""},
      {"backslash", "GET", "/api\\search", "", "400", ""},
      {"trailing slash on an exact route", "GET", "/api/exact/", "", "200 200 200 429",
       "/api/exact/"},
      {"HEAD on a GET route", "HEAD", "/api/search", "", "200 200 200 429", "/api/search"},
      {"dot segments and slashes", "GET", "//api/./x/../search", "", "200 200 200 429",
       "/api/search"},
      {"encoded unreserved", "GET", "/api/%73earch", "", "200 200 200 429", "/api/search"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.name);
    std::string yaml = k_config;
    if (!r.paths.empty()) {
      yaml = replace_all(yaml, "  max_header_bytes: 1024\n",
                         "  max_header_bytes: 1024\n  paths: " + r.paths + "\n");
    }
    gateway_harness gw(yaml, upstream.port());
    const auto before = upstream.received().size();
    const int count = r.expected == "400" ? 1 : 4;
    CHECK(statuses(gw.port(), r.method, r.target, count) == r.expected);
    auto received = upstream.received();
    if (r.forwarded.empty()) {
      CHECK(received.size() == before);
    } else {
      REQUIRE(received.size() == before + 3);
      CHECK(received.back().target == r.forwarded);
      CHECK(received.back().method == r.method);
    }
  }
}

TEST_CASE("a chunk line that ends in a bare LF or in an open quoted string: 400 at once") {
  // Beast looks only for CRLF, and reads a quoted string on past it: such a line waited for
  // body_timeout (408) or the 64 KiB bound. Nothing is forwarded.
  recording_upstream upstream;
  gateway_harness gw(k_long_body_timeout, upstream.port());
  check_chunked_bodies(
      gw.port(), upstream,
      {"5\nhello\n0\n\n", "5\r\nhello\r\n0\n\n", "5\r\nhello\n0\r\n\r\n",
       "5;ext=1\nhello\r\n0\r\n\r\n",
       // after the last chunk: a trailer line, or the empty line that ends the body
       "5\r\nhello\r\n0\r\nX-T: 1\n\r\n", "5\r\nhello\r\n0\r\n\n", "0\r\nX-T: 1\r\n\n",
       "00;e=1\r\nX-T: 1\r\nX-U: 2\n\r\n",
       // a quoted string still open at the line's end (a quoted string holds no CR or LF)
       "5;foo=\"abc\r\nhello\r\n0\r\n\r\n", "5;foo=\"abc\r\n", "5;a=b;c=\"\r\nx\r\n"},
      // A body's own LF is content, not a line end.
      "3\r\na\nb\r\n1\r\n\n\r\n0\r\nX-T: 1\r\n\r\n", "a\nb\n");
}

TEST_CASE("a control byte in a chunk extension, quoted or not: 400, nothing forwarded") {
  // Beast takes any byte in a quoted extension value; nginx would end the line at the LF.
  recording_upstream upstream;
  gateway_harness gw(k_long_body_timeout, upstream.port());
  const std::string nul(1, '\0');
  check_chunked_bodies(
      gw.port(), upstream,
      {"5;a=\"x\ny\"\r\nhello\r\n0\r\n\r\n", "5;a=\"x" + nul + "y\"\r\nhello\r\n0\r\n\r\n",
       "5;a=\"x\x7fy\"\r\nhello\r\n0\r\n\r\n", "0;a=\"\n\"\r\n\r\n",
       "5;a=\"\\\x01\"\r\nhello\r\n0\r\n\r\n"},
      // HTAB, a quoted-pair and obs-text are a quoted value's own.
      "5;a=\"x\ty\\\"z\xe9\";b=c\r\nhello\r\n0;d=\"\"\r\n\r\n", "hello");
}

TEST_CASE("a HEAD the gateway answers itself gets the head alone, and the connection goes on") {
  // RFC 9110 §9.3.2: a body after the head of a HEAD's answer would be read as the start of
  // the next response on the connection.
  recording_upstream upstream;
  gateway_harness gw(R"(
server:
  threads: 1
upstreams:
  api: { targets: [${UPSTREAM}] }
  gone: { targets: [127.0.0.1:1] }
routes:
  - name: limited
    match: { path_prefix: /limited }
    upstream: api
    limits:
      - { name: once, rate: 1/m, burst: 1 }
  - name: gone
    match: { path_prefix: /gone }
    upstream: gone
  - name: open
    match: { path_prefix: /open }
    upstream: api
)",
                     upstream.port());
  http_client client(gw.port());
  REQUIRE(client.get("/limited").status == 200);  // the limit's one request
  const struct {
    const char* target;
    unsigned status;
  } answers[] = {{"/nowhere", 404}, {"/limited", 429}, {"/gone", 502}};
  for (const auto& a : answers) {
    CAPTURE(a.target);
    const http_reply head = client.request("HEAD", a.target);
    CHECK(head.status == a.status);
    CHECK(head.body.empty());
    CHECK(head.keep_alive);
    CHECK(std::stoul(head.header("content-length")) > 0);  // what a GET would get
    const http_reply next = client.get("/open");
    CHECK(next.status == 200);
    CHECK(next.body == "ok");
  }
}

TEST_CASE("a chunk line or trailer that never ends: 400 once 64 KiB of it wait, never held") {
  // Beast takes a chunk's size line and a trailer only whole and bounds neither: without a
  // bound, each such request holds as much memory as the client sends. The body timeout is
  // long here, so only the bound can answer in time. Neither is a head's field section: a 400,
  // as HAProxy answers what does not fit its buffer (it was a 431).
  recording_upstream upstream;
  gateway_harness gw(k_long_body_timeout, upstream.port());
  const std::string head = "POST /x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  const std::string endless(1024 * 1024, 'a');
  SUBCASE("a chunk extension, a trailer field") {
    for (const std::string& body : {"1;" + endless, "2\r\nok\r\n0\r\nX-Trailer: " + endless}) {
      http_client client(gw.port(), 5s);
      client.send_raw(head + body);
      CHECK(client.read_reply().status == 400);
      CHECK(client.closed_by_peer());
    }
    CHECK(upstream.received().empty());
  }
  SUBCASE("a whole chunk extension or trailer field past 64 KiB, in as few reads as may be") {
    // A trailer field came whole before the 64 KiB bound could be checked, and Beast threw:
    // the connection was dropped without an answer. A chunk extension that one read completed
    // past the bound was taken.
    for (const std::size_t size : {66'000, 70'000, 99'000}) {
      for (const std::string& body :
           {"2;" + std::string(size, 'e') + "\r\nok\r\n0\r\n\r\n",
            "2\r\nok\r\n0\r\nX-Trailer: " + std::string(size, 'a') + "\r\n\r\n"}) {
        CAPTURE(size);
        http_client client(gw.port(), 5s);
        client.send_raw(head + body);
        CHECK(client.read_reply().status == 400);
        CHECK(client.closed_by_peer());
      }
    }
    CHECK(upstream.received().empty());
  }
  SUBCASE("a chunk extension after a 429: the body is not read on") {
    REQUIRE(statuses(gw.port(), "GET", "/limited", 1) == "200");
    http_client client(gw.port(), 5s);
    client.send_raw("POST /limited HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n1;" +
                    endless);
    CHECK(client.read_reply().status == 429);
    CHECK(client.closed_by_peer());          // at once, not after body_timeout
    CHECK(upstream.received().size() == 1);  // the limited route's first request
  }
}

TEST_CASE("Connection: close in any of several Connection lines closes after the answer") {
  // Beast's head keeps only the first line's reading: `close` in the second was missed, and a
  // request pipelined after it was served on a connection the client had asked to end.
  recording_upstream upstream;
  gateway_harness gw(k_long_body_timeout, upstream.port());
  // HTTP/1.0 too, where Beast's parser let a `keep-alive` beside the `close` outweigh it.
  for (const std::string version_and_lines :
       {"HTTP/1.1\r\nConnection: foo\r\nConnection: close",
        "HTTP/1.0\r\nConnection: close\r\n"
        "Connection: keep-alive",
        "HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close",
        "HTTP/1.0\r\nConnection: keep-alive, close"}) {
    for (const std::string target : {"/forwarded", "/limited"}) {
      CAPTURE(version_and_lines);
      CAPTURE(target);
      http_client spent(gw.port(), 5s);
      CHECK(spent.get("/limited").status != 0);  // /limited's one request is taken: then 429
      http_client client(gw.port(), 5s);
      client.send_raw("GET " + target + " " + version_and_lines +
                      "\r\nHost: x\r\n\r\nGET /after-close HTTP/1.1\r\nHost: x\r\n\r\n");
      const auto reply = client.read_reply();
      CHECK(reply.status == (target == "/limited" ? 429 : 200));
      CHECK_FALSE(reply.keep_alive);
      CHECK(client.closed_by_peer());
    }
  }
  for (const auto& r : upstream.received()) {
    CHECK(r.target != "/after-close");
  }
}
