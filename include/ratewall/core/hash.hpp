#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ratewall {

using sha256_digest = std::array<std::uint8_t, 32>;

/// Incremental SHA-256. Copyable, so a state over a fixed prefix can be reused.
class sha256_hasher {
 public:
  sha256_hasher();
  void update(std::string_view data);
  sha256_digest finish();

 private:
  std::uint32_t state_[8];
  std::uint8_t buffer_[64] = {};
  std::size_t buffered_ = 0;
  std::uint64_t total_ = 0;
};

/// SHA-256 of `data` (used to match declared API keys without keeping them raw).
sha256_digest sha256(std::string_view data);

/// An HMAC-SHA-256 key with its inner and outer pads hashed once, so that each MAC of a short
/// message costs two compressions. Thread-safe to share (mac is const).
class hmac_sha256_key {
 public:
  explicit hmac_sha256_key(std::string_view key);
  sha256_digest mac(std::string_view data) const;

 private:
  sha256_hasher inner_;
  sha256_hasher outer_;
};

/// HMAC-SHA-256 of `data` under `key`: the keyed hash that names subjects in logs, metrics
/// and Redis keys, so a raw API key never leaves the process.
sha256_digest hmac_sha256(std::string_view key, std::string_view data);

/// Lower-case hex of `bytes`.
std::string to_hex(const std::uint8_t* bytes, std::size_t n);
inline std::string to_hex(const sha256_digest& d) {
  return to_hex(d.data(), d.size());
}

/// Parses exactly 2 * out.size() hex digits (either case) into `out`; false for anything else.
bool from_hex(std::string_view hex, std::span<std::uint8_t> out);

/// Parses 64 hex digits (either case); nullopt for anything else.
std::optional<sha256_digest> sha256_from_hex(std::string_view hex);

}  // namespace ratewall
