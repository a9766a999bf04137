#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/limit/snapshot.hpp"
#include "ratewall/limit/store.hpp"

namespace ratewall {

struct memory_store_options {
  /// Cap on tracked rows, one per (subject, limit) with state, enforced per shard
  /// (max_keys / shards each). A subject limited by one limit is one row, as before slots.
  std::uint64_t max_keys = 1000000;
  std::size_t shards = 64;  // rounded up to a power of two
  /// A request that needs a new row in a full shard (a new subject, or a subject whose row of
  /// some limit expired and was swept) first makes room by evicting rows (see memory_store).
  /// Only when no row may go is it answered by this:
  ///   deny:  refused with route_decision::store_full and retry_after k_full_retry (the gateway
  ///          answers 503 with Retry-After: the store's capacity, not the client's limit);
  ///   allow: decided as it is (a missing row is fresh state), charged to the rows that exist,
  ///          the missing ones not recorded (route_decision::untracked).
  store_full on_full = store_full::deny;
  /// top_denied counts denials over this long (admin.top_window); set_top_window changes it.
  nanos top_window = std::chrono::minutes(10);
};

/// retry_after of a request refused because the store is full (store_full::deny).
inline constexpr nanos k_full_retry = std::chrono::seconds(1);

/// Rows a full shard looks at to find one to evict (see memory_store).
inline constexpr std::size_t k_eviction_sample = 16;

/// A memory store built from a configuration has fewer than memory_store_options::shards
/// shards when max_keys is small, so that each holds at least this many rows: the cap is per
/// shard, and a shard of a handful of rows is full as soon as a few limited subjects sit in it.
inline constexpr std::uint64_t k_min_shard_rows = 256;

/// Limit state in this process's memory, kept across configurations.
///
/// State is kept per limit definition, not per route: bind_slot gives every limit identity a
/// slot, and each slot has one table of rows in every shard. Limiters of successive
/// configurations that share the store share the slots of the limits they have in common, so
/// an unchanged limit keeps its state, with no copy, and requests on the old and the new
/// configuration see the same state during the switch. A slot is freed (tables and memory) when
/// its last limiter unbinds it and no lease holds concurrency units in it; its id is reused.
///
/// Sharded by a seeded 64-bit hash of the subject (one mutex per shard, so all limits of a
/// subject are decided under one lock: exact under any number of threads). A slot's table in a
/// shard is a boost::unordered_flat_map keyed by the subject (16-byte key: up to 15 bytes
/// inline, longer ones on the heap), whose value is a row: one word for when the row expires
/// (to ~1 ms) and whether it is limited, then the limit's state (token/leaky bucket, concurrency,
/// sliding log pointer: 1 word; fixed window: 2; sliding counter: 3). A token bucket subject is a
/// 32-byte entry of the table.
///
/// A row whose state has expired equals no row: `sweep` drops them. Rows with concurrency
/// units in flight are never dropped.
///
/// Denials are counted apart from rows, per shard (recent_denials, k_top_subjects / shards
/// subjects per shard): top_denied lists a subject for the whole top_window, whatever became
/// of its rows (expired, swept, evicted or reset). A request counts once, whichever of its
/// limits denied; a request refused because the store is full does not count.
///
/// A full shard (max_keys / shards rows) makes room for a new row by evicting the row whose
/// loss loses least, and never a row that is limited:
///   - a row is *limited* from the moment its state denies a request (one whose cost the
///     limit can admit at all) or is left with nothing remaining by an admitted one
///     (remaining 0: a request of cost 1 would be denied next), until its state expires
///     (bucket full again, window over), even if it may admit a request again before that.
///     Such a row, and a row with concurrency units in flight, is never evicted: a subject that
///     has been held to its limit stays held, whatever the flood of new subjects;
///   - of the other rows, the one that expires soonest goes (the stored expiry: a bucket
///     nearest full, a window nearest its end; an expired row, which equals no row, first);
///     rows of the requesting subject are never candidates.
/// The work is bounded: k_eviction_sample rows are looked at per row needed (Redis's
/// approximated LRU samples likewise), from a table picked with a probability proportional to
/// its rows (the subject's hash is the dice), each table resuming where its last look ended
/// (a cursor), so that successive evictions walk the whole shard rather than the same few
/// rows. No structure is kept per row, the request path never scans a shard, and nothing is
/// locked beyond the shard's mutex. When the rows looked at are all limited, nothing goes and
/// the request is answered per memory_store_options::on_full.
///
/// Never suspends: try_check always answers. Thread-safe, bind_slot and unbind_slot included.
class memory_store final : public store {
 public:
  explicit memory_store(memory_store_options options = {});
  /// max_keys and on_full from cfg.store; fewer shards for a small max_keys (k_min_shard_rows).
  explicit memory_store(const config& cfg);
  /// Every slot must have been unbound and every lease released.
  ~memory_store() override;

  memory_store(const memory_store&) = delete;
  memory_store& operator=(const memory_store&) = delete;

  std::optional<route_decision> try_check(const check_request& req) override;
  boost::asio::awaitable<route_decision> check(const check_request& req) override;

  std::uint32_t bind_slot(const limit_identity& id, algorithm algo) override;
  void unbind_slot(std::uint32_t slot) noexcept override;
  void release_slots(std::string_view subject,
                     std::span<const std::uint32_t> slots) noexcept override;

  boost::asio::awaitable<std::vector<decision>> status(std::string_view subject,
                                                       std::uint32_t route,
                                                       std::span<const policy> limits,
                                                       nanos now) override;
  /// With a route index: clears nothing and returns 0 (the store holds state by slot, for
  /// several configurations at once); reset_limits clears a route's limits.
  boost::asio::awaitable<std::size_t> reset(std::string_view subject,
                                            std::optional<std::uint32_t> route) override;
  boost::asio::awaitable<std::size_t> reset_limits(std::string_view subject, std::uint32_t route,
                                                   std::span<const policy> limits) override;
  boost::asio::awaitable<std::size_t> reset_all() override;
  boost::asio::awaitable<std::vector<denied_subject>> top_denied(std::size_t n, nanos now) override;
  void set_top_window(nanos window, nanos now) override;
  /// Drops expired rows (returns how many) and the subjects no longer denied in the window.
  std::size_t sweep(nanos now) override;

  // The same operations without a coroutine, for callers that are not one.
  route_decision decide(const check_request& req);
  std::vector<decision> status_now(std::string_view subject, std::span<const policy> limits,
                                   nanos now) const;
  /// Every limit of the subject (rows cleared); nothing is kept but units in flight.
  std::size_t reset_now(std::string_view subject);
  std::size_t reset_limits_now(std::string_view subject, std::span<const policy> limits);
  std::size_t reset_all_now();
  std::vector<denied_subject> top_denied_now(std::size_t n, nanos now) const;
  /// Subjects whose denials are counted for top_denied, all shards (at most k_top_subjects).
  std::size_t denied_subjects() const;

  struct usage {
    std::size_t entries = 0;      // tracked (subject, limit) rows
    std::size_t table_bytes = 0;  // hash table arrays: slots (key + row) and control bytes
    std::size_t heap_bytes = 0;   // subjects longer than 15 bytes, sliding logs
  };
  /// Walks every row: for tests, benchmarks and the admin API, not the request path.
  usage memory_usage() const;
  /// Rows, all slots.
  std::size_t size() const;
  /// Slots bound or still holding units in flight (ids not free for reuse).
  std::size_t slot_count() const;

  struct full_counts {
    std::uint64_t evictions = 0;  // rows evicted to make room for new ones
    std::uint64_t full = 0;       // requests that found no row to evict (answered per on_full)
  };
  /// Since the store was made, all shards; for /metrics.
  full_counts full_stats() const;
  store_status status() const override;

  // store.snapshot (limit/snapshot.hpp).

  /// Appends a snapshot's body: each bound slot's identity and algorithm, then its rows that
  /// have not expired at `now` (subject, header, state). Concurrency slots are left out: their
  /// units belong to requests of this process. Holds the registry's lock throughout (a reload
  /// binding slots waits for it) and one shard's lock at a time. Returns the rows written.
  std::size_t save_rows(byte_writer& out, nanos now) const;
  /// Reads a body that save_rows wrote and adds its rows to the bound slots of the same
  /// identity (`counts` says what was skipped and why). With keyed_subjects false, only "ip:"
  /// subjects are taken. load_snapshot makes three passes: `check` changes nothing and throws
  /// snapshot_error for anything malformed or out of reach (a time beyond any limit's
  /// horizon); `limited` adds the rows of clients held to a limit, `rest` the others, while
  /// their shard has room: shards split subjects differently in each process, so a store near
  /// max_keys keeps the limited rows first.
  enum class restore_pass { check, limited, rest };
  void restore_rows(byte_reader& in, nanos now, bool keyed_subjects, restore_pass pass,
                    snapshot_loaded& counts);

 private:
  struct shard;
  struct registry;

  shard& shard_for(std::uint64_t hash) const;
  /// Makes room in the full shard `s` for `missing` new rows of the subject (evict_one); false
  /// when it cannot (counted in full_stats). Under the shard's lock.
  bool make_room(shard& s, std::uint64_t missing, std::string_view subject, std::uint64_t hash,
                 nanos now);
  /// charge_mode::force, under the shard's lock: every limit charged, rows made as needed.
  route_decision force_locked(shard& s, const check_request& req, std::uint64_t hash);
  std::size_t sweep_shard(shard& s, nanos now);
  /// Evicts one row of the full shard `s` that is neither limited nor the subject's own;
  /// false when none of the rows looked at may go.
  bool evict_one(shard& s, std::string_view subject, std::uint64_t hash, nanos now);
  /// Drops the tables of `slot` that hold no units in flight, the others keep only those.
  void retire_slot(std::uint32_t slot) noexcept;
  /// The slot's table in some shard is gone: the last one frees the id.
  void table_dropped(std::uint32_t slot, std::size_t count) noexcept;

  memory_store_options options_;
  std::uint64_t shard_capacity_ = 0;
  std::uint64_t seed_ = 0;
  std::size_t shard_mask_ = 0;
  std::unique_ptr<shard[]> shards_;
  std::unique_ptr<registry> registry_;
};

}  // namespace ratewall
