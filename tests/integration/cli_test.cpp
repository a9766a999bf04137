// The ratewall executable itself: `check`, start-up errors and `simulate`.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include "support/child_process.hpp"
#include "support/sim_configs.hpp"
#include "support/test_pki.hpp"

namespace {

struct run_result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

run_result run(const std::string& args) {
  std::string command = std::string(RATEWALL_BINARY) + " " + args + " 2>&1";
  run_result r;
  FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) {
    r.output.append(buf, n);
  }
  int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/ratewall-cli-test-" + std::to_string(::getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

}  // namespace

TEST_CASE("ratewall check accepts the shipped configurations") {
  for (const char* file : {"/config/ratewall.yaml", "/config/examples/reference.yaml"}) {
    auto r = run(std::string("check ") + RATEWALL_SOURCE_DIR + file);
    CHECK_MESSAGE(r.exit_code == 0, r.output);
    CHECK(r.output.find(": ok") != std::string::npos);
  }
}

TEST_CASE("ratewall check names file, line and key of an error and exits 2") {
  auto path = write_temp("bad.yaml", R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - name: l
        rate: ten per second
)");
  auto r = run("check " + path);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(path + ":8: routes[0].limits[0].rate:") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("ratewall refuses to start on a bad config, with the same message") {
  auto path = write_temp("typo.yaml", R"(server:
  threds: 2
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
)");
  auto r = run("--config " + path);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(path + ":2: server.threds: unknown key") != std::string::npos);
  std::remove(path.c_str());
}

TEST_CASE("ratewall without arguments prints its usage and exits 2") {
  auto r = run("");
  CHECK(r.exit_code == 2);
  CHECK(r.output.find("usage:") != std::string::npos);
  CHECK(run("--version").exit_code == 0);
}

TEST_CASE("ratewall check accepts the longest periods and refuses a bucket it cannot run") {
  const std::string head = R"(upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
)";
  auto ok = write_temp("long.yaml", head + R"(      - { name: yearly, rate: 600/365d }
      - { name: decade, rate: 100/3650d }
      - { name: deep, rate: 1000000000/s, burst: 864000000000000000 }
)");
  auto r = run("check " + ok);
  CHECK_MESSAGE(r.exit_code == 0, r.output);

  auto deep = write_temp("deep.yaml", head + R"(      - name: deep
        rate: 1/d
        burst: 10001
)");
  r = run("check " + deep);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(deep + ":9: routes[0].limits[0].burst: burst 10001 at 1/d takes too long "
                             "to refill") != std::string::npos);
  std::remove(ok.c_str());
  std::remove(deep.c_str());
}

TEST_CASE("ratewall check with store.type redis refuses limits the Redis scripts cannot carry") {
  const std::string text = R"(store:
  type: redis
  redis: { url: "redis://127.0.0.1:1/0" }
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - name: r
    upstream: api
    limits:
      - { name: l, algorithm: fixed_window, limit: 1000000000000000, window: 1m }
)";
  auto path = write_temp("redis-large.yaml", text);
  auto r = run("check " + path);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(path + ": route 'r' limit 'l': too large for the Redis store") !=
        std::string::npos);
  // The same limit is fine for the memory store.
  auto memory = write_temp("memory-large.yaml", text.substr(text.find("upstreams:")));
  CHECK(run("check " + memory).exit_code == 0);
  std::remove(path.c_str());
  std::remove(memory.c_str());
}

TEST_CASE("ratewall check and start load the certificates: a bad one exits 2 naming its file") {
  ratewall::testing::test_pki pki;
  const auto good = pki.issue("api", {"api.test"});
  const auto expired = pki.issue("old", {"api.test"}, {}, -30, -1);
  auto config_for = [&](const std::string& name, const std::string& cert, const std::string& key) {
    return pki.write_file(name, R"(server:
  listen: 127.0.0.1:0
  tls:
    listen: 127.0.0.1:0
    certificates:
      - cert: )" + cert +
                                    "\n        key: " + key + R"(
admin: { enabled: false }
upstreams:
  api: { targets: ["https://127.0.0.1:8443"], tls: { ca_file: ca.pem } }
routes:
  - { name: r, upstream: api }
)");
  };
  // Relative paths: from the config file's directory, whatever the working directory.
  const std::string cert = good.cert.substr(pki.dir().size() + 1);
  const std::string key = good.key.substr(pki.dir().size() + 1);
  auto r = run("check " + config_for("good.yaml", cert, key));
  CHECK_MESSAGE(r.exit_code == 0, r.output);

  const std::string bad = config_for("expired.yaml", expired.cert, expired.key);
  r = run("check " + bad);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(bad + ":6: server.tls.certificates[0].cert: certificate " + expired.cert +
                      " expired on ") != std::string::npos);
  r = run("--config " + bad);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(bad + ":6: server.tls.certificates[0].cert: certificate ") !=
        std::string::npos);

  const std::string no_ca = config_for("no-ca.yaml", cert, key);
  std::remove(pki.ca_cert().c_str());
  r = run("check " + no_ca);
  CHECK(r.exit_code == 2);
  CHECK(r.output.find(no_ca + ":10: upstreams.api.tls.ca_file: cannot read CA file " + pki.dir() +
                      "/ca.pem: No such file or directory") != std::string::npos);
}

TEST_CASE("threads: 0 starts one worker per CPU this process may use (its affinity mask)") {
  if (::access("/usr/bin/taskset", X_OK) != 0) {
    MESSAGE("taskset is not installed: skipped");
    return;
  }
  auto path = write_temp("threads.yaml", R"(server:
  listen: 127.0.0.1:0
  threads: 0
admin: { enabled: false }
upstreams:
  api: { targets: [127.0.0.1:8000] }
routes:
  - { name: r, upstream: api }
)");
  // Pinned to CPU 0, as `docker run --cpuset-cpus 0` would: one worker, not one per host core.
  ratewall::testing::child_process gw(
      {"/usr/bin/taskset", "-c", "0", RATEWALL_BINARY, "--config", path});
  REQUIRE_MESSAGE(gw.wait_for_output("listening on", std::chrono::seconds(10)), gw.output());
  CHECK(gw.output().find("with 1 thread(s)") != std::string::npos);
  gw.signal(SIGTERM);
  CHECK(gw.wait_exit(std::chrono::seconds(5)) == 0);
  std::remove(path.c_str());
}

namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

TEST_CASE("ratewall simulate reads an nginx log, compares two configs and writes the report") {
  const std::string a = write_temp("sim-a.yaml", ratewall::test::bucket_config(3));
  const std::string b = write_temp("sim-b.yaml", ratewall::test::bucket_config(1));
  std::string log;
  for (int i = 0; i < 4; ++i) {
    log += R"(192.0.2.1 - - [01/Jan/2024:10:00:00 +0100] "GET /api/x HTTP/1.1" 200 5 "-" "curl")"
           "\n";
  }
  log += "garbage\n";
  const std::string trace = write_temp("sim.log", log);
  const std::string html = "/tmp/ratewall-cli-test-" + std::to_string(::getpid()) + "-sim.html";

  auto r = run("simulate --config " + a + " --trace " + trace + " --compare " + b + " --html " +
               html + " --summary");
  CHECK_MESSAGE(r.exit_code == 0, r.output);
  // A (burst 3) allows 3 of 4, B (burst 1) allows 1: two differ.
  CHECK(r.output.find("2 of 4 requests decided differently") != std::string::npos);
  CHECK(r.output.find(trace + ":5: remote_addr: expected an IPv4 or IPv6 address (line skipped)") !=
        std::string::npos);
  CHECK(r.output.find(trace + ": 1 malformed line skipped") != std::string::npos);
  const std::string page = read_all(html);
  CHECK(page.starts_with("<!DOCTYPE html>"));
  CHECK(page.find("http") == std::string::npos);

  SUBCASE("--format forces the format; the wrong one is refused") {
    auto forced = run("simulate --config " + a + " --trace " + trace + " --format access-log");
    CHECK(forced.exit_code == 2);
    CHECK(forced.output.find("more malformed lines than requests as format access-log") !=
          std::string::npos);
    auto unknown = run("simulate --config " + a + " --trace " + trace + " --format xml");
    CHECK(unknown.exit_code == 2);
    CHECK(unknown.output.find("--format: expected csv, access-log or nginx (got 'xml')") !=
          std::string::npos);
  }
  std::remove(html.c_str());
}
