#include "ratewall/redis/crc16.hpp"

#include <array>

namespace ratewall::redis {

namespace {

constexpr std::array<std::uint16_t, 256> make_table() {
  std::array<std::uint16_t, 256> table{};
  for (unsigned i = 0; i < 256; ++i) {
    std::uint16_t crc = static_cast<std::uint16_t>(i << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<std::uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021 : crc << 1);
    }
    table[i] = crc;
  }
  return table;
}

constexpr std::array<std::uint16_t, 256> k_table = make_table();

}  // namespace

std::uint16_t crc16(std::string_view data) {
  std::uint16_t crc = 0;
  for (char c : data) {
    const auto byte = static_cast<std::uint8_t>(c);
    crc = static_cast<std::uint16_t>((crc << 8) ^ k_table[((crc >> 8) ^ byte) & 0xff]);
  }
  return crc;
}

std::uint16_t key_slot(std::string_view key) {
  const auto open = key.find('{');
  if (open != std::string_view::npos) {
    const auto close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return crc16(key) & (k_cluster_slots - 1);
}

}  // namespace ratewall::redis
