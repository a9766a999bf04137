#pragma once

// The API keys the gateway knows (DESIGN §5b): the seed set declared under `api_keys` in the
// configuration, and the keys an operator adds, changes or removes at run time through the
// admin API (`/admin/keys`). A run-time change overrides the seed: a key put at run time has
// the plan and name given there, a key deleted at run time is unknown even when the
// configuration declares it. The configuration's set is replaced at every reload; the run-time
// changes stay (they are persisted by a key_journal and replayed at start).
//
// Keys are known by their SHA-256 only, and indexed by their subject ("key:<32 hex>", the
// keyed hash identity_resolver names them by), so a subject that /admin/top reports finds its
// key's name without a scan.
//
// Sized for a million keys: 16 shards, each a flat hash map under a reader-writer lock, so a
// change blocks the readers of one shard only. Readers are rare anyway: identity_resolver
// remembers what each raw key means per thread, and asks again only when version() moved.

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "ratewall/config/config.hpp"
#include "ratewall/core/hash.hpp"

namespace ratewall {

/// What a key means: its plan ("" = the default plan) and the name an operator gave it ("" =
/// none; logs and the admin API then show its subject).
struct key_meaning {
  std::string plan;
  std::string name;
  bool operator==(const key_meaning&) const = default;
};

/// One change to the run-time set: a put (meaning set) or a delete (meaning empty).
struct key_change {
  sha256_digest sha256{};
  std::optional<key_meaning> meaning;  // nullopt: deleted
};

/// One key as the admin API lists it.
struct listed_key {
  sha256_digest sha256{};
  key_meaning meaning;
  bool from_config = false;  // the configuration declares it and no run-time change overrides it
};

class key_registry {
 public:
  /// `hash_key` keys the subjects, as identity_resolver's does (the same key, or the two
  /// disagree about which subject is which key).
  explicit key_registry(std::string_view hash_key);

  key_registry(const key_registry&) = delete;
  key_registry& operator=(const key_registry&) = delete;

  /// Replaces the configuration's keys (start, reload). Thread-safe.
  void set_seed(const std::vector<api_key_config>& keys);
  /// Applies a run-time change (admin API, journal replay, another gateway's change seen in
  /// Redis). Returns false when it changed nothing (the same meaning again). Thread-safe.
  bool apply(const key_change& change);
  /// Replaces every run-time change with `changes` (a journal loaded from scratch), shard by
  /// shard, so a key that stays known is never unknown in between. Thread-safe.
  void replace_changes(const std::vector<key_change>& changes);
  /// Every run-time change held, deletions included, in no particular order. Thread-safe.
  std::vector<key_change> all_changes() const;

  /// What the key with this SHA-256 means, or nullopt when it is not known. Thread-safe.
  std::optional<key_meaning> find(const sha256_digest& sha256) const;
  /// The same for a subject "key:<32 hex>", with the key's SHA-256. Thread-safe.
  std::optional<listed_key> find_subject(std::string_view subject) const;
  /// Known keys with SHA-256 above `after` (all when nullopt), in SHA-256 order, at most
  /// `limit`, only of `plan` when given ("" = the default plan). Scans every key: for the
  /// admin API, not the request path. Thread-safe.
  std::vector<listed_key> list(std::optional<std::string_view> plan,
                               std::optional<sha256_digest> after, std::size_t limit) const;

  /// The subject the key with this SHA-256 is counted as: "key:<32 hex>". Thread-safe.
  std::string subject(const sha256_digest& sha256) const;

  /// Moves at every change that changed something (apply, replace_changes, set_seed).
  std::uint64_t version() const { return version_.load(std::memory_order_acquire); }
  /// Run-time changes held (puts and deletes), for metrics and tests.
  std::size_t changes() const;

 private:
  using subject_id = std::array<std::uint8_t, 16>;  // the first 16 bytes of the keyed hash
  struct subject_hash {
    std::size_t operator()(const subject_id& s) const noexcept;
  };
  struct entry {
    sha256_digest sha256{};
    std::optional<key_meaning> meaning;  // run-time layer: nullopt = deleted
  };
  struct shard {
    mutable std::shared_mutex mutex;
    boost::unordered_flat_map<subject_id, entry, subject_hash> seed;     // meaning always set
    boost::unordered_flat_map<subject_id, entry, subject_hash> changes;  // run-time layer
  };
  static constexpr std::size_t k_shards = 16;

  subject_id subject_of(const sha256_digest& sha256) const;
  shard& shard_of(const subject_id& id) { return shards_[id[0] % k_shards]; }
  const shard& shard_of(const subject_id& id) const { return shards_[id[0] % k_shards]; }
  void bump() { version_.fetch_add(1, std::memory_order_acq_rel); }

  hmac_sha256_key mac_key_;
  std::array<shard, k_shards> shards_;
  std::atomic<std::uint64_t> version_{1};
};

}  // namespace ratewall
