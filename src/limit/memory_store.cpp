#include "ratewall/limit/memory_store.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cassert>
#include <cstring>
#include <limits>
#include <mutex>
#include <random>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>

#include <boost/unordered/unordered_flat_map.hpp>

#include "ratewall/limit/concurrency.hpp"
#include "ratewall/limit/fixed_window.hpp"
#include "ratewall/limit/gcra.hpp"
#include "ratewall/limit/leaky_bucket.hpp"
#include "ratewall/limit/sliding_window_counter.hpp"
#include "ratewall/limit/sliding_window_log.hpp"

namespace ratewall {

namespace {

constexpr std::size_t k_max_words = 16;
constexpr std::size_t k_max_limits = 64;  // a lease is a 64-bit mask of limits

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
// Rows: a header and the state words of every limit of the route.

// One word: when the row expires (from then on it equals no row, unless slots are held) in
// units of 2^20 ns (about 1 ms, rounded up: a row may be swept up to 1 ms late, never early),
// 40 bits (36 years of uptime); and the subject's denials, 24 bits, saturating.
class row_header {
 public:
  bool expired(std::int64_t now) const {
    return static_cast<std::int64_t>(expiry() << k_unit) <= now;
  }

  void set_expires_at(std::int64_t t) {
    std::uint64_t units = 0;
    if (t > 0) {
      units =
          std::min((static_cast<std::uint64_t>(t) + (1u << k_unit) - 1) >> k_unit, k_max_expiry);
    }
    meta_ = (units << k_denial_bits) | denials();
  }

  std::uint64_t denials() const { return meta_ & k_max_denials; }
  void add_denial() {
    if (denials() < k_max_denials) {
      ++meta_;
    }
  }

 private:
  static constexpr int k_unit = 20;
  static constexpr int k_denial_bits = 24;
  static constexpr std::uint64_t k_max_denials = (std::uint64_t{1} << k_denial_bits) - 1;
  static constexpr std::uint64_t k_max_expiry = (std::uint64_t{1} << (64 - k_denial_bits)) - 1;

  std::uint64_t expiry() const { return meta_ >> k_denial_bits; }

  std::uint64_t meta_ = 0;
};

struct row_ref {
  row_header* header = nullptr;
  std::uint64_t* words = nullptr;
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
decltype(auto) with_algorithm(algorithm a, F&& f) {
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

std::size_t width_of(algorithm a) {
  return with_algorithm(a, [](auto t) { return decltype(t)::type::width; });
}

decision check_limit(algorithm a, const std::uint64_t* words, nanos now, const policy& p,
                     std::uint64_t cost) {
  return with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    return A::check(load<A>(words), now, p, cost);
  });
}

void commit_limit(algorithm a, std::uint64_t* words, nanos now, const policy& p,
                  std::uint64_t cost) {
  with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    auto s = load<A>(words);
    A::commit(s, now, p, cost);
    save<A>(s, words);
  });
}

// When the limit's state lapses; slots in flight are tracked apart (row_table::in_flight).
std::int64_t expiry_of(algorithm a, const std::uint64_t* words, const policy& p) {
  if (a == algorithm::concurrency) {
    return 0;
  }
  return with_algorithm(a, [&](auto t) {
    using A = typename decltype(t)::type;
    return A::expires_at(load<A>(words), p).count();
  });
}

// One route's rows in one shard. Virtual so that each route gets rows of exactly its width.
class row_table {
 public:
  virtual ~row_table() = default;
  virtual row_ref find(const subject_probe& p) = 0;
  virtual row_ref insert(std::string_view subject) = 0;  // a zeroed row; the subject is absent
  virtual std::size_t sweep(std::int64_t now) = 0;
  /// Clears one subject (all: every row) but for slots in flight; returns the rows touched.
  virtual std::size_t reset(const subject_probe* p) = 0;
  virtual void collect_denials(std::vector<denied_subject>& out) const = 0;
  virtual std::size_t size() const = 0;
  virtual memory_store::usage usage() const = 0;
};

// Which words of a row need care: sliding log pointers own heap memory; concurrency counts
// are slots in flight.
struct special_words {
  std::vector<std::uint32_t> logs;
  std::vector<std::uint32_t> slots;
};

template <std::size_t W>
class row_table_of final : public row_table {
 public:
  row_table_of(special_words special, std::uint64_t seed)
      : special_(std::move(special)), rows_(0, key_hash{seed}) {}

  ~row_table_of() override {
    for (auto& [key, r] : rows_) {
      free_logs(r);
    }
  }

  row_ref find(const subject_probe& p) override {
    auto it = rows_.find(p);
    if (it == rows_.end()) {
      return {};
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
      free_logs(r);
      return true;
    });
  }

  std::size_t reset(const subject_probe* p) override {
    auto clear = [&](row& r) {
      if (!in_flight(r)) {
        free_logs(r);
        return true;
      }
      // Keep the slots of requests still in flight: they are real, and their leases will
      // give them back.
      free_logs(r);
      std::array<std::uint64_t, W> kept{};
      for (std::uint32_t w : special_.slots) {
        kept[w] = r.words[w];
      }
      r.words = kept;
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

  void collect_denials(std::vector<denied_subject>& out) const override {
    for (const auto& [key, r] : rows_) {
      if (r.header.denials() > 0) {
        out.push_back({std::string(key.view()), r.header.denials()});
      }
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
      for (std::uint32_t w : special_.logs) {
        u.heap_bytes += sliding_window_log::heap_bytes(load<sliding_window_log>(&r.words[w]));
      }
    }
    return u;
  }

 private:
  struct row {
    row_header header;
    std::array<std::uint64_t, W> words{};
  };
  using map = boost::unordered_flat_map<subject_key, row, key_hash, key_equal>;

  bool in_flight(const row& r) const {
    for (std::uint32_t w : special_.slots) {
      if (r.words[w] != 0) {
        return true;
      }
    }
    return false;
  }

  void free_logs(row& r) {
    for (std::uint32_t w : special_.logs) {
      auto s = load<sliding_window_log>(&r.words[w]);
      sliding_window_log::clear(s);
      save<sliding_window_log>(s, &r.words[w]);
    }
  }

  special_words special_;
  map rows_;
};

// Rows are sized to the smallest instantiated width that holds the route's words.
std::unique_ptr<row_table> make_table(std::size_t w, const special_words& layout,
                                      std::uint64_t seed) {
  if (w <= 1) {
    return std::make_unique<row_table_of<1>>(layout, seed);
  }
  if (w <= 2) {
    return std::make_unique<row_table_of<2>>(layout, seed);
  }
  if (w <= 3) {
    return std::make_unique<row_table_of<3>>(layout, seed);
  }
  if (w <= 4) {
    return std::make_unique<row_table_of<4>>(layout, seed);
  }
  if (w <= 6) {
    return std::make_unique<row_table_of<6>>(layout, seed);
  }
  if (w <= 8) {
    return std::make_unique<row_table_of<8>>(layout, seed);
  }
  return std::make_unique<row_table_of<k_max_words>>(layout, seed);
}

}  // namespace

struct memory_store::route_layout {
  std::vector<algorithm> algos;
  std::vector<std::uint32_t> offsets;  // first word of each limit
  std::uint32_t words = 0;             // per row
  special_words special;
};

// Aligned to a cache line so that threads working on different shards do not share one.
struct alignas(64) memory_store::shard {
  mutable std::mutex mutex;
  std::vector<std::unique_ptr<row_table>> tables;  // one per route
  std::uint64_t rows = 0;
  std::int64_t last_full_sweep = std::numeric_limits<std::int64_t>::min();
};

memory_store::memory_store(const std::vector<std::vector<algorithm>>& routes,
                           memory_store_options options)
    : options_(options) {
  for (std::size_t r = 0; r < routes.size(); ++r) {
    route_layout layout;
    layout.algos = routes[r];
    if (layout.algos.size() > k_max_limits) {
      throw std::invalid_argument("route " + std::to_string(r) + ": more than " +
                                  std::to_string(k_max_limits) + " limits");
    }
    for (algorithm a : layout.algos) {
      layout.offsets.push_back(layout.words);
      if (a == algorithm::sliding_window_log) {
        layout.special.logs.push_back(layout.words);
      } else if (a == algorithm::concurrency) {
        layout.special.slots.push_back(layout.words);
      }
      layout.words += static_cast<std::uint32_t>(width_of(a));
    }
    if (layout.words > k_max_words) {
      throw std::invalid_argument("route " + std::to_string(r) + ": its limits need more than " +
                                  std::to_string(k_max_words) + " words of state");
    }
    routes_.push_back(std::move(layout));
  }

  const std::size_t shards = std::bit_ceil(std::max<std::size_t>(options_.shards, 1));
  shard_mask_ = shards - 1;
  shard_capacity_ = std::max<std::uint64_t>((options_.max_keys + shards - 1) / shards, 1);
  seed_ = (std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  shards_ = std::make_unique<shard[]>(shards);
  for (std::size_t i = 0; i < shards; ++i) {
    for (const route_layout& layout : routes_) {
      shards_[i].tables.push_back(make_table(layout.words, layout.special, seed_));
    }
  }
}

namespace {

std::vector<std::vector<algorithm>> layouts_of(const config& cfg) {
  std::vector<std::vector<algorithm>> routes;
  for (const route_config& route : cfg.routes) {
    auto& algos = routes.emplace_back();
    for (const limit_config& limit : route.limits) {
      algos.push_back(limit.algo);
    }
  }
  return routes;
}

memory_store_options options_of(const config& cfg) {
  memory_store_options options;
  options.max_keys = cfg.store.max_keys;
  return options;
}

}  // namespace

memory_store::memory_store(const config& cfg) : memory_store(layouts_of(cfg), options_of(cfg)) {}

memory_store::~memory_store() = default;

memory_store::shard& memory_store::shard_for(std::uint64_t hash) const {
  // Bits 8 and up: the table takes its slot from the top bits and its tag from the low byte.
  return shards_[(hash >> 8) & shard_mask_];
}

std::optional<route_decision> memory_store::try_check(const check_request& req) {
  return decide(req);
}

boost::asio::awaitable<route_decision> memory_store::check(const check_request& req) {
  co_return decide(req);
}

route_decision memory_store::decide(const check_request& req) {
  const route_layout& layout = routes_[req.route];
  const std::size_t n = layout.algos.size();
  assert(req.limits.size() == n);
  if (n == 0) {
    return {};
  }
  const subject_probe probe{req.subject, hash_subject(req.subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::unique_lock lock(s.mutex);
  row_table& table = *s.tables[req.route];
  row_ref row = table.find(probe);

  std::array<std::uint64_t, k_max_words> fresh;
  const std::uint64_t* words = row.words;
  if (!row) {
    std::fill_n(fresh.begin(), layout.words, 0);
    words = fresh.data();
  }
  decision_fold fold;
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    fold.add(i, check_limit(layout.algos[i], words + layout.offsets[i], req.now, p, req.cost),
             p.shadow);
  }
  if (!fold.allowed()) {
    // A subject without a row is denied only for an impossible cost: no need to track it.
    if (row) {
      row.header->add_denial();
    }
    lock.unlock();
    return fold.finish();
  }

  if (!row) {
    if (s.rows >= shard_capacity_ &&
        req.now.count() - k_full_sweep_interval.count() >= s.last_full_sweep) {
      s.last_full_sweep = req.now.count();
      sweep_shard(s, req.now);
    }
    if (s.rows >= shard_capacity_) {
      lock.unlock();
      route_decision r = fold.finish();
      r.untracked = true;
      if (options_.when_full == memory_store_options::full_policy::deny && r.has_limits) {
        r.allowed = false;
        r.delay = nanos{0};
        r.headline.allowed = false;
        r.headline.delay = nanos{0};
        r.headline.retry_after = k_full_retry;
      }
      return r;
    }
    ++s.rows;
    row = table.insert(req.subject);
  }

  std::uint64_t slots = 0;
  std::int64_t expires = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const policy& p = req.limits[i];
    const algorithm a = layout.algos[i];
    std::uint64_t* w = row.words + layout.offsets[i];
    // Shadow limits that would deny are not charged, as an enforced one would not be.
    if (fold.allowed(i)) {
      commit_limit(a, w, req.now, p, req.cost);
      if (a == algorithm::concurrency) {
        slots |= std::uint64_t{1} << i;
      }
    }
    expires = std::max(expires, expiry_of(a, w, p));
  }
  row.header->set_expires_at(expires);
  lock.unlock();

  route_decision r = fold.finish();
  if (slots != 0) {
    r.slot = lease(*this, std::string(req.subject), req.route, slots);
  }
  return r;
}

void memory_store::release(std::string_view subject, std::uint32_t route,
                           std::uint64_t limits) noexcept {
  const route_layout& layout = routes_[route];
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  // Rows holding slots are never swept nor reset away, so the row is there.
  row_ref row = s.tables[route]->find(probe);
  if (!row) {
    return;
  }
  for (std::uint32_t i = 0; i < layout.algos.size(); ++i) {
    if (((limits >> i) & 1) != 0 && layout.algos[i] == algorithm::concurrency) {
      auto state = load<concurrency>(row.words + layout.offsets[i]);
      concurrency::release(state);
      save<concurrency>(state, row.words + layout.offsets[i]);
    }
  }
}

std::vector<decision> memory_store::status_now(std::string_view subject, std::uint32_t route,
                                               std::span<const policy> limits, nanos now) const {
  const route_layout& layout = routes_[route];
  assert(limits.size() == layout.algos.size());
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  row_ref row = s.tables[route]->find(probe);
  std::array<std::uint64_t, k_max_words> fresh{};
  const std::uint64_t* words = row ? row.words : fresh.data();
  std::vector<decision> out;
  for (std::uint32_t i = 0; i < layout.algos.size(); ++i) {
    const algorithm a = layout.algos[i];
    const std::uint64_t* w = words + layout.offsets[i];
    // Cost 0 reads the state as it is; cost 1 tells whether one more request would pass.
    decision d = check_limit(a, w, now, limits[i], 0);
    const decision next = check_limit(a, w, now, limits[i], 1);
    d.allowed = next.allowed;
    d.impossible = next.impossible;
    d.retry_after = next.retry_after;
    d.delay = next.delay;
    if (a == algorithm::concurrency) {
      d.remaining = next.allowed ? next.remaining + 1 : 0;
    }
    out.push_back(d);
  }
  return out;
}

std::size_t memory_store::reset_now(std::string_view subject, std::optional<std::uint32_t> route) {
  const subject_probe probe{subject, hash_subject(subject, seed_)};
  shard& s = shard_for(probe.hash);
  std::lock_guard lock(s.mutex);
  std::size_t touched = 0;
  for (std::uint32_t r = 0; r < routes_.size(); ++r) {
    if (route && *route != r) {
      continue;
    }
    touched += s.tables[r]->reset(&probe);
  }
  std::uint64_t rows = 0;
  for (const auto& table : s.tables) {
    rows += table->size();
  }
  s.rows = rows;
  return touched;
}

std::size_t memory_store::reset_all_now() {
  std::size_t touched = 0;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    std::uint64_t rows = 0;
    for (const auto& table : s.tables) {
      touched += table->reset(nullptr);
      rows += table->size();
    }
    s.rows = rows;
  }
  return touched;
}

std::vector<denied_subject> memory_store::top_denied_now(std::size_t n) const {
  std::vector<denied_subject> rows;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    for (const auto& table : s.tables) {
      table->collect_denials(rows);
    }
  }
  // One subject has a row per route: add them up.
  std::unordered_map<std::string, std::uint64_t> totals;
  for (auto& row : rows) {
    totals[std::move(row.subject)] += row.denied;
  }
  std::vector<denied_subject> top;
  top.reserve(totals.size());
  for (auto& [subject, denied] : totals) {
    top.push_back({subject, denied});
  }
  const auto by_denials = [](const denied_subject& a, const denied_subject& b) {
    if (a.denied != b.denied) {
      return a.denied > b.denied;
    }
    return a.subject < b.subject;
  };
  const std::size_t keep = std::min(n, top.size());
  std::partial_sort(top.begin(), top.begin() + static_cast<std::ptrdiff_t>(keep), top.end(),
                    by_denials);
  top.resize(keep);
  return top;
}

std::size_t memory_store::sweep_shard(shard& s, nanos now) {
  std::size_t dropped = 0;
  for (const auto& table : s.tables) {
    dropped += table->sweep(now.count());
  }
  s.rows -= dropped;
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
                                                                   std::uint32_t route,
                                                                   std::span<const policy> limits,
                                                                   nanos now) {
  co_return status_now(subject, route, limits, now);
}

boost::asio::awaitable<std::size_t> memory_store::reset(std::string_view subject,
                                                        std::optional<std::uint32_t> route) {
  co_return reset_now(subject, route);
}

boost::asio::awaitable<std::size_t> memory_store::reset_all() {
  co_return reset_all_now();
}

boost::asio::awaitable<std::vector<denied_subject>> memory_store::top_denied(std::size_t n) {
  co_return top_denied_now(n);
}

memory_store::usage memory_store::memory_usage() const {
  usage total;
  for (std::size_t i = 0; i <= shard_mask_; ++i) {
    const shard& s = shards_[i];
    std::lock_guard lock(s.mutex);
    for (const auto& table : s.tables) {
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

}  // namespace ratewall
