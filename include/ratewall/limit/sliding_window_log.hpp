#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "ratewall/limit/decision.hpp"
#include "ratewall/limit/policy.hpp"

namespace ratewall {

/// Sliding window log: exact. The state is the timestamp of every admitted unit still inside
/// the window (a unit admitted at t counts until t + window); a request is allowed iff the
/// units of the last `window` plus its cost fit in `limit`.
///
/// Memory bound, per subject and limit: at most `limit` timestamps of 8 bytes plus a 16-byte
/// header, held in a ring that grows by doubling and shrinks again when mostly empty; nothing
/// once the window has passed (the store then drops the state). `limit` is capped at
/// k_max_log_limit (8 MB per subject); larger limits belong to sliding_window_counter.
///
/// The state owns heap memory through a raw pointer so that it fits one word of the store's
/// rows: whoever discards a state calls `clear` (the memory store does on erase and reset).
struct sliding_window_log : detail::check_then_commit<sliding_window_log> {
  class ring;
  struct state {
    ring* log = nullptr;
  };
  static constexpr std::size_t width = 1;

  static decision check(const state& s, nanos now, const policy& p, std::uint64_t cost);
  /// Drops expired timestamps and appends `cost` copies of now (never earlier than the newest).
  static void commit(state& s, nanos now, const policy& p, std::uint64_t cost);

  static nanos expires_at(const state& s, const policy& p);

  static void clear(state& s) noexcept;
  /// Heap bytes owned by the state (memory accounting).
  static std::size_t heap_bytes(const state& s);
  /// Timestamps held, expired ones included until the next commit.
  static std::size_t size(const state& s);
  /// The `i`th timestamp held, oldest first (i < size(s)): store.snapshot writes them.
  static std::int64_t at(const state& s, std::size_t i);
  /// A state holding `stamps` (oldest first, never decreasing, at most k_max_log_limit): what
  /// store.snapshot wrote. The caller checks the order and the count.
  static state from_timestamps(std::span<const std::int64_t> stamps);
};

}  // namespace ratewall
