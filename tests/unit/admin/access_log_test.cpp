#include "ratewall/admin/access_log.hpp"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "ratewall/config/loader.hpp"
#include "ratewall/http/identity.hpp"

using namespace ratewall;
using namespace std::chrono_literals;

namespace {

// 2024-05-01T12:00:00.123Z
const auto k_time = std::chrono::system_clock::time_point(1714564800123ms);

access_record sample_record() {
  access_record r;
  r.time = k_time;
  r.request_id = "6f0c1d2e";
  r.method = "GET";
  r.target = "/api/search?q=secret#frag";
  r.route = "search";
  r.subject = "key:00112233445566778899aabbccddeeff";
  r.decision = request_decision::allowed;
  r.status = 200;
  r.upstream = 12345678ns;
  r.duration = 13002000ns;
  r.bytes_in = 0;
  r.bytes_out = 1234;
  return r;
}

std::string line_of(const access_record& r) {
  std::string out;
  format_access_line(out, r, "hash-key");
  return out;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line);
  }
  return lines;
}

struct temp_dir {
  temp_dir() {
    char tmpl[] = "/tmp/ratewall-access-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  std::string path;
};

log_config file_sink(const std::string& path) {
  log_config cfg;
  cfg.access = access_log_sink::file;
  cfg.access_path = path;
  return cfg;
}

}  // namespace

TEST_CASE("the line format: every key, in order, on one line") {
  access_record r = sample_record();
  std::string expected =
      std::string(R"({"time":"2024-05-01T12:00:00.123Z","request_id":"6f0c1d2e",)") +
      R"("method":"GET","path":"/api/search","host":null,"route":"search","subject":")" +
      subject_hash(r.subject, "hash-key") +
      R"(","plan":null,"key":null,"client":null,"user_agent":null,"decision":"allowed","limit":null,)"
      R"("status":200,"upstream":null,"upstream_ms":12.345,)"
      R"("duration_ms":13.002,"bytes_in":0,"bytes_out":1234})"
      "\n";
  CHECK(line_of(r) == expected);
}

TEST_CASE("a route whose cost the response reports logs the cost charged, last") {
  access_record r = sample_record();
  CHECK(line_of(r).ends_with(R"("bytes_out":1234})"
                             "\n"));
  r.cost = 4096;
  CHECK(line_of(r).ends_with(R"("bytes_out":1234,"cost":4096})"
                             "\n"));
  r.cost = 0;
  CHECK(line_of(r).ends_with(R"("cost":0})"
                             "\n"));
}

TEST_CASE("host, plan, user agent, upstream; the client's address as log.client_address says") {
  access_record r = sample_record();
  r.host = "api.example.com";
  r.plan = "premium";
  r.client = "203.0.113.7";
  const std::string user_agent = "curl/8.1 \"quoted\"\x01" + std::string(300, 'x');
  r.user_agent = user_agent;
  r.upstream_address = "127.0.0.1:8000";
  std::string hashed;
  format_access_line(hashed, r, "hash-key");  // the default: hashed
  const auto j = nlohmann::json::parse(hashed);
  CHECK(j["host"] == "api.example.com");
  CHECK(j["plan"] == "premium");
  CHECK(j["upstream"] == "127.0.0.1:8000");
  CHECK(j["client"] == subject_hash("ip:203.0.113.7", "hash-key"));
  CHECK(hashed.find("203.0.113.7") == std::string::npos);
  const std::string ua = j["user_agent"];
  CHECK(ua.starts_with("curl/8.1 \"quoted\"\x01"));
  CHECK(ua.size() == 256);  // cut: a line stays small whatever a client sends

  std::string raw;
  format_access_line(raw, r, "hash-key", client_address_log::raw);
  CHECK(nlohmann::json::parse(raw)["client"] == "203.0.113.7");
  std::string off;
  format_access_line(off, r, "hash-key", client_address_log::off);
  CHECK(nlohmann::json::parse(off)["client"].is_null());
  CHECK(off.find("203.0.113.7") == std::string::npos);
}

TEST_CASE("a writer shows the client as its log says, and a new log starts afresh") {
  temp_dir dir;
  log_config cfg = file_sink(dir.path + "/a.log");
  auto hashed = std::make_shared<access_log>(cfg, "k");
  cfg.access_path = dir.path + "/b.log";
  cfg.client_address = client_address_log::raw;
  auto raw = std::make_shared<access_log>(cfg, "k");
  access_record r = sample_record();
  r.client = "198.51.100.4";
  {
    access_log_writer w(hashed);
    w.write(r);
    w.set_log(raw);  // same client next: its cached text must not carry over
    w.write(r);
  }
  const auto a = read_lines(dir.path + "/a.log");
  const auto b = read_lines(dir.path + "/b.log");
  REQUIRE(a.size() == 1);
  REQUIRE(b.size() == 1);
  CHECK(nlohmann::json::parse(a[0])["client"] == subject_hash("ip:198.51.100.4", "k"));
  CHECK(nlohmann::json::parse(b[0])["client"] == "198.51.100.4");
}

TEST_CASE("the subject is hashed, never written in clear; the query never appears") {
  access_record r = sample_record();
  r.subject = "ip:203.0.113.7";
  std::string line = line_of(r);
  CHECK(line.find("203.0.113.7") == std::string::npos);
  CHECK(line.find("secret") == std::string::npos);
  auto j = nlohmann::json::parse(line);
  CHECK(j["subject"] == subject_hash("ip:203.0.113.7", "hash-key"));
  CHECK(j["subject"].get<std::string>().size() == 16);
}

TEST_CASE("nulls where a field does not apply") {
  access_record r;
  r.time = k_time;
  r.method = "GET";
  r.target = "/nowhere";
  r.decision = request_decision::no_route;
  r.status = 404;
  auto j = nlohmann::json::parse(line_of(r));
  CHECK(j["route"].is_null());
  CHECK(j["subject"].is_null());
  CHECK(j["limit"].is_null());
  CHECK(j["upstream_ms"].is_null());
  CHECK(j["request_id"].is_null());
  CHECK(j["decision"] == "no_route");
  CHECK(j["status"] == 404);
  CHECK(j["duration_ms"] == 0.0);
}

TEST_CASE("denied requests name their limit") {
  access_record r = sample_record();
  r.decision = request_decision::denied;
  r.limit = "burst";
  r.status = 429;
  r.upstream.reset();
  auto j = nlohmann::json::parse(line_of(r));
  CHECK(j["decision"] == "denied");
  CHECK(j["limit"] == "burst");
  CHECK(j["upstream_ms"].is_null());
}

TEST_CASE("whatever the client sends, the line is one valid JSON object") {
  access_record r = sample_record();
  std::string nasty = "/a\"b\\c\nd\te\x01\x7f/\xff\xfe/\xc3\xa9/\xe2\x82";
  r.target = nasty;
  r.method = "G\"ET";
  std::string line = line_of(r);
  CHECK(std::count(line.begin(), line.end(), '\n') == 1);
  CHECK(line.back() == '\n');
  auto j = nlohmann::json::parse(line);
  CHECK(j["path"] ==
        "/a\"b\\c\nd\te\x01\x7f/\xef\xbf\xbd\xef\xbf\xbd/\xc3\xa9/\xef\xbf\xbd\xef\xbf\xbd");
  CHECK(j["method"] == "G\"ET");
  SUBCASE("long paths are cut") {
    std::string long_path = "/" + std::string(5000, 'x');
    r.target = long_path;
    auto k = nlohmann::json::parse(line_of(r));
    CHECK(k["path"].get<std::string>().size() == 1024);
  }
}

TEST_CASE("milliseconds and timestamps: rounding down, across seconds") {
  access_record r = sample_record();
  r.time = std::chrono::system_clock::time_point(1714564800999999us);
  r.upstream = 999ns;
  r.duration = 1s + 1500us;
  auto j = nlohmann::json::parse(line_of(r));
  CHECK(j["time"] == "2024-05-01T12:00:00.999Z");
  CHECK(line_of(r).find(R"("upstream_ms":0.000,)") != std::string::npos);
  CHECK(line_of(r).find(R"("duration_ms":1001.500,)") != std::string::npos);
}

TEST_CASE("a writer buffers until flush, then one file gets whole lines") {
  temp_dir dir;
  std::string path = dir.path + "/access.log";
  auto log = std::make_shared<access_log>(file_sink(path), "hash-key");
  access_log_writer writer(log);
  CHECK(writer.enabled());
  access_record r = sample_record();
  writer.write(r);
  writer.write(r);
  CHECK(read_lines(path).empty());  // still in the buffer
  CHECK(writer.buffered() > 0);
  writer.flush();
  CHECK(writer.buffered() == 0);
  auto lines = read_lines(path);
  REQUIRE(lines.size() == 2);
  std::string expected = line_of(r);
  expected.pop_back();
  CHECK(lines[0] == expected);
  CHECK(log->lines_written() == 2);

  SUBCASE("a full buffer flushes by itself") {
    while (log->lines_written() == 2) {
      writer.write(r);
    }
    CHECK(writer.buffered() == 0);
    CHECK(read_lines(path).size() == log->lines_written());
  }
  SUBCASE("the writer flushes when destroyed") {
    {
      access_log_writer other(log);
      other.write(r);
    }
    CHECK(read_lines(path).size() == 3);
  }
}

TEST_CASE("reopen: after the file was moved away, lines go to a new file at the path") {
  temp_dir dir;
  std::string path = dir.path + "/access.log";
  auto log = std::make_shared<access_log>(file_sink(path), "hash-key");
  access_log_writer writer(log);
  writer.write(sample_record());
  writer.flush();
  std::filesystem::rename(path, path + ".1");
  writer.write(sample_record());
  writer.flush();
  CHECK(read_lines(path + ".1").size() == 2);  // without reopen: still the moved file
  CHECK(log->reopen());
  writer.write(sample_record());
  writer.flush();
  CHECK(read_lines(path).size() == 1);
  CHECK(read_lines(path + ".1").size() == 2);
}

TEST_CASE("off writes nothing; a bad path throws naming it") {
  log_config off;
  auto log = std::make_shared<access_log>(off, "k");
  access_log_writer writer(log);
  CHECK_FALSE(writer.enabled());
  writer.write(sample_record());
  CHECK(writer.buffered() == 0);
  access_log_writer none(nullptr);
  CHECK_FALSE(none.enabled());
  none.write(sample_record());

  try {
    access_log bad(file_sink("/nonexistent-dir/access.log"), "k");
    FAIL("expected an exception");
  } catch (const config_error& e) {
    CHECK(std::string(e.what()).find("/nonexistent-dir/access.log: No such file or directory") !=
          std::string::npos);
    CHECK(e.key_path() == "log.access");
  }
}

TEST_CASE("a new configuration keeps the open sink only when nothing the sink uses changed") {
  const log_config running = file_sink("/var/log/ratewall/access.log");
  CHECK(keeps_access_log(running, running));
  log_config other_path = running;
  other_path.access_path = "/var/log/ratewall/other.log";
  CHECK_FALSE(keeps_access_log(running, other_path));
  log_config to_stdout = running;
  to_stdout.access = access_log_sink::stdout_stream;
  CHECK_FALSE(keeps_access_log(running, to_stdout));
  // The sink writes the client's address as it was made to: a reload and the gateway agree.
  log_config raw = running;
  raw.client_address = client_address_log::raw;
  CHECK_FALSE(keeps_access_log(running, raw));
  log_config other_level = running;
  other_level.level = running.level == log_level::info ? log_level::debug : log_level::info;
  CHECK(keeps_access_log(running, other_level));
}

TEST_CASE("set_log flushes to the old log and hashes with the new key") {
  temp_dir dir;
  auto a = std::make_shared<access_log>(file_sink(dir.path + "/a.log"), "key-a");
  auto b = std::make_shared<access_log>(file_sink(dir.path + "/b.log"), "key-b");
  access_log_writer writer(a);
  access_record r = sample_record();
  writer.write(r);
  writer.set_log(b);
  writer.write(r);
  writer.flush();
  auto la = read_lines(dir.path + "/a.log");
  auto lb = read_lines(dir.path + "/b.log");
  REQUIRE(la.size() == 1);
  REQUIRE(lb.size() == 1);
  CHECK(nlohmann::json::parse(la[0])["subject"] == subject_hash(r.subject, "key-a"));
  CHECK(nlohmann::json::parse(lb[0])["subject"] == subject_hash(r.subject, "key-b"));
}

TEST_CASE("a stdout pipe whose reader stalls costs a bounded wait, not a hung worker") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  // Point stdout at the pipe just long enough for the log to open its own description of it.
  int saved = ::dup(STDOUT_FILENO);
  std::fflush(stdout);
  ::dup2(fds[1], STDOUT_FILENO);
  log_config cfg;
  cfg.access = access_log_sink::stdout_stream;
  auto log = std::make_shared<access_log>(cfg, "k");
  ::dup2(saved, STDOUT_FILENO);
  ::close(saved);
  ::close(fds[1]);

  std::string line;
  format_access_line(line, sample_record(), "k");
  std::string lines;
  while (lines.size() < 256 * 1024) {  // far more than a pipe buffer holds
    lines += line;
  }
  auto start = std::chrono::steady_clock::now();
  log->write_lines(lines);
  auto waited = std::chrono::steady_clock::now() - start;
  CHECK(waited < std::chrono::seconds(2));
  CHECK(log->write_errors() == 1);
  CHECK(log->lines_written() == 0);

  // What did get through is whole lines from the start.
  std::string got(64 * 1024, '\0');
  ssize_t n = ::read(fds[0], got.data(), got.size());
  REQUIRE(n > 0);
  CHECK(got.compare(0, line.size(), line) == 0);
  ::close(fds[0]);
}
