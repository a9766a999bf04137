#include "ratewall/redis/redis_store.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <charconv>
#include <cstdlib>
#include <mutex>
#include <random>
#include <stdexcept>
#include <unordered_map>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/execution_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/shared_value.hpp"
#include "ratewall/core/string_hash.hpp"
#include "ratewall/core/use_tuple.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/limit/recent_denials.hpp"
#include "ratewall/redis/cluster.hpp"
#include "ratewall/redis/connection.hpp"
#include "ratewall/redis/crc16.hpp"
#include "ratewall/redis/denied_table.hpp"
#include "ratewall/redis/keys.hpp"
#include "ratewall/redis/scripts.hpp"
#include "ratewall/redis/url.hpp"

namespace ratewall {

namespace asio = boost::asio;
using steady = std::chrono::steady_clock;
using redis::reply;

namespace {

// retry_after of a limit denied because its store failed (on_store_error: deny).
constexpr nanos k_store_error_retry = std::chrono::seconds(1);
// A MOVED reloads the cluster's slot map at most this often (the request itself follows the
// redirect at once).
constexpr nanos k_refresh_interval = std::chrono::milliseconds(250);
constexpr int k_max_redirects = 3;
constexpr nanos k_tryagain_pause = std::chrono::milliseconds(2);
// Checks from one turn of a thread's event loop for one node (one slot on a cluster) are
// decided in one script call, at most this many per call.
constexpr std::size_t k_max_batch = 64;
constexpr std::size_t k_cache_shards = 64;
constexpr std::size_t k_scan_batch = 500;
constexpr nanos k_warn_interval = std::chrono::seconds(10);
// thread_client::run's `script` for commands that are not the limiter script.
constexpr int k_no_script = -1;

std::atomic<std::uint64_t> g_next_store_id{1};

nanos admin_timeout(nanos timeout) {
  return std::max<nanos>(timeout, std::chrono::seconds(1));
}

steady::time_point deadline_after(nanos d) {
  return steady::now() + std::chrono::duration_cast<steady::duration>(d);
}

// The limiter script's mode for a check (redis/scripts.hpp).
char script_mode(charge_mode m) {
  switch (m) {
    case charge_mode::peek:
      return 'p';
    case charge_mode::force:
      return 'f';
    case charge_mode::check:
      break;
  }
  return 'c';
}

std::string random_hex() {
  std::random_device rd;
  const std::uint64_t v = (std::uint64_t{rd()} << 32) ^ rd();
  std::uint8_t bytes[8];
  for (int i = 0; i < 8; ++i) {
    bytes[i] = static_cast<std::uint8_t>(v >> (8 * i));
  }
  return to_hex(bytes, sizeof bytes);
}

std::string command(std::initializer_list<std::string_view> args) {
  return redis::format_command(args);
}

// Deletes the keys that are not concurrency units in flight (sorted sets): a reset keeps them.
constexpr std::string_view k_delete_unless_units = R"lua(
local n = 0
for _, k in ipairs(KEYS) do
  if redis.call('TYPE', k).ok ~= 'zset' then n = n + redis.call('DEL', k) end
end
return n
)lua";

// The limit with its numbers divided among `instances` gateways (on_store_error: local),
// never below what one request of the route can cost.
policy scaled(const policy& p, unsigned instances, std::uint64_t max_cost) {
  return scale_policy(p, 1, instances, max_cost);
}

// A 64-bit hash (FNV-1a for the keys) of what decides a route's limits: each limit's state key and
// the values that decide with that state (a reload can keep the state and make a limit shadow, and
// a key's plan picks other values for the same state). The denied cache's entries are named by it,
// so an entry never answers for limits that decide otherwise, in this configuration or the next.
std::uint64_t limits_hash(std::span<const policy> limits) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](std::uint64_t v) {  // a word at a time
    h = (h ^ v) * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
  };
  for (const policy& p : limits) {
    for (unsigned char c : p.key) {
      h = (h ^ c) * 0x100000001b3ull;
    }
    mix(static_cast<std::uint64_t>(p.algo) | (p.shadow ? 0x100u : 0u) | (p.delay ? 0x200u : 0u));
    mix(p.limit);
    mix(static_cast<std::uint64_t>(p.interval.count()));
    mix(static_cast<std::uint64_t>(p.tolerance.count()));
    mix(static_cast<std::uint64_t>(p.window.count()));
  }
  return h;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// State shared by every thread: settings, nodes and their breakers, the slot map, counters,
// the denied cache, the local fallback store, and the registry of thread clients.

namespace {

struct node_state {
  explicit node_state(redis::node_address a, redis::breaker_options b)
      : address(std::move(a)), name(address.to_string()), breaker(b) {}
  redis::node_address address;
  std::string name;
  redis::circuit_breaker breaker;
};

struct topology {
  redis::slot_map map;
  std::vector<std::shared_ptr<node_state>> nodes;  // parallel to map.primaries()
};

struct cache_shard {
  std::mutex mutex;
  // (subject, limits hash) -> until when it is denied; sized by shared_state's constructor
  redis::denied_table denied{0};
  // The shard's subjects denied in the last top_window; sized by shared_state's constructor.
  recent_denials denials{2, admin_config{}.top_window};
  // denied.size(), read without the lock: most checks find the shard empty (nothing denied)
  std::atomic<std::size_t> denied_entries{0};
};

class thread_client;

struct client_entry {
  std::weak_ptr<thread_client> client;
  bool dead = false;  // its io_context is gone or going: never post to it again
};

// What `run` got.
struct outcome {
  enum class kind { ok, unavailable, timeout, error };
  outcome() = default;
  outcome(kind t, std::vector<reply> r, std::string e, std::vector<decision> d = {})
      : type(t), replies(std::move(r)), error(std::move(e)), decisions(std::move(d)) {}

  kind type = kind::unavailable;
  std::vector<reply> replies;  // ok: the replies to the commands run
  std::string error;
  std::vector<decision> decisions;  // ok, from thread_client::check: the request's decisions
};

}  // namespace

struct redis_store::shared_state : std::enable_shared_from_this<redis_store::shared_state> {
  shared_state(const config& cfg, std::string hash_key, std::size_t cache_capacity);

  std::shared_ptr<node_state> node(const redis::node_address& address);
  std::shared_ptr<node_state> node_for_slot(std::uint16_t slot) const;
  std::shared_ptr<thread_client> client_for(const asio::any_io_executor& ex);

  // The subject's hash tag, an HMAC: remembered per thread, since computing it costs more
  // than the rest of the store's work for a check (about 9,000 instructions).
  std::string tag(std::string_view subject) const;

  // The Redis keys of `limits` for the subject `tag`, one per limit.
  static std::vector<std::string> keys_of(std::string_view tag, std::span<const policy> limits);
  std::uint64_t unit_ttl_us() const {
    return static_cast<std::uint64_t>((slot_ttl.count() + 999) / 1000);
  }

  route_decision fallback(const check_request& req);
  std::optional<route_decision> cached(const check_request& req);
  // `epoch`: cache_epoch when the request was sent. An entry made from a reply to a request
  // sent before a reset is stale, whenever the reply comes.
  void record_denial(const check_request& req, std::span<const decision> decisions,
                     const route_decision& r, std::uint64_t epoch);
  // An allowed request that used the last unit of an exact limit: the requests after it are
  // denied until a unit comes back, which the cache can answer without a round trip.
  void record_exhaustion(const check_request& req, std::span<const decision> decisions,
                         std::uint64_t epoch);
  void remember(cache_shard& s, const check_request& req, nanos exact, std::uint64_t cost,
                std::uint32_t limit_index, const decision& headline, std::uint64_t epoch);
  // Makes every cache entry stale. A reset calls it before its deletes are sent and again once
  // they are done: a check sent in between may have been decided before them.
  void forget_cached() { cache_epoch.fetch_add(1, std::memory_order_acq_rel); }
  std::size_t prune_cache(nanos now);
  cache_shard& shard_of(std::string_view subject) {
    return cache[std::hash<std::string_view>{}(subject) % k_cache_shards];
  }
  // Logs at most once per k_warn_interval: a failing script would otherwise log per request.
  void warn_throttled(const std::string& message) {
    const std::int64_t now = steady::now().time_since_epoch().count();
    std::int64_t last = last_warning.load(std::memory_order_relaxed);
    if (now - last < std::chrono::duration_cast<steady::duration>(k_warn_interval).count() ||
        !last_warning.compare_exchange_strong(last, now)) {
      return;
    }
    log_warn("redis store: " + message);
  }
  std::string next_unit_id() {
    return instance + "-" + std::to_string(next_unit.fetch_add(1, std::memory_order_relaxed));
  }

  const std::uint64_t id = g_next_store_id.fetch_add(1);
  bool cluster = false;
  std::vector<redis::node_address> seeds;
  redis::connection_options connection;
  redis::breaker_options breaker;
  nanos timeout{0};
  nanos connect_timeout{0};
  nanos slot_ttl{0};
  bool denied_cache = true;
  unsigned instances = 1;
  hmac_sha256_key tag_key;
  const std::string instance = random_hex();
  std::atomic<std::uint64_t> next_unit{0};

  const std::string asking_command = command({"ASKING"});

  std::shared_ptr<redis::connection_counters> connection_counters =
      std::make_shared<redis::connection_counters>();
  std::atomic<std::uint64_t> calls{0};
  std::atomic<std::uint64_t> errors{0};
  std::atomic<std::uint64_t> error_replies{0};
  std::atomic<std::uint64_t> fallbacks{0};
  std::atomic<std::uint64_t> breaker_rejections{0};
  std::atomic<std::uint64_t> cache_hits{0};
  std::atomic<std::uint64_t> redirects{0};
  std::atomic<std::uint64_t> topology_refreshes{0};
  std::atomic<std::uint64_t> script_loads{0};
  std::atomic<std::int64_t> last_warning{std::numeric_limits<std::int64_t>::min() / 2};

  std::shared_ptr<memory_store> local;

  mutable std::mutex nodes_mutex;
  std::unordered_map<std::string, std::shared_ptr<node_state>> nodes;
  std::shared_ptr<node_state> first;  // standalone: the server; cluster: the first seed
  shared_value<topology> slots;
  std::atomic<std::int64_t> last_refresh{std::numeric_limits<std::int64_t>::min()};  // steady
  std::atomic<bool> refresh_pending{false};

  std::atomic<std::uint64_t> cache_epoch{0};
  std::array<cache_shard, k_cache_shards> cache;

  std::mutex clients_mutex;
  std::vector<client_entry> clients;
};

namespace {

// ---------------------------------------------------------------------------------------------
// Per io_context: the clients of every Redis store used on it.

class client_service final : public asio::execution_context::service {
 public:
  static asio::execution_context::id id;

  explicit client_service(asio::execution_context& ctx) : asio::execution_context::service(ctx) {}

  std::shared_ptr<thread_client> find(std::uint64_t store) const {
    auto it = clients_.find(store);
    return it == clients_.end() ? nullptr : it->second;
  }
  void add(std::uint64_t store, std::shared_ptr<thread_client> c) {
    clients_[store] = std::move(c);
  }
  void drop(std::uint64_t store);

 private:
  // The io_context is going away: close every client while its services still exist.
  void shutdown() override;

  std::unordered_map<std::uint64_t, std::shared_ptr<thread_client>> clients_;
};

asio::execution_context::id client_service::id;

using outcome_handler = asio::any_completion_handler<void(outcome)>;

// Checks of one turn of the event loop, for one node (one slot on a cluster): one script call.
struct check_batch {
  struct waiter {
    std::span<const policy> limits;  // its share of the reply: a decision per limit
    outcome_handler handler;
  };
  std::shared_ptr<node_state> node;
  std::uint16_t slot = 0;
  redis::script_call call;
  std::vector<waiter> waiters;
  steady::time_point deadline;  // the earliest of its checks'
  nanos now{0};                 // the limiter's clock at the first check, for the breaker
};

// One thread's (one io_context's) side of a store: its connection to each node, the checks
// waiting for this turn's batch, the concurrency units its requests hold, and cluster
// topology refreshes.
class thread_client : public std::enable_shared_from_this<thread_client> {
 public:
  thread_client(asio::any_io_executor ex, asio::execution_context& ctx,
                std::shared_ptr<redis_store::shared_state> shared)
      : ex_(std::move(ex)), ctx_(&ctx), shared_(std::move(shared)), refresh_timer_(ex_) {}

  const asio::any_io_executor& executor() const { return ex_; }
  asio::execution_context& context() const { return *ctx_; }
  std::size_t index() const { return index_; }
  void set_index(std::size_t i) { index_ = i; }

  // Runs `commands` (`replies` RESP commands for one slot) on `node`, following MOVED / ASK
  // (at most k_max_redirects). When `script` is not k_no_script, the commands run the limiter
  // script of those algorithms: on NOSCRIPT it is loaded and run again, once.
  // Foreground calls (checks, admin) report to the nodes' breakers, which already decided
  // that they may go, so they connect at once; background ones (units given back or
  // refreshed) respect the connection's reconnect backoff and leave the breakers alone.
  asio::awaitable<outcome> run(std::shared_ptr<node_state> node, std::string commands,
                               std::size_t replies, int script, steady::time_point deadline,
                               bool background, nanos now);

  // Decides one request (mode 'c') together with the other checks for the same node (and
  // slot) in this turn of the event loop: `ok` brings a decision per limit. `limits` must
  // outlive the wait.
  // `mode`: the script's ('c', 'p' or 'f'); calls of one mode share a batch.
  asio::awaitable<outcome> check(std::shared_ptr<node_state> node, std::uint16_t slot, char mode,
                                 std::vector<std::string> keys, std::span<const policy> limits,
                                 std::uint64_t cost, std::string_view unit,
                                 steady::time_point deadline, nanos now);

  // Concurrency units of this thread's requests, refreshed until released.
  void hold(const std::string& unit, std::vector<std::string> keys);
  void release(const std::string& unit, std::vector<std::string> keys);

  // Reloads the slot map in the background, at most every k_refresh_interval: a request
  // within the interval is served when it ends.
  void request_refresh();
  asio::awaitable<bool> refresh_topology();

  void close();

 private:
  std::shared_ptr<redis::connection> connection_to(const node_state& n);
  void enqueue_check(std::shared_ptr<node_state> node, std::uint16_t slot, char mode,
                     std::vector<std::string> keys, std::span<const policy> limits,
                     std::uint64_t cost, std::string_view unit, steady::time_point deadline,
                     nanos now, outcome_handler handler);
  void flush_checks();
  asio::awaitable<void> run_batch(check_batch batch);
  void complete(outcome_handler handler, outcome o) {
    asio::post(
        ex_, [h = std::move(handler), o = std::move(o)]() mutable { std::move(h)(std::move(o)); });
  }
  void arm_unit_refresh();
  void refresh_units();
  // Sends `commands` for the subject of `key` in the background (releases, refreshes).
  void send_detached(const std::string& key, std::string commands, std::size_t replies, int script);

  asio::any_io_executor ex_;
  asio::execution_context* ctx_;
  std::shared_ptr<redis_store::shared_state> shared_;
  std::size_t index_ = 0;
  bool closed_ = false;
  std::unordered_map<std::string, std::shared_ptr<redis::connection>> connections_;
  std::unordered_map<std::string, std::vector<std::string>> units_;  // unit id -> its keys
  std::vector<check_batch> batches_;                                 // filling during this turn
  bool flush_posted_ = false;
  asio::steady_timer refresh_timer_;
  bool refresh_armed_ = false;
};

void client_service::drop(std::uint64_t store) {
  auto it = clients_.find(store);
  if (it != clients_.end()) {
    it->second->close();
    clients_.erase(it);
  }
}

void client_service::shutdown() {
  for (auto& [store, c] : clients_) {
    c->close();
  }
  clients_.clear();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

redis_store::shared_state::shared_state(const config& cfg, std::string hash_key,
                                        std::size_t cache_capacity)
    : tag_key(hash_key) {
  for (cache_shard& s : cache) {
    s.denied = redis::denied_table((cache_capacity + k_cache_shards - 1) / k_cache_shards);
    s.denials = recent_denials(k_top_subjects / k_cache_shards, cfg.admin.top_window);
  }
  const redis_config& rc = cfg.store.redis;
  std::string error;
  auto url = redis::parse_redis_url(rc.url, &error);
  if (!url) {
    throw std::invalid_argument("store.redis.url: " + error);
  }
  cluster = rc.cluster;
  connection.username = url->username;
  connection.password = url->password;
  if (auto password = password_from_environment(cfg)) {
    connection.password = std::move(*password);
  }
  connection.db = cluster ? 0 : url->db;
  connection.connect_timeout = rc.connect_timeout;
  breaker = {rc.breaker_failures, rc.breaker_cooldown};
  timeout = rc.timeout;
  connect_timeout = rc.connect_timeout;
  slot_ttl = rc.slot_ttl;
  denied_cache = rc.denied_cache;
  instances = std::max(rc.instances, 1u);
  seeds.push_back({url->host, url->port});
  for (const endpoint& e : rc.seeds) {
    seeds.push_back({e.host, e.port});
  }
  first = node(seeds.front());
  local = std::make_shared<memory_store>(cfg);  // max_keys and on_full as a memory store
}

std::shared_ptr<node_state> redis_store::shared_state::node(const redis::node_address& address) {
  const std::string name = address.to_string();
  std::lock_guard lock(nodes_mutex);
  auto& n = nodes[name];
  if (!n) {
    n = std::make_shared<node_state>(address, breaker);
  }
  return n;
}

std::shared_ptr<node_state> redis_store::shared_state::node_for_slot(std::uint16_t slot) const {
  if (cluster) {
    if (auto t = slots.load()) {
      const int owner = t->map.owner(slot);
      if (owner >= 0) {
        return t->nodes[static_cast<std::size_t>(owner)];
      }
    }
  }
  // Standalone, or no map yet: the (first) seed, which redirects when it does not serve it.
  return first;
}

std::shared_ptr<thread_client> redis_store::shared_state::client_for(
    const asio::any_io_executor& ex) {
  asio::execution_context& ctx = asio::query(ex, asio::execution::context);
  auto& service = asio::use_service<client_service>(ctx);
  if (auto c = service.find(id)) {
    return c;
  }
  auto c = std::make_shared<thread_client>(ex, ctx, shared_from_this());
  {
    std::lock_guard lock(clients_mutex);
    c->set_index(clients.size());
    clients.push_back({c, false});
  }
  service.add(id, c);
  return c;
}

namespace {

// At most this many subjects' tags per thread, then the cache starts over: a flood of new
// subjects cannot grow it, and a miss costs what no cache would.
constexpr std::size_t k_tag_cache_entries = 4096;

}  // namespace

std::string redis_store::shared_state::tag(std::string_view subject) const {
  struct cache {
    std::uint64_t owner = 0;  // the store whose key made the entries
    boost::unordered_flat_map<std::string, std::string, string_hash, std::equal_to<>> entries;
  };
  thread_local cache c;
  if (c.owner != id) {
    c.entries.clear();
    c.owner = id;
  }
  if (auto it = c.entries.find(subject); it != c.entries.end()) {
    return it->second;
  }
  if (c.entries.size() >= k_tag_cache_entries) {
    c.entries.clear();
  }
  return c.entries.emplace(std::string(subject), redis::subject_tag(tag_key, subject))
      .first->second;
}

std::vector<std::string> redis_store::shared_state::keys_of(std::string_view tag,
                                                            std::span<const policy> limits) {
  std::vector<std::string> keys;
  keys.reserve(limits.size());
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const std::string& id = limits[i].key;
    keys.push_back(redis::limit_key(tag, id.empty() ? "limit" + std::to_string(i) : id));
  }
  return keys;
}

route_decision redis_store::shared_state::fallback(const check_request& req) {
  fallbacks.fetch_add(1, std::memory_order_relaxed);
  if (req.mode == charge_mode::force) {
    // A reported cost Redis did not take: the limits kept locally take it; the others lose it.
    std::vector<policy> local_limits;
    for (const policy& p : req.limits) {
      if (p.on_store_error == store_failure::local) {
        local_limits.push_back(scaled(p, instances, req.max_cost));
      }
    }
    if (!local_limits.empty()) {
      local->decide({req.subject, req.route, local_limits, req.cost, req.now, req.mode});
    }
    return route_decision{};
  }
  decision_fold fold;
  bool denied = false;
  std::vector<policy> local_limits;
  std::vector<std::uint32_t> local_index;
  for (std::uint32_t i = 0; i < req.limits.size(); ++i) {
    const policy& p = req.limits[i];
    if (p.on_store_error == store_failure::deny) {
      decision d;
      d.allowed = false;
      d.limit = p.limit;
      d.reset_after = k_store_error_retry;
      d.retry_after = k_store_error_retry;
      fold.add(i, d, p.shadow);
      denied = denied || !p.shadow;
    } else if (p.on_store_error == store_failure::local) {
      local_limits.push_back(scaled(p, instances, req.max_cost));
      local_index.push_back(i);
    } else {
      // Unknown state, let through: report the whole quota.
      decision d;
      d.limit = p.limit;
      d.remaining = p.limit;
      fold.add(i, d, p.shadow);
    }
  }
  if (local_limits.empty() || denied) {
    // Denied already: nothing may be charged, the local limits included.
    return fold.finish();
  }
  check_request sub{req.subject, req.route, local_limits, req.cost,
                    req.now,     req.mode,  req.max_cost};
  route_decision local_decision = local->decide(sub);
  if (local_decision.has_limits) {
    fold.add(local_index[local_decision.limit_index], local_decision.headline, false);
  }
  if (local_decision.shadow_denied) {
    decision d;
    d.allowed = false;
    fold.add(local_index[local_decision.shadow_limit_index], d, true);
  }
  route_decision r = fold.finish();
  r.allowed = r.allowed && local_decision.allowed;
  r.delay = r.allowed ? std::max(r.delay, local_decision.delay) : nanos{0};
  r.untracked = local_decision.untracked;
  r.store_full = local_decision.store_full;
  r.slot = std::move(local_decision.slot);
  return r;
}

std::optional<route_decision> redis_store::shared_state::cached(const check_request& req) {
  if (!denied_cache) {
    return std::nullopt;
  }
  cache_shard& s = shard_of(req.subject);
  if (s.denied_entries.load(std::memory_order_relaxed) == 0) {
    return std::nullopt;
  }
  const std::uint64_t limits = limits_hash(req.limits);
  std::lock_guard lock(s.mutex);
  const redis::denied_entry* e = s.denied.find(req.subject, limits, req.now.count(),
                                               cache_epoch.load(std::memory_order_acquire));
  s.denied_entries.store(s.denied.size(), std::memory_order_relaxed);
  if (e == nullptr || req.cost < e->cost || e->limit_index >= req.limits.size()) {
    return std::nullopt;
  }
  cache_hits.fetch_add(1, std::memory_order_relaxed);
  route_decision r;
  r.allowed = false;
  r.has_limits = true;
  r.limit_index = e->limit_index;
  r.headline = e->headline;
  const nanos elapsed{std::max<std::int64_t>(req.now.count() - e->at, 0)};
  r.headline.retry_after =
      std::max(r.headline.retry_after - elapsed, nanos{e->until - req.now.count()});
  r.headline.reset_after = std::max(r.headline.reset_after - elapsed, nanos{0});
  s.denials.add(req.subject, req.now);
  return r;
}

void redis_store::shared_state::record_denial(const check_request& req,
                                              std::span<const decision> decisions,
                                              const route_decision& r, std::uint64_t epoch) {
  cache_shard& s = shard_of(req.subject);
  // The request is denied at least as long as its slowest exact denial: concurrency units
  // free up at any moment, and an impossible cost is not worth remembering.
  nanos exact{0};
  for (std::size_t i = 0; i < decisions.size(); ++i) {
    const decision& d = decisions[i];
    if (!d.allowed && !req.limits[i].shadow && !d.impossible &&
        req.limits[i].algo != algorithm::concurrency) {
      exact = std::max(exact, d.retry_after);
    }
  }
  std::lock_guard lock(s.mutex);
  s.denials.add(req.subject, req.now);
  if (!denied_cache || exact <= nanos{0}) {
    return;
  }
  remember(s, req, exact, req.cost, r.limit_index, r.headline, epoch);
}

void redis_store::shared_state::record_exhaustion(const check_request& req,
                                                  std::span<const decision> decisions,
                                                  std::uint64_t epoch) {
  if (!denied_cache) {
    return;
  }
  nanos exact{0};
  std::uint32_t index = 0;
  for (std::uint32_t i = 0; i < decisions.size(); ++i) {
    if (req.limits[i].shadow) {
      continue;
    }
    const nanos wait = redis::exhausted_for(req.limits[i], decisions[i]);
    if (wait > exact) {
      exact = wait;
      index = i;
    }
  }
  if (exact <= nanos{0}) {
    return;
  }
  // The answer the script would give the next request: that limit, nothing left.
  decision headline = decisions[index];
  headline.allowed = false;
  headline.delay = nanos{0};
  headline.retry_after = exact;
  cache_shard& s = shard_of(req.subject);
  std::lock_guard lock(s.mutex);
  remember(s, req, exact, 1, index, headline, epoch);
}

// Under the shard's lock.
void redis_store::shared_state::remember(cache_shard& s, const check_request& req, nanos exact,
                                         std::uint64_t cost, std::uint32_t limit_index,
                                         const decision& headline, std::uint64_t epoch) {
  if (epoch != cache_epoch.load(std::memory_order_acquire)) {
    return;  // sent before a reset: stale already
  }
  redis::denied_entry e;
  e.at = req.now.count();
  e.until = req.now.count() + exact.count();
  e.cost = cost;
  e.epoch = epoch;
  e.limit_index = limit_index;
  e.headline = headline;
  s.denied.remember(req.subject, limits_hash(req.limits), e);
  s.denied_entries.store(s.denied.size(), std::memory_order_relaxed);
}

std::size_t redis_store::shared_state::prune_cache(nanos now) {
  std::size_t dropped = 0;
  for (cache_shard& s : cache) {
    std::lock_guard lock(s.mutex);
    dropped += s.denied.prune(now.count(), cache_epoch.load(std::memory_order_acquire));
    s.denied_entries.store(s.denied.size(), std::memory_order_relaxed);
    s.denials.prune(now);
  }
  return dropped;
}

// ---------------------------------------------------------------------------------------------

namespace {

std::shared_ptr<redis::connection> thread_client::connection_to(const node_state& n) {
  auto& c = connections_[n.name];
  if (!c) {
    c = redis::connection::create(ex_, n.address, shared_->connection,
                                  shared_->connection_counters);
  }
  return c;
}

asio::awaitable<outcome> thread_client::run(std::shared_ptr<node_state> node, std::string commands,
                                            std::size_t replies, int script,
                                            steady::time_point deadline, bool background,
                                            nanos now) {
  auto self = shared_from_this();
  redis_store::shared_state& s = *shared_;
  bool asking = false;
  bool load = false;
  int redirects = 0;
  for (;;) {
    if (closed_) {
      co_return outcome{outcome::kind::unavailable, {}, "closed"};
    }
    std::string payload;
    std::size_t skip = 0;
    if (load) {
      payload += command({"SCRIPT", "LOAD", redis::limiter_script(static_cast<unsigned>(script))});
      ++skip;
    }
    if (asking) {
      payload += s.asking_command;
      ++skip;
    }
    payload += commands;
    auto conn = connection_to(*node);
    s.calls.fetch_add(1, std::memory_order_relaxed);
    redis::call_result r =
        co_await conn->call(std::move(payload), replies + skip, deadline, !background);
    if (r.status != redis::call_status::ok) {
      if (!background) {
        node->breaker.record_failure(now);
      }
      // The node may be gone for good and its slots served by another (a promoted replica, a
      // slot moved while nobody asked): a dead node sends no MOVED, so the map is read again.
      request_refresh();
      co_return outcome{r.status == redis::call_status::timeout ? outcome::kind::timeout
                                                                : outcome::kind::unavailable,
                        {},
                        {}};
    }
    const reply& first = r.replies[skip];
    const std::string_view code = first.error_code();
    if (code == "LOADING" || code == "MASTERDOWN" || code == "CLUSTERDOWN" || code == "BUSY" ||
        code == "READONLY" || code == "MISCONF" || code == "NOAUTH") {
      // Up, but not serving: as good as down for the breaker. READONLY is a primary demoted to
      // a replica, MISCONF one that refuses writes it cannot persist, NOAUTH one whose password
      // the gateway does not have. In a failover the map changes.
      if (!background) {
        node->breaker.record_failure(now);
      }
      if (code == "CLUSTERDOWN" || code == "READONLY") {
        request_refresh();
      }
      s.error_replies.fetch_add(1, std::memory_order_relaxed);
      co_return outcome{outcome::kind::error, {}, first.str};
    }
    if (!background) {
      node->breaker.record_success();
    }
    if (load && r.replies[0].is_error()) {
      s.error_replies.fetch_add(1, std::memory_order_relaxed);
      co_return outcome{outcome::kind::error, {}, "SCRIPT LOAD: " + r.replies[0].str};
    }
    if (code == "NOSCRIPT" && script != k_no_script && !load) {
      // The server lost its scripts (restart, SCRIPT FLUSH, failover): load and run again,
      // in one round trip.
      s.script_loads.fetch_add(1, std::memory_order_relaxed);
      load = true;
      continue;
    }
    if (code == "MOVED" || code == "ASK") {
      auto to = redis::parse_redirect(first, node->address);
      if (!to || ++redirects > k_max_redirects) {
        s.error_replies.fetch_add(1, std::memory_order_relaxed);
        co_return outcome{outcome::kind::error, {}, first.str};
      }
      s.redirects.fetch_add(1, std::memory_order_relaxed);
      if (to->type == redis::redirect::kind::moved) {
        request_refresh();
      }
      node = s.node(to->to);
      asking = to->type == redis::redirect::kind::ask;
      load = false;
      if (!background && node->breaker.try_acquire(now) == redis::circuit_breaker::admit::no) {
        co_return outcome{outcome::kind::unavailable, {}, "breaker open"};
      }
      continue;
    }
    if (code == "TRYAGAIN" && ++redirects <= k_max_redirects &&
        steady::now() + k_tryagain_pause < deadline) {
      // A multi-key call during a slot migration with only some keys moved: soon settled.
      asio::steady_timer pause(ex_, k_tryagain_pause);
      co_await pause.async_wait(use_tuple);
      continue;
    }
    outcome out{outcome::kind::ok, {}, {}};
    out.replies.assign(
        std::make_move_iterator(r.replies.begin() + static_cast<std::ptrdiff_t>(skip)),
        std::make_move_iterator(r.replies.end()));
    co_return out;
  }
}

asio::awaitable<outcome> thread_client::check(std::shared_ptr<node_state> node, std::uint16_t slot,
                                              char mode, std::vector<std::string> keys,
                                              std::span<const policy> limits, std::uint64_t cost,
                                              std::string_view unit, steady::time_point deadline,
                                              nanos now) {
  auto self = shared_from_this();
  co_return co_await asio::async_initiate<const asio::deferred_t&, void(outcome)>(
      [&](auto handler) {
        enqueue_check(std::move(node), slot, mode, std::move(keys), limits, cost, unit, deadline,
                      now, outcome_handler(std::move(handler)));
      },
      asio::deferred);
}

void thread_client::enqueue_check(std::shared_ptr<node_state> node, std::uint16_t slot, char mode,
                                  std::vector<std::string> keys, std::span<const policy> limits,
                                  std::uint64_t cost, std::string_view unit,
                                  steady::time_point deadline, nanos now, outcome_handler handler) {
  if (closed_) {
    complete(std::move(handler), outcome{outcome::kind::unavailable, {}, "closed"});
    return;
  }
  // A cluster runs a script only on keys of one slot.
  const bool by_slot = shared_->cluster;
  check_batch* batch = nullptr;
  for (check_batch& b : batches_) {
    if (b.node == node && (!by_slot || b.slot == slot) && b.call.mode() == mode &&
        b.waiters.size() < k_max_batch) {
      batch = &b;
      break;
    }
  }
  if (batch == nullptr) {
    batch = &batches_.emplace_back(check_batch{
        node, slot, redis::script_call(mode, -1, shared_->unit_ttl_us()), {}, deadline, now});
  }
  if (!batch->call.add(std::move(keys), limits, cost, unit)) {
    // Unreachable with a validated configuration. A batch left empty runs nothing (see
    // flush_checks) and takes its deadline from its first waiter.
    complete(std::move(handler),
             outcome{outcome::kind::error, {}, "a limit or cost is too large for the script"});
    return;
  }
  if (batch->waiters.empty()) {
    batch->deadline = deadline;
    batch->now = now;
  } else {
    batch->deadline = std::min(batch->deadline, deadline);
  }
  batch->waiters.push_back({limits, std::move(handler)});
  if (!flush_posted_) {
    // Runs after the handlers already queued: the checks of this turn join the batch.
    flush_posted_ = true;
    asio::post(ex_, [self = shared_from_this()] { self->flush_checks(); });
  }
}

void thread_client::flush_checks() {
  flush_posted_ = false;
  std::vector<check_batch> batches = std::move(batches_);
  batches_.clear();
  for (check_batch& b : batches) {
    if (!b.waiters.empty()) {
      asio::co_spawn(ex_, run_batch(std::move(b)), log_failure{"Redis batch"});
    }
  }
}

asio::awaitable<void> thread_client::run_batch(check_batch batch) {
  auto self = shared_from_this();
  std::string cmd;
  batch.call.append_to(cmd);
  outcome o = co_await run(batch.node, std::move(cmd), 1, static_cast<int>(batch.call.algorithms()),
                           batch.deadline, false, batch.now);
  std::size_t total = 0;
  for (const check_batch::waiter& w : batch.waiters) {
    total += w.limits.size() * redis::k_script_values_per_decision;
  }
  if (o.type == outcome::kind::ok &&
      (o.replies[0].type != reply::kind::array || o.replies[0].elements.size() != total)) {
    if (o.replies[0].is_error()) {
      shared_->error_replies.fetch_add(1, std::memory_order_relaxed);
    }
    o = outcome{outcome::kind::error,
                {},
                "unexpected reply to the limiter script: " +
                    (o.replies[0].is_error() ? o.replies[0].str : std::string("not decisions"))};
  }
  if (o.type != outcome::kind::ok) {
    for (check_batch::waiter& w : batch.waiters) {
      complete(std::move(w.handler), outcome{o.type, {}, o.error});
    }
    co_return;
  }
  std::span<const reply> values = o.replies[0].elements;
  for (check_batch::waiter& w : batch.waiters) {
    const std::size_t n = w.limits.size() * redis::k_script_values_per_decision;
    auto decisions = redis::decode_decisions(values.first(n), w.limits);
    values = values.subspan(n);
    if (!decisions) {
      complete(std::move(w.handler),
               outcome{outcome::kind::error,
                       {},
                       "a reply to the limiter script that is not its decisions (a value of "
                       "the wrong type or out of range)",
                       {}});
      continue;
    }
    complete(std::move(w.handler), outcome{outcome::kind::ok, {}, {}, std::move(*decisions)});
  }
}

void thread_client::send_detached(const std::string& key, std::string commands, std::size_t replies,
                                  int script) {
  if (closed_) {
    return;
  }
  auto node = shared_->node_for_slot(redis::key_slot(key));
  const nanos now{std::chrono::duration_cast<nanos>(steady::now().time_since_epoch())};
  asio::co_spawn(
      ex_,
      [](std::shared_ptr<thread_client> self, std::shared_ptr<node_state> node, std::string cmds,
         std::size_t n, int script, nanos now) -> asio::awaitable<void> {
        const auto deadline = deadline_after(admin_timeout(self->shared_->timeout));
        co_await self->run(std::move(node), std::move(cmds), n, script, deadline, true, now);
      }(shared_from_this(), std::move(node), std::move(commands), replies, script, now),
      log_failure{"Redis command"});
}

void thread_client::hold(const std::string& unit, std::vector<std::string> keys) {
  units_[unit] = std::move(keys);
  arm_unit_refresh();
}

void thread_client::release(const std::string& unit, std::vector<std::string> keys) {
  units_.erase(unit);
  if (keys.empty()) {
    return;
  }
  std::string cmds;
  for (const std::string& key : keys) {
    redis::append_command(cmds, std::initializer_list<std::string_view>{"ZREM", key, unit});
  }
  const std::string first = keys.front();
  send_detached(first, std::move(cmds), keys.size(), k_no_script);
}

void thread_client::arm_unit_refresh() {
  if (refresh_armed_ || closed_ || units_.empty()) {
    return;
  }
  refresh_armed_ = true;
  refresh_timer_.expires_after(shared_->slot_ttl / 3);
  refresh_timer_.async_wait([self = shared_from_this()](boost::system::error_code ec) {
    self->refresh_armed_ = false;
    if (ec || self->closed_) {
      return;
    }
    self->refresh_units();
    self->arm_unit_refresh();
  });
}

void thread_client::refresh_units() {
  for (const auto& [unit, keys] : units_) {
    redis::script_call call('r', -1, shared_->unit_ttl_us());
    call.add(keys, {}, 0, unit);
    std::string cmd;
    call.append_to(cmd);
    send_detached(keys.front(), std::move(cmd), 1, static_cast<int>(call.algorithms()));
  }
}

void thread_client::request_refresh() {
  redis_store::shared_state& s = *shared_;
  if (!s.cluster || closed_) {
    return;
  }
  // One refresh at a time, queued or running: a burst of MOVED replies loads the map once.
  if (s.refresh_pending.exchange(true)) {
    return;
  }
  const std::int64_t now = steady::now().time_since_epoch().count();
  const std::int64_t last = s.last_refresh.load(std::memory_order_relaxed);
  const std::int64_t wait = std::max<std::int64_t>(
      last == std::numeric_limits<std::int64_t>::min()
          ? 0
          : std::chrono::duration_cast<steady::duration>(k_refresh_interval).count() - (now - last),
      0);
  asio::co_spawn(
      ex_,
      [](std::shared_ptr<thread_client> self, steady::duration wait) -> asio::awaitable<void> {
        redis_store::shared_state& s = *self->shared_;
        // Cleared however the coroutine ends, its io_context's destruction included.
        struct clear_pending {
          redis_store::shared_state& s;
          ~clear_pending() { s.refresh_pending.store(false); }
        } guard{s};
        if (wait > steady::duration::zero()) {
          asio::steady_timer pause(self->ex_, wait);
          co_await pause.async_wait(use_tuple);
        }
        s.last_refresh.store(steady::now().time_since_epoch().count(), std::memory_order_relaxed);
        co_await self->refresh_topology();
      }(shared_from_this(), steady::duration(wait)),
      log_failure{"Redis topology refresh"});
}

asio::awaitable<bool> thread_client::refresh_topology() {
  auto self = shared_from_this();
  redis_store::shared_state& s = *shared_;
  std::vector<std::shared_ptr<node_state>> candidates;
  if (auto t = s.slots.load()) {
    candidates = t->nodes;
  }
  for (const redis::node_address& seed : s.seeds) {
    candidates.push_back(s.node(seed));
  }
  static const std::string k_slots = command({"CLUSTER", "SLOTS"});
  static const std::string k_shards = command({"CLUSTER", "SHARDS"});
  std::string last_error = "no node answered";
  for (const auto& n : candidates) {
    if (closed_) {
      co_return false;
    }
    auto conn = connection_to(*n);
    const auto deadline = deadline_after(admin_timeout(s.timeout));
    s.calls.fetch_add(1, std::memory_order_relaxed);
    auto r = co_await conn->call(k_slots, 1, deadline, true);
    if (r.status != redis::call_status::ok) {
      continue;
    }
    std::optional<redis::slot_map> map =
        redis::slot_map::from_cluster_slots(r.replies[0], n->address, &last_error);
    if (!map) {
      // CLUSTER SLOTS is deprecated since Redis 7: a server may have dropped it.
      s.calls.fetch_add(1, std::memory_order_relaxed);
      auto shards = co_await conn->call(k_shards, 1, deadline, true);
      if (shards.status == redis::call_status::ok) {
        map = redis::slot_map::from_cluster_shards(shards.replies[0], n->address, &last_error);
      }
    }
    if (!map || map->covered() == 0) {
      continue;
    }
    auto t = std::make_shared<topology>();
    for (const redis::node_address& primary : map->primaries()) {
      t->nodes.push_back(s.node(primary));
    }
    t->map = std::move(*map);
    s.slots.store(std::move(t));
    s.topology_refreshes.fetch_add(1, std::memory_order_relaxed);
    co_return true;
  }
  log_warn("redis cluster: cannot load the slot map: " + last_error);
  co_return false;
}

void thread_client::close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  {
    std::lock_guard lock(shared_->clients_mutex);
    if (index_ < shared_->clients.size()) {
      shared_->clients[index_].dead = true;
    }
  }
  for (auto& [name, c] : connections_) {
    c->close();
  }
  connections_.clear();
  units_.clear();
  refresh_timer_.cancel();
  // Checks still waiting for this turn's batch: their coroutines hold this client, so keeping
  // them would keep it alive. They are answered as if Redis were unreachable.
  for (check_batch& b : batches_) {
    for (check_batch::waiter& w : b.waiters) {
      complete(std::move(w.handler), outcome{outcome::kind::unavailable, {}, "closed"});
    }
  }
  batches_.clear();
}

// The lease token of Redis concurrency units: thread client, unit id, then the keys.
std::string make_token(std::size_t client, const std::string& unit,
                       const std::vector<std::string>& keys) {
  std::string token = std::to_string(client);
  token += '\x1f';
  token += unit;
  for (const std::string& k : keys) {
    token += '\x1f';
    token += k;
  }
  return token;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

redis_store::redis_store(const config& cfg, std::string hash_key, std::size_t denied_cache_capacity)
    : state_(std::make_shared<shared_state>(cfg, std::move(hash_key), denied_cache_capacity)) {
  validate(cfg);
}

std::optional<std::string> redis_store::password_from_environment(const config& cfg) {
  const redis_config& rc = cfg.store.redis;
  if (rc.password_env.empty()) {
    return std::nullopt;
  }
  const char* password = std::getenv(rc.password_env.c_str());
  if (password == nullptr || *password == 0) {
    throw config_error(cfg.source, rc.password_env_at.line, rc.password_env_at.key_path,
                       "the environment variable " + rc.password_env + " is not set (or empty)");
  }
  return password;
}

void redis_store::validate(const config& cfg) {
  for (const route_config& route : cfg.routes) {
    const std::uint64_t most = max_cost(route);
    for (const limit_config& limit : route.limits) {
      std::vector<std::pair<std::string, const limit_override*>> variants{{"", nullptr}};
      for (const auto& [plan, values] : limit.plans) {
        variants.emplace_back(plan, &values);
      }
      for (const auto& [plan, variant] : variants) {
        policy p;
        try {
          p = resolve_policy(limit, variant, route.shadow, cfg.store.redis.on_error);
        } catch (const std::invalid_argument&) {
          continue;  // the limiter reports it
        }
        redis::script_call call('c', -1, 0);
        if (!call.add(shared_state::keys_of("", std::span<const policy>(&p, 1)),
                      std::span<const policy>(&p, 1), most, "")) {
          throw std::invalid_argument(
              cfg.source + ": route '" + route.name + "' limit '" + limit.name + "'" +
              (plan.empty() ? "" : " for plan '" + plan + "'") +
              ": too large for the Redis store (counts, costs and spans in microseconds must "
              "stay below 2^49)");
        }
      }
    }
  }
}

redis_store::~redis_store() {
  // Each thread's client lives on its io_context: close it there. A client whose io_context
  // is gone was closed by its service already.
  std::lock_guard lock(state_->clients_mutex);
  for (client_entry& e : state_->clients) {
    if (e.dead) {
      continue;
    }
    auto c = e.client.lock();
    if (!c) {
      continue;
    }
    e.dead = true;
    asio::post(c->executor(),
               [c, id = state_->id] { asio::use_service<client_service>(c->context()).drop(id); });
  }
}

std::optional<route_decision> redis_store::try_check(const check_request& req) {
  shared_state& s = *state_;
  // A forced charge must reach Redis: a cached denial says nothing about it.
  if (req.mode != charge_mode::force) {
    if (auto hit = s.cached(req)) {
      return hit;
    }
  }
  std::shared_ptr<node_state> node = s.first;
  if (s.cluster) {
    node = s.node_for_slot(redis::crc16(s.tag(req.subject)) & (redis::k_cluster_slots - 1));
  }
  if (node->breaker.refusing(req.now)) {
    s.breaker_rejections.fetch_add(1, std::memory_order_relaxed);
    return s.fallback(req);
  }
  return std::nullopt;
}

boost::asio::awaitable<route_decision> redis_store::check(const check_request& req) {
  shared_state& s = *state_;
  if (req.mode != charge_mode::force) {
    if (auto hit = s.cached(req)) {
      co_return std::move(*hit);
    }
  }
  const std::string tag = s.tag(req.subject);
  const auto slot = static_cast<std::uint16_t>(redis::crc16(tag) & (redis::k_cluster_slots - 1));
  std::shared_ptr<node_state> node = s.node_for_slot(slot);
  // Closed: go. Open: answer now. Cooling down: this request may be the one probe.
  if (node->breaker.try_acquire(req.now) == redis::circuit_breaker::admit::no) {
    s.breaker_rejections.fetch_add(1, std::memory_order_relaxed);
    co_return s.fallback(req);
  }
  const auto deadline = deadline_after(s.timeout);
  const std::uint64_t epoch = s.cache_epoch.load(std::memory_order_acquire);
  auto ex = co_await asio::this_coro::executor;
  std::shared_ptr<thread_client> client = s.client_for(ex);
  if (s.cluster && !s.slots.load()) {
    client->request_refresh();
  }

  const bool units = std::any_of(req.limits.begin(), req.limits.end(),
                                 [](const policy& p) { return p.algo == algorithm::concurrency; });
  const std::string unit = units ? s.next_unit_id() : std::string();
  std::vector<std::string> keys = shared_state::keys_of(tag, req.limits);
  // The keys go into the batch's command; the units' are needed afterwards.
  std::vector<std::string> unit_keys;
  if (units) {
    unit_keys = keys;
  }
  outcome o = co_await client->check(node, slot, script_mode(req.mode), std::move(keys), req.limits,
                                     req.cost, unit, deadline, req.now);
  if (o.type != outcome::kind::ok) {
    s.errors.fetch_add(1, std::memory_order_relaxed);
    if (o.type == outcome::kind::error) {
      s.warn_throttled(o.error + "; on_store_error decides");
    }
    if (units) {
      // A check that timed out may still run (it was written, or waits in the connection's
      // queue): its unit would hold a slot until slot_ttl for a request that never had one.
      // Removed after it, in order on the same connection; a no-op where it never ran.
      std::vector<std::string> taken;
      for (std::uint32_t i = 0; i < req.limits.size(); ++i) {
        if (req.limits[i].algo == algorithm::concurrency) {
          taken.push_back(unit_keys[i]);
        }
      }
      client->release(unit, std::move(taken));
    }
    co_return s.fallback(req);
  }
  const std::vector<decision>& decisions = o.decisions;

  decision_fold fold;
  // A forced charge is done, whatever the limits held before it: it answers allowed.
  for (std::uint32_t i = 0; i < decisions.size() && req.mode != charge_mode::force; ++i) {
    fold.add(i, decisions[i], req.limits[i].shadow);
  }
  route_decision r = fold.finish();
  if (fold.allowed() && units) {
    std::vector<std::string> held;
    for (std::uint32_t i = 0; i < req.limits.size(); ++i) {
      if (req.limits[i].algo == algorithm::concurrency && decisions[i].allowed) {
        held.push_back(unit_keys[i]);
      }
    }
    if (!held.empty()) {
      r.slot = lease(*this, make_token(client->index(), unit, held), req.route, 1);
      client->hold(unit, std::move(held));
    }
  }
  if (!r.allowed) {
    s.record_denial(req, decisions, r, epoch);
  } else if (req.mode == charge_mode::check) {
    // (A peek's "remaining" counts a unit it did not take: nothing is exhausted by it.)
    s.record_exhaustion(req, decisions, epoch);
  }
  co_return r;
}

std::uint32_t redis_store::bind_slot(const limit_identity& id, algorithm algo) {
  return state_->local->bind_slot(id, algo);
}

void redis_store::unbind_slot(std::uint32_t slot) noexcept {
  state_->local->unbind_slot(slot);
}

void redis_store::release(std::string_view token, std::uint32_t, std::uint64_t) noexcept {
  try {
    std::vector<std::string> parts;
    std::size_t start = 0;
    for (;;) {
      const auto end = token.find('\x1f', start);
      parts.emplace_back(token.substr(start, end - start));
      if (end == std::string_view::npos) {
        break;
      }
      start = end + 1;
    }
    if (parts.size() < 3) {
      return;
    }
    std::size_t index = 0;
    std::from_chars(parts[0].data(), parts[0].data() + parts[0].size(), index);
    std::string unit = std::move(parts[1]);
    std::vector<std::string> keys(std::make_move_iterator(parts.begin() + 2),
                                  std::make_move_iterator(parts.end()));
    shared_state& s = *state_;
    std::lock_guard lock(s.clients_mutex);
    if (index >= s.clients.size() || s.clients[index].dead) {
      return;  // its thread is gone: the units lapse after slot_ttl
    }
    auto c = s.clients[index].client.lock();
    if (!c) {
      return;
    }
    // Back to the thread that holds the units (and refreshes them).
    asio::post(c->executor(), [c, unit = std::move(unit), keys = std::move(keys)]() mutable {
      c->release(unit, std::move(keys));
    });
  } catch (...) {
    // Out of memory: the units lapse after slot_ttl.
  }
}

boost::asio::awaitable<std::vector<decision>> redis_store::status(std::string_view subject,
                                                                  std::uint32_t,
                                                                  std::span<const policy> limits,
                                                                  nanos now) {
  shared_state& s = *state_;
  std::vector<decision> out;
  if (limits.empty()) {
    co_return out;
  }
  const std::string tag = s.tag(subject);
  auto node = s.node_for_slot(redis::key_slot(redis::limit_key(tag, "")));
  auto client = s.client_for(co_await asio::this_coro::executor);
  redis::script_call call('s', -1, s.unit_ttl_us());
  if (!call.add(shared_state::keys_of(tag, limits), limits, 1, "")) {
    co_return out;
  }
  std::string cmd;
  call.append_to(cmd);
  outcome o = co_await client->run(node, std::move(cmd), 1, static_cast<int>(call.algorithms()),
                                   deadline_after(admin_timeout(s.timeout)), false, now);
  if (o.type != outcome::kind::ok || o.replies[0].type != reply::kind::array) {
    co_return out;
  }
  auto rows = redis::decode_decisions(o.replies[0].elements, limits, 2);
  if (!rows) {
    co_return out;
  }
  // As memory_store::status_now: cost 0 reads the state, cost 1 says whether one more passes.
  for (std::size_t i = 0; i < limits.size(); ++i) {
    decision d = (*rows)[2 * i];
    const decision& next = (*rows)[2 * i + 1];
    d.allowed = next.allowed;
    d.impossible = next.impossible;
    d.retry_after = next.retry_after;
    d.delay = next.delay;
    if (limits[i].algo == algorithm::concurrency) {
      d.remaining = next.allowed ? next.remaining + 1 : 0;
    }
    out.push_back(d);
  }
  co_return out;
}

boost::asio::awaitable<std::size_t> redis_store::reset_limits(std::string_view subject,
                                                              std::uint32_t,
                                                              std::span<const policy> limits) {
  shared_state& s = *state_;
  const std::string tag = s.tag(subject);
  std::vector<std::string_view> args{"DEL"};
  std::vector<std::string> keys;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    // Units in flight stay: their requests give them back.
    if (limits[i].algo != algorithm::concurrency) {
      keys.push_back(redis::limit_key(tag, limits[i].key));
    }
  }
  s.forget_cached();
  if (keys.empty()) {
    co_return 0;
  }
  for (const std::string& k : keys) {
    args.emplace_back(k);
  }
  auto node = s.node_for_slot(redis::key_slot(keys.front()));
  auto client = s.client_for(co_await asio::this_coro::executor);
  const nanos now{std::chrono::duration_cast<nanos>(steady::now().time_since_epoch())};
  outcome o = co_await client->run(node, redis::format_command(args), 1, k_no_script,
                                   deadline_after(admin_timeout(s.timeout)), false, now);
  s.forget_cached();
  // DEL counts the keys it deleted: at most those it was given.
  if (o.type != outcome::kind::ok || o.replies[0].type != reply::kind::integer ||
      o.replies[0].integer < 0 || static_cast<std::uint64_t>(o.replies[0].integer) > keys.size()) {
    co_return 0;
  }
  co_return static_cast<std::size_t>(o.replies[0].integer);
}

namespace {

// The next cursor of a SCAN reply (a decimal number, then an array of key names); nullopt
// when the reply is not that.
std::optional<std::uint64_t> scan_cursor(const reply& r) {
  if (r.type != reply::kind::array || r.elements.size() != 2 || !r.elements[0].is_string() ||
      r.elements[1].type != reply::kind::array ||
      !std::all_of(r.elements[1].elements.begin(), r.elements[1].elements.end(),
                   [](const reply& k) { return k.type == reply::kind::string; })) {
    return std::nullopt;
  }
  const std::string& text = r.elements[0].str;
  std::uint64_t cursor = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), cursor);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return cursor;
}

// SCANs `node` for keys matching `pattern` and deletes those that are not units in flight;
// returns how many went.
asio::awaitable<std::size_t> scan_and_delete(std::shared_ptr<thread_client> client,
                                             redis_store::shared_state& s,
                                             std::shared_ptr<node_state> node, std::string pattern,
                                             bool one_slot) {
  std::size_t deleted = 0;
  std::string cursor = "0";
  const nanos now{std::chrono::duration_cast<nanos>(steady::now().time_since_epoch())};
  const std::string count = std::to_string(k_scan_batch);
  do {
    const std::string scan = redis::format_command(
        std::initializer_list<std::string_view>{"SCAN", cursor, "MATCH", pattern, "COUNT", count});
    outcome o = co_await client->run(node, scan, 1, k_no_script,
                                     deadline_after(admin_timeout(s.timeout)), false, now);
    const auto next = o.type == outcome::kind::ok ? scan_cursor(o.replies[0]) : std::nullopt;
    if (!next) {
      break;
    }
    cursor = std::to_string(*next);
    const auto& found = o.replies[0].elements[1].elements;
    if (found.empty()) {
      continue;
    }
    std::string cmds;
    std::size_t n = 0;
    if (one_slot) {
      std::vector<std::string_view> args{"EVAL", k_delete_unless_units};
      const std::string nkeys = std::to_string(found.size());
      args.emplace_back(nkeys);
      for (const reply& k : found) {
        args.emplace_back(k.str);
      }
      redis::append_command(cmds, args);
      n = 1;
    } else {
      // Keys of different subjects live in different slots: one call each, pipelined.
      for (const reply& k : found) {
        redis::append_command(cmds, std::initializer_list<std::string_view>{
                                        "EVAL", k_delete_unless_units, "1", k.str});
        ++n;
      }
    }
    outcome d = co_await client->run(node, std::move(cmds), n, k_no_script,
                                     deadline_after(admin_timeout(s.timeout)), false, now);
    if (d.type == outcome::kind::ok) {
      // Each call deletes at most the keys it was given.
      const std::int64_t most = one_slot ? static_cast<std::int64_t>(found.size()) : 1;
      for (const reply& r : d.replies) {
        if (r.type == reply::kind::integer && r.integer >= 0 && r.integer <= most) {
          deleted += static_cast<std::size_t>(r.integer);
        }
      }
    }
  } while (cursor != "0");
  co_return deleted;
}

}  // namespace

boost::asio::awaitable<std::size_t> redis_store::reset(std::string_view subject,
                                                       std::optional<std::uint32_t> route) {
  shared_state& s = *state_;
  if (route) {
    co_return 0;
  }
  s.forget_cached();
  const std::string tag = s.tag(subject);
  const std::string pattern = std::string(redis::k_key_prefix) + "{" + tag + "}:*";
  auto node = s.node_for_slot(redis::key_slot(pattern));
  auto client = s.client_for(co_await asio::this_coro::executor);
  const std::size_t deleted = co_await scan_and_delete(client, s, node, pattern, true);
  s.forget_cached();
  co_return deleted;
}

boost::asio::awaitable<std::optional<std::vector<reply>>> redis_store::run_commands(
    std::string key, std::string commands, std::size_t replies, std::string* error) {
  shared_state& s = *state_;
  auto client = s.client_for(co_await asio::this_coro::executor);
  auto node = s.node_for_slot(redis::key_slot(key));
  const nanos now{std::chrono::duration_cast<nanos>(steady::now().time_since_epoch())};
  outcome o = co_await client->run(std::move(node), std::move(commands), replies, k_no_script,
                                   deadline_after(admin_timeout(s.timeout)), false, now);
  if (o.type != outcome::kind::ok) {
    if (error != nullptr) {
      *error = o.type == outcome::kind::timeout ? "Redis did not answer in time"
               : o.error.empty()                ? "Redis cannot be reached"
                                                : o.error;
    }
    co_return std::nullopt;
  }
  co_return std::move(o.replies);
}

boost::asio::awaitable<std::size_t> redis_store::reset_all() {
  shared_state& s = *state_;
  s.forget_cached();
  auto client = s.client_for(co_await asio::this_coro::executor);
  std::vector<std::shared_ptr<node_state>> primaries{s.first};
  if (s.cluster) {
    if (!s.slots.load()) {
      co_await client->refresh_topology();
    }
    if (auto t = s.slots.load()) {
      primaries = t->nodes;
    }
  }
  std::size_t deleted = 0;
  const std::string pattern = std::string(redis::k_key_prefix) + "*";
  for (const auto& node : primaries) {
    deleted += co_await scan_and_delete(client, s, node, pattern, !s.cluster);
  }
  s.forget_cached();
  co_return deleted;
}

boost::asio::awaitable<std::vector<denied_subject>> redis_store::top_denied(std::size_t n,
                                                                            nanos now) {
  // A subject's denials are all in its shard.
  std::vector<denied_subject> all;
  for (cache_shard& shard : state_->cache) {
    std::lock_guard lock(shard.mutex);
    shard.denials.collect(now, all);
  }
  co_return most_denied(std::move(all), n);
}

void redis_store::set_top_window(nanos window, nanos now) {
  for (cache_shard& shard : state_->cache) {
    std::lock_guard lock(shard.mutex);
    shard.denials.set_window(window, now);
  }
}

std::size_t redis_store::sweep(nanos now) {
  return state_->prune_cache(now) + state_->local->sweep(now);
}

redis_metrics redis_store::metrics() const {
  const shared_state& s = *state_;
  const auto load = [](const std::atomic<std::uint64_t>& a) {
    return a.load(std::memory_order_relaxed);
  };
  redis_metrics m;
  m.calls = load(s.calls);
  m.errors = load(s.errors);
  m.timeouts = load(s.connection_counters->timeouts);
  m.error_replies = load(s.error_replies);
  m.fallback_decisions = load(s.fallbacks);
  m.breaker_rejections = load(s.breaker_rejections);
  m.cache_hits = load(s.cache_hits);
  m.redirects = load(s.redirects);
  m.topology_refreshes = load(s.topology_refreshes);
  m.script_loads = load(s.script_loads);
  m.connects = load(s.connection_counters->connects);
  m.connect_failures = load(s.connection_counters->connect_failures);
  m.late_replies = load(s.connection_counters->late_replies);
  m.writes = load(s.connection_counters->writes);
  for (cache_shard& shard : state_->cache) {
    std::lock_guard lock(shard.mutex);
    m.cache_entries += shard.denied.size();
    m.cache_evictions += shard.denied.evictions();
  }
  std::lock_guard lock(s.nodes_mutex);
  for (const auto& [name, n] : s.nodes) {
    m.breaker_opened += n->breaker.opened();
    m.breakers_open += n->breaker.current() != redis::circuit_breaker::state::closed ? 1 : 0;
  }
  return m;
}

std::vector<redis_node_status> redis_store::nodes() const {
  std::vector<redis_node_status> out;
  std::lock_guard lock(state_->nodes_mutex);
  for (const auto& [name, n] : state_->nodes) {
    out.push_back({name, n->breaker.current()});
  }
  std::sort(out.begin(), out.end(), [](const redis_node_status& a, const redis_node_status& b) {
    return a.address < b.address;
  });
  return out;
}

store_status redis_store::status() const {
  const redis_metrics m = metrics();
  store_status out;
  out.kind = "redis";
  out.errors = m.errors;
  out.fallback_decisions = m.fallback_decisions;
  for (const redis_node_status& node : nodes()) {
    using state = redis::circuit_breaker::state;
    const char* breaker = node.breaker == state::open        ? "open"
                          : node.breaker == state::half_open ? "half_open"
                                                             : "closed";
    out.breakers.emplace_back(node.address, breaker);
  }
  return out;
}

}  // namespace ratewall
