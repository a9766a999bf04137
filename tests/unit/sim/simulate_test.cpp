#include "ratewall/sim/simulate.hpp"

#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/sim/report_html.hpp"
#include "ratewall/sim/trace_file.hpp"
#include "support/sim_configs.hpp"
#include "support/temp_dir.hpp"

using namespace ratewall;
using json = nlohmann::json;
using ratewall::test::bucket_config;
using ratewall::test::one_route_config;

namespace {

std::string source_file(const std::string& relative) {
  return std::string(RATEWALL_SOURCE_DIR) + "/" + relative;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Compares with a golden file; RATEWALL_UPDATE_GOLDEN=1 rewrites it instead (then review the
// diff: it is the specification).
void check_golden(const std::string& actual, const std::string& golden_relative) {
  std::string path = source_file(golden_relative);
  if (const char* update = std::getenv("RATEWALL_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream(path, std::ios::binary) << actual;
  }
  std::string expected = read(path);
  REQUIRE_FALSE(expected.empty());
  CHECK(actual == expected);
}

struct run_result {
  int code = 0;
  std::string out;
  std::string err;
};

// What `run(out, err)` returned and wrote.
template <typename F>
run_result capture(F&& run) {
  std::ostringstream out;
  std::ostringstream err;
  run_result r;
  r.code = run(out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

run_result run_example(bool as_json) {
  simulate_options options;
  options.config_path = source_file("config/examples/simulate.yaml");
  options.trace_path = source_file("scripts/examples/trace.csv");
  options.json = as_json;
  return capture(
      [&](std::ostream& out, std::ostream& err) { return run_simulate(options, out, err); });
}

run_result run_text(const std::string& yaml, const std::string& trace, bool as_json = true) {
  config cfg = parse_config(yaml, "test.yaml");
  return capture([&](std::ostream& out, std::ostream& err) {
    return simulate(cfg, trace, "trace.csv", as_json, out, err);
  });
}

std::vector<json> lines_of(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    lines.push_back(json::parse(line));
  }
  return lines;
}

const std::string k_small = R"(
identity:
  trusted_proxies: [10.0.0.0/8]
  unknown_api_key: reject
plans:
  gold: {}
api_keys:
  - key: gold-key
    plan: gold
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: api
    match: { path_prefix: /api }
    upstream: api
    cost: { default: 1, POST: 3 }
    limits:
      - name: burst
        rate: 1/s
        burst: 5
        plans: { gold: { rate: 1/s, burst: 10 } }
      - name: watch
        algorithm: fixed_window
        limit: 3
        window: 1m
        shadow: true
  - name: open
    match: { path_exact: /open }
    upstream: api
)";

}  // namespace

TEST_CASE("simulate: the example trace matches its golden output (JSON and tables)") {
  run_result j = run_example(true);
  CHECK(j.code == 0);
  CHECK(j.err.empty());
  check_golden(j.out, "tests/unit/sim/golden/trace.jsonl");
  run_result t = run_example(false);
  CHECK(t.code == 0);
  check_golden(t.out, "tests/unit/sim/golden/trace.txt");
}

TEST_CASE("simulate: the same input gives the same output") {
  CHECK(run_example(true).out == run_example(true).out);
  CHECK(run_example(false).out == run_example(false).out);
}

TEST_CASE("simulate: the example shows bursts, refill, tiers and independent clients") {
  auto lines = lines_of(run_example(true).out);
  std::vector<json> alice;
  std::vector<json> bob;
  std::vector<json> anonymous;
  for (const auto& l : lines) {
    if (l.contains("summary")) {
      continue;
    }
    if (l["route"] == "search" && l["plan"] == "free") {
      alice.push_back(l);
    } else if (l["plan"] == "premium") {
      bob.push_back(l);
    } else if (l["subject"] == "ip:203.0.113.7") {
      anonymous.push_back(l);
    }
  }
  REQUIRE(alice.size() == 15);
  // Burst: 5 at once, then denied for half a second (one token at 2/s).
  for (int i = 0; i < 5; ++i) {
    CHECK(alice[i]["decision"] == "allowed");
  }
  CHECK(alice[5]["decision"] == "denied");
  CHECK(alice[5]["retry_after_s"] == 0.5);
  // Refill: one second later two tokens are back.
  CHECK(alice[7]["t"] == 1.0);
  CHECK(alice[7]["decision"] == "allowed");
  CHECK(alice[8]["decision"] == "allowed");
  CHECK(alice[9]["decision"] == "denied");
  // Full again after 2.5 s.
  for (int i = 10; i < 15; ++i) {
    CHECK(alice[i]["decision"] == "allowed");
  }
  // Tier: premium's bucket of 20 takes 12 at once.
  REQUIRE(bob.size() == 12);
  CHECK(bob.back()["decision"] == "allowed");
  CHECK(bob.back()["remaining"] == 8);
  // Independence: alice's empty bucket does not touch another client, and a made-up key is
  // counted by its IP.
  REQUIRE(anonymous.size() == 3);
  CHECK(anonymous[0]["remaining"] == 4);
  CHECK(anonymous[2]["remaining"] == 2);
}

TEST_CASE("simulate: rejected, no route, shadow denials, costs and users") {
  auto lines = lines_of(run_text(k_small, R"(time_s,method,path,api_key,user,ip,cost
0,GET,/nowhere,,,192.0.2.1
0,GET,/api/x,made-up,,192.0.2.1
0,GET,/api/x,,,192.0.2.1
0,GET,/api/x,,,192.0.2.1
0,GET,/api/x,,,192.0.2.1
0,GET,/api/x,,,192.0.2.1
0,GET,/api/x,gold-key,,192.0.2.1
0,POST,/api/x,gold-key,,192.0.2.1
0,POST,/api/x,gold-key,,192.0.2.1,6
0,GET,/api/x,,u-1,10.0.0.5
0,GET,/api/x,,u-1,192.0.2.9
0,GET,/open,,,192.0.2.1
)")
                            .out);
  REQUIRE(lines.size() == 12 + 3 + 4);  // requests, routes, subjects
  CHECK(lines[0]["decision"] == "no_route");
  CHECK(lines[0]["route"].is_null());
  CHECK(lines[0]["subject"].is_null());
  CHECK(lines[1]["decision"] == "rejected");
  CHECK(lines[2]["decision"] == "allowed");
  CHECK(lines[4]["decision"] == "allowed");
  // The fourth request passes the bucket but not the shadow window of 3: counted, not denied.
  CHECK(lines[5]["decision"] == "shadow_denied");
  CHECK(lines[5]["shadow_limit"] == "watch");
  CHECK(lines[5]["limit"] == "burst");
  CHECK(lines[5]["remaining"] == 1);
  CHECK(lines[6]["plan"] == "gold");
  CHECK(lines[6]["remaining"] == 9);
  CHECK(lines[7]["remaining"] == 6);  // POST costs 3
  CHECK(lines[8]["remaining"] == 0);  // the cost column: 6
  CHECK(lines[8]["decision"] == "shadow_denied");
  // A user header counts only from a trusted proxy.
  CHECK(lines[9]["subject"].get<std::string>().starts_with("user:"));
  CHECK(lines[10]["subject"] == "ip:192.0.2.9");
  // A route without limits: allowed, nothing to report.
  CHECK(lines[11]["decision"] == "allowed");
  CHECK(lines[11]["limit"].is_null());
  CHECK(lines[11]["remaining"].is_null());
  CHECK(lines[11]["retry_after_s"].is_null());
  // Summaries: routes in config order, then requests without a route, then subjects.
  CHECK(lines[12]["summary"] == "route");
  CHECK(lines[12]["route"] == "api");
  CHECK(lines[12]["requests"] == 10);
  CHECK(lines[12]["rejected"] == 1);
  CHECK(lines[12]["denied"] == 0);
  CHECK(lines[13]["route"] == "open");
  CHECK(lines[13]["requests"] == 1);
  CHECK(lines[14]["route"].is_null());
  CHECK(lines[14]["no_route"] == 1);
  CHECK(lines[15]["summary"] == "subject");
  CHECK(lines[15]["subject"] == "ip:192.0.2.1");
  CHECK(lines[15]["requests"] == 5);  // 4 on api, 1 on open
}

TEST_CASE("simulate: trace errors name the file, the line and the column") {
  auto error_of = [](const std::string& trace) {
    run_result r = run_text(k_small, trace);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
    return r.err;
  };
  CHECK(error_of("0,GET,/api,,,1.2.3.4\nsoon,GET,/api,,,1.2.3.4\n") ==
        "trace.csv:2: time_s: expected seconds like 0, 1.5 or 0.001 (got \"soon\")\n");
  CHECK(error_of("2,GET,/api,,,1.2.3.4\n1.5,GET,/api,,,1.2.3.4\n") ==
        "trace.csv:2: time_s: 1.5 is earlier than the 2 before it (times must not decrease)\n");
  CHECK(error_of("# comment\n\n0,GET,/api,,\n") ==
        "trace.csv:3: expected 6 to 9 fields "
        "(time_s,method,path,api_key,user,ip[,cost[,latency_ms[,status]]]), found 5\n");
  CHECK(error_of("0,GET,/api,,,1.2.3.4,,,,\n").find("expected 6 to 9 fields") != std::string::npos);
  CHECK(error_of("0,GET,/api,,,1.2.3.4,,slow\n") ==
        "trace.csv:1: latency_ms: expected milliseconds like 12 or 0.25 (got \"slow\")\n");
  CHECK(error_of("0,GET,/api,,,1.2.3.4,,0.0000001\n").find("latency_ms: expected") !=
        std::string::npos);
  for (const char* status : {"99", "600", "2000", "20x"}) {
    CHECK(error_of(std::string("0,GET,/api,,,1.2.3.4,,1,") + status + "\n") ==
          std::string("trace.csv:1: status: expected an HTTP status from 100 to 599 (got \"") +
              status + "\")\n");
  }
  CHECK(error_of("0,GET,/api,,,localhost\n") ==
        "trace.csv:1: ip: expected an IPv4 or IPv6 address (got \"localhost\")\n");
  CHECK(error_of("0,GET,api,,,1.2.3.4\n") ==
        "trace.csv:1: path: expected a request path like /api/search\n");
  CHECK(error_of("0,GET,/api,,,1.2.3.4,0\n") ==
        "trace.csv:1: cost: expected a positive integer (got \"0\")\n");
  CHECK(error_of("0,GET,\"/api,,,1.2.3.4\n") == "trace.csv:1: unterminated quoted field\n");
  CHECK(error_of("-1,GET,/api,,,1.2.3.4\n").find("time_s: expected seconds") != std::string::npos);
}

TEST_CASE("simulate: quoted fields, CRLF line ends, exact decimal times") {
  auto lines =
      lines_of(run_text(k_small,
                        "time_s,method,path,api_key,user,ip\r\n0.000000001,GET,\"/api/a,b\",,,"
                        "\"192.0.2.1\"\r\n")
                   .out);
  REQUIRE(lines.size() >= 1);
  CHECK(lines[0]["path"] == "/api/a,b");
  CHECK(lines[0]["t"] == 1e-9);
  CHECK(lines[0]["decision"] == "allowed");
}

TEST_CASE("simulate: command-line arguments") {
  auto run = [](std::vector<std::string> args) {
    std::vector<std::string_view> views(args.begin(), args.end());
    std::ostringstream out;
    std::ostringstream err;
    int code = simulate_command(views, out, err);
    return std::make_pair(code, out.str() + err.str());
  };
  std::string cfg = source_file("config/examples/simulate.yaml");
  std::string trace = source_file("scripts/examples/trace.csv");
  CHECK(run({"--config", cfg, "--trace", trace, "--json"}).first == 0);
  CHECK(run({"--config=" + cfg, "--trace=" + trace}).first == 0);
  CHECK(run({"-c", cfg, "--trace", trace}).first == 0);
  CHECK(run({"--help"}).first == 0);
  auto missing = run({"--config", cfg});
  CHECK(missing.first == 2);
  CHECK(missing.second.find("--config and --trace are required") != std::string::npos);
  CHECK(run({"--config", cfg, "--trace", trace, "--fast"}).first == 2);
  auto bad_config = run({"--config", "/nonexistent.yaml", "--trace", trace});
  CHECK(bad_config.first == 2);
  CHECK(bad_config.second.find("/nonexistent.yaml: cannot read file") != std::string::npos);
  auto bad_trace = run({"--config", cfg, "--trace", "/nonexistent.csv"});
  CHECK(bad_trace.first == 2);
  CHECK(bad_trace.second == "/nonexistent.csv: cannot read file: No such file or directory\n");
}

TEST_CASE("simulate: a response-cost route admits on room left and charges the cost column") {
  const std::string yaml = R"(
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: chat
    upstream: api
    identify_by: [ip]
    cost_from_response: { header: X-Tokens-Used, default: 4 }
    limits:
      - { name: tokens, algorithm: fixed_window, limit: 10, window: 1m }
)";
  // 8 reported, then 8 with 2 left (admitted, 6 in debt), then denied; a row without a cost
  // is charged the default.
  const std::string trace =
      "0,GET,/a,,,1.2.3.4,8\n0,GET,/a,,,1.2.3.4,8\n0,GET,/a,,,1.2.3.4,1\n"
      "0,GET,/a,,,5.6.7.8\n0,GET,/a,,,5.6.7.8\n0,GET,/a,,,5.6.7.8\n0,GET,/a,,,5.6.7.8\n";
  run_result r = run_text(yaml, trace);
  REQUIRE(r.code == 0);
  std::vector<json> lines;
  for (json& line : lines_of(r.out)) {
    if (line.contains("decision")) {
      lines.push_back(std::move(line));  // the summaries follow the decisions
    }
  }
  REQUIRE(lines.size() == 7);
  CHECK(lines[0]["decision"] == "allowed");
  CHECK(lines[1]["decision"] == "allowed");
  CHECK(lines[2]["decision"] == "denied");
  CHECK(lines[3]["decision"] == "allowed");  // 4, 8: the third finds 2 left and passes
  CHECK(lines[4]["decision"] == "allowed");
  CHECK(lines[5]["decision"] == "allowed");
  CHECK(lines[6]["decision"] == "denied");
}

namespace {

run_result run_compare(const std::string& yaml_a, const std::string& yaml_b,
                       const std::string& trace, simulate_options options) {
  config a = parse_config(yaml_a, "a.yaml");
  config b = parse_config(yaml_b, "b.yaml");
  options.config_path = "a.yaml";
  options.compare_path = "b.yaml";
  return capture([&](std::ostream& out, std::ostream& err) {
    return simulate(a, &b, trace, "trace.log", options, out, err);
  });
}

}  // namespace

TEST_CASE("simulate --compare: exactly the requests a tighter bucket denies differ") {
  // 10 requests at once from one address, 1 from another, then 3 s later 4 more from the
  // first. A (burst 5): 5 allowed, 5 denied; B (burst 2): 2 allowed, 8 denied: lines 3..5
  // differ. At 3 s A's empty bucket has 3 tokens back, B's is full at 2: A allows 3 of the 4,
  // B 2: the third (line 14) differs.
  std::string trace;
  for (int i = 0; i < 10; ++i) {
    trace += "0,GET,/api/x,,,192.0.2.1\n";
  }
  trace += "0,GET,/api/x,,,192.0.2.2\n";
  for (int i = 0; i < 4; ++i) {
    trace += "3,GET,/api/x,,,192.0.2.1\n";
  }
  trace += "3,GET,/elsewhere,,,192.0.2.1\n";
  simulate_options options;
  options.json = true;
  run_result r = run_compare(bucket_config(5), bucket_config(2), trace, options);
  REQUIRE(r.code == 0);
  CHECK(r.err.empty());
  std::vector<json> differ;
  std::vector<json> routes;
  std::vector<json> subjects;
  json total;
  for (json& l : lines_of(r.out)) {
    if (l.contains("differ") && l["differ"] == true) {
      differ.push_back(l);
    } else if (l["summary"] == "route") {
      routes.push_back(l);
    } else if (l["summary"] == "subject") {
      subjects.push_back(l);
    } else {
      total = l;
    }
  }
  REQUIRE(differ.size() == 4);
  CHECK(differ[0]["line"] == 3);
  CHECK(differ[1]["line"] == 4);
  CHECK(differ[2]["line"] == 5);
  CHECK(differ[3]["line"] == 14);
  CHECK(differ[0]["a"]["decision"] == "allowed");
  CHECK(differ[0]["b"]["decision"] == "denied");
  CHECK(differ[0]["a"]["subject"] == "ip:192.0.2.1");
  CHECK(differ[3]["t"] == 3.0);
  CHECK(differ[3]["path"] == "/api/x");

  REQUIRE(routes.size() == 2);
  CHECK(routes[0]["route"] == "api");
  CHECK(routes[0]["a"]["allowed"] == 5 + 1 + 3);
  CHECK(routes[0]["a"]["denied"] == 5 + 1);
  CHECK(routes[0]["b"]["allowed"] == 2 + 1 + 2);
  CHECK(routes[0]["b"]["denied"] == 8 + 2);
  CHECK(routes[0]["differ"] == 4);
  CHECK(routes[1]["route"].is_null());
  CHECK(routes[1]["a"]["no_route"] == 1);
  CHECK(routes[1]["differ"] == 0);

  REQUIRE(subjects.size() == 2);
  CHECK(subjects[0]["subject"] == "ip:192.0.2.1");
  CHECK(subjects[0]["a"]["requests"] == 14);
  CHECK(subjects[0]["differ"] == 4);
  CHECK(subjects[1]["subject"] == "ip:192.0.2.2");
  CHECK(subjects[1]["differ"] == 0);
  CHECK(total["requests"] == 16);
  CHECK(total["differ"] == 4);

  SUBCASE("the same config twice differs nowhere") {
    run_result same = run_compare(bucket_config(5), bucket_config(5), trace, options);
    CHECK(lines_of(same.out).back()["differ"] == 0);
  }
  SUBCASE("text: the tables and the differing requests") {
    options.json = false;
    run_result text = run_compare(bucket_config(5), bucket_config(2), trace, options);
    CHECK(text.out.find("4 of 16 requests decided differently") != std::string::npos);
    CHECK(text.out.find("\n  3.000   14 GET    /api/x api   ip:192.0.2.1 allowed denied\n") !=
          std::string::npos);
    options.summary_only = true;
    run_result summary = run_compare(bucket_config(5), bucket_config(2), trace, options);
    CHECK(summary.out.find("4 of 16 requests decided differently") != std::string::npos);
    CHECK(summary.out.find("/api/x") == std::string::npos);
  }
}

TEST_CASE("simulate: an access log replays as the logged subjects, plans from the key names") {
  const std::string yaml = R"(
plans:
  gold: {}
api_keys:
  - { key: secret-of-alice, plan: gold, name: alice }
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: api
    match: { path_prefix: /api }
    upstream: api
    limits:
      - { name: burst, rate: 1/s, burst: 2, plans: { gold: { rate: 1/s, burst: 4 } } }
)";
  auto line = [](const char* subject, const char* key, const char* plan) {
    return std::string(R"({"time":"2024-05-01T12:00:00.000Z","method":"GET","path":"/api/a",)") +
           R"("subject":)" + subject + R"(,"plan":)" + plan + R"(,"key":)" + key + "}\n";
  };
  std::string trace;
  for (int i = 0; i < 4; ++i) {
    trace += line(R"("aaaa")", R"("alice")", "null");  // plan from the config: gold, 4
    trace += line(R"("bbbb")", "null", R"("gold")");   // the logged plan: gold, 4
    trace += line(R"("cccc")", "null", "null");        // default: 2
  }
  trace += line("null", "null", "null");  // never identified by the gateway
  auto lines = lines_of(run_text(yaml, trace).out);
  REQUIRE(lines.size() == 13 + 1 + 3);
  CHECK(lines[0]["subject"] == "log:aaaa");
  CHECK(lines[0]["plan"] == "gold");
  CHECK(lines[1]["plan"] == "gold");
  CHECK(lines[2]["plan"].is_null());
  CHECK(lines[12]["decision"] == "rejected");
  CHECK(lines[13]["allowed"] == 4 + 4 + 2);
  CHECK(lines[13]["denied"] == 2);
  CHECK(lines[13]["rejected"] == 1);
}

// The markup of a page: each `<...>`. Trace text is escaped, so every '<' left is the page's.
std::vector<std::string> tags_of(const std::string& html) {
  std::vector<std::string> tags;
  for (auto open = html.find('<'); open != std::string::npos; open = html.find('<', open + 1)) {
    tags.push_back(html.substr(open, html.find('>', open) - open + 1));
  }
  return tags;
}

TEST_CASE("simulate --html: one self-contained page, every trace text escaped") {
  const std::string path = "/tmp/ratewall-sim-test-" + std::to_string(::getpid()) + ".html";
  // The gateway refuses '<' in a path (no route, and so not in the report's tables); quotes
  // and '&' pass and must be escaped. The trace's name and an access log's subject carry
  // markup too.
  std::string trace;
  for (int i = 0; i < 4; ++i) {
    for (int j = 0; j < 3; ++j) {
      trace += std::to_string(i) + ".5,GET,/api/it's?a=1&b=2,,,192.0.2.1\n";
    }
    trace += std::to_string(i) + ".5,GET,/api/<script>alert(1)</script>,,,192.0.2.1\n";
  }
  const std::string log_line =
      R"({"time":"2024-05-01T12:00:00.000Z","method":"GET","path":"/api/x",)"
      R"("subject":"<img src=\"http://evil.example/x\" onerror=alert(1)>"})"
      "\n";
  simulate_options options;
  options.html_path = path;
  SUBCASE("compare") {
    run_result r = run_compare(bucket_config(5), bucket_config(2), trace, options);
    REQUIRE(r.code == 0);
    std::string html = read(path);
    CHECK(html.starts_with("<!DOCTYPE html>"));
    CHECK(html.find("<polyline") != std::string::npos);
    CHECK(html.find("route api") != std::string::npos);
    CHECK(html.find("requests decided differently") != std::string::npos);
    CHECK(html.find("/api/it&#39;s?a=1&amp;b=2") != std::string::npos);
    CHECK(html.find("it's") == std::string::npos);
  }
  SUBCASE("one config, a hostile access log and file name") {
    config cfg = parse_config(bucket_config(5), "a.yaml");
    REQUIRE(capture([&](std::ostream& out, std::ostream& err) {
              return simulate(cfg, nullptr, log_line, "<script>x</script>.log", options, out, err);
            }).code == 0);
    std::string html = read(path);
    CHECK(html.find("log:&lt;img src=&quot;http://evil.example/x&quot; onerror=alert(1)&gt;") !=
          std::string::npos);
    CHECK(html.find("&lt;script&gt;x&lt;/script&gt;.log") != std::string::npos);
  }
  // Self-contained: no tag of the page refers to anything outside it, and none came from the
  // trace.
  const std::string html = read(path);
  const auto tags = tags_of(html);
  CHECK(tags.size() > 20);
  for (const auto& tag : tags) {
    CAPTURE(tag);
    CHECK(tag.find("http") == std::string::npos);
    CHECK(tag.find("src=") == std::string::npos);
    CHECK(tag.find("href=") == std::string::npos);
    CHECK_FALSE(tag.starts_with("<script"));
    CHECK_FALSE(tag.starts_with("<img"));
    CHECK_FALSE(tag.starts_with("<link"));
  }
  CHECK(html.find("url(") == std::string::npos);
  CHECK(html.find("@import") == std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("simulate --html: a file that cannot be written exits 2") {
  simulate_options options;
  options.html_path = "/nonexistent-dir/report.html";
  config cfg = parse_config(bucket_config(5), "a.yaml");
  run_result r = capture([&](std::ostream& out, std::ostream& err) {
    return simulate(cfg, nullptr, "0,GET,/api,,,192.0.2.1\n", "t.csv", options, out, err);
  });
  CHECK(r.code == 2);
  CHECK(r.err == "/nonexistent-dir/report.html: cannot write the HTML report\n");
}

TEST_CASE("html_escape escapes the five characters that matter") {
  CHECK(html_escape(R"(<a href="x">'&'</a>)") ==
        "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

TEST_CASE("simulate: clients named by the query or the path are told apart on every request") {
  // The replay identifies each client once; a route that names clients by the target must
  // not take one tenant for another.
  const std::string yaml = R"(
upstreams:
  api: { targets: [127.0.0.1:9] }
routes:
  - name: by-query
    match: { path_prefix: /q }
    upstream: api
    identify_by: [query:tenant]
    limits:
      - { name: burst, rate: 1/s, burst: 1 }
  - name: by-path
    match: { path_template: "/t/{tenant}/items" }
    upstream: api
    identify_by: [path:tenant]
    limits:
      - { name: burst, rate: 1/s, burst: 1 }
)";
  auto lines = lines_of(run_text(yaml, R"(0,GET,/q?tenant=a,,,192.0.2.1
0,GET,/q?tenant=b,,,192.0.2.1
0,GET,/q?tenant=a,,,192.0.2.1
0,GET,/t/a/items,,,192.0.2.1
0,GET,/t/b/items,,,192.0.2.1
0,GET,/t/a/items,,,192.0.2.1
)")
                            .out);
  REQUIRE(lines.size() >= 6);
  for (int i : {0, 3}) {
    CAPTURE(i);
    CHECK(lines[i]["decision"] == "allowed");
    CHECK(lines[i + 1]["decision"] == "allowed");
    CHECK(lines[i + 1]["subject"] != lines[i]["subject"]);
    CHECK(lines[i + 2]["decision"] == "denied");
    CHECK(lines[i + 2]["subject"] == lines[i]["subject"]);
  }
}

TEST_CASE("simulate --html: at most 200 buckets, none finer than the trace's times") {
  const std::string path = "/tmp/ratewall-sim-buckets-" + std::to_string(::getpid()) + ".html";
  simulate_options options;
  options.html_path = path;
  config cfg = parse_config(bucket_config(5), "a.yaml");
  auto bucket_of = [&](const std::string& trace) {
    REQUIRE(capture([&](std::ostream& out, std::ostream& err) {
              return simulate(cfg, nullptr, trace, "t", options, out, err);
            }).code == 0);
    std::string html = read(path);
    auto at = html.find("requests per ");
    REQUIRE(at != std::string::npos);
    return html.substr(at, html.find('<', at) - at);
  };
  // 1 s in 1 ms steps would be 1,000 buckets; 10 ms make 100.
  CHECK(bucket_of("0,GET,/api,,,192.0.2.1\n1,GET,/api,,,192.0.2.1\n") == "requests per 0.010 s");
  // nginx logs whole seconds.
  CHECK(bucket_of("192.0.2.1 - - [01/Jan/2024:00:00:00 +0000] \"GET /api HTTP/1.1\" 200 0 \"-\" "
                  "\"-\"\n192.0.2.1 - - [01/Jan/2024:00:00:01 +0000] \"GET /api HTTP/1.1\" 200 0 "
                  "\"-\" \"-\"\n") == "requests per 1.000 s");
  std::remove(path.c_str());
}

TEST_CASE("simulate: a replayed log's fixed windows start where the gateway's did") {
  // A window of a minute starts on the minute (the gateway's clock counts from 2020-01-01
  // UTC): the request at 12:01:01 is in a new window, whatever time the log started at.
  const std::string yaml =
      one_route_config("{ name: fw, algorithm: fixed_window, limit: 3, window: 1m }");
  std::string log;
  for (const char* at : {"12:00:50", "12:00:55", "12:00:58", "12:01:01"}) {
    log += std::string("203.0.113.9 - - [01/May/2024:") + at +
           " +0000] \"GET /api/a HTTP/1.1\" 200 1 \"-\" \"-\"\n";
  }
  const auto r = run_text(yaml, log);
  const auto lines = lines_of(r.out);
  REQUIRE(lines.size() >= 4);
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(lines[i]["decision"] == "allowed");
  }
}

TEST_CASE("simulate: bytes a log may hold reach no output raw") {
  const std::string yaml = test::bucket_config(5);
  SUBCASE("a path that is not UTF-8 is printed as JSON, not an exception") {
    const auto r = run_text(yaml, "0,GET,/api/\xc3\x28,,,1.2.3.4\n");
    CHECK(r.code == 0);
    CHECK(r.out.find("/api/\xef\xbf\xbd(") != std::string::npos);  // U+FFFD
  }
  SUBCASE("control bytes in the text tables are shown as \\xHH") {
    const auto r = run_text(yaml, "0,GET,/api/\x1b]0;title\x07,,,1.2.3.4\n", false);
    CHECK(r.code == 0);
    CHECK(r.out.find('\x1b') == std::string::npos);
    CHECK(r.out.find("\\x1b]0;title\\x07") != std::string::npos);
  }
}

TEST_CASE("simulate: adaptive limits replay the trace's latencies and statuses") {
  // 60 requests a second from one client, under a bucket of 100/s: never denied while the
  // upstream answers in 10 ms. Seconds 4 to 6 it takes 400 ms (or answers 503).
  const std::string yaml = one_route_config(
      "{ name: burst, rate: 100/s, burst: 100 }",
      "    adaptive: { latency_target: 100ms, error_rate_target: 0.2, min_factor: 0.2, window: "
      "1s }\n");
  auto trace_with = [](const std::string& slow_columns) {
    std::string trace;
    for (int i = 0; i < 60 * 20; ++i) {
      const int second = i / 60;
      char time[32];
      std::snprintf(time, sizeof time, "%d.%06d", second, (i % 60) * 16'000);
      const bool slow = second >= 4 && second <= 6;
      trace +=
          std::string(time) + ",GET,/api,,,192.0.2.1,," + (slow ? slow_columns : "10,200") + "\n";
    }
    return trace;
  };

  for (const std::string slow : {"400,200", "10,503"}) {
    CAPTURE(slow);
    const run_result r = run_text(yaml, trace_with(slow));
    REQUIRE(r.code == 0);
    std::vector<json> changes;
    double lowest = 1;
    std::uint64_t denied = 0;
    for (const json& line : lines_of(r.out)) {
      if (line.contains("adaptive")) {
        changes.push_back(line);
      } else if (line.contains("decision")) {
        const double factor = line.at("factor").get<double>();
        lowest = std::min(lowest, factor);
        if (line["decision"] == "denied") {
          ++denied;
          CHECK(factor < 1);  // at the configured limits, 60/s is never denied
        }
      }
    }
    REQUIRE(changes.size() >= 3);
    // Down once a slow second's window has ended, halved per window over the target...
    CHECK(changes[0]["adaptive"] == "api");
    CHECK(changes[0]["from"] == 1.0);
    CHECK(changes[0]["to"] == 0.5);
    CHECK(changes[0]["t"].get<double>() >= 5.0);
    CHECK(changes[0]["t"].get<double>() < 6.1);
    CHECK(lowest >= 0.2);  // min_factor
    CHECK(lowest < 0.5);
    CHECK(denied > 0);
    // ...and back to 1 by +0.1 per window once it answers in time again.
    CHECK(changes.back()["to"] == 1.0);
    CHECK(changes.back()["t"].get<double>() < 20);
  }

  SUBCASE("the text output lists the changes") {
    config cfg = parse_config(yaml, "test.yaml");
    const run_result r = capture([&](std::ostream& out, std::ostream& err) {
      return simulate(cfg, trace_with("400,200"), "trace.csv", false, out, err);
    });
    CHECK(r.out.find("adaptive factor changes (") != std::string::npos);
    CHECK(r.out.find("5.000 api   1.00 0.50") != std::string::npos);
  }
  SUBCASE("a trace without latencies or statuses leaves the factor at 1") {
    std::string trace;
    for (int i = 0; i < 600; ++i) {
      trace += std::to_string(i / 60) + ".5,GET,/api,,,192.0.2.1\n";
    }
    const run_result r = run_text(yaml, trace);
    for (const json& line : lines_of(r.out)) {
      CHECK_FALSE(line.contains("adaptive"));
      if (line.contains("decision")) {
        CHECK(line["factor"] == 1.0);
      }
    }
  }
}

TEST_CASE("simulate --summary reads a file in pieces and prints what the whole file gives") {
  // The summaries, through run_simulate (which streams a regular file) and through simulate
  // on the whole text, for a log out of order within the window and one out of order beyond
  // it (streaming gives up and the file is read whole: the malformed line is reported once).
  ratewall::testing::temp_dir dir;
  const std::string yaml = one_route_config(
      "{ name: burst, rate: 5/s, burst: 5 }\n"
      "      - { name: day, window: 1d, limit: 3000, algorithm: fixed_window }");
  const std::string config_path = dir.write("sim.yaml", yaml);
  auto line = [](long ms, int subject) {
    char text[200];
    std::snprintf(text, sizeof text,
                  R"({"time":"2024-05-01T23:%02ld:%02ld.%03ldZ","method":"GET","path":"/api/a",)"
                  R"("subject":"s%d","plan":null,"key":null})"
                  "\n",
                  ms / 60000 % 60, ms / 1000 % 60, ms % 1000, subject);
    return std::string(text);
  };
  std::string near;  // blocks of 100 lines, each block 50 ms behind the one before it
  std::string far = line(999, 0) + "not json\n";
  for (long i = 0; i < 20000; ++i) {
    near += line(i * 7 + (i / 100 % 2 == 0 ? 50 : 0), static_cast<int>(i % 37));
    far += line(1000 + i, static_cast<int>(i % 37));
  }
  near += "{}\n";
  for (std::size_t i = 0; i < k_stream_window; ++i) {
    far += line(21000, 1);
  }
  far += line(0, 2);  // earlier than everything, after more than the window
  const config cfg = parse_config(yaml, config_path);
  for (const auto& [name, text] : {std::pair{"near.log", near}, std::pair{"far.log", far}}) {
    CAPTURE(name);
    simulate_options options;
    options.config_path = config_path;
    options.trace_path = dir.write(name, text);
    options.summary_only = true;
    options.json = true;
    const run_result streamed = capture(
        [&](std::ostream& out, std::ostream& err) { return run_simulate(options, out, err); });
    const run_result whole = capture([&](std::ostream& out, std::ostream& err) {
      return simulate(cfg, nullptr, text, options.trace_path, options, out, err);
    });
    CAPTURE(streamed.err);
    CHECK(streamed.code == 0);
    CHECK(streamed.out == whole.out);
    CHECK(streamed.err == whole.err);
    CHECK(streamed.err.find("malformed line skipped") != std::string::npos);
    CHECK(lines_of(streamed.out).size() > 37);
  }
}
