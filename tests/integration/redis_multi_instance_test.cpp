// Two real ratewall processes on one redis-server: one limit, clients on both gateways at
// once, and exactly the limit admitted in total, for every algorithm. Nothing in Redis
// names a client in clear.

#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <mutex>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/child_process.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

constexpr int k_limit = 20;

// Removed however the test ends.
struct temp_file {
  explicit temp_file(std::string p) : path(std::move(p)) {}
  ~temp_file() { std::remove(path.c_str()); }
  std::string path;
};

// A ratewall process with `yaml` as its configuration and the shared hash secret.
class gateway_process {
 public:
  gateway_process(const std::string& yaml, const std::string& name)
      : file_("/tmp/ratewall-redis-" + std::to_string(::getpid()) + "-" + name + ".yaml") {
    std::ofstream(file_.path) << yaml;
    process_ = std::make_unique<owned_process>(
        std::vector<std::string>{RATEWALL_BINARY, "--config", file_.path},
        std::vector<std::string>{"RATEWALL_HASH_KEY=shared-test-secret"});
    REQUIRE_MESSAGE(process_->wait_for_output("listening on", 10s), process_->output());
    port_ = listening_port(process_->output());
    REQUIRE(port_ != 0);
  }

  std::uint16_t port() const { return port_; }
  std::string output() const { return process_->output(); }

 private:
  temp_file file_;
  std::unique_ptr<owned_process> process_;
  std::uint16_t port_ = 0;
};

struct tally {
  std::atomic<int> ok{0};
  std::atomic<int> limited{0};
  std::atomic<int> other{0};
  std::mutex mutex;
  std::string others;  // the statuses counted in `other`
};

// `clients` threads, alternating between the gateways, each sending `each` requests to
// `target` as `api_key`; every thread starts at the same moment.
void hammer(const std::vector<std::uint16_t>& ports, int clients, int each,
            const std::string& target, const std::string& api_key, tally& t) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      auto count_other = [&](const std::string& what) {
        t.other.fetch_add(1);
        std::lock_guard lock(t.mutex);
        t.others += what + "; ";
      };
      // A thread must not throw (that would abort the test binary): failures are counted.
      try {
        http_client client(ports[static_cast<std::size_t>(c) % ports.size()]);
        ready.fetch_add(1);
        while (ready.load() < clients) {
          std::this_thread::yield();
        }
        for (int i = 0; i < each; ++i) {
          const http_reply r = client.get(target, {{"X-API-Key", api_key}});
          if (r.status == 200) {
            t.ok.fetch_add(1);
          } else if (r.status == 429) {
            t.limited.fetch_add(1);
          } else {
            count_other(std::to_string(r.status) + " " + r.body.substr(0, 200));
          }
        }
      } catch (const std::exception& e) {
        ready.fetch_add(1);
        count_other(e.what());
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
}

std::string config_for(const redis_server& redis, std::uint16_t upstream) {
  std::string yaml = R"(
server: { listen: "127.0.0.1:0", threads: 2 }
admin: { enabled: false }
identity: { unknown_api_key: allow }
store:
  type: redis
  redis: { url: REDIS, timeout: 2s, on_error: deny }  # exactness here, not latency
upstreams:
  api: { targets: [127.0.0.1:UPSTREAM], connect_timeout: 5s, response_timeout: 10s }
routes:
  - name: tb
    match: { path_prefix: /tb }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: token_bucket, rate: 1/h, burst: 20 }]
  - name: lb
    match: { path_prefix: /lb }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: leaky_bucket, rate: 1/h, burst: 19 }]
  - name: fw
    match: { path_prefix: /fw }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: fixed_window, limit: 20, window: 1d }]
  - name: swl
    match: { path_prefix: /swl }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: sliding_window_log, limit: 20, window: 1h }]
  - name: swc
    match: { path_prefix: /swc }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: sliding_window_counter, limit: 20, window: 1d }]
  - name: conc
    match: { path_prefix: /conc }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: concurrency, limit: 5 }]
)";
  yaml = std::regex_replace(yaml, std::regex("REDIS"), redis.url());
  return std::regex_replace(yaml, std::regex("UPSTREAM"), std::to_string(upstream));
}

}  // namespace

TEST_CASE("redis: two gateways on one Redis admit exactly the limit in total, every algorithm") {
  if (!have_program("redis-server")) {
    MESSAGE("redis-server not installed: skipped");
    return;
  }
  redis_server redis;
  test_upstream upstream;
  const std::string yaml = config_for(redis, upstream.port());
  gateway_process a(yaml, "a");
  gateway_process b(yaml, "b");
  const std::vector<std::uint16_t> ports{a.port(), b.port()};

  for (const char* route : {"tb", "lb", "fw", "swl", "swc"}) {
    tally t;
    // 8 clients × 10 requests = 80 attempts at a limit of 20, half through each gateway.
    hammer(ports, 8, 10, std::string("/") + route + "/x", std::string("raw-secret-") + route, t);
    INFO("route " << route);
    CHECK(t.ok.load() == k_limit);
    CHECK(t.limited.load() == 80 - k_limit);
    CHECK(t.other.load() == 0);
  }

  {
    // No raw API key, nor any subject in clear, in KEYS *.
    const redis::reply keys = redis.call({"KEYS", "*"});
    REQUIRE(keys.elements.size() == 5);
    const std::regex shape(R"(rw:v1:\{[0-9a-f]{16}\}:(tb|lb|fw|swl|swc):l:[0-9a-f]{8})");
    for (const auto& k : keys.elements) {
      CHECK_MESSAGE(std::regex_match(k.str, shape), k.str);
      CHECK(k.str.find("raw-secret") == std::string::npos);
      CHECK(k.str.find("key:") == std::string::npos);
    }
    // Both gateways named the client alike: one key per route, not one per gateway.
    CHECK(redis.call({"KEYS", "rw:v1:*:tb:*"}).elements.size() == 1);
  }

  {
    // Concurrency: 5 in flight across both gateways; the units come back afterwards.
    tally t;
    // 16 requests at once, each held 2 s upstream: exactly 5 run.
    hammer(ports, 16, 1, "/conc/slow?ms=2000", "raw-secret-conc", t);
    CHECK_MESSAGE(t.other.load() == 0, t.others);
    CHECK(t.ok.load() == 5);
    CHECK(t.limited.load() == 11);
    // The leases went back: the sorted set of units empties (then disappears).
    bool empty = false;
    for (int i = 0; i < 100 && !empty; ++i) {
      const redis::reply keys = redis.call({"KEYS", "rw:v1:*:conc:*"});
      empty = keys.elements.empty();
      std::this_thread::sleep_for(20ms);
    }
    CHECK(empty);
    tally again;
    hammer(ports, 4, 1, "/conc/x", "raw-secret-conc", again);
    CHECK(again.ok.load() == 4);
  }
}
