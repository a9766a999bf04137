#include "ratewall/sim/simulate.hpp"

#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ratewall/config/loader.hpp"

using namespace ratewall;
using json = nlohmann::json;

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

run_result run_example(bool as_json) {
  run_result r;
  std::ostringstream out;
  std::ostringstream err;
  r.code = run_simulate({source_file("config/examples/simulate.yaml"),
                         source_file("scripts/examples/trace.csv"), as_json},
                        out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

run_result run_text(const std::string& yaml, const std::string& trace, bool as_json = true) {
  run_result r;
  std::ostringstream out;
  std::ostringstream err;
  config cfg = parse_config(yaml, "test.yaml");
  r.code = simulate(cfg, trace, "trace.csv", as_json, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
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
        "trace.csv:3: expected 6 or 7 fields (time_s,method,path,api_key,user,ip[,cost]), "
        "found 5\n");
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
  CHECK(bad_trace.second == "/nonexistent.csv: cannot read file\n");
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
