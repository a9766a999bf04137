#include "ratewall/limit/memory_store.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/unordered/unordered_flat_map.hpp>

#include "ratewall/config/limit_bounds.hpp"
#include "ratewall/limit/concurrency.hpp"
#include "ratewall/limit/fixed_window.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/leaky_bucket.hpp"
#include "ratewall/limit/recent_denials.hpp"
#include "ratewall/limit/sliding_window_counter.hpp"
#include "ratewall/limit/sliding_window_log.hpp"

namespace ratewall {

namespace {

constexpr std::size_t k_max_limits = 64;  // decision_fold keeps a 64-bit mask of limits

// ---------------------------------------------------------------------------------------------
// Subject hashing: seeded per process so that nobody can pick subjects that collide.

std::uint64_t mum(std::uint64_t a, std::uint64_t b) {
  const unsigned __int128 r = static_cast<unsigned __int128>(a) * b;
  return static_cast<std::uint64_t>(r) ^ static_cast<std::uint64_t>(r >> 64);
}

std::uint64_t read64(const unsigned char* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::uint64_t read32(const unsigned char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// The structure of wyhash (final v4): two 64-bit lanes folded by 128-bit multiplications.
std::uint64_t hash_subject(std::string_view s, std::uint64_t seed) {
  constexpr std::uint64_t k0 = 0xa0761d6478bd642full;
  constexpr std::uint64_t k1 = 0xe7037ed1a0b428dbull;
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::uint64_t h = seed ^ k0;
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  if (n <= 16) {
    if (n >= 4) {
      const std::size_t q = (n >> 3) << 2;
      a = (read32(p) << 32) | read32(p + q);
      b = (read32(p + n - 4) << 32) | read32(p + n - 4 - q);
    } else if (n > 0) {
      a = (std::uint64_t{p[0]} << 16) | (std::uint64_t{p[n >> 1]} << 8) | p[n - 1];
    }
  } else {
    std::size_t i = n;
    while (i > 16) {
      h = mum(read64(p) ^ k1, read64(p + 8) ^ h);
      p += 16;
      i -= 16;
    }
    a = read64(p + i - 16);
    b = read64(p + i - 8);
  }
  return mum(k1 ^ n, mum(a ^ k1, b ^ h));
}

// ---------------------------------------------------------------------------------------------
// The key: 16 bytes. Up to 15 bytes inline (an IPv4 or short IPv6 subject), otherwise a heap
// copy. Byte 15 holds the inline length, or k_heap.

class subject_key {
 public:
  explicit subject_key(std::string_view s) {
    if (s.size() <= k_inline) {
      std::memcpy(bytes_, s.data(), s.size());
      bytes_[15] = static_cast<char>(s.size());
      return;
    }
    char* copy = new char[s.size()];
    std::memcpy(copy, s.data(), s.size());
    const auto size = static_cast<std::uint32_t>(s.size());
    std::memcpy(bytes_, &copy, sizeof copy);
    std::memcpy(bytes_ + 8, &size, sizeof size);
    bytes_[15] = k_heap;
  }

  subject_key(subject_key&& other) noexcept {
    std::memcpy(bytes_, other.bytes_, sizeof bytes_);
    other.bytes_[15] = 0;
  }

  subject_key& operator=(subject_key&& other) noexcept {
    if (this != &other) {
      free();
      std::memcpy(bytes_, other.bytes_, sizeof bytes_);
      other.bytes_[15] = 0;
    }
    return *this;
  }

  subject_key(const subject_key&) = delete;
  subject_key& operator=(const subject_key&) = delete;
  ~subject_key() { free(); }

  std::string_view view() const {
    if (bytes_[15] != k_heap) {
      return {bytes_, static_cast<std::size_t>(bytes_[15])};
    }
    const char* p;
    std::uint32_t size;
    std::memcpy(&p, bytes_, sizeof p);
    std::memcpy(&size, bytes_ + 8, sizeof size);
    return {p, size};
  }

  std::size_t heap_bytes() const { return bytes_[15] == k_heap ? view().size() : 0; }

 private:
  static constexpr std::size_t k_inline = 15;
  static constexpr char k_heap = static_cast<char>(0xff);

  void free() {
    if (bytes_[15] == k_heap) {
      delete[] view().data();
    }
  }

  char bytes_[16];
};
static_assert(sizeof(subject_key) == 16);

// A lookup: the subject and its hash, computed once per request.
struct subject_probe {
  std::string_view subject;
  std::uint64_t hash;
};

struct key_hash {
  using is_transparent = void;
  using is_avalanching = void;  // the hash is well mixed: the table need not mix it again

  std::uint64_t seed = 0;

  std::size_t operator()(const subject_key& k) const { return hash_subject(k.view(), seed); }
  std::size_t operator()(const subject_probe& p) const { return p.hash; }
};

struct key_equal {
  using is_transparent = void;

  bool operator()(const subject_key& a, const subject_key& b) const { return a.view() == b.view(); }
  bool operator()(const subject_probe& p, const subject_key& k) const {
    return p.subject == k.view();
  }
  bool operator()(const subject_key& k, const subject_probe& p) const {
    return p.subject == k.view();
  }
};

// ---------------------------------------------------------------------------------------------
// Rows: a header and the state words of one limit.

// One word: when the row expires (from then on it equals no row, unless units are in flight)
// in units of 2^20 ns (about 1 ms, rounded up: a row may be swept up to 1 ms late, never
// early), 40 bits (36 years from the clock's origin: 2056 for steady_clock's 2020), saturating at
// "never" (a bucket may be up to 55 years deep); whether the row is limited (memory_store: never
// evicted while it is), 1 bit; 23 bits spare. (Denials are counted per shard, recent_denials: they
// outlive the row.)
class row_header {
 public:
  bool expired(std::int64_t now) const {
    return expiry() != k_max_expiry && static_cast<std::int64_t>(expiry() << k_unit) <= now;
  }

  void set_expires_at(std::int64_t t) {
    std::uint64_t units = 0;
    if (t > 0) {
      units =
          std::min((static_cast<std::uint64_t>(t) + (1u << k_unit) - 1) >> k_unit, k_max_expiry);
    }
    meta_ = (units << k_expiry_shift) | (meta_ & k_flags);
  }

  /// Orders rows by when they expire: smaller expires sooner.
  std::uint64_t expiry() const { return meta_ >> k_expiry_shift; }

  // Set when the row denies or is left with nothing remaining; stale once the row expired
  // (memory_store::decide clears it when an expired row is charged again).
  bool limited() const { return (meta_ & k_limited) != 0; }
  void set_limited(bool on) { meta_ = on ? (meta_ | k_limited) : (meta_ & ~k_limited); }

  /// The word itself, as store.snapshot keeps it (expiry and flags; the spare bits are zero).
  std::uint64_t raw() const { return meta_; }
  static row_header from_raw(std::uint64_t meta) {
    row_header h;
    h.meta_ = meta & ~k_spare;
    return h;
  }

 private:
  static constexpr int k_unit = 20;
  static constexpr int k_spare_bits = 23;
  static constexpr int k_expiry_shift = k_spare_bits + 1;
  static constexpr std::uint64_t k_limited = std::uint64_t{1} << k_spare_bits;
  static constexpr std::uint64_t k_flags = k_limited;
  static constexpr std::uint64_t k_spare = k_limited - 1;
  static constexpr std::uint64_t k_max_expiry = (std::uint64_t{1} << (64 - k_expiry_shift)) - 1;

  std::uint64_t meta_ = 0;
};

// Trivial on purpose: decide keeps an uninitialised array of 64 of them on the stack.
struct row_ref {
  row_header* header;
  std::uint64_t* words;
  explicit operator bool() const { return header != nullptr; }
};

template <class A>
typename A::state load(const std::uint64_t* words) {
  static_assert(std::is_trivially_copyable_v<typename A::state>);
  static_assert(sizeof(typename A::state) == A::width * sizeof(std::uint64_t));
  typename A::state s;
  std::memcpy(static_cast<void*>(&s), words, sizeof s);
  return s;
}

template <class A>
void save(const typename A::state& s, std::uint64_t* words) {
  std::memcpy(words, static_cast<const void*>(&s), sizeof s);
}

// Calls f with a std::type_identity of the algorithm's type.
template <class F>
[[gnu::always_inline]] inline decltype(auto) with_algorithm(algorithm a, F&& f) {
  switch (a) {
    case algorithm::token_bucket:
      return f(std::type_identity<gcra>{});
    case algorithm::leaky_bucket:
      return f(std::type_identity<leaky_bucket>{});
    case algorithm::fixed_window:
      return f(std::type_identity<fixed_window>{});
    case algorithm::sliding_window_log:
      return f(std::type_identity<sliding_window_log>{});
    case algorithm::sliding_window_counter:
      return f(std::type_identity<sliding_window_counter>{});
    case algorithm::concurrency:
      break;
  }
  return f(std::type_identity<concurrency>{});
}

// The widest state; a missing row reads as this many zero words.
constexpr std::size_t k_max_width = 3;
constexpr std::uint64_t k_zero_words[k_max_width] = {};

// Forced inline: the switch then folds into the caller's loop, a few ns per request.
[[gnu::always_inline]] inline decision check_limit(algorithm a, const std::uint64_t* words,
                                                   nanos now, const policy& p, std::uint64_t cost) {
  return with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    return A::check(load<A>(words), now, p, cost);
  });
}

[[gnu::always_inline]] inline void commit_limit(algorithm a, std::uint64_t* words, nanos now,
                                                const policy& p, std::uint64_t cost) {
  with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    auto s = load<A>(words);
    A::commit(s, now, p, cost);
    save<A>(s, words);
  });
}

// charge_mode::force. The loader keeps cost_from_response routes to algorithms with a debt;
// the others are left as they are.
[[gnu::always_inline]] inline void force_limit(algorithm a, std::uint64_t* words, nanos now,
                                               const policy& p, std::uint64_t cost) {
  with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    if constexpr (requires(typename A::state & s, nanos n, const policy& q, std::uint64_t c) {
                    A::force(s, n, q, c);
                  }) {
      auto s = load<A>(words);
      A::force(s, now, p, cost);
      save<A>(s, words);
    }
  });
}

// When the limit's state lapses; units in flight are tracked apart (row_table_of::in_flight).
[[gnu::always_inline]] inline std::int64_t expiry_of(algorithm a, const std::uint64_t* words,
                                                     const policy& p) {
  if (a == algorithm::concurrency) {
    return 0;
  }
  return with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    return A::expires_at(load<A>(words), p).count();
  });
}

// One row as a snapshot holds it (limit/snapshot.hpp): read whole before it is kept.
struct saved_row {
  std::string_view subject;
  row_header header;
  std::array<std::uint64_t, k_max_width> words{};  // the state, but for a sliding log
  std::vector<std::int64_t> stamps;                // a sliding log's timestamps, oldest first
};

// Longest subject a snapshot may hold: identity makes them far shorter (a prefix and 32 hex
// digits, or an address); the bound keeps a damaged length from asking for gigabytes.
constexpr std::size_t k_max_saved_subject = 4096;

void write_row(byte_writer& out, algorithm a, std::string_view subject, row_header header,
               const std::uint64_t* words) {
  out.text(subject);
  out.u64(header.raw());
  if (a == algorithm::sliding_window_log) {
    const auto s = load<sliding_window_log>(words);
    const std::size_t n = sliding_window_log::size(s);
    out.u32(static_cast<std::uint32_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      out.i64(sliding_window_log::at(s, i));
    }
    return;
  }
  const std::size_t width = with_algorithm(a, [](auto t) { return decltype(t)::type::width; });
  for (std::size_t i = 0; i < width; ++i) {
    out.u64(words[i]);
  }
}

// Throws snapshot_error for a row that write_row cannot have written.
void read_row(byte_reader& in, algorithm a, saved_row& row) {
  row.subject = in.text(k_max_saved_subject);
  if (row.subject.empty()) {
    throw snapshot_error("a row without a subject");
  }
  row.header = row_header::from_raw(in.u64());
  row.stamps.clear();
  if (a == algorithm::sliding_window_log) {
    const std::uint32_t n = in.u32();
    if (n > k_max_log_limit || std::uint64_t{n} * 8 > in.left()) {
      throw snapshot_error("a sliding log of " + std::to_string(n) + " timestamps");
    }
    row.stamps.resize(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      row.stamps[i] = in.i64();
      if (i > 0 && row.stamps[i] < row.stamps[i - 1]) {
        throw snapshot_error("a sliding log out of order");
      }
    }
    return;
  }
  const std::size_t width = with_algorithm(a, [](auto t) { return decltype(t)::type::width; });
  for (std::size_t i = 0; i < width; ++i) {
    row.words[i] = in.u64();
  }
}

class row_table;

// The row a full shard would evict, as found so far by row_table::sample.
struct eviction_candidate {
  row_table* table = nullptr;
  std::string_view subject;  // views the row's key: valid until its table changes
  std::uint64_t expiry = 0;  // row_header::expiry(), 0 for an expired row
  bool lapsed = false;       // the row has expired: it equals no row, nothing is better
};

// One slot's rows in one shard. Virtual so that each algorithm gets rows of exactly its width.
// Every member is used under the shard's mutex.
class row_table {
 public:
  explicit row_table(algorithm algo) : algo_(algo) {}
  virtual ~row_table() = default;

  virtual row_ref find(const subject_probe& p) = 0;
  virtual row_ref insert(std::string_view subject) = 0;  // a zeroed row; the subject is absent
  virtual std::size_t sweep(std::int64_t now) = 0;
  /// Clears one subject (all: every row) but for units in flight; returns the rows touched.
  virtual std::size_t reset(const subject_probe* p) = 0;
  virtual std::size_t size() const = 0;
  virtual memory_store::usage usage() const = 0;
  /// Looks at up to `budget` rows from where its last look ended, wrapping around (each row at
  /// most once), and keeps in `best` the row that expires soonest among those that may be
  /// evicted: not limited, no units in flight, not `exclude`'s. Returns the rows looked at.
  virtual std::size_t sample(std::int64_t now, std::size_t budget, const subject_probe& exclude,
                             eviction_candidate& best) = 0;
  /// Drops the row of `p`, which is there.
  virtual void evict(const subject_probe& p) = 0;
  /// store.snapshot: appends each row that has not expired at `now` (write_row); returns how
  /// many.
  virtual std::size_t write_rows(byte_writer& out, std::int64_t now) const = 0;
  /// Adds a row read from a snapshot; its subject is absent.
  virtual void restore(const saved_row& saved) = 0;

  algorithm algo() const { return algo_; }

  // Concurrency units held by leases, all rows: a slot's table outlives its last configuration
  // until they are given back.
  std::uint64_t units_in_flight = 0;
  bool retired = false;  // no configuration binds the slot any more

 private:
  algorithm algo_;
};

template <class A>
class row_table_of final : public row_table {
  static_assert(A::width <= k_max_width);

 public:
  row_table_of(algorithm algo, std::uint64_t seed) : row_table(algo), rows_(0, key_hash{seed}) {}

  ~row_table_of() override {
    for (auto& [key, r] : rows_) {
      free_log(r);
    }
  }

  row_ref find(const subject_probe& p) override {
    auto it = rows_.find(p);
    if (it == rows_.end()) {
      return {nullptr, nullptr};
    }
    return {&it->second.header, it->second.words.data()};
  }

  row_ref insert(std::string_view subject) override {
    auto [it, inserted] = rows_.try_emplace(subject_key(subject));
    assert(inserted);
    return {&it->second.header, it->second.words.data()};
  }

  std::size_t sweep(std::int64_t now) override {
    return boost::unordered::erase_if(rows_, [&](auto& entry) {
      row& r = entry.second;
      if (!r.header.expired(now) || in_flight(r)) {
        return false;
      }
      free_log(r);
      return true;
    });
  }

  std::size_t reset(const subject_probe* p) override {
    auto clear = [&](row& r) {
      if (!in_flight(r)) {
        free_log(r);
        return true;
      }
      // Keep the units of requests still in flight (a concurrency row holds nothing else):
      // they are real, and their leases will give them back.
      r.header = row_header{};
      return false;
    };
    if (p != nullptr) {
      auto it = rows_.find(*p);
      if (it == rows_.end()) {
        return 0;
      }
      if (clear(it->second)) {
        rows_.erase(it);
      }
      return 1;
    }
    const std::size_t touched = rows_.size();
    boost::unordered::erase_if(rows_, [&](auto& entry) { return clear(entry.second); });
    return touched;
  }

  std::size_t size() const override { return rows_.size(); }

  std::size_t sample(std::int64_t now, std::size_t budget, const subject_probe& exclude,
                     eviction_candidate& best) override {
    const std::size_t n = std::min(budget, rows_.size());
    if (n == 0) {
      return 0;
    }
    auto it = rows_.end();
    if (has_cursor_) {
      it = rows_.find(subject_probe{cursor_, hash_subject(cursor_, rows_.hash_function().seed)});
    }
    std::size_t looked = 0;
    while (looked < n && !best.lapsed) {
      if (it == rows_.end()) {
        it = rows_.begin();
      }
      const auto& [key, r] = *it;
      ++looked;
      ++it;
      const bool lapsed = r.header.expired(now);
      if (in_flight(r) || (r.header.limited() && !lapsed) || key.view() == exclude.subject) {
        continue;
      }
      const std::uint64_t expiry = lapsed ? 0 : r.header.expiry();
      if (best.table == nullptr || expiry < best.expiry) {
        best = {this, key.view(), expiry, lapsed};
      }
    }
    // The next look starts after this one: successive evictions walk the whole table.
    if (it == rows_.end()) {
      it = rows_.begin();
    }
    cursor_.assign(it->first.view());
    has_cursor_ = true;
    return looked;
  }

  void evict(const subject_probe& p) override {
    auto it = rows_.find(p);
    assert(it != rows_.end() && !in_flight(it->second));
    free_log(it->second);
    rows_.erase(it);
  }

  std::size_t write_rows(byte_writer& out, std::int64_t now) const override {
    std::size_t n = 0;
    for (const auto& [key, r] : rows_) {
      if (!r.header.expired(now)) {
        write_row(out, algo(), key.view(), r.header, r.words.data());
        ++n;
      }
    }
    return n;
  }

  void restore(const saved_row& saved) override {
    auto [it, inserted] = rows_.try_emplace(subject_key(saved.subject));
    assert(inserted);
    row& r = it->second;
    r.header = saved.header;
    if constexpr (k_log) {
      save<sliding_window_log>(sliding_window_log::from_timestamps(saved.stamps), r.words.data());
    } else {
      std::copy_n(saved.words.begin(), A::width, r.words.begin());
    }
  }

  memory_store::usage usage() const override {
    memory_store::usage u;
    u.entries = rows_.size();
    if (rows_.bucket_count() > 0) {
      // boost::unordered_flat_map: groups of 15 slots, each group with 16 control bytes.
      const std::size_t slots = rows_.bucket_count() + 1;
      u.table_bytes = slots * sizeof(typename map::value_type) + slots / 15 * 16;
    }
    for (const auto& [key, r] : rows_) {
      u.heap_bytes += key.heap_bytes();
      if constexpr (k_log) {
        u.heap_bytes += sliding_window_log::heap_bytes(load<sliding_window_log>(r.words.data()));
      }
    }
    return u;
  }

 private:
  static constexpr bool k_log = std::is_same_v<A, sliding_window_log>;
  static constexpr bool k_units = std::is_same_v<A, concurrency>;

  struct row {
    row_header header;
    std::array<std::uint64_t, A::width> words{};
  };
  using map = boost::unordered_flat_map<subject_key, row, key_hash, key_equal>;

  static bool in_flight(const row& r) { return k_units && r.words[0] != 0; }

  // Sliding log state owns heap memory.
  static void free_log(row& r) {
    if constexpr (k_log) {
      auto s = load<sliding_window_log>(r.words.data());
      sliding_window_log::clear(s);
      save<sliding_window_log>(s, r.words.data());
    }
  }

  map rows_;
  // The subject of the row the next `sample` starts at (when it is gone: the first row).
  std::string cursor_;
  bool has_cursor_ = false;
};

// row_table::reset, keeping the shard's count of rows right.
std::size_t reset_rows(row_table& table, const subject_probe* probe, std::uint64_t& shard_rows) {
  const std::size_t before = table.size();
  const std::size_t touched = table.reset(probe);
  shard_rows -= before - table.size();
  return touched;
}

std::unique_ptr<row_table> make_table(algorithm a, std::uint64_t seed) {
  return with_algorithm(a, [&](auto t) -> std::unique_ptr<row_table> {
    return std::make_unique<row_table_of<typename decltype(t)::type>>(a, seed);
  });
}

}  // namespace

// Aligned to a cache line so that threads working on different shards do not share one.
struct alignas(64) memory_store::shard {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<row_table>> tables;  // by slot; null: a free slot id
  std::uint64_t rows = 0;                          // in all tables
  std::uint64_t evictions = 0;                     // memory_store::full_counts
  std::uint64_t full = 0;
  // The shard's subjects denied in the last top_window; sized by the store's constructor.
  recent_denials denials{2, memory_store_options{}.top_window};
};

// Which identity has which slot. Used when configurations are loaded and dropped, and when the
// last unit of a retired slot comes back; never on the request path.
struct memory_store::registry {
  struct slot_info {
    limit_identity id;
    algorithm algo = algorithm::token_bucket;
    std::uint32_t refs = 0;  // limiters binding it
    std::size_t tables = 0;  // shards whose table of it is still there
  };

  mutable std::mutex mutex;
  std::map<limit_identity, std::uint32_t> by_identity;  // bound slots only
  std::vector<slot_info> slots;
  std::vector<std::uint32_t> free;
};

memory_store::memory_store(memory_store_options options)
    : options_(options), registry_(std::make_unique<registry>()) {
  const std::size_t shards = std::bit_ceil(std::max<std::size_t>(options_.shards, 1));
  shard_mask_ = shards - 1;
  // Rounded up without the sum that would wrap for a max_keys near UINT64_MAX.
  shard_capacity_ = std::max<std::uint64_t>(
      options_.max_keys / shards + (options_.max_keys % shards != 0 ? 1 : 0), 1);
  seed_ = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  shards_ = std::make_unique<shard[]>(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    shards_[i].denials = recent_denials(k_top_subjects / shards, options_.top_window);
  }
}

namespace {

memory_store_options options_of(const config& cfg) {
  memory_store_options options;
  options.max_keys = cfg.store.max_keys;
  options.on_full = cfg.store.on_full;
  options.top_window = cfg.admin.top_window;
  const std::uint64_t most = std::max<std::uint64_t>(cfg.store.max_keys / k_min_shard_rows, 1);
  if (most < options.shards) {
    options.shards = static_cast<std::size_t>(std::bit_floor(most));
  }
  return options;
}

}  // namespace

memory_store::memory_store(const config& cfg) : memory_store(options_of(cfg)) {}

memory_store::~memory_store() = default;

memory_store::shard& memory_store::shard_for(std::uint64_t hash) const {
  // Bits 8 and up: the table takes its position from the top bits and its tag from the low byte.
  return shards_[(hash >> 8) & shard_mask_];
}

std::uint32_t memory_store::bind_slot(const limit_identity& id, algorithm algo) {
  registry& reg = *registry_;
  std::lock_guard lock(reg.mutex);
  if (auto it = reg.by_identity.find(id); it != reg.by_identity.end()) {
    registry::slot_info& info = reg.slots[it->second];
    // The signature covers the algorithm: one identity, one algorithm.
    assert(info.algo == algo);
    ++info.refs;
    return it->second;
  }

  const std::size_t shards = shard_mask_ + 1;
  std::vector<std::unique_ptr<row_table>> tables;
  tables.reserve(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    tables.push_back(make_table(algo, seed_));
  }
  std::uint32_t slot = 0;
  if (reg.free.empty()) {
    if (reg.slots.size() >= k_no_slot) {
      throw std::length_error("memory_store: out of slot ids");
    }
    slot = static_cast<std::uint32_t>(reg.slots.size());
    reg.slots.emplace_back();
  } else {
    slot = reg.free.back();
  }
  for (std::size_t i = 0; i < shards; ++i) {
    shard& s = shards_[i];
    std::lock_guard shard_lock(s.mutex);
    if (s.tables.size() <= slot) {
      s.tables.resize(slot + 1);
    }
    s.tables[slot] = std::move(tables[i]);
  }
  if (!reg.free.empty()) {
    reg.free.pop_back();
  }
  reg.slots[slot] = {id, algo, 1, shards};
  reg.by_identity.emplace(id, slot);
  return slot;
}

void memory_store::unbind_slot(std::uint32_t slot) noexcept {
  {
    registry& reg = *registry_;
    std::lock_guard lock(reg.mutex);
    registry::slot_info& info = reg.slots[slot];
    assert(info.refs > 0);
    if (--info.refs > 0) {
      return;
    }
    // From here on the identity binds a fresh slot: the old one is on its way out.
    reg.by_identity.erase(info.id);
  }
  retire_slot(slot);
}

void memory_store::retire_slot(std::uint32_t slot) noexcept {
  std::size_t dropped = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    shard& s = shards_[i];
    std::unique_ptr<row_table> gone;
    {
      std::lock_guard lock(s.mutex);
      std::unique_ptr<row_table>& table = s.tables[slot];
      if (table->units_in_flight == 0) {
        s.rows -= table->size();
        gone = std::move(table);
        ++dropped;
      } else {
        // Leases still name the slot: keep their rows until they come back (release_slots
        // drops the table with the last one).
        reset_rows(*table, nullptr, s.rows);
        table->retired = true;
      }
    }
    // `gone` is freed here, outside the lock: a large table takes a while.
  }
  table_dropped(slot, dropped);
}

void memory_store::table_dropped(std::uint32_t slot, std::size_t count) noexcept {
  if (count == 0) {
    return;
  }
  registry& reg = *registry_;
  std::lock_guard lock(reg.mutex);
  registry::slot_info& info = reg.slots[slot];
  assert(info.tables >= count);
  info.tables -= count;
  if (info.tables == 0) {
    info = {};
    reg.free.push_back(slot);
  }
}

std::optional<route_decision> memory_store::try_check(const check_request& req) {
  return decide(req);
}

boost::asio::awaitable<route_decision> memory_store::check(const check_request& req) {
  co_return decide(req);
}

route_decision memory_store::decide(const check_request& req) {
  const std::size_t n = req.limits.size();
  assert(n <= k_max_limits);
  if (n == 0) {
    return {};
  }
  const subject_probe probe{req.subject, hash_subject(req.subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::unique_lock lock(s.mutex);

  row_table* tables[k_max_limits];
  row_ref rows[k_max_limits];
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    assert(p.slot < s.tables.size() && s.tables[p.slot] && !s.tables[p.slot]->retired);
    assert(s.tables[p.slot]->algo() == p.algo);
    tables[i] = s.tables[p.slot].get();
  }

  if (req.mode == charge_mode::force) {
    return force_locked(s, req, probe.hash);
  }

  decision_fold fold;
  std::uint64_t denying = 0;    // limits whose state denies this request (bit i: limit i)
  std::uint64_t exhausted = 0;  // limits this request leaves with nothing remaining
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    rows[i] = tables[i]->find(probe);
    const std::uint64_t* words = rows[i] ? rows[i].words : k_zero_words;
    const decision d = check_limit(p.algo, words, req.now, p, req.cost);
    if (!d.allowed && !d.impossible) {
      denying |= std::uint64_t{1} << i;
    } else if (d.allowed && d.remaining == 0) {
      exhausted |= std::uint64_t{1} << i;
    }
    fold.add(i, d, p.shadow);
  }
  // A row that denies is limited (memory_store: never evicted) until its state expires.
  for (std::uint32_t i = 0; i < n; ++i) {
    if (rows[i] && ((denying >> i) & 1) != 0) {
      rows[i].header->set_limited(true);
    }
  }
  if (!fold.allowed()) {
    s.denials.add(req.subject, req.now);
    return fold.finish();
  }
  // Rows to be made: limits that will be charged and have none yet. A peek makes room for the
  // rows its charge will need, and is refused as a check is when there is none: else a flood
  // of new subjects would be admitted untracked and their charges dropped.
  std::uint64_t missing = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    missing += (!rows[i] && fold.allowed(i)) ? 1 : 0;
  }
  const bool full = !make_room(s, missing, probe.subject, probe.hash, req.now);
  if (full && options_.on_full == store_full::deny) {
    lock.unlock();
    route_decision r = fold.finish();
    // A route of shadow limits only has nothing to enforce: it goes on untracked.
    r.untracked = !r.has_limits;
    if (r.has_limits) {
      r.allowed = false;
      r.store_full = true;
      r.delay = nanos{0};
      r.headline.allowed = false;
      r.headline.delay = nanos{0};
      r.headline.retry_after = k_full_retry;
    }
    return r;
  }

  if (req.mode == charge_mode::peek) {
    route_decision r = fold.finish();  // room left; the charge comes when the response ends
    r.untracked = full;
    return r;
  }

  // Every row first, then every charge: nothing is charged if a row cannot be made. (Rows
  // of a request are in distinct tables, so an insert moves no other row of it.)
  if (missing > 0 && !full) {
    for (std::uint32_t i = 0; i < n; ++i) {
      if (!rows[i] && fold.allowed(i)) {
        rows[i] = tables[i]->insert(req.subject);
        ++s.rows;
      }
    }
  }
  slot_list units;
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    row_ref row = rows[i];
    // Shadow limits that would deny are not charged, as an enforced one would not be.
    // on_full: allow: a missing row was decided as fresh state and is not recorded.
    if (!fold.allowed(i) || !row) {
      continue;
    }
    // An expired row is a fresh one: it is limited again only by what happens from now on.
    const bool lapsed = row.header->expired(req.now.count());
    row.header->set_limited(((exhausted >> i) & 1) != 0 || (!lapsed && row.header->limited()));
    commit_limit(p.algo, row.words, req.now, p, req.cost);
    if (p.algo == algorithm::concurrency) {
      units.push_back(p.slot);
      ++tables[i]->units_in_flight;
    }
    row.header->set_expires_at(expiry_of(p.algo, row.words, p));
  }
  lock.unlock();

  route_decision r = fold.finish();
  r.untracked = full;
  if (!units.empty()) {
    r.slot = lease(*this, std::string(req.subject), std::move(units));
  }
  return r;
}

bool memory_store::make_room(shard& s, std::uint64_t missing, std::string_view subject,
                             std::uint64_t hash, nanos now) {
  if (missing == 0 || s.rows + missing <= shard_capacity_) {
    return true;
  }
  // Room is made by evicting rows that lose least; never the subject's own (the caller holds
  // them), and erasing other rows moves none of them.
  std::uint64_t needed = s.rows + missing - shard_capacity_;
  while (needed > 0 && evict_one(s, subject, hash, now)) {
    --needed;
  }
  s.full += needed > 0 ? 1 : 0;
  return needed == 0;
}

route_decision memory_store::force_locked(shard& s, const check_request& req, std::uint64_t hash) {
  const std::size_t n = req.limits.size();
  const subject_probe probe{req.subject, hash};
  row_table* tables[k_max_limits];
  row_ref rows[k_max_limits];
  std::uint64_t missing = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    tables[i] = s.tables[req.limits[i].slot].get();
    rows[i] = tables[i]->find(probe);
    missing += rows[i] ? 0 : 1;
  }
  // A full store that can evict nothing leaves the missing rows out: the charge is lost for
  // them, as on_full: allow loses an admitted request's.
  const bool full = !make_room(s, missing, req.subject, hash, req.now);
  route_decision r;
  r.has_limits = true;
  r.untracked = full;
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    if (!rows[i] && !full) {
      rows[i] = tables[i]->insert(req.subject);
      ++s.rows;
    }
    row_ref row = rows[i];
    if (!row) {
      continue;
    }
    const bool lapsed = row.header->expired(req.now.count());
    force_limit(p.algo, row.words, req.now, p, req.cost);
    // Limited (never evicted) while even one more unit would be denied: the debt stays.
    const decision next = check_limit(p.algo, row.words, req.now, p, 1);
    row.header->set_limited(!next.allowed || (!lapsed && row.header->limited()));
    row.header->set_expires_at(expiry_of(p.algo, row.words, p));
  }
  return r;
}

bool memory_store::evict_one(shard& s, std::string_view subject, std::uint64_t hash, nanos now) {
  const std::size_t count = s.tables.size();
  if (s.rows == 0) {
    return false;
  }
  // The first table to look in, with a probability proportional to its rows (so that a table
  // of few rows is not emptied first): the subject's seeded hash, mixed again, is the dice.
  std::uint64_t dice = mum(hash, 0x9e3779b97f4a7c15ull) % s.rows;
  std::size_t first = 0;
  for (; first < count; ++first) {
    const std::size_t size = s.tables[first] ? s.tables[first]->size() : 0;
    if (dice < size) {
      break;
    }
    dice -= size;
  }
  eviction_candidate best;
  std::size_t budget = k_eviction_sample;
  const subject_probe self{subject, hash};
  for (std::size_t step = 0; step < count && budget > 0 && !best.lapsed; ++step) {
    if (row_table* t = s.tables[(first + step) % count].get()) {
      budget -= t->sample(now.count(), budget, self, best);
    }
  }
  if (best.table == nullptr) {
    return false;
  }
  best.table->evict({best.subject, hash_subject(best.subject, seed_)});
  --s.rows;
  ++s.evictions;
  return true;
}

void memory_store::release_slots(std::string_view subject,
                                 std::span<const std::uint32_t> slots) noexcept {
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  slot_list dropped;
  {
    std::lock_guard lock(s.mutex);
    for (std::uint32_t slot : slots) {
      std::unique_ptr<row_table>& table = s.tables[slot];
      // Rows holding units are never swept nor reset away, and their table stays while they
      // are held, so the row is there.
      row_ref row = table->find(probe);
      assert(row && table->algo() == algorithm::concurrency);
      if (!row) {
        continue;
      }
      auto state = load<concurrency>(row.words);
      concurrency::release(state);
      save<concurrency>(state, row.words);
      --table->units_in_flight;
      if (table->retired && table->units_in_flight == 0) {
        s.rows -= table->size();
        table.reset();
        dropped.push_back(slot);
      }
    }
  }
  for (std::uint32_t slot : dropped.view()) {
    table_dropped(slot, 1);
  }
}

std::vector<decision> memory_store::status_now(std::string_view subject,
                                               std::span<const policy> limits, nanos now) const {
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  std::vector<decision> out;
  for (const policy& p : limits) {
    assert(p.slot < s.tables.size() && s.tables[p.slot]);
    row_ref row = s.tables[p.slot]->find(probe);
    const std::uint64_t* w = row ? row.words : k_zero_words;
    // Cost 0 reads the state as it is; cost 1 tells whether one more request would pass.
    decision d = check_limit(p.algo, w, now, p, 0);
    const decision next = check_limit(p.algo, w, now, p, 1);
    d.allowed = next.allowed;
    d.impossible = next.impossible;
    d.retry_after = next.retry_after;
    d.delay = next.delay;
    if (p.algo == algorithm::concurrency) {
      d.remaining = next.allowed ? next.remaining + 1 : 0;
    }
    out.push_back(d);
  }
  return out;
}

std::size_t memory_store::reset_now(std::string_view subject) {
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  std::size_t touched = 0;
  for (const auto& table : s.tables) {
    if (table) {
      touched += reset_rows(*table, &probe, s.rows);
    }
  }
  return touched;
}

std::size_t memory_store::reset_limits_now(std::string_view subject,
                                           std::span<const policy> limits) {
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  std::size_t touched = 0;
  for (const policy& p : limits) {
    assert(p.slot < s.tables.size() && s.tables[p.slot]);
    touched += reset_rows(*s.tables[p.slot], &probe, s.rows);
  }
  return touched;
}

std::size_t memory_store::reset_all_now() {
  std::size_t touched = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    for (const auto& table : s.tables) {
      if (table) {
        touched += reset_rows(*table, nullptr, s.rows);
      }
    }
  }
  return touched;
}

std::vector<denied_subject> memory_store::top_denied_now(std::size_t n, nanos now) const {
  // A subject's denials are all in its shard, whatever route or limit denied.
  std::vector<denied_subject> all;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    s.denials.collect(now, all);
  }
  return most_denied(std::move(all), n);
}

void memory_store::set_top_window(nanos window, nanos now) {
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    s.denials.set_window(window, now);
  }
}

std::size_t memory_store::denied_subjects() const {
  std::size_t n = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    n += s.denials.size();
  }
  return n;
}

std::size_t memory_store::sweep_shard(shard& s, nanos now) {
  std::size_t dropped = 0;
  for (const auto& table : s.tables) {
    if (table) {
      dropped += table->sweep(now.count());
    }
  }
  s.rows -= dropped;
  s.denials.prune(now);
  return dropped;
}

std::size_t memory_store::sweep(nanos now) {
  std::size_t dropped = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    dropped += sweep_shard(s, now);
  }
  return dropped;
}

boost::asio::awaitable<std::vector<decision>> memory_store::status(std::string_view subject,
                                                                   std::uint32_t,
                                                                   std::span<const policy> limits,
                                                                   nanos now) {
  co_return status_now(subject, limits, now);
}

boost::asio::awaitable<std::size_t> memory_store::reset(std::string_view subject,
                                                        std::optional<std::uint32_t> route) {
  if (route) {
    co_return 0;
  }
  co_return reset_now(subject);
}

boost::asio::awaitable<std::size_t> memory_store::reset_limits(std::string_view subject,
                                                               std::uint32_t,
                                                               std::span<const policy> limits) {
  co_return reset_limits_now(subject, limits);
}

boost::asio::awaitable<std::size_t> memory_store::reset_all() {
  co_return reset_all_now();
}

boost::asio::awaitable<std::vector<denied_subject>> memory_store::top_denied(std::size_t n,
                                                                             nanos now) {
  co_return top_denied_now(n, now);
}

memory_store::usage memory_store::memory_usage() const {
  usage total;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    for (const auto& table : s.tables) {
      if (!table) {
        continue;
      }
      const usage u = table->usage();
      total.entries += u.entries;
      total.table_bytes += u.table_bytes;
      total.heap_bytes += u.heap_bytes;
    }
  }
  return total;
}

std::size_t memory_store::size() const {
  std::size_t rows = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    rows += s.rows;
  }
  return rows;
}

memory_store::full_counts memory_store::full_stats() const {
  full_counts total;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    total.evictions += s.evictions;
    total.full += s.full;
  }
  return total;
}

store_status memory_store::status() const {
  const full_counts full = full_stats();
  store_status out;
  out.kind = "memory";
  out.rows = size();
  out.evictions = full.evictions;
  out.full = full.full;
  return out;
}

std::size_t memory_store::slot_count() const {
  std::lock_guard lock(registry_->mutex);
  return registry_->slots.size() - registry_->free.size();
}

// A snapshot names algorithms by these numbers (version 1).
static_assert(static_cast<int>(algorithm::token_bucket) == 0 &&
              static_cast<int>(algorithm::leaky_bucket) == 1 &&
              static_cast<int>(algorithm::fixed_window) == 2 &&
              static_cast<int>(algorithm::sliding_window_log) == 3 &&
              static_cast<int>(algorithm::sliding_window_counter) == 4 &&
              static_cast<int>(algorithm::concurrency) == 5);

std::size_t memory_store::save_rows(byte_writer& out, nanos now) const {
  const registry& reg = *registry_;
  std::lock_guard lock(reg.mutex);
  std::size_t sections = 0;
  for (const auto& [id, slot] : reg.by_identity) {
    sections += reg.slots[slot].algo != algorithm::concurrency ? 1 : 0;
  }
  out.u32(static_cast<std::uint32_t>(sections));
  std::size_t total = 0;
  for (const auto& [id, slot] : reg.by_identity) {
    const algorithm algo = reg.slots[slot].algo;
    if (algo == algorithm::concurrency) {
      continue;
    }
    out.text(id.route);
    out.text(id.limit);
    out.u64(id.signature);
    out.u8(static_cast<std::uint8_t>(algo));
    const std::size_t count_at = out.position();
    out.u64(0);
    std::size_t rows = 0;
    for (std::size_t i = 0; i <= shard_mask_; ++i) {
      const shard& s = shards_[i];
      std::lock_guard shard_lock(s.mutex);
      rows += s.tables[slot]->write_rows(out, now.count());
    }
    out.patch_u64(count_at, rows);
    total += rows;
  }
  return total;
}

void memory_store::restore_rows(byte_reader& in, nanos now, bool keyed_subjects, restore_pass pass,
                                snapshot_loaded& counts) {
  // No state reaches further than this from now (a bucket's depth and a debt are bounded far
  // below it): a time beyond it is no state this gateway wrote, and would overflow the
  // algorithms' arithmetic.
  const std::int64_t horizon = now.count() + (std::int64_t{1} << 61);
  registry& reg = *registry_;
  std::lock_guard lock(reg.mutex);
  const std::uint32_t sections = in.u32();
  saved_row row;
  for (std::uint32_t n = 0; n < sections; ++n) {
    limit_identity id;
    id.route = in.text(k_max_saved_subject);
    id.limit = in.text(k_max_saved_subject);
    id.signature = in.u64();
    const std::uint8_t code = in.u8();
    if (code >= static_cast<std::uint8_t>(algorithm::concurrency)) {
      throw snapshot_error("an unknown algorithm (" + std::to_string(code) + ")");
    }
    const auto algo = static_cast<algorithm>(code);
    const std::uint64_t rows = in.u64();
    // The slot of the same definition: the signature covers the algorithm and every parameter
    // that gives the state its meaning (same_state_meaning), as a reload keeps state.
    const auto bound = reg.by_identity.find(id);
    const bool same = bound != reg.by_identity.end() && reg.slots[bound->second].algo == algo;
    for (std::uint64_t r = 0; r < rows; ++r) {
      read_row(in, algo, row);
      const bool bucket = algo == algorithm::token_bucket || algo == algorithm::leaky_bucket;
      if ((bucket && static_cast<std::int64_t>(row.words[0]) > horizon) ||
          (!row.stamps.empty() && row.stamps.back() > horizon)) {
        throw snapshot_error("a time beyond any limit's reach");
      }
      if (pass == restore_pass::check || row.header.limited() != (pass == restore_pass::limited)) {
        continue;
      }
      if (!same) {
        ++counts.changed;
      } else if (row.header.expired(now.count())) {
        ++counts.expired;
      } else if (!keyed_subjects && !row.subject.starts_with("ip:")) {
        ++counts.other_key;
      } else {
        const subject_probe probe{row.subject, hash_subject(row.subject, seed_)};
        shard& s = shard_for(probe.hash);
        std::lock_guard shard_lock(s.mutex);
        row_table& table = *s.tables[bound->second];
        if (table.find(probe)) {
          continue;  // state made since the start is newer
        }
        if (s.rows >= shard_capacity_) {
          ++counts.full;
          continue;
        }
        table.restore(row);
        ++s.rows;
        ++counts.rows;
      }
    }
  }
  if (in.left() != 0) {
    throw snapshot_error(std::to_string(in.left()) + " bytes after the last row");
  }
}

}  // namespace ratewall
