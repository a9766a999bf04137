// The Redis store on a 3-primary Redis Cluster made on loopback with redis-cli --cluster
// create: exact limits for subjects spread over the nodes, and a slot moved while requests run
// (MOVED / ASK followed, the count carried along with the key).

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/proxy/gateway.hpp"
#include "ratewall/redis/redis_store.hpp"
#include "support/gateway_harness.hpp"
#include "support/http_client.hpp"
#include "support/redis_server.hpp"
#include "support/test_upstream.hpp"

using namespace ratewall;
using namespace ratewall::testing;
using namespace std::chrono_literals;

namespace {

std::set<std::string> all_keys(redis_cluster& cluster) {
  std::set<std::string> keys;
  for (int i = 0; i < cluster.size(); ++i) {
    for (const auto& k : cluster.node(i).call({"KEYS", "rw:v1:*"}).elements) {
      keys.insert(k.str);
    }
  }
  return keys;
}

/// A configuration on `cluster` (the first node's URL, the others as seeds; on_error: deny):
/// `server`'s threads, the store's `timeout`, then `routes` (upstream `api`).
std::string cluster_config(redis_cluster& cluster, int threads, std::string_view timeout,
                           std::string_view routes) {
  std::string yaml = "server: { threads: " + std::to_string(threads) + R"( }
identity: { unknown_api_key: allow }
store:
  type: redis
  redis:
    url: redis://NODE0
    cluster: true
    seeds: [NODE1, NODE2]
    timeout: )" + std::string(timeout) +
                     R"(
    on_error: deny
upstreams:
  api: { targets: [${UPSTREAM}] }
routes:
)" + std::string(routes);
  for (int i = 0; i < 3; ++i) {
    yaml =
        std::regex_replace(yaml, std::regex("NODE" + std::to_string(i)), cluster.node(i).address());
  }
  return yaml;
}

}  // namespace

TEST_CASE("redis cluster: exact limits across slots; a slot moved under load is followed") {
  if (!have_program("redis-server") || !have_program("redis-cli")) {
    MESSAGE("redis-server or redis-cli not installed: skipped");
    return;
  }
  redis_cluster cluster(3);
  test_upstream upstream;
  const std::string yaml = cluster_config(cluster, 2, "500ms", R"(
  - name: small
    match: { path_prefix: /small }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, rate: 1/h, burst: 20 }]
  - name: big
    match: { path_prefix: /big }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: sliding_window_log, limit: 100, window: 1h }]
)");
  gateway_harness h(yaml, upstream.port());
  auto& store = dynamic_cast<redis_store&>(h.current()->limits().backing_store());

  // 12 subjects, 40 attempts each from 4 clients at once: 20 each, wherever their slot is.
  constexpr int k_subjects = 12;
  std::vector<std::atomic<int>> ok(k_subjects);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        http_client client(h.port());
        for (int round = 0; round < 10; ++round) {
          for (int s = 0; s < k_subjects; ++s) {
            const auto r = client.get("/small/x", {{"X-API-Key", "subject-" + std::to_string(s)}});
            ok[static_cast<std::size_t>(s)] += r.status == 200 ? 1 : 0;
          }
        }
      } catch (const std::exception&) {
        ok[0] += 1000;  // fails the checks below instead of aborting the binary
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (int s = 0; s < k_subjects; ++s) {
    INFO("subject " << s);
    CHECK(ok[static_cast<std::size_t>(s)].load() == 20);
  }
  int nodes_used = 0;
  for (int i = 0; i < cluster.size(); ++i) {
    nodes_used += integer_of(cluster.node(i).call({"DBSIZE"})) > 0 ? 1 : 0;
  }
  CHECK(nodes_used >= 2);
  CHECK(all_keys(cluster).size() == k_subjects);

  // A new subject: find its key and slot, then move that slot while its requests run.
  const std::set<std::string> before = all_keys(cluster);
  http_client first(h.port());
  REQUIRE(first.get("/big/x", {{"X-API-Key", "mover"}}).status == 200);
  std::string key;
  for (const std::string& k : all_keys(cluster)) {
    if (before.count(k) == 0) {
      key = k;
    }
  }
  REQUIRE(!key.empty());
  const auto slot =
      static_cast<std::uint16_t>(integer_of(cluster.node(0).call({"CLUSTER", "KEYSLOT", key})));
  const int from = cluster.owner(slot);
  const int to = (from + 1) % cluster.size();
  const redis_metrics start = store.metrics();

  std::atomic<int> admitted{1};
  std::atomic<int> failed{0};
  threads.clear();
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      try {
        http_client client(h.port());
        for (int i = 0; i < 50; ++i) {
          const auto r = client.get("/big/x", {{"X-API-Key", "mover"}});
          admitted += r.status == 200 ? 1 : 0;
          failed += (r.status != 200 && r.status != 429) ? 1 : 0;
          std::this_thread::sleep_for(4ms);
        }
      } catch (const std::exception&) {
        failed += 1;
      }
    });
  }
  std::this_thread::sleep_for(100ms);
  cluster.move_slot(slot, to);
  for (auto& th : threads) {
    th.join();
  }
  // The MOVED replies also reloaded the slot map (in the background, at most every 250 ms):
  // once it is in, the subject's requests go to the new node directly.
  for (int i = 0; i < 300 && store.metrics().topology_refreshes == start.topology_refreshes; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  const redis_metrics end = store.metrics();
  CHECK(first.get("/big/x", {{"X-API-Key", "mover"}}).status == 429);
  CHECK(store.metrics().redirects == end.redirects);
  MESSAGE("slot " << slot << " moved from node " << from << " to " << to << ": redirects "
                  << end.redirects - start.redirects << ", slot maps loaded "
                  << end.topology_refreshes);
  CHECK(cluster.owner(slot) == to);
  CHECK(integer_of(cluster.node(to).call({"EXISTS", key})) == 1);
  CHECK(admitted.load() == 100);  // 201 attempts, the limit exactly, across the move
  CHECK(failed.load() == 0);
  CHECK(end.redirects > start.redirects);
  CHECK(end.topology_refreshes > start.topology_refreshes);
  CHECK(end.fallback_decisions == 0);
}

TEST_CASE("redis cluster: a node that died after its slot moved away is not asked forever") {
  // A dead node sends no MOVED: the slot map is read again when a node fails, or the breaker's
  // probes would keep going to it and the subject would stay on on_error's answer for good
  // (as after a failover that promoted a replica elsewhere).
  if (!have_program("redis-server") || !have_program("redis-cli")) {
    MESSAGE("redis-server or redis-cli not installed: skipped");
    return;
  }
  redis_cluster cluster(3);
  test_upstream upstream;
  const std::string yaml = cluster_config(cluster, 1, "300ms", R"(
  - name: all
    match: { path_prefix: / }
    upstream: api
    identify_by: [api_key]
    limits: [{ name: l, algorithm: sliding_window_log, limit: 1000, window: 1h }]
)");
  gateway_harness h(yaml, upstream.port());
  auto& store = dynamic_cast<redis_store&>(h.current()->limits().backing_store());

  // A subject whose key is not on node 0 (the url's node, which stays up).
  http_client client(h.port());
  std::string subject;
  std::uint16_t slot = 0;
  int from = 0;
  for (int i = 0; i < 50 && subject.empty(); ++i) {
    const std::set<std::string> before = all_keys(cluster);
    const std::string candidate = "subject-" + std::to_string(i);
    REQUIRE(client.get("/x", {{"X-API-Key", candidate}}).status == 200);
    for (const std::string& k : all_keys(cluster)) {
      if (before.count(k) == 0) {
        slot =
            static_cast<std::uint16_t>(integer_of(cluster.node(0).call({"CLUSTER", "KEYSLOT", k})));
        from = cluster.owner(slot);
        subject = from != 0 ? candidate : "";
      }
    }
  }
  REQUIRE(!subject.empty());
  // The slot goes to node 0, its key along, without the gateway asking anything meanwhile;
  // then its old node dies.
  cluster.move_slot(slot, 0);
  cluster.node(from).kill();
  const redis_metrics start = store.metrics();

  // The first requests find the old node gone (on_error: deny); the map read again sends the
  // next ones to node 0. Within the cluster's node timeout (5 s), before it declares a failure.
  int denied = 0;
  bool admitted = false;
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (!admitted && std::chrono::steady_clock::now() < until) {
    const auto r = client.get("/x", {{"X-API-Key", subject}});
    admitted = r.status == 200;
    denied += admitted ? 0 : 1;
    std::this_thread::sleep_for(20ms);
  }
  const redis_metrics end = store.metrics();
  MESSAGE("slot " << slot << " moved from node " << from << " (then killed) to node 0: " << denied
                  << " requests answered by on_error first, slot maps loaded "
                  << end.topology_refreshes - start.topology_refreshes);
  CHECK(admitted);
  CHECK(end.topology_refreshes > start.topology_refreshes);
  // Each request refused meanwhile was on_error's answer, none Redis's.
  CHECK(end.fallback_decisions - start.fallback_decisions == static_cast<std::uint64_t>(denied));
}
