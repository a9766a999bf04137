#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/store.hpp"
#include "ratewall/redis/breaker.hpp"
#include "ratewall/redis/reply.hpp"

namespace ratewall {

/// What a Redis store has done since it was built: counters, plus one gauge (breakers_open).
/// For the metrics endpoint: redis_store::metrics() takes a snapshot (relaxed atomics).
struct redis_metrics {
  std::uint64_t calls = 0;               // round trips sent (checks, retries, redirects, admin)
  std::uint64_t errors = 0;              // checks Redis did not answer (answered by on_store_error)
  std::uint64_t timeouts = 0;            // calls that passed their deadline
  std::uint64_t error_replies = 0;       // error replies other than redirects and NOSCRIPT
  std::uint64_t fallback_decisions = 0;  // decisions made by on_store_error
  std::uint64_t breaker_rejections = 0;  // of those, answered at once by an open breaker
  std::uint64_t breaker_opened = 0;      // times a breaker opened
  std::uint64_t breakers_open = 0;       // nodes whose breaker is open or half-open now (gauge)
  std::uint64_t cache_hits = 0;          // denials answered by the "denied until" cache
  std::uint64_t cache_entries = 0;       // entries in that cache now (gauge, at most capacity)
  std::uint64_t cache_evictions = 0;     // live entries it evicted to make room
  std::uint64_t redirects = 0;           // MOVED and ASK followed
  std::uint64_t topology_refreshes = 0;  // cluster slot maps loaded
  std::uint64_t script_loads = 0;        // SCRIPT LOAD after NOSCRIPT
  std::uint64_t connects = 0;            // connections established (all threads and nodes)
  std::uint64_t connect_failures = 0;
  std::uint64_t late_replies = 0;  // replies that arrived after their call timed out (dropped)
  std::uint64_t writes = 0;        // socket writes (the commands of one loop turn go in one)
};

struct redis_node_status {
  std::string address;  // host:port
  redis::circuit_breaker::state breaker = redis::circuit_breaker::state::closed;
};

/// Limit state in Redis or a Redis Cluster (store.type: redis), shared by every gateway that
/// uses the same Redis: a route's limits for one subject are decided by one atomic Lua call
/// (redis/scripts.hpp) on the server's clock, so N gateways admit exactly what one would.
///
/// Threads: each io_context that calls `check` gets its own connection to each Redis primary
/// (made lazily, kept in an Asio service of that io_context, closed when the store or the
/// io_context goes away). Nothing on the request path locks except the denied-subject cache
/// (sharded) and, on first use per thread, the registry of thread clients. An io_context that
/// calls the store must be run by one thread (as every worker's is).
///
/// Failure: a check Redis cannot answer within store.redis.timeout (down, slow, refused,
/// error) is decided per limit by policy::on_store_error: allow, deny (retry after 1 s), or
/// local (an in-process memory store at limit ÷ store.redis.instances). A circuit breaker per
/// node opens after `breaker_failures` consecutive failures: then try_check answers at once,
/// without a round trip, and one probe per cooldown tests whether Redis is back.
///
/// Denied cache: a denial by limits whose retry_after is exact (all but concurrency) is
/// remembered until now + retry_after, measured from before the request was sent, so the
/// cache never denies a request that Redis would allow (other gateways can only add charges);
/// try_check answers those requests locally. So is an allowed request that took the last unit
/// of a token bucket, leaky bucket or fixed window, until the next unit comes back
/// (redis::exhausted_for). A reset through this store clears the cache.
///
/// The cache holds at most k_denied_cache_capacity entries (64 shards, each a fixed table:
/// redis/denied_table.hpp), about 11 MB, so a flood of new subjects can neither grow it nor
/// slow it down: a lookup or an insertion looks at 8 entries at most. A full cache evicts
/// (entries not hit lately first, then the first to expire); an evicted subject's next request
/// goes to Redis, which decides it exactly as before.
///
/// Admin: status and reset_limits know their keys (no SCAN); reset(subject) and reset_all use
/// SCAN per primary. Concurrency units in flight survive resets. top_denied counts the
/// denials this process answered, from Redis or the denied cache (the other gateways count
/// their own), per subject over admin.top_window, in the cache's shards (recent_denials,
/// k_top_subjects in all). Decisions made by on_store_error are not counted.
class redis_store final : public store {
 public:
  /// The settings of cfg.store.redis; `hash_key` keys the hash that names subjects in Redis
  /// (it must be the same on every gateway sharing the store). Connects lazily. Throws
  /// std::invalid_argument for settings that cannot work (a bad URL, password_env unset).
  /// Also throws std::invalid_argument for limits the script cannot carry (see `validate`).
  /// `denied_cache_capacity`: the most entries of the denied cache (tests use a small one).
  redis_store(const config& cfg, std::string hash_key,
              std::size_t denied_cache_capacity = k_denied_cache_capacity);
  ~redis_store() override;

  /// The denied cache's entries at most: (subject, route) pairs answered without Redis.
  static constexpr std::size_t k_denied_cache_capacity = 65536;

  /// Throws std::invalid_argument naming the file, route and limit of the first limit (or
  /// route cost) the Lua script cannot compute exactly: counts and spans in microseconds must
  /// stay below 2^49 (the script's numbers are doubles). Checked when a store is built and when
  /// a reload keeps one, so a reload that brings such a limit is refused.
  static void validate(const config& cfg);
  /// The password store.redis.password_env names, read from the environment; nullopt when the
  /// setting is absent. Throws config_error, naming its line, when the variable is not set
  /// or empty.
  static std::optional<std::string> password_from_environment(const config& cfg);

  redis_store(const redis_store&) = delete;
  redis_store& operator=(const redis_store&) = delete;

  /// Answers without I/O when the denied cache holds the subject or the node's breaker is
  /// open; nullopt otherwise.
  std::optional<route_decision> try_check(const check_request& req) override;
  boost::asio::awaitable<route_decision> check(const check_request& req) override;

  /// Binds the limit in the local fallback store (on_store_error: local) and returns that slot.
  std::uint32_t bind_slot(const limit_identity& id, algorithm algo) override;
  void unbind_slot(std::uint32_t slot) noexcept override;
  /// A Redis lease: the subject is the lease's token (thread, unit id, keys).
  void release(std::string_view token, std::uint32_t route, std::uint64_t limits) noexcept override;

  /// Empty when Redis cannot be reached.
  boost::asio::awaitable<std::vector<decision>> status(std::string_view subject,
                                                       std::uint32_t route,
                                                       std::span<const policy> limits,
                                                       nanos now) override;
  /// With a route index: 0 (routes are known by their limits: reset_limits). Without: every
  /// key of the subject (SCAN on its node). 0 when Redis cannot be reached.
  boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                            std::optional<std::uint32_t> route) override;
  boost::asio::awaitable<std::size_t> reset_limits(std::string_view subject, std::uint32_t route,
                                                   std::span<const policy> limits) override;
  boost::asio::awaitable<std::size_t> reset_all() override;
  boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n, nanos now) override;
  void set_top_window(nanos window, nanos now) override;
  /// Drops expired cache entries, expired local fallback state and the subjects no longer
  /// denied in the top window.
  std::size_t sweep(nanos now) override;

  /// Runs `commands` (`replies` commands formatted with redis::append_command, all of keys in
  /// `key`'s slot) on the primary that serves `key`, following redirects, within the admin
  /// deadline (store.redis.timeout, at least 1 s): their replies, or nullopt with `*error`
  /// saying why (unreachable, timeout, an error reply such as LOADING). For what is not limit
  /// state (the run-time API keys); the caller's io_context must be run by one thread.
  boost::asio::awaitable<std::optional<std::vector<redis::reply>>> run_commands(
      std::string key, std::string commands, std::size_t replies, std::string* error);

  redis_metrics metrics() const;
  std::vector<redis_node_status> nodes() const;
  store_status status() const override;

  struct shared_state;

 private:
  std::shared_ptr<shared_state> state_;
};

}  // namespace ratewall
