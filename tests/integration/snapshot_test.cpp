// Limits that survive restarts (issue 15, item 2) on the real binary: store.snapshot writes
// the memory store's state every interval and at shutdown, and a new process reads it back
// before its first request. A client at its daily quota stays limited across a restart, a
// crash loses at most one interval, and a damaged file never stops the start.

#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/http_client.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

// Three requests a day per API key, or per address for a client without one.
std::string daily_config(std::uint16_t upstream_port, const std::string& snapshot,
                         int per_day = 3) {
  return R"(server:
  listen: 127.0.0.1:0
  threads: 2
admin:
  listen: 127.0.0.1:0
identity:
  unknown_api_key: allow
store:
  snapshot: )" +
         snapshot + R"(
upstreams:
  api: { targets: [127.0.0.1:)" +
         std::to_string(upstream_port) + R"(] }
routes:
  - name: main
    match: { path_prefix: / }
    upstream: api
    identify_by: [api_key, ip]
    limits:
      - { name: daily, algorithm: fixed_window, limit: )" +
         std::to_string(per_day) + R"(, window: 1d }
)";
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

struct gateway_process {
  explicit gateway_process(const std::string& config_path,
                           std::vector<std::string> env = {"RATEWALL_HASH_KEY=snapshot-test"})
      : process({RATEWALL_BINARY, "--config", config_path}, std::move(env)) {
    REQUIRE_MESSAGE(process.wait_for_output("listening on", 10s), process.output());
    port = listening_port(process.output());
    admin = admin_port_of(process.output());
    REQUIRE(port != 0);
  }
  ~gateway_process() { stop(); }

  void stop() {
    if (!stopped) {
      stopped = true;
      process.signal(SIGTERM);
      CHECK(process.wait_exit(10s) == 0);
    }
  }

  int status(const std::string& key = "") const {
    http_client c(port);
    header_pairs headers;
    if (!key.empty()) {
      headers.emplace_back("X-API-Key", key);
    }
    return c.get("/", headers).status;
  }

  child_process process;
  std::uint16_t port = 0;
  std::uint16_t admin = 0;
  bool stopped = false;
};

}  // namespace

TEST_CASE("store.snapshot: a client at its daily quota stays limited across a restart") {
  test_upstream upstream;
  temp_dir dir;
  const std::string config_path =
      dir.write("gw.yaml", daily_config(upstream.port(), "{ path: state.bin, interval: 1h }"));
  {
    gateway_process gw(config_path);
    CHECK(gw.process.output().find("does not exist yet") != std::string::npos);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(gw.status("spent-key") == 200);
      REQUIRE(gw.status() == 200);  // the address of the clients without a key
    }
    CHECK(gw.status("spent-key") == 429);
    CHECK(gw.status() == 429);
    REQUIRE(gw.status("other-key") == 200);
    gw.stop();  // the interval is an hour: only the shutdown's snapshot can hold this
    CHECK(gw.process.output().find("limit state written to") != std::string::npos);
  }
  // The file is beside the configuration, private to the gateway's user.
  CHECK(std::filesystem::exists(dir.path + "/state.bin"));
  CHECK((std::filesystem::status(dir.path + "/state.bin").permissions() &
         std::filesystem::perms::others_read) == std::filesystem::perms::none);

  gateway_process again(config_path);
  CHECK_MESSAGE(again.process.output().find("restored 3 rows") != std::string::npos,
                again.process.output());
  CHECK(again.status("spent-key") == 429);
  CHECK(again.status() == 429);
  CHECK(again.status("other-key") == 200);  // had one of three: two left
  CHECK(again.status("other-key") == 200);
  CHECK(again.status("other-key") == 429);
  CHECK(again.status("new-key") == 200);
}

TEST_CASE("store.snapshot: after a reload that made a new store, the new one is written") {
  // A changed store.max_keys makes a new store. The snapshots must follow it: the old one
  // empties once its requests end, and written over the file it would lose every quota.
  test_upstream upstream;
  temp_dir dir;
  const std::string snapshot = "{ path: state.bin, interval: 1h }";
  const std::string config_path = dir.write("gw.yaml", daily_config(upstream.port(), snapshot));
  {
    gateway_process gw(config_path);
    dir.write("gw.yaml", daily_config(upstream.port(), snapshot + "\n  max_keys: 5000"));
    gw.process.signal(SIGHUP);
    REQUIRE(gw.process.wait_for_output("reloaded", 10s));
    for (int i = 0; i < 3; ++i) {
      REQUIRE(gw.status("spent-key") == 200);
    }
    CHECK(gw.status("spent-key") == 429);
    gw.stop();
  }
  gateway_process again(config_path);
  CHECK_MESSAGE(again.process.output().find("restored 1 row") != std::string::npos,
                again.process.output());
  CHECK(again.status("spent-key") == 429);
  CHECK(again.status("other-key") == 200);
}

TEST_CASE("store.snapshot: a crash loses at most one interval") {
  test_upstream upstream;
  temp_dir dir;
  const std::string config_path =
      dir.write("gw.yaml", daily_config(upstream.port(), "{ path: state.bin, interval: 1s }"));
  {
    gateway_process gw(config_path);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(gw.status("spent-key") == 200);
    }
    // A snapshot written after the third request: /metrics counts the writes.
    http_client admin(gw.admin);
    auto writes = [&] {
      const std::string needle = "ratewall_snapshot_writes_total{result=\"ok\"} ";
      const std::string body = admin.get("/metrics").body;
      const auto at = body.find(needle);
      return at == std::string::npos ? -1 : std::stoi(body.substr(at + needle.size()));
    };
    const int before = writes();
    REQUIRE(before >= 0);
    REQUIRE(eventually([&] { return writes() >= before + 2; }, 10s));
    gw.process.signal(SIGKILL);
    gw.process.wait_exit(5s);
    gw.stopped = true;
  }
  gateway_process again(config_path);
  CHECK_MESSAGE(again.process.output().find("restored 1 rows") != std::string::npos,
                again.process.output());
  CHECK(again.status("spent-key") == 429);
}

TEST_CASE(
    "store.snapshot: what no longer applies is dropped, and a damaged file never stops "
    "the start") {
  test_upstream upstream;
  temp_dir dir;
  const std::string snapshot = "{ path: state.bin, interval: 1h }";
  const std::string config_path = dir.write("gw.yaml", daily_config(upstream.port(), snapshot));
  {
    gateway_process gw(config_path);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(gw.status("spent-key") == 200);
      REQUIRE(gw.status() == 200);
    }
  }

  SUBCASE("a limit defined otherwise starts afresh") {
    dir.write("gw.yaml", daily_config(upstream.port(), snapshot, 4));
    gateway_process again(config_path);
    CHECK_MESSAGE(
        again.process.output().find("dropped 2 of limits changed since") != std::string::npos,
        again.process.output());
    CHECK(again.status("spent-key") == 200);
  }
  SUBCASE("another hash key: the addresses' state is kept, the keys' cannot be recognised") {
    gateway_process again(config_path, {"RATEWALL_HASH_KEY="});
    CHECK(again.process.output().find("RATEWALL_HASH_KEY is not set") != std::string::npos);
    CHECK_MESSAGE(again.process.output().find("restored 1 rows") != std::string::npos,
                  again.process.output());
    CHECK(again.process.output().find("dropped 1 rows of API keys") != std::string::npos);
    CHECK(again.status() == 429);
    CHECK(again.status("spent-key") == 200);
  }
  SUBCASE("a corrupt file is reported and ignored") {
    std::fstream f(dir.path + "/state.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(70);  // in the rows, past the header
    f.put('\x7f');
    f.close();
    gateway_process again(config_path);
    CHECK_MESSAGE(again.process.output().find("ignored, starting with no limit state: its "
                                              "checksum does not match") != std::string::npos,
                  again.process.output());
    CHECK(again.status("spent-key") == 200);
  }
  SUBCASE("a start that fails leaves the snapshot as it was") {
    const std::string before = read_all(dir.path + "/state.bin");
    // The listen port is taken: the start fails after the snapshot was read.
    boost::asio::io_context ioc;
    boost::asio::ip::tcp::acceptor taken(ioc, {boost::asio::ip::make_address("127.0.0.1"), 0});
    std::string yaml = daily_config(upstream.port(), snapshot);
    const std::string any = "listen: 127.0.0.1:0\n  threads";
    yaml.replace(
        yaml.find(any), any.size(),
        "listen: 127.0.0.1:" + std::to_string(taken.local_endpoint().port()) + "\n  threads");
    dir.write("gw.yaml", yaml);
    child_process failed({RATEWALL_BINARY, "--config", config_path},
                         {"RATEWALL_HASH_KEY=snapshot-test"});
    CHECK(failed.wait_exit(10s) != 0);
    CHECK(read_all(dir.path + "/state.bin") == before);
  }
  SUBCASE("the configuration given as the snapshot's path is refused, and never replaced") {
    // `check` and the start refuse it with its line (the start used to run, writing none).
    dir.write("gw.yaml", daily_config(upstream.port(), "{ path: gw.yaml, interval: 1s }"));
    const std::string yaml = read_all(config_path);
    child_process refused({RATEWALL_BINARY, "--config", config_path},
                          {"RATEWALL_HASH_KEY=snapshot-test"});
    CHECK(refused.wait_exit(10s) == 2);
    CHECK(refused.output().find("store.snapshot.path: " + config_path +
                                " is the configuration file itself") != std::string::npos);
    CHECK(read_all(config_path) == yaml);
  }
  SUBCASE("a file that is not a snapshot is written over once it is moved away") {
    dir.write("state.bin", "{\"not\": \"a snapshot\"}\n");
    dir.write("gw.yaml", daily_config(upstream.port(), "{ path: state.bin, interval: 1s }"));
    gateway_process gw(config_path);
    std::this_thread::sleep_for(2500ms);  // two intervals' writes refused, one error logged
    CHECK(read_all(dir.path + "/state.bin") == "{\"not\": \"a snapshot\"}\n");
    const std::string refused = "no snapshot is written until it is moved away";
    const std::string log = gw.process.output();
    CHECK_MESSAGE(log.find(refused) != std::string::npos, log);
    CHECK(log.find(refused) == log.rfind(refused));
    std::filesystem::rename(dir.path + "/state.bin", dir.path + "/moved.json");
    CHECK(eventually(
        [&] { return read_all(dir.path + "/state.bin").starts_with("ratewall-snapshot\n"); }, 10s));
    CHECK(eventually([&] {
      return gw.process.output().find("was moved away: writing snapshots there again") !=
             std::string::npos;
    }));
  }
  SUBCASE("a file that is not a snapshot is reported and ignored") {
    dir.write("state.bin", "{\"not\": \"a snapshot\"}\n");
    gateway_process again(config_path);
    CHECK(again.process.output().find("not a ratewall snapshot") != std::string::npos);
    CHECK(again.status() == 200);
  }
}
