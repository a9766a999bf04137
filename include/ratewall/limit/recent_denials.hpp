#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ratewall/core/clock.hpp"
#include "ratewall/core/string_hash.hpp"
#include "ratewall/limit/store.hpp"

namespace ratewall {

/// Subjects whose denials a store counts for /admin/top, at most, all its shards together
/// (each shard keeps an equal part). About 130 bytes each: some 9 MB when full.
inline constexpr std::size_t k_top_subjects = 65536;

/// The denials of each subject over the last `window` (admin.top_window), for /admin/top. Kept
/// apart from limit state on purpose: a subject's rows go as soon as its state expires (a
/// bucket full again), often within seconds, and a subject denied a minute ago must still be
/// listed.
///
/// Each subject has its denials in k_slices + 1 time slices of window / k_slices: the slice
/// now is in progress, the k_slices before it are whole. A denial is therefore counted for at
/// least `window` and dropped at most window / k_slices later: at 10m, a denial at 12:00:30 is
/// counted until 12:10:59.999 (slices 12:00-12:01 ... 12:10-12:11) and gone at 12:11:00.
///
/// Bounded: at most `capacity` subjects. A new subject that finds the table full first makes
/// room by dropping the half of the subjects with the fewest denials in the window (those with
/// none left first; among equal counts, the one denied least recently first). Half goes every
/// time, so a flood of new subjects costs a constant per subject on average, and a subject
/// denied often outlasts any number of subjects denied once or twice.
///
/// Not thread-safe: each store shard keeps one under its own lock.
class recent_denials {
 public:
  static constexpr std::size_t k_slices = 10;

  /// `window` of at least k_slices ns; `capacity` of at least 2.
  recent_denials(std::size_t capacity, nanos window);

  /// One denial of `subject` at `now` (the store's clock, as limit state uses it).
  void add(std::string_view subject, nanos now);
  /// Appends each subject with denials in the window that ends at `now`, with their number.
  void collect(nanos now, std::vector<denied_subject>& out) const;
  /// Forgets the subjects with no denial left in the window at `now`; returns how many.
  std::size_t prune(nanos now);

  /// Counts over `window` from now on. Counts carry over: each subject keeps the denials it had
  /// in the old window, as if all were made at its latest denial (the old slices cannot be cut
  /// into the new ones), so it stays listed until a new window has passed since then. Subjects
  /// whose latest denial is already past the new window are forgotten.
  void set_window(nanos window, nanos now);

  nanos window() const { return window_; }
  std::size_t size() const { return subjects_.size(); }
  std::size_t capacity() const { return capacity_; }

 private:
  static constexpr std::size_t k_ring = k_slices + 1;

  struct counts {
    std::uint64_t latest = 0;  // the slice of the latest denial
    // Denials per slice: slice i at i % k_ring; only latest - k_slices .. latest are valid.
    std::array<std::uint32_t, k_ring> per_slice{};
  };
  using table = std::unordered_map<std::string, counts, string_hash, std::equal_to<>>;

  std::uint64_t slice_of(nanos t) const;
  /// The denials of `c` in the window whose last slice is `now_slice`.
  static std::uint64_t total(const counts& c, std::uint64_t now_slice);
  void make_room(std::uint64_t now_slice);

  std::size_t capacity_;
  nanos window_;
  nanos width_;  // of a slice
  table subjects_;
};

/// The `n` subjects of `all` with the most denials, most first (ties by subject).
std::vector<denied_subject> most_denied(std::vector<denied_subject> all, std::size_t n);

}  // namespace ratewall
