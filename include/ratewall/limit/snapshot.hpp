#pragma once

// store.snapshot (DESIGN §9): the memory store's state in a file, so that limits survive a
// restart. nginx, HAProxy and Envoy all start their local limiters afresh: a client at its daily
// quota would start over after every deploy.
//
// The file, integers little-endian:
//   "ratewall-snapshot\n"   18 bytes, so that `head -c 18` says what the file is
//   u32  version            k_snapshot_version; another version is ignored
//   i64  written_at         the writer's steady_clock::now() (ns since 2020-01-01 UTC)
//   u64  key_tag            snapshot_key_tag of the writer's hash key
//   u64  body_bytes
//   ...  body               memory_store::save_rows
//   32   SHA-256            of everything before it
// Times in the body are the writer's steady_clock times. That clock counts from the same
// origin in every process (core/clock.hpp), so they are read back as they are.
//
// A snapshot is written whole to "<path>.<pid>.tmp", fsync'ed and renamed over the path: a
// crash leaves the previous snapshot or the new one, never a mix. Loading never stops the
// start: a missing or empty file is a first start; a file that is truncated, corrupt
// (checksum), of another version, or written over a minute later than now (the wall clock went
// back) is reported and ignored. A path that holds anything else (not a regular file, or not a
// snapshot: the configuration given by mistake) is reported and never replaced. Rows of limits
// whose definition changed are dropped, as a reload drops them; a time beyond any limit's
// reach refuses the file.

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "ratewall/core/clock.hpp"

namespace ratewall {

class memory_store;

inline constexpr std::uint32_t k_snapshot_version = 1;

/// A snapshot that cannot be read back as it is.
class snapshot_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Appends little-endian integers and length-prefixed strings to a string.
class byte_writer {
 public:
  explicit byte_writer(std::string& out) : out_(out) {}

  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { put(v, 4); }
  void u64(std::uint64_t v) { put(v, 8); }
  void i64(std::int64_t v) { put(static_cast<std::uint64_t>(v), 8); }
  /// u32 length, then the bytes.
  void text(std::string_view s);
  /// Where the next byte goes, for patch_u64.
  std::size_t position() const { return out_.size(); }
  /// Overwrites the u64 written at `at` (a count known only later).
  void patch_u64(std::size_t at, std::uint64_t v);

 private:
  void put(std::uint64_t v, int bytes);
  std::string& out_;
};

/// Reads what byte_writer wrote; every read past the end throws snapshot_error.
class byte_reader {
 public:
  explicit byte_reader(std::string_view in) : in_(in) {}

  std::uint8_t u8() { return static_cast<std::uint8_t>(get(1)); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(get(4)); }
  std::uint64_t u64() { return get(8); }
  std::int64_t i64() { return static_cast<std::int64_t>(get(8)); }
  /// A string of at most `max` bytes; a longer one throws.
  std::string_view text(std::size_t max);
  /// `n` raw bytes.
  std::string_view bytes(std::size_t n);
  std::size_t left() const { return in_.size() - at_; }

 private:
  std::uint64_t get(int bytes);
  std::string_view in_;
  std::size_t at_ = 0;
};

/// Names the hash key without revealing it: HMAC(hash_key, "ratewall snapshot"), first 8
/// bytes. Subjects named by another key ("key:", "user:", descriptors) cannot be recognised,
/// so a snapshot of another key gives back only address subjects ("ip:").
std::uint64_t snapshot_key_tag(std::string_view hash_key);

struct snapshot_saved {
  std::size_t rows = 0;
  std::size_t bytes = 0;
};

/// The longest name save_snapshot gives the file it writes beside `path` before renaming it:
/// PATH.PID.tmp, a process id being at most 4194304 (Linux's PID_MAX_LIMIT).
inline constexpr std::string_view k_snapshot_longest_temporary_suffix = ".4194304.tmp";

/// Writes the store's state to `path` (atomically, see above). Throws std::system_error naming
/// the file when it cannot be written; the previous snapshot is then left as it was.
snapshot_saved save_snapshot(const memory_store& store, const std::string& path, nanos now,
                             std::uint64_t key_tag);

/// What a load found, for the start's log line.
struct snapshot_loaded {
  bool found = false;         // the file exists
  std::string problem;        // why it was ignored; "" when it was read
  bool keep_out = false;      // the path holds something else: it must never be replaced
  std::int64_t age_ms = 0;    // how long ago it was written
  std::size_t rows = 0;       // rows restored
  std::size_t changed = 0;    // rows of limits not in this configuration, or defined otherwise
  std::size_t expired = 0;    // rows whose state lapsed while the gateway was down
  std::size_t other_key = 0;  // rows of keyed subjects written under another hash key
  std::size_t full = 0;       // rows that found their shard full (store.max_keys)
};

/// Restores `path` into the store, which has the configuration's slots bound and no traffic
/// yet. Never throws for the file's content or absence (see `problem`); rows already in the
/// store are kept as they are.
snapshot_loaded load_snapshot(memory_store& store, const std::string& path, nanos now,
                              std::uint64_t key_tag);

}  // namespace ratewall
