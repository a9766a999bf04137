// The trace formats of `ratewall simulate`: detection, each format's fields, and the hostile
// lines a real log holds.

#include "ratewall/sim/trace.hpp"

#include <doctest/doctest.h>

#include <deque>
#include <sstream>
#include <string>

#include "ratewall/admin/access_log.hpp"
#include "ratewall/http/identity.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

struct read_result {
  trace t;
  std::string warnings;
};

// A trace's views point into its text: the texts of the tests live as long as the process.
std::string_view kept(std::string text) {
  static std::deque<std::string> texts;
  return texts.emplace_back(std::move(text));
}

read_result read(const std::string& text, trace_format format) {
  std::ostringstream warnings;
  read_result r{read_trace(kept(text), "t.log", format, warnings), {}};
  r.warnings = warnings.str();
  return r;
}

// The one problem reported for a single malformed line after a good one, or "" when the line
// was read.
std::string problem_of(const std::string& good, const std::string& line, trace_format format) {
  // Two good lines keep the malformed one from outnumbering them.
  read_result r = read(good + "\n" + good + "\n" + line + "\n", format);
  if (r.t.bad_lines == 0) {
    return "";
  }
  CHECK(r.t.requests.size() == 2);
  auto first = r.warnings.find('\n');
  return r.warnings.substr(0, first);
}

const std::string k_nginx_good =
    R"(203.0.113.9 - alice [10/Oct/2000:13:55:36 -0700] "GET /api/x?q=1 HTTP/1.1" 200 2326 )"
    R"x("http://example.com/start" "Mozilla/4.08 [en] (Win98; I ;Nav)")x";

const std::string k_access_good =
    R"({"time":"2024-05-01T12:00:00.123Z","request_id":"6f0c","method":"GET",)"
    R"("path":"/api/search","host":"api.example.com","route":"search",)"
    R"("subject":"3f2a9c1b0d4e5f60","plan":"premium","key":"k1","client":"9b1c0a7d3e2f4a65",)"
    R"("user_agent":"curl/8.1","decision":"allowed","limit":null,"status":200,)"
    R"("upstream":"10.0.0.5:8000","upstream_ms":12.345,"duration_ms":13.002,"bytes_in":0,)"
    R"("bytes_out":1234})";

}  // namespace

TEST_CASE("trace format: detected from the first line that is not empty") {
  CHECK(detect_trace_format("time_s,method,path,api_key,user,ip\n") == trace_format::csv);
  CHECK(detect_trace_format("0,GET,/a,,,1.2.3.4\n") == trace_format::csv);
  CHECK(detect_trace_format("# comment\n{\"time\":1}\n") == trace_format::csv);
  CHECK(detect_trace_format("\n  \n" + k_access_good + "\n") == trace_format::access_log);
  CHECK(detect_trace_format("\r\n" + k_nginx_good + "\r\n") == trace_format::nginx);
  CHECK(detect_trace_format("2001:db8::1 - - [10/Oct/2000:13:55:36 -0700] \"GET / HTTP/1.1\"") ==
        trace_format::nginx);
  // An address followed by something else is not nginx.
  CHECK(detect_trace_format("1.2.3.4 x y [10/Oct/2000:13:55:36 -0700]") == trace_format::csv);
  CHECK(detect_trace_format("") == trace_format::csv);
  CHECK(parse_trace_format("access-log") == trace_format::access_log);
  CHECK(parse_trace_format("nginx") == trace_format::nginx);
  CHECK(parse_trace_format("csv") == trace_format::csv);
  CHECK_FALSE(parse_trace_format("json"));
}

TEST_CASE("nginx: address, user, time with its zone, method and target") {
  read_result r = read(k_nginx_good + "\n" +
                           R"(198.51.100.2 - - [10/Oct/2000:20:55:37 +0000] "POST /up HTTP/2.0" )"
                           R"(201 - "-" "-")" +
                           "\n",
                       trace_format::nginx);
  REQUIRE(r.t.requests.size() == 2);
  CHECK(r.warnings.empty());
  const trace_request& a = r.t.requests[0];
  CHECK(a.ip == "203.0.113.9");
  CHECK(a.user == "alice");
  CHECK(a.method == "GET");
  CHECK(a.path == "/api/x?q=1");
  CHECK(a.time == 0ns);
  CHECK(a.line == 1);
  const trace_request& b = r.t.requests[1];
  CHECK(b.user.empty());
  CHECK(b.method == "POST");
  CHECK(b.path == "/up");
  // 13:55:36 at -07:00 is 20:55:36 UTC: one second before the second line.
  CHECK(b.time == 1s);
}

TEST_CASE("nginx: escaped quotes and bytes in the request and the user agent") {
  read_result r =
      read(R"(192.0.2.1 - - [01/Jan/2024:00:00:00 +0000] "GET /a\x22b\x5Cc%20 HTTP/1.1" 200 0 )"
           R"("-" "agent \"quoted\" \\ end")",
           trace_format::nginx);
  REQUIRE(r.t.requests.size() == 1);
  CHECK(r.t.requests[0].path == "/a\"b\\c%20");
}

TEST_CASE("nginx: the hostile table, each line skipped with its file:line and problem") {
  const std::string t = "[10/Oct/2000:13:55:36 -0700]";
  struct row {
    std::string line;
    std::string problem;
  };
  const row rows[] = {
      {"203.0.113.9 - - " + t + R"( "GET /a HTT)", "t.log:3: unterminated quoted field"},
      {"203.0.113.9 - - " + t, "t.log:3: expected a double-quoted field"},
      {"203.0.113.9 - - [10/Foo/2000:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: time_local: expected 10/Oct/2000:13:55:36 -0700"},
      {"203.0.113.9 - - [10/Oct/2000:13:55:36 -07] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: time_local: expected 10/Oct/2000:13:55:36 -0700"},
      {"203.0.113.9 - - [10/Oct/2000:25:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: time_local: expected 10/Oct/2000:13:55:36 -0700"},
      // Dates that are no dates: 31 February, a year whose nanoseconds overflow 64 bits.
      {"203.0.113.9 - - [31/Feb/2024:13:55:36 -0700] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: time_local: expected 10/Oct/2000:13:55:36 -0700"},
      {"203.0.113.9 - - [24/Jun/9861:18:16:00 +0000] \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: time_local: expected 10/Oct/2000:13:55:36 -0700"},
      {"203.0.113.9 - - [10/Oct/2000:13:55:36 -0700 \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: expected [time_local]"},
      {"203.0.113.9 - - " + t + " \"-\" 400 0 \"-\" \"-\"",
       "t.log:3: request: expected \"METHOD /target HTTP/x.y\""},
      {"203.0.113.9 - - " + t + R"( "\x16\x03\x01" 400 0 "-" "-")",
       "t.log:3: request: expected \"METHOD /target HTTP/x.y\""},
      {"203.0.113.9 - - " + t + " \"GET nowhere HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: request: expected \"METHOD /target HTTP/x.y\""},
      {"203.0.113.9 - - " + t + " \"GET / HTTP/1.1\" ok 1 \"-\" \"-\"",
       "t.log:3: expected the status and the body bytes after the request"},
      {"203.0.113.9 - - " + t + " \"GET /\\xZZ HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: bad \\x escape"},
      {"localhost - - " + t + " \"GET / HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: remote_addr: expected an IPv4 or IPv6 address"},
      {"203.0.113.9 - - " + t + " \"GET /" + std::string(70'000, 'a') +
           " HTTP/1.1\" 200 1 \"-\" \"-\"",
       "t.log:3: line longer than 65536 bytes (line skipped)"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.line.substr(0, 120));
    std::string problem = problem_of(k_nginx_good, r.line, trace_format::nginx);
    CHECK(problem.starts_with(r.problem));
  }
}

TEST_CASE("access log: reads the lines the gateway's own writer formats") {
  access_record rec;
  rec.time =
      std::chrono::system_clock::time_point(1'714'564'800'123ms);  // 2024-05-01T12:00:00.123Z
  rec.request_id = "r1";
  rec.method = "POST";
  rec.target = "/api/\"quoted\"/\xc3\xa9?q=secret";
  rec.route = "search";
  rec.subject = "key:0123456789abcdef";
  rec.plan = "premium";
  rec.key = "alice";
  rec.client = "192.0.2.7";
  rec.status = 200;
  rec.cost = 7;
  std::string text;
  format_access_line(text, rec, "gateway-secret", client_address_log::raw);
  rec.time += 1500ms;
  rec.subject = "";
  rec.plan = "";
  rec.key = "";
  rec.cost.reset();
  format_access_line(text, rec, "gateway-secret", client_address_log::hashed);

  read_result r = read(text, trace_format::access_log);
  REQUIRE(r.t.requests.size() == 2);
  CHECK(r.warnings.empty());
  const trace_request& a = r.t.requests[0];
  CHECK(a.logged_identity);
  CHECK(a.time == 0ns);
  CHECK(a.method == "POST");
  CHECK(a.path == "/api/\"quoted\"/\xc3\xa9");  // the log cuts the query off
  CHECK(a.subject == subject_hash("key:0123456789abcdef", "gateway-secret"));
  CHECK(a.plan == "premium");
  CHECK(a.key_name == "alice");
  CHECK(a.ip == "192.0.2.7");  // client_address: raw
  CHECK(a.cost == 7u);
  const trace_request& b = r.t.requests[1];
  CHECK(b.time == 1500ms);
  CHECK(b.subject.empty());
  CHECK(b.ip.empty());  // hashed: no address to replay
  CHECK_FALSE(b.cost);
}

TEST_CASE("access log: JSON escapes are undone, times in any RFC 3339 offset") {
  read_result r = read(
      R"({"time":"2024-05-01T14:00:00.5+02:00","method":"GET","path":"/a\"b\\c\/d\u00e9\ud83d\ude00","subject":"s1"})"
      "\n"
      R"({"time":"2024-05-01T12:00:00Z","method":"GET","path":"/first","subject":null})"
      "\n",
      trace_format::access_log);
  REQUIRE(r.t.requests.size() == 2);
  // Put in time order: 12:00:00Z comes first, 14:00:00.5+02:00 half a second later.
  CHECK(r.t.requests[0].path == "/first");
  CHECK(r.t.requests[1].path == "/a\"b\\c/d\xc3\xa9\xf0\x9f\x98\x80");
  CHECK(r.t.requests[1].time == 500ms);
  CHECK(r.t.requests[1].line == 1);
}

TEST_CASE("access log: the hostile table") {
  struct row {
    std::string line;
    std::string problem;
  };
  const std::string head = R"({"time":"2024-05-01T12:00:00.123Z","method":"GET",)";
  const row rows[] = {
      {"GET /api 200", "t.log:3: expected '{' in JSON"},
      {R"({"time":"2024-05-01T12:00:00.123Z","method":"GET","pa)", "t.log:3: truncated JSON"},
      {head + R"("path":"/a"} trailing)", "t.log:3: text after the JSON object"},
      {head + R"("path":"/a","x":{"nested":1}})", "t.log:3: expected a flat JSON object"},
      {head + R"("path":"/a","x":[1]})", "t.log:3: expected a flat JSON object"},
      {head + R"("path":"/a\q"})", "t.log:3: bad escape in a JSON string"},
      {head + R"("path":"/a\ud800"})", "t.log:3: lone surrogate in a JSON string"},
      {head + R"("path":"/a\u12"})", "t.log:3: bad \\u escape in a JSON string"},
      {head + "\"path\":\"/a\tb\"}", "t.log:3: control character in a JSON string"},
      {R"({"time":"yesterday","method":"GET","path":"/a"})",
       "t.log:3: time: expected 2024-05-01T12:00:00.123Z"},
      {R"({"time":"2024-13-01T12:00:00Z","method":"GET","path":"/a"})",
       "t.log:3: time: expected 2024-05-01T12:00:00.123Z"},
      {R"({"time":"2024-05-01T12:00:00.1234567890Z","method":"GET","path":"/a"})",
       "t.log:3: time: expected 2024-05-01T12:00:00.123Z"},
      {R"({"method":"GET","path":"/a"})", "t.log:3: no \"time\""},
      // A head the gateway could not read: logged, but no request to replay.
      {R"({"time":"2024-05-01T12:00:00.123Z","method":null,"path":null,"status":400})",
       "t.log:3: no request (\"method\" or \"path\" is null or not a path)"},
      {head + R"("path":"/)" + std::string(70'000, 'a') + R"("})",
       "t.log:3: line longer than 65536 bytes"},
  };
  for (const auto& r : rows) {
    CAPTURE(r.line.substr(0, 120));
    CHECK(problem_of(k_access_good, r.line, trace_format::access_log).starts_with(r.problem));
  }
  // A number where a string is expected is ignored, and unknown keys too.
  CHECK(problem_of(k_access_good, head + R"("path":"/a","new_field":true,"status":1e3})",
                   trace_format::access_log)
            .empty());
}

TEST_CASE("logs: malformed lines are counted, the first ten reported, too many refuse the trace") {
  std::string text;
  for (int i = 0; i < 12; ++i) {
    text += k_nginx_good + "\nnot a log line\n";
  }
  read_result r = read(text, trace_format::nginx);
  CHECK(r.t.requests.size() == 12);
  CHECK(r.t.bad_lines == 12);
  std::istringstream lines(r.warnings);
  std::vector<std::string> warnings;
  for (std::string l; std::getline(lines, l);) {
    warnings.push_back(l);
  }
  REQUIRE(warnings.size() == k_reported_bad_lines + 1);
  CHECK(warnings[0] == "t.log:2: remote_addr: expected an IPv4 or IPv6 address (line skipped)");
  CHECK(warnings[9].starts_with("t.log:20: "));
  CHECK(warnings[10] == "t.log: 12 malformed lines skipped");

  std::ostringstream ignored;
  CHECK_THROWS_WITH_AS(read_trace(text + "junk\n", "t.log", trace_format::nginx, ignored),
                       "t.log: more malformed lines than requests as format nginx (--format "
                       "names another)",
                       trace_error);
}

TEST_CASE("logs: lines out of order are replayed in time order, equal times keep their order") {
  auto line = [](const char* time, const char* path) {
    return std::string("192.0.2.1 - - [01/Jan/2024:00:00:") + time + " +0000] \"GET " + path +
           " HTTP/1.1\" 200 0 \"-\" \"-\"\n";
  };
  read_result r = read(line("05", "/c") + line("03", "/a") + line("05", "/d") + line("04", "/b"),
                       trace_format::nginx);
  REQUIRE(r.t.requests.size() == 4);
  CHECK(r.t.requests[0].path == "/a");
  CHECK(r.t.requests[0].time == 0s);
  CHECK(r.t.requests[1].path == "/b");
  CHECK(r.t.requests[1].time == 1s);
  CHECK(r.t.requests[2].path == "/c");
  CHECK(r.t.requests[3].path == "/d");
  CHECK(r.t.requests[3].time == 2s);
  CHECK(r.t.requests[3].line == 3);
}

TEST_CASE("logs: time 0 of a trace is its first line's place on the gateway's clock") {
  // 2024-05-01T12:00:00Z is 4 years and 121 days after the clock's origin (2020-01-01 UTC).
  const read_result r = read(k_access_good, trace_format::access_log);
  REQUIRE(r.t.requests.size() == 1);
  CHECK(r.t.origin == std::chrono::hours(24) * (366 + 365 + 365 + 365 + 121) + 12h + 123ms);
  // A log from before the origin starts at 0; so does CSV.
  CHECK(read(R"(203.0.113.9 - - [10/Oct/2000:13:55:36 -0700] "GET / HTTP/1.1" 200 1 "-" "-")",
             trace_format::nginx)
            .t.origin == 0ns);
  CHECK(read("0,GET,/,,,1.2.3.4\n", trace_format::csv).t.origin == 0ns);
}

TEST_CASE("latency and status: CSV's optional columns, the access log's upstream_ms and status") {
  const read_result csv = read(
      "0,GET,/a,,,192.0.2.1\n"
      "0,GET,/a,,,192.0.2.1,,\n"
      "0,GET,/a,,,192.0.2.1,2,12.5\n"
      "0,GET,/a,,,192.0.2.1,,0.001,503\n"
      "0,GET,/a,,,192.0.2.1,,,200\n",
      trace_format::csv);
  REQUIRE(csv.t.requests.size() == 5);
  CHECK(csv.t.requests[0].latency < nanos{0});
  CHECK(csv.t.requests[0].status == 0);
  CHECK(csv.t.requests[1].latency < nanos{0});
  CHECK(csv.t.requests[2].latency == 12'500us);
  CHECK(csv.t.requests[2].cost == 2u);
  CHECK(csv.t.requests[3].latency == 1us);
  CHECK(csv.t.requests[3].status == 503);
  CHECK(csv.t.requests[4].latency < nanos{0});
  CHECK(csv.t.requests[4].status == 200);

  const read_result log = read(
      R"({"time":"2024-10-10T13:00:00Z","method":"GET","path":"/a","status":200,"upstream_ms":1.250})"
      "\n"
      R"({"time":"2024-10-10T13:00:01Z","method":"GET","path":"/a","status":429,"upstream_ms":null})"
      "\n"
      R"({"time":"2024-10-10T13:00:02Z","method":"GET","path":"/a","status":504,"upstream_ms":"x"})"
      "\n",
      trace_format::access_log);
  REQUIRE(log.t.requests.size() == 3);
  CHECK(log.t.requests[0].latency == 1'250us);
  CHECK(log.t.requests[0].status == 200);
  CHECK(log.t.requests[1].latency < nanos{0});
  CHECK(log.t.requests[1].status == 429);
  CHECK(log.t.requests[2].latency < nanos{0});
  CHECK(log.t.requests[2].status == 504);
}
