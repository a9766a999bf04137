#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ratewall {

using sha256_digest = std::array<std::uint8_t, 32>;

/// SHA-256 of `data` (used to match declared API keys without keeping them raw).
sha256_digest sha256(std::string_view data);

/// HMAC-SHA-256 of `data` under `key`: the keyed hash that names subjects in logs, metrics
/// and Redis keys, so a raw API key never leaves the process.
sha256_digest hmac_sha256(std::string_view key, std::string_view data);

/// Lower-case hex of `bytes`.
std::string to_hex(const std::uint8_t* bytes, std::size_t n);
inline std::string to_hex(const sha256_digest& d) {
  return to_hex(d.data(), d.size());
}

/// Parses 64 hex digits (either case); nullopt for anything else.
std::optional<sha256_digest> sha256_from_hex(std::string_view hex);

}  // namespace ratewall
