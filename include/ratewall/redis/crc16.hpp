#pragma once

#include <cstdint>
#include <string_view>

namespace ratewall::redis {

inline constexpr std::uint16_t k_cluster_slots = 16384;

/// CRC16 as Redis Cluster uses it (CCITT/XMODEM: polynomial 0x1021, initial 0, no reflection);
/// crc16("123456789") == 0x31C3.
std::uint16_t crc16(std::string_view data);

/// The cluster slot of `key`: CRC16 of the hash tag, the text between the first '{' and the
/// next '}' when that text is not empty, else of the whole key; modulo 16384.
std::uint16_t key_slot(std::string_view key);

}  // namespace ratewall::redis
