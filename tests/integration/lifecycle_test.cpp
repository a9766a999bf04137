// The ratewall process over its life: reload on SIGHUP (good file, bad file, state kept, under
// load) and graceful shutdown on SIGTERM.

#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/eventually.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/refusing_port.hpp"
#include "support/temp_dir.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

std::string config_text(std::uint16_t upstream_port, const std::string& limits,
                        const std::string& extra_route = "") {
  return R"(server:
  listen: 127.0.0.1:0
  threads: 2
  drain_timeout: 5s
admin:
  listen: 127.0.0.1:0
upstreams:
  api: { targets: [127.0.0.1:)" +
         std::to_string(upstream_port) + R"(] }
routes:
)" + extra_route +
         R"(  - name: main
    match: { path_prefix: / }
    upstream: api
    limits:
)" + limits;
}

const std::string k_burst_3 = "      - { name: burst, rate: 1/h, burst: 3 }\n";

/// Twenty thousand API keys: the better part of a second to read (seconds under a sanitizer).
std::string many_keys() {
  std::string keys = "plans: { p: {} }\napi_keys:\n";
  for (int i = 0; i < 20'000; ++i) {
    char hex[65];
    std::snprintf(hex, sizeof hex, "%064x", i);
    keys += std::string("  - { key_sha256: ") + hex + ", plan: p }\n";
  }
  return keys;
}

struct running_gateway {
  std::string path;
  child_process process;
  std::uint16_t port = 0;

  running_gateway(const std::string& file, const std::string& text,
                  std::vector<std::string> env = {})
      : path(write(file, text)), process({RATEWALL_BINARY, "--config", path}, std::move(env)) {
    REQUIRE(process.wait_for_output("listening on", 10s));
    port = listening_port(process.output());
    REQUIRE(port != 0);
  }
  ~running_gateway() { std::remove(path.c_str()); }

  static std::string write(const std::string& file, const std::string& text) {
    std::ofstream(file) << text;
    return file;
  }
  void rewrite(const std::string& text) { write(path, text); }
  /// Sends SIGHUP and waits for the log line that says how it went (the n-th such line).
  bool reload_and_wait(const std::string& expect, int nth = 1) {
    process.signal(SIGHUP);
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto out = process.output();
      int seen = 0;
      for (auto at = out.find(expect); at != std::string::npos; at = out.find(expect, at + 1)) {
        ++seen;
      }
      if (seen >= nth) {
        return true;
      }
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }
};

/// `ratewall check` and a start of `path` both refuse it with exit status 2, saying `says`.
void refused_by_check_and_start(const std::string& path, const std::string& says,
                                const std::vector<std::string>& env = {}) {
  child_process check({RATEWALL_BINARY, "check", path}, env);
  CHECK(check.wait_exit(10s) == 2);
  CHECK(check.output().find(says) != std::string::npos);
  child_process start({RATEWALL_BINARY, "--config", path}, env);
  CHECK(start.wait_exit(10s) == 2);
  CHECK(start.output().find(says) != std::string::npos);
}

std::string temp_config(const char* name) {
  return "/tmp/ratewall-lifecycle-" + std::to_string(::getpid()) + "-" + name + ".yaml";
}

}  // namespace

TEST_CASE("SIGHUP with a bad file keeps the running configuration and says why") {
  test_upstream upstream;
  running_gateway gw(temp_config("bad"), config_text(upstream.port(), k_burst_3));
  http_client client(gw.port);
  CHECK(client.get("/a").status == 200);

  gw.rewrite(config_text(upstream.port(), "      - { name: burst, rate: lots, burst: 3 }\n"));
  REQUIRE(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find(gw.path + ":14: routes[0].limits[0].rate:") != std::string::npos);
  // Still the old limits: two more allowed, then 429.
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 429);
  CHECK(gw.process.running());
}

TEST_CASE("SIGHUP to a Redis store without RATEWALL_HASH_KEY is refused, as a start would be") {
  // The process's own secret would name each client apart from the other gateways': every
  // shared limit would count once per gateway.
  test_upstream upstream;
  running_gateway gw(temp_config("hash-key"), config_text(upstream.port(), k_burst_3),
                     {"RATEWALL_HASH_KEY="});
  http_client client(gw.port);
  CHECK(client.get("/a").status == 200);

  gw.rewrite("store:\n  type: redis\n  redis: { url: \"redis://127.0.0.1:1/0\" }\n" +
             config_text(upstream.port(), k_burst_3));
  REQUIRE(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find("RATEWALL_HASH_KEY is not set") != std::string::npos);
  // Still the memory store: two more allowed, then 429.
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 429);
  CHECK(gw.process.running());
}

TEST_CASE("SIGHUP or SIGUSR1 while the gateway starts does not end it") {
  // Start-up waits for Redis's run-time keys on a Redis that never answers (about 1 s, the
  // first load's deadline): a `systemctl reload` or a log rotation then must not kill it.
  const silent_port redis;
  test_upstream upstream;
  const std::string path = running_gateway::write(
      temp_config("early-signal"),
      "store:\n  type: redis\n  redis: { url: \"redis://127.0.0.1:" + std::to_string(redis.port()) +
          "/0\", on_error: allow }\n" + config_text(upstream.port(), k_burst_3));
  child_process process({RATEWALL_BINARY, "--config", path}, {"RATEWALL_HASH_KEY=early-signal"});
  // The gateway has connected to Redis: it is in its start-up's wait.
  REQUIRE(redis.connected(15s));
  REQUIRE(process.running());
  REQUIRE(process.output().find("listening on") == std::string::npos);  // still starting
  process.signal(SIGHUP);
  process.signal(SIGUSR1);
  CHECK(process.wait_for_output("listening on", 15s));
  CHECK(process.running());
  // The reload asked for meanwhile is done once the gateway is up.
  CHECK(process.wait_for_output("reloaded", 10s));
  const std::uint16_t port = listening_port(process.output());
  REQUIRE(port != 0);
  CHECK(http_client(port).get("/a").status == 200);
  process.signal(SIGTERM);
  CHECK(process.wait_exit(15s) == 0);
  std::remove(path.c_str());
}

TEST_CASE("SIGHUP or SIGUSR1 while the gateway reads its configuration does not end it") {
  // The signals come once the gateway has begun to run (it ignores SIGXFSZ, its first act
  // after catching these two), while it still reads many_keys(). Caught only after the
  // reading, they once killed it (exit by SIGHUP, which systemd's Restart=on-failure does not
  // restart).
  test_upstream upstream;
  const std::string path = running_gateway::write(
      temp_config("reading-signal"), many_keys() + config_text(upstream.port(), k_burst_3));
  child_process process({RATEWALL_BINARY, "--config", path});
  auto ignores_sigxfsz = [&process] {  // Linux: the mask of signals ignored
    std::ifstream status("/proc/" + std::to_string(process.pid()) + "/status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigIgn:", 0) == 0) {
        return (std::stoull(line.substr(7), nullptr, 16) >> (SIGXFSZ - 1) & 1) != 0;
      }
    }
    return false;
  };
  REQUIRE(eventually(ignores_sigxfsz, 30s));
  REQUIRE(process.output().find("listening on") == std::string::npos);  // still reading
  process.signal(SIGHUP);
  process.signal(SIGUSR1);
  CHECK(process.wait_for_output("listening on", 30s));
  CHECK(process.running());
  CHECK(process.wait_for_output("reloaded", 30s));  // the reload asked for, once up
  process.signal(SIGTERM);
  CHECK(process.wait_exit(15s) == 0);
  std::remove(path.c_str());
}

TEST_CASE("the admin API answers while a reload reads its configuration") {
  // Every admin request (/healthz too) once waited for the reload to end: a liveness probe
  // during a reload of a million keys would time out.
  test_upstream upstream;
  running_gateway gw(temp_config("admin-during-reload"),
                     many_keys() + config_text(upstream.port(), k_burst_3));
  const std::uint16_t admin = admin_port_of(gw.process.output());
  REQUIRE(admin != 0);
  gw.process.signal(SIGHUP);
  std::this_thread::sleep_for(100ms);
  CHECK(http_client(admin, 30s).get("/healthz").status == 200);
  CHECK(gw.process.output().find("reloaded") == std::string::npos);  // answered first
  CHECK(gw.process.wait_for_output("reloaded", 30s));
}

TEST_CASE("the admin API answers while its own POST /admin/reload reads the configuration") {
  // POST /admin/reload once reloaded on the admin thread: /healthz waited for it, as it did for
  // a SIGHUP's before (reading a million keys, or a slow DNS server's answers).
  test_upstream upstream;
  running_gateway gw(temp_config("admin-post-reload"),
                     many_keys() + config_text(upstream.port(), k_burst_3),
                     {"RATEWALL_ADMIN_TOKEN=reload-token"});
  const std::uint16_t admin = admin_port_of(gw.process.output());
  REQUIRE(admin != 0);
  http_client reloading(admin, 30s);
  reloading.send_raw("POST /admin/reload HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(admin) +
                     "\r\nAuthorization: Bearer reload-token\r\nContent-Length: 0\r\n\r\n");
  std::this_thread::sleep_for(100ms);
  CHECK(http_client(admin, 30s).get("/healthz").status == 200);
  CHECK(gw.process.output().find("reloaded") == std::string::npos);  // answered first
  const http_reply reply = reloading.read_reply();
  CHECK(reply.status == 200);
  CHECK(reply.body.find("\"reloaded\":true") != std::string::npos);
  CHECK(gw.process.wait_for_output("reloaded", 30s));
}

TEST_CASE("SIGHUP with a good file: new routes apply, unchanged limits keep their state") {
  test_upstream upstream;
  running_gateway gw(temp_config("good"), config_text(upstream.port(), k_burst_3));
  http_client client(gw.port);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(client.get("/a").status == 200);
  }
  REQUIRE(client.get("/a").status == 429);

  std::string new_route = R"(  - name: extra
    match: { path_prefix: /extra }
    upstream: api
    limits:
      - { name: tiny, rate: 1/h, burst: 1 }
)";
  gw.rewrite(config_text(upstream.port(), k_burst_3, new_route));
  REQUIRE(gw.reload_and_wait("reloaded"));
  // The client at its limit stays limited: its limit did not change.
  CHECK(client.get("/a").status == 429);
  // The new route exists, with its own limit.
  CHECK(client.get("/extra").status == 200);
  CHECK(client.get("/extra").status == 429);

  // A limit whose definition changes starts afresh.
  gw.rewrite(config_text(upstream.port(), "      - { name: burst, rate: 1/h, burst: 5 }\n"));
  REQUIRE(gw.reload_and_wait("reloaded", 2));
  CHECK(client.get("/a").status == 200);
}

TEST_CASE("SIGHUP that also changes threads still applies the admin API's new settings") {
  test_upstream upstream;
  running_gateway gw(temp_config("admin-hosts"), config_text(upstream.port(), k_burst_3));
  const std::uint16_t admin = admin_port_of(gw.process.output());
  REQUIRE(admin != 0);
  const std::string from_gw_example = "GET /healthz HTTP/1.1\r\nHost: gw.example\r\n\r\n";
  http_client before(admin);
  before.send_raw(from_gw_example);
  CHECK(before.read_reply().status == 403);
  // A restart-only change (threads) beside a setting that applies now (allowed_hosts): the
  // threads stay, the admin API's hosts change. Before, the whole new admin section was
  // dropped, a tightened setting included, with one warning about restarts.
  std::string next = config_text(upstream.port(), k_burst_3);
  next = replace_all(next, "  threads: 2\n", "  threads: 1\n");
  next = replace_all(next, "admin:\n  listen: 127.0.0.1:0\n",
                     "admin:\n  listen: 127.0.0.1:0\n  allowed_hosts: [gw.example]\n");
  gw.rewrite(next);
  REQUIRE(gw.reload_and_wait("reloaded"));
  CHECK(gw.process.output().find("server.threads") != std::string::npos);
  http_client after(admin);
  after.send_raw(from_gw_example);
  CHECK(after.read_reply().status == 200);
}

TEST_CASE("ten reloads under load: no request fails") {
  test_upstream upstream;
  running_gateway gw(temp_config("load"),
                     config_text(upstream.port(), "      - { name: roomy, rate: 100000/s }\n"));
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0};
  std::atomic<int> failed{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 4; ++t) {
    clients.emplace_back([&] {
      http_client client(gw.port);
      // Bounded: at most 20000 requests per client, and the test stops them after the reloads.
      for (int i = 0; i < 20000 && !stop; ++i) {
        if (client.get("/load").status == 200) {
          ++ok;
        } else {
          ++failed;
        }
      }
    });
  }
  for (int i = 1; i <= 10; ++i) {
    REQUIRE(gw.reload_and_wait("reloaded", i));
    std::this_thread::sleep_for(50ms);
  }
  stop = true;
  for (auto& c : clients) {
    c.join();
  }
  CHECK(failed == 0);
  CHECK(ok > 100);
}

TEST_CASE("SIGTERM: in-flight requests finish, new connections are refused, exit 0") {
  test_upstream upstream;
  running_gateway gw(temp_config("term"),
                     config_text(upstream.port(), "      - { name: roomy, rate: 1000/s }\n"));
  http_client idle(gw.port);
  CHECK(idle.get("/before").status == 200);

  http_reply slow_reply;
  std::thread slow([&] {
    http_client client(gw.port);
    slow_reply = client.get("/slow?ms=800");
  });
  std::this_thread::sleep_for(200ms);
  gw.process.signal(SIGTERM);
  slow.join();
  CHECK(slow_reply.status == 200);
  CHECK_FALSE(slow_reply.keep_alive);  // told to close: the gateway is going away
  CHECK(idle.closed_by_peer());        // the idle keep-alive connection was closed at once
  CHECK(gw.process.wait_exit(5s) == 0);
}

namespace {

// drain_timeout: 1s, so SIGTERM must end the process within 2 s whatever is still open.
std::string stop_config(std::uint16_t upstream_port, const std::string& store,
                        const std::string& admin = "admin: { listen: 127.0.0.1:0 }") {
  return R"(server:
  listen: 127.0.0.1:0
  threads: 2
  drain_timeout: 1s
)" + admin +
         "\n" + store + R"(
upstreams:
  api: { targets: [127.0.0.1:)" +
         std::to_string(upstream_port) + R"(], response_timeout: 60s }
routes:
  - name: main
    match: { path_prefix: / }
    upstream: api
    limits:
      - { name: roomy, rate: 1000/s }
)";
}

constexpr auto k_drain_timeout = 1s;
const header_pairs k_admin_auth{{"Authorization", "Bearer stop-token"}};

}  // namespace

TEST_CASE("SIGTERM after an admin call reached Redis: exit 0 within drain_timeout + 1 s") {
  if (!have_program("redis-server")) {
    return;
  }
  redis_server redis;
  test_upstream upstream;
  const std::string path = temp_config("stop-redis");
  running_gateway::write(
      path, stop_config(upstream.port(), "store: { type: redis, redis: { url: \"" + redis.url() +
                                             "\", timeout: 1s } }"));
  child_process gw({RATEWALL_BINARY, "--config", path},
                   {"RATEWALL_HASH_KEY=stop-test", "RATEWALL_ADMIN_TOKEN=stop-token"});
  REQUIRE(gw.wait_for_output("listening on", 10s));
  const std::uint16_t port = listening_port(gw.output());
  const std::uint16_t admin_port = admin_port_of(gw.output());
  REQUIRE(port != 0);
  REQUIRE(admin_port != 0);

  // A proxied request (a worker's Redis connection) and an admin call that reads the subject's
  // state from Redis (a Redis connection on the admin thread's loop).
  http_client client(port);
  CHECK(client.get("/a").status == 200);
  http_client admin(admin_port);
  http_reply limits = admin.get("/admin/limits?subject=ip:127.0.0.1", k_admin_auth);
  REQUIRE(limits.status == 200);
  CHECK(limits.body.find(R"("name":"roomy")") != std::string::npos);

  gw.signal(SIGTERM);
  CHECK(gw.wait_exit(k_drain_timeout + 1s) == 0);
  std::remove(path.c_str());
}

TEST_CASE("SIGTERM with connections held open and a request stalled upstream: exit in time") {
  test_upstream upstream;
  auto run = [&](const std::string& name, const std::string& admin_section) {
    const std::string path = temp_config(name.c_str());
    running_gateway::write(path,
                           stop_config(upstream.port(), "store: { type: memory }", admin_section));
    child_process gw({RATEWALL_BINARY, "--config", path}, {"RATEWALL_ADMIN_TOKEN=stop-token"});
    REQUIRE(gw.wait_for_output("listening on", 10s));
    const std::uint16_t port = listening_port(gw.output());
    REQUIRE(port != 0);

    http_client idle(port);  // keep-alive, idle after one request
    CHECK(idle.get("/before").status == 200);
    http_client partial(port);
    partial.send_raw("GET /half HTTP/1.1\r\nHost: x\r\n");  // a head never finished
    std::optional<http_client> admin;
    if (const std::uint16_t admin_port = admin_port_of(gw.output())) {
      admin.emplace(admin_port);
      CHECK(admin->get("/admin/limits?subject=ip:127.0.0.1", k_admin_auth).status == 200);
    }
    // The upstream answers after a minute: far beyond the drain timeout.
    http_reply stalled_reply;
    std::thread stalled([&] {
      http_client client(port, 20s);
      stalled_reply = client.get("/slow?ms=60000");
    });
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (upstream.count("GET", "/slow") == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(10ms);
    }
    // CHECK, not REQUIRE: `stalled` must be joined whatever happens.
    CHECK(upstream.count("GET", "/slow") == 1);

    gw.signal(SIGTERM);
    CHECK(gw.wait_exit(k_drain_timeout + 1s) == 0);
    stalled.join();
    CHECK(stalled_reply.status == 0);  // cut at the drain timeout, without a response
    std::remove(path.c_str());
  };
  SUBCASE("with the admin API and an admin connection left open") {
    run("stop-held", "admin: { listen: 127.0.0.1:0 }");
  }
  SUBCASE("with the admin API disabled") {
    run("stop-noadmin", "admin: { enabled: false }");
  }
}

TEST_CASE("check refuses, as a start does, what this environment cannot run; both exit 2") {
  // systemd's ExecStartPre=ratewall check must not pass a configuration the start then refuses.
  temp_dir dir;
  const std::string upstream_and_route = R"(
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: r
    upstream: api
)";
  struct refused_case {
    const char* name;
    std::string yaml;
    std::vector<std::string> env;  // what makes it refused
    std::vector<std::string> fixed_env;
    int line;  // the line the error names
    const char* says;
  };
  const refused_case cases[] = {
      {"redis.yaml",
       "admin: { enabled: false }\nstore:\n  type: redis\n" + upstream_and_route,
       {"RATEWALL_HASH_KEY="},
       {"RATEWALL_HASH_KEY=shared-secret"},
       3,
       "store.type is redis but RATEWALL_HASH_KEY is not set"},
      {"password.yaml",
       "admin: { enabled: false }\nstore:\n  type: redis\n  redis:\n    url: "
       "redis://127.0.0.1:1\n    password_env: RATEWALL_TEST_REDIS_PASSWORD\n" +
           upstream_and_route,
       {"RATEWALL_HASH_KEY=shared-secret", "RATEWALL_TEST_REDIS_PASSWORD="},
       {"RATEWALL_HASH_KEY=shared-secret", "RATEWALL_TEST_REDIS_PASSWORD=pw"},
       6,
       "store.redis.password_env: the environment variable RATEWALL_TEST_REDIS_PASSWORD is not "
       "set"},
      {"admin.yaml",
       "admin:\n  token_env: RATEWALL_TEST_ADMIN_TOKEN\n  listen: 0.0.0.0:0\n" + upstream_and_route,
       {"RATEWALL_TEST_ADMIN_TOKEN="},
       {"RATEWALL_TEST_ADMIN_TOKEN=s3cret-token-for-the-test"},
       3,
       "admin.listen 0.0.0.0:0 is not a loopback address and no admin token is set"},
      // A secret in another variable whose value is RATEWALL_HASH_KEY's: whoever holds it could
      // name the clients behind every hash (the loader refuses only the variable's name).
      {"admin-token-is-hash-key.yaml",
       "admin:\n  listen: 127.0.0.1:0\n  token_env: RATEWALL_TEST_ADMIN_TOKEN\n" +
           upstream_and_route,
       {"RATEWALL_HASH_KEY=one-secret-for-everything",
        "RATEWALL_TEST_ADMIN_TOKEN=one-secret-for-everything"},
       {"RATEWALL_HASH_KEY=one-secret-for-everything",
        "RATEWALL_TEST_ADMIN_TOKEN=the-admin-token-alone"},
       3,
       "admin.token_env: the environment variable RATEWALL_TEST_ADMIN_TOKEN holds the same value "
       "as RATEWALL_HASH_KEY"},
      {"redis-password-is-hash-key.yaml",
       "admin: { enabled: false }\nstore:\n  type: redis\n  redis:\n    url: "
       "redis://127.0.0.1:1\n    password_env: RATEWALL_TEST_REDIS_PASSWORD\n" +
           upstream_and_route,
       {"RATEWALL_HASH_KEY=one-secret-for-everything",
        "RATEWALL_TEST_REDIS_PASSWORD=one-secret-for-everything"},
       {"RATEWALL_HASH_KEY=one-secret-for-everything", "RATEWALL_TEST_REDIS_PASSWORD=pw"},
       6,
       "store.redis.password_env: the environment variable RATEWALL_TEST_REDIS_PASSWORD holds the "
       "same value as RATEWALL_HASH_KEY"},
      {"jwt-secret-is-hash-key.yaml",
       "admin: { enabled: false }\nidentity:\n  jwt:\n    hs256_secret_env: "
       "RATEWALL_TEST_JWT_SECRET\n" +
           upstream_and_route,
       {"RATEWALL_HASH_KEY=one-secret-for-everything-0123456789",
        "RATEWALL_TEST_JWT_SECRET=one-secret-for-everything-0123456789"},
       {"RATEWALL_HASH_KEY=one-secret-for-everything-0123456789",
        "RATEWALL_TEST_JWT_SECRET=the-jwt-secret-alone-0123456789abcdef"},
       4,
       "identity.jwt.hs256_secret_env: the environment variable RATEWALL_TEST_JWT_SECRET holds the "
       "same value as RATEWALL_HASH_KEY"},
      // Any two secrets: whoever holds the admin token could mint any client's JWT.
      {"admin-token-is-jwt-secret.yaml",
       "admin:\n  listen: 127.0.0.1:0\n  token_env: RATEWALL_TEST_ADMIN_TOKEN\nidentity:\n  jwt:\n"
       "    hs256_secret_env: RATEWALL_TEST_JWT_SECRET\n" +
           upstream_and_route,
       {"RATEWALL_TEST_ADMIN_TOKEN=one-secret-for-both-0123456789abcdef",
        "RATEWALL_TEST_JWT_SECRET=one-secret-for-both-0123456789abcdef"},
       {"RATEWALL_TEST_ADMIN_TOKEN=one-secret-for-both-0123456789abcdef",
        "RATEWALL_TEST_JWT_SECRET=the-jwt-secret-alone-0123456789abcdef"},
       6,
       "identity.jwt.hs256_secret_env: the environment variable RATEWALL_TEST_JWT_SECRET holds the "
       "same value as the environment variable RATEWALL_TEST_ADMIN_TOKEN (admin.token_env)"},
      // The Redis password written in the URL.
      {"redis-url-password-is-hash-key.yaml",
       "admin: { enabled: false }\nstore:\n  type: redis\n  redis:\n    url: "
       "redis://:one-secret-for-everything@127.0.0.1:1/0\n" +
           upstream_and_route,
       {"RATEWALL_HASH_KEY=one-secret-for-everything"},
       {"RATEWALL_HASH_KEY=another-secret-for-the-hashes"},
       5,
       "store.redis.url: the password in it holds the same value as RATEWALL_HASH_KEY"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.name);
    const std::string path = dir.write(c.name, c.yaml);
    // The file and the line of the setting, as a bad line in the file is named.
    const std::string says = path + ":" + std::to_string(c.line) + ": " + c.says;
    refused_by_check_and_start(path, says, c.env);
    child_process fixed({RATEWALL_BINARY, "check", path}, c.fixed_env);
    CHECK(fixed.wait_exit(10s) == 0);
  }
}

TEST_CASE("a FIFO named as the configuration or a certificate is refused at once, not waited on") {
  // Opening a FIFO for reading blocks until something writes to it: `check` hung, and a reload
  // hung, and held back every later reload and SIGTERM's drain with it.
  test_upstream upstream;
  temp_dir dir;
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  child_process config({RATEWALL_BINARY, "check", fifo});
  CHECK(config.wait_exit(5s) == 2);
  CHECK(config.output().find(fifo + ": cannot read file: not a regular file") != std::string::npos);
  std::string text = config_text(upstream.port(), k_burst_3);
  REQUIRE(text.starts_with("server:\n"));
  text.insert(8,
              "  tls:\n    listen: 127.0.0.1:0\n    certificates: [{ cert: fifo, key: fifo }]\n");
  const std::string with_cert = dir.write("tls.yaml", text);
  child_process cert({RATEWALL_BINARY, "check", with_cert});
  CHECK(cert.wait_exit(5s) == 2);
  CHECK(cert.output().find("not a regular file") != std::string::npos);
  CHECK(cert.output().find("server.tls.certificates[0].cert") != std::string::npos);
}

TEST_CASE("an access log that is a FIFO with no reader is refused at once; with a reader, used") {
  // Opening a FIFO for writing blocks until something reads it: the start, a reload and
  // SIGUSR1's reopen hung on it.
  test_upstream upstream;
  temp_dir dir;
  const std::string fifo = dir.path + "/access.fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string plain = config_text(upstream.port(), k_burst_3);
  std::string to_fifo = plain;
  to_fifo.insert(0, "log: { access: " + fifo + " }\n");

  child_process start({RATEWALL_BINARY, "--config", dir.write("fifo.yaml", to_fifo)});
  CHECK(start.wait_exit(5s) != 0);
  CHECK(start.output().find(":1: log.access: cannot open " + fifo + ": a FIFO with no reader") !=
        std::string::npos);

  running_gateway gw(dir.path + "/gw.yaml", plain);
  gw.rewrite(to_fifo);
  CHECK(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find("a FIFO with no reader") != std::string::npos);
  http_client client(gw.port);
  CHECK(client.get("/before").status == 200);

  // With a reader, the FIFO is the log.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(reader >= 0);
  CHECK(gw.reload_and_wait("reloaded"));
  CHECK(client.get("/through-the-fifo").status == 200);
  std::string lines;
  CHECK(eventually(
      [&] {
        char buf[4096];
        const ssize_t n = ::read(reader, buf, sizeof buf);
        if (n > 0) {
          lines.append(buf, static_cast<std::size_t>(n));
        }
        return lines.find("/through-the-fifo") != std::string::npos;
      },
      5s));
  // The reader goes away: the next write fails with EPIPE, which is said and the lines lost;
  // the signal the kernel sends with it (SIGPIPE) ended the gateway, with no word (hostile
  // review), and the next request got no answer.
  ::close(reader);
  CHECK(client.get("/after-the-reader").status == 200);
  CHECK(gw.process.wait_for_output("access log: write failed: Broken pipe", 5s));
  http_client again(gw.port);
  CHECK(again.get("/still-served").status == 429);  // the fourth of a burst of 3: answered
  CHECK(gw.process.running());
}

TEST_CASE(
    "an access log that cannot be opened is refused by check and the start alike with its line; "
    "a relative one lies beside the configuration") {
  // check passed these, and the start then failed with exit status 1 and no line; a relative
  // path was taken from the working directory (/ under systemd), unlike every other path.
  test_upstream upstream;
  temp_dir dir;
  const std::string plain = config_text(upstream.port(), k_burst_3);
  const std::pair<std::string, std::string> refused[] = {
      {dir.path + "/no-such-folder/access.log", "No such file or directory"},
      {dir.path, "Is a directory"},
  };
  for (const auto& [access, why] : refused) {
    CAPTURE(access);
    const std::string path = dir.write("refused.yaml", "log: { access: " + access + " }\n" + plain);
    const std::string says = path + ":1: log.access: cannot open " + access + ": " + why;
    refused_by_check_and_start(path, says);
  }
  // check finds what it can without opening the log: it creates no file (which would be its
  // user's, not the service's) and would not end a FIFO reader's stream.
  const std::string fresh = dir.write("fresh.yaml", "log: { access: fresh.log }\n" + plain);
  child_process check({RATEWALL_BINARY, "check", fresh});
  CHECK(check.wait_exit(10s) == 0);
  CHECK_FALSE(std::filesystem::exists(dir.path + "/fresh.log"));
  REQUIRE(std::filesystem::create_directory(dir.path + "/etc"));
  running_gateway gw(dir.path + "/etc/gw.yaml", "log: { access: relative.log }\n" + plain);
  http_client client(gw.port);
  CHECK(client.get("/beside-the-configuration").status == 200);
  CHECK(eventually([&] {
    std::ifstream log(dir.path + "/etc/relative.log");
    std::stringstream text;
    text << log.rdbuf();
    return text.str().find("/beside-the-configuration") != std::string::npos;
  }));
}

TEST_CASE("a reload refuses what the next start would refuse, the settings it defers included") {
  // Both reloads said "reloaded" and the running gateway went on; the file then failed
  // `ratewall check` and the next start.
  test_upstream upstream;
  temp_dir dir;
  const std::string plain = config_text(upstream.port(), k_burst_3);
  running_gateway gw(dir.path + "/gw.yaml", plain, {"RATEWALL_TEST_ADMIN_TOKEN="});
  http_client client(gw.port);
  // An admin API other hosts could reach, without its token (admin.listen is the 6th line).
  std::string open_admin = plain;
  const std::string admin = "admin:\n  listen: 127.0.0.1:0\n";
  REQUIRE(open_admin.find(admin) != std::string::npos);
  open_admin.replace(open_admin.find(admin), admin.size(),
                     "admin:\n  listen: 0.0.0.0:0\n  token_env: RATEWALL_TEST_ADMIN_TOKEN\n");
  gw.rewrite(open_admin);
  CHECK(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find(gw.path + ":6: admin.listen 0.0.0.0:0 is not a loopback") !=
        std::string::npos);
  // A TLS listener added (served from the next start) whose certificate is missing.
  std::string with_tls = plain;
  with_tls.insert(with_tls.find("  threads:"),
                  "  tls:\n    listen: 127.0.0.1:0\n    "
                  "certificates: [{ cert: missing.pem, key: missing.pem }]\n");
  gw.rewrite(with_tls);
  CHECK(gw.reload_and_wait("reload refused", 2));
  CHECK(gw.process.output().find("server.tls.certificates[0].cert") != std::string::npos);
  // A store.keys_file (used from the next start) that is a directory.
  gw.rewrite("store:\n  keys_file: " + dir.path + "\n" + plain);
  CHECK(gw.reload_and_wait("reload refused", 3));
  CHECK(gw.process.output().find(":2: store.keys_file: ") != std::string::npos);
  CHECK(gw.process.output().find("reloaded") == std::string::npos);
  CHECK(client.get("/still-served").status == 200);
  gw.rewrite(plain);
  CHECK(gw.reload_and_wait("reloaded"));
}

TEST_CASE("a reload keeps the access log it writes to, saying what the next start would refuse") {
  // A rotation, or a folder removed, must not hold back a limit's change (review): the reload
  // keeps the open log, and says so. A secret another shares is refused as at start.
  test_upstream upstream;
  temp_dir dir;
  REQUIRE(std::filesystem::create_directory(dir.path + "/logs"));
  const std::string plain =
      "log: { access: logs/access.log }\n" + config_text(upstream.port(), k_burst_3);
  running_gateway gw(dir.path + "/gw.yaml", plain,
                     {"RATEWALL_HASH_KEY=one-secret-for-everything",
                      "RATEWALL_TEST_SAME=one-secret-for-everything"});
  std::filesystem::remove_all(dir.path + "/logs");
  CHECK(gw.reload_and_wait("reloaded"));
  CHECK(gw.process.output().find("reload refused") == std::string::npos);
  CHECK(gw.process.output().find("the next start would refuse it: " + gw.path +
                                 ":1: log.access: cannot open " + dir.path + "/logs/access.log") !=
        std::string::npos);
  std::string shared = plain;
  const std::string admin = "admin:\n  listen: 127.0.0.1:0\n";
  REQUIRE(shared.find(admin) != std::string::npos);
  shared.insert(shared.find(admin) + admin.size(), "  token_env: RATEWALL_TEST_SAME\n");
  const int line = static_cast<int>(std::count(shared.begin(),
                                               shared.begin() + shared.find("  token_env"), '\n')) +
                   1;
  gw.rewrite(shared);
  CHECK(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find(gw.path + ":" + std::to_string(line) +
                                 ": admin.token_env: the environment variable RATEWALL_TEST_SAME "
                                 "holds the same value as RATEWALL_HASH_KEY") != std::string::npos);
}

TEST_CASE("a store.keys_file that is a directory is refused by check and the start with its line") {
  // check passed it; the start failed with exit status 1 and no line.
  test_upstream upstream;
  temp_dir dir;
  const std::string path = dir.write("keys.yaml", "store:\n  keys_file: " + dir.path + "\n" +
                                                      config_text(upstream.port(), k_burst_3));
  const std::string says = path + ":2: store.keys_file: the API keys changed at run time would " +
                           "be kept in " + dir.path + ", which is a directory, not a file";
  refused_by_check_and_start(path, says);
  // Nor a FIFO, nor a file in a folder that does not exist (every key change was then 503).
  REQUIRE(::mkfifo((dir.path + "/keys.fifo").c_str(), 0600) == 0);
  const std::string fifo = dir.write(
      "fifo.yaml", "store:\n  keys_file: keys.fifo\n" + config_text(upstream.port(), k_burst_3));
  refused_by_check_and_start(fifo, fifo + ":2: store.keys_file: the API keys changed at run time " +
                                       "would be kept in " + dir.path +
                                       "/keys.fifo, which is not a regular file");
  const std::string nowhere =
      dir.write("nowhere.yaml", "store:\n  keys_file: no-such-folder/keys.jsonl\n" +
                                    config_text(upstream.port(), k_burst_3));
  refused_by_check_and_start(nowhere, nowhere + ":2: store.keys_file: the API keys changed at " +
                                          "run time would be kept in " + dir.path +
                                          "/no-such-folder/keys.jsonl, in a folder that does " +
                                          "not exist");
  // The default file, which no line sets: where it comes from, and what to set instead.
  const std::string by_default = dir.write("default.yaml", config_text(upstream.port(), k_burst_3));
  REQUIRE(std::filesystem::create_directory(dir.path + "/default.keys.jsonl"));
  refused_by_check_and_start(
      by_default, by_default + ": the API keys changed at run time would " + "be kept in " +
                      dir.path + "/default.keys.jsonl, " +
                      "which is a directory, not a file (store.keys_file's " +
                      "default, beside the configuration; set " + "store.keys_file)");
  refused_by_check_and_start(by_default,
                             "in a folder that does not exist (store.keys_file's default in "
                             "$STATE_DIRECTORY; set store.keys_file)",
                             {"STATE_DIRECTORY=" + dir.path + "/no-such-state"});
}

TEST_CASE("a snapshot path in a folder that does not exist is refused by check and the start") {
  // Both passed it, and every snapshot failed, the last one at shutdown included.
  test_upstream upstream;
  temp_dir dir;
  const std::string path =
      dir.write("snapshot.yaml", "store:\n  snapshot: { path: no-such-folder/state.bin }\n" +
                                     config_text(upstream.port(), k_burst_3));
  refused_by_check_and_start(path, path + ":2: store.snapshot.path: the folder " + dir.path +
                                       "/no-such-folder does not exist: no snapshot could be "
                                       "written");
}

TEST_CASE("what the gateway writes is a file it can write, and no other setting's") {
  // Each passed `check` (hostile review): the start then failed with exit status 1 and no
  // line, or ran without snapshots, or wrote its access log into its own configuration.
  test_upstream upstream;
  temp_dir dir;
  const std::string plain = config_text(upstream.port(), k_burst_3);
  REQUIRE(std::filesystem::create_directory(dir.path + "/state"));
  const std::string snapshot_dir =
      dir.write("snapshot-dir.yaml", "store:\n  snapshot: { path: state }\n" + plain);
  refused_by_check_and_start(snapshot_dir, snapshot_dir + ":2: store.snapshot.path: " + dir.path +
                                               "/state is not a regular file: no snapshot could "
                                               "be written");
  const std::string self = dir.write("self.yaml", "log: { access: self.yaml }\n" + plain);
  refused_by_check_and_start(self, self + ":1: log.access: " + self +
                                       " is the configuration file itself: each would write "
                                       "over the other");
  const std::string over = dir.write(
      "over.yaml", "store:\n  keys_file: keys.jsonl\n  snapshot: { path: ./keys.jsonl }\n" + plain);
  refused_by_check_and_start(over, over + ":3: store.snapshot.path: " + dir.path +
                                       "/./keys.jsonl is also store.keys_file");
  const std::string long_name = std::string(300, 'k') + ".jsonl";
  const std::string too_long =
      dir.write("too-long.yaml", "store:\n  keys_file: " + long_name + "\n" + plain);
  refused_by_check_and_start(too_long, too_long + ":2: store.keys_file: the API keys changed at " +
                                           "run time would be kept in " + dir.path + "/" +
                                           long_name +
                                           ", which cannot be read: File name too long");
  const std::string long_snapshot =
      dir.write("long-snapshot.yaml", "store:\n  snapshot: { path: " + long_name + " }\n" + plain);
  refused_by_check_and_start(
      long_snapshot, long_snapshot + ":2: store.snapshot.path: " + dir.path + "/" + long_name +
                         " cannot be read: File name too long: no " + "snapshot could be written");
  // The default keys file (beside the configuration; no line names it): the line of the
  // setting that names it too.
  const std::string on_keys =
      dir.write("on-keys.yaml", "log: { access: on-keys.keys.jsonl }\n" + plain);
  refused_by_check_and_start(on_keys, on_keys + ":1: log.access: " + dir.path +
                                          "/on-keys.keys.jsonl is also the API keys' file");
  // A link to a file in a folder that does not exist: the start's open follows it.
  std::filesystem::create_symlink(dir.path + "/no-such-folder/access.log",
                                  dir.path + "/dangling.log");
  const std::string dangling =
      dir.write("dangling.yaml", "log: { access: dangling.log }\n" + plain);
  refused_by_check_and_start(dangling, dangling + ":1: log.access: cannot open " + dir.path +
                                           "/dangling.log: No such file or directory");
  // A socket, which open(2) cannot open (ENXIO, as a FIFO with no reader).
  const std::string socket_path = dir.path + "/access.sock";
  const int listener = ::socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(listener >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, socket_path.c_str(), sizeof address.sun_path - 1);
  REQUIRE(::bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  const std::string to_socket = dir.write("socket.yaml", "log: { access: access.sock }\n" + plain);
  refused_by_check_and_start(to_socket, to_socket + ":1: log.access: cannot open " + socket_path +
                                            ": a socket, not a file or a FIFO");
  ::close(listener);
}

TEST_CASE("check refuses a keys file its user may not read, or a snapshot it may not replace") {
  // Each passed `check` (hostile review): the start then failed on the keys file with exit
  // status 1 and no line, and every snapshot failed while the gateway ran. Permissions are
  // asked as the gateway's user: as root, the tests run the gateway as nobody (setpriv).
  test_upstream upstream;
  temp_dir dir;
  REQUIRE(::chmod(dir.path.c_str(), 0777) == 0);  // the gateway's user writes beside, too
  const bool root = ::geteuid() == 0;
  // A copy of the binary in the folder: the build's own may sit where nobody cannot reach it.
  const std::string binary = dir.path + "/ratewall";
  std::filesystem::copy_file(RATEWALL_BINARY, binary);
  const auto as_user = [&](std::vector<std::string> argv) {
    if (root) {
      argv.insert(argv.begin(),
                  {"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"});
    }
    return argv;
  };
  const auto refused = [&](const std::string& path, const std::string& says) {
    child_process check(as_user({binary, "check", path}));
    CHECK(check.wait_exit(10s) == 2);
    CHECK_MESSAGE(check.output().find(says) != std::string::npos, check.output());
    child_process start(as_user({binary, "--config", path}));
    CHECK(start.wait_exit(10s) == 2);
    CHECK_MESSAGE(start.output().find(says) != std::string::npos, start.output());
  };
  const std::string plain = config_text(upstream.port(), k_burst_3);
  // A keys file only root may read (as another user: only its owner may write it).
  const std::string secret = dir.write("secret.keys", "");
  REQUIRE(::chmod(secret.c_str(), root ? 0600 : 0200) == 0);
  const std::string keys = dir.write("keys.yaml", "store:\n  keys_file: secret.keys\n" + plain);
  REQUIRE(::chmod(keys.c_str(), 0644) == 0);
  refused(keys, keys + ":2: store.keys_file: the API keys changed at run time would be kept in " +
                    secret + ", which the gateway's user may not read: Permission denied");
  // A snapshot in a folder its user may not write in: the snapshot is written beside, then
  // renamed over the last one.
  REQUIRE(std::filesystem::create_directory(dir.path + "/locked"));
  REQUIRE(::chmod((dir.path + "/locked").c_str(), 0555) == 0);
  const std::string locked =
      dir.write("locked.yaml", "store:\n  snapshot: { path: locked/state.bin }\n" + plain);
  REQUIRE(::chmod(locked.c_str(), 0644) == 0);
  refused(locked, locked + ":2: store.snapshot.path: the gateway's user may not write in " +
                      dir.path + "/locked: Permission denied: no snapshot could be written");
  // Nor one whose temporary file's name would be too long: 246 characters are a name, not
  // with ".PID.tmp" after them.
  const std::string long_name = std::string(246, 's');
  const std::string too_long =
      dir.write("long.yaml", "store:\n  snapshot: { path: " + long_name + " }\n" + plain);
  REQUIRE(::chmod(too_long.c_str(), 0644) == 0);
  refused(too_long, too_long + ":2: store.snapshot.path: the name of " + dir.path + "/" +
                        long_name + " is too long for the temporary file written beside it");
  REQUIRE(::chmod((dir.path + "/locked").c_str(), 0755) == 0);
}

TEST_CASE("a keys file or snapshot that is a dangling link is made where the link points") {
  // The keys file passed check and the start, and every key change was then a 503: "cannot
  // write ...: Too many levels of symbolic links" (hostile review).
  test_upstream upstream;
  temp_dir dir;
  REQUIRE(std::filesystem::create_directory(dir.path + "/state"));
  std::filesystem::create_symlink(dir.path + "/state/keys.jsonl", dir.path + "/keys-link");
  std::filesystem::create_symlink(dir.path + "/state/snapshot.bin", dir.path + "/snapshot-link");
  std::string text = config_text(upstream.port(), k_burst_3);
  text.insert(0,
              "store:\n  keys_file: keys-link\n  snapshot: { path: snapshot-link, interval: 1s "
              "}\nplans: { p: {} }\n");
  running_gateway gw(dir.path + "/gw.yaml", text,
                     {"RATEWALL_ADMIN_TOKEN=link-token-of-thirty-two-bytes-xx"});
  const std::uint16_t admin = admin_port_of(gw.process.output());
  REQUIRE(admin != 0);
  http_client client(admin);
  const auto r = client.request("PUT", "/admin/keys/" + std::string(64, 'a'),
                                {{"Authorization", "Bearer link-token-of-thirty-two-bytes-xx"},
                                 {"Content-Type", "application/json"}},
                                R"({"plan":"p"})");
  CHECK(r.status == 201);
  CHECK(std::filesystem::is_symlink(dir.path + "/keys-link"));
  CHECK(std::filesystem::file_size(dir.path + "/state/keys.jsonl") > 0);
  CHECK(eventually([&] { return std::filesystem::exists(dir.path + "/state/snapshot.bin"); }, 5s));
  CHECK(std::filesystem::is_symlink(dir.path + "/snapshot-link"));
}

TEST_CASE("a short RATEWALL_HASH_KEY or admin token is warned about at start") {
  test_upstream upstream;
  temp_dir dir;
  std::string text = config_text(upstream.port(), k_burst_3);
  text.insert(text.find("admin:\n") + 7, "  token_env: RATEWALL_TEST_ADMIN_TOKEN\n");
  running_gateway short_ones(dir.path + "/short.yaml", text,
                             {"RATEWALL_HASH_KEY=short", "RATEWALL_TEST_ADMIN_TOKEN=tiny-token"});
  CHECK(short_ones.process.output().find("RATEWALL_HASH_KEY has 5 bytes") != std::string::npos);
  CHECK(short_ones.process.output().find(
            "the admin token in RATEWALL_TEST_ADMIN_TOKEN has 10 bytes") != std::string::npos);
  running_gateway long_ones(dir.path + "/long.yaml", text,
                            {"RATEWALL_HASH_KEY=0123456789abcdef0123456789abcdef",
                             "RATEWALL_TEST_ADMIN_TOKEN=fedcba9876543210fedcba9876543210"});
  CHECK(long_ones.process.output().find("bytes: a short") == std::string::npos);
}

TEST_CASE("check takes the file as the gateway does, after --config, and nothing else") {
  // `ratewall check --config F` read "--config" as the file: a new user's first try failed
  // with "--config: cannot read file".
  test_upstream upstream;
  temp_dir dir;
  const std::string path = dir.write("ok.yaml", config_text(upstream.port(), k_burst_3));
  for (const std::vector<std::string>& args : {std::vector<std::string>{"check", path},
                                               {"check", "--config", path},
                                               {"check", "-c", path},
                                               {"check", "--config=" + path}}) {
    CAPTURE(args[1]);
    std::vector<std::string> command{RATEWALL_BINARY};
    command.insert(command.end(), args.begin(), args.end());
    child_process check(command);
    CHECK(check.wait_exit(10s) == 0);
    CHECK(check.output().find(path + ": ok") != std::string::npos);
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"check"},
                                               {"check", "--config"},
                                               {"check", path, path},
                                               {"check", "--verbose", path}}) {
    std::vector<std::string> command{RATEWALL_BINARY};
    command.insert(command.end(), args.begin(), args.end());
    child_process check(command);
    CHECK(check.wait_exit(10s) == 2);
    CHECK(check.output().find("usage: ratewall") != std::string::npos);
  }
}

TEST_CASE("a target name that gives no address: check, start and reload refuse it") {
  // Before, the name was dropped without a word: the gateway started (or reloaded), reported
  // itself ready, and answered 502 to every request for that upstream, even once the name
  // resolved. `.invalid` never resolves (RFC 6761).
  test_upstream upstream;
  const std::string good = config_text(upstream.port(), k_burst_3);
  std::string with_typo = good;
  const std::string api_line =
      "  api: { targets: [127.0.0.1:" + std::to_string(upstream.port()) + "] }\n";
  REQUIRE(with_typo.find(api_line) != std::string::npos);
  with_typo.replace(with_typo.find(api_line), api_line.size(),
                    api_line + "  other:\n    targets:\n      - 127.0.0.1:" +
                        std::to_string(upstream.port()) + "\n      - api-typo.invalid:8000\n");
  const std::string says = ":12: upstreams.other.targets[1]: \"api-typo.invalid\" gives no address";

  temp_dir dir;
  const std::string path = dir.write("typo.yaml", with_typo);
  refused_by_check_and_start(path, path + says);

  running_gateway gw(temp_config("typo"), good);
  http_client client(gw.port);
  CHECK(client.get("/a").status == 200);
  gw.rewrite(with_typo);
  REQUIRE(gw.reload_and_wait("reload refused"));
  CHECK(gw.process.output().find(gw.path + says) != std::string::npos);
  // Still the old configuration, its limit's state kept: two more allowed, then 429.
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 200);
  CHECK(client.get("/a").status == 429);
  CHECK(gw.process.running());
}

TEST_CASE("check prints a configuration's warnings, naming file, line and key, and passes it") {
  temp_dir dir;
  const std::string path = dir.write("regex.yaml", R"(admin: { enabled: false }
upstreams:
  api: { targets: [127.0.0.1:1] }
routes:
  - name: versioned
    match: { path_regex: "^/api/v[0-9]+/" }
    upstream: api
)");
  child_process check({RATEWALL_BINARY, "check", path});
  CHECK(check.wait_exit(10s) == 0);
  CHECK(check.output().find("warning: " + path + ":6: routes[0].match.path_regex: ") !=
        std::string::npos);
  CHECK(check.output().find(path + ": ok") != std::string::npos);
}

TEST_CASE("a second gateway on a port another one listens on refuses to start") {
  // SO_REUSEPORT lets every worker thread bind the port; it must not let a second process in,
  // which would count its own share of the clients' requests against limits of its own.
  test_upstream upstream;
  gateway_harness first(R"(
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
  - name: r
    upstream: api
)",
                        upstream.port());
  temp_dir dir;
  const std::string path = dir.write(
      "second.yaml",
      "admin: { enabled: false }\nserver:\n  listen: 127.0.0.1:" + std::to_string(first.port()) +
          "\n  threads: 2\nupstreams:\n  api: { targets: [127.0.0.1:" +
          std::to_string(upstream.port()) + "] }\nroutes:\n  - name: r\n    upstream: api\n");
  child_process second({RATEWALL_BINARY, "--config", path});
  CHECK(second.wait_exit(10s) != 0);
  CHECK(second.output().find("listen on 127.0.0.1:" + std::to_string(first.port()) +
                             " (another process holds the port") != std::string::npos);
  http_client client(first.port());
  CHECK(client.get("/").status == 200);
}
