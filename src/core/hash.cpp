#include "ratewall/core/hash.hpp"

#include <openssl/evp.h>
#include <openssl/hmac.h>

namespace ratewall {

sha256_digest sha256(std::string_view data) {
  sha256_digest out{};
  unsigned int n = 0;
  EVP_Digest(data.data(), data.size(), out.data(), &n, EVP_sha256(), nullptr);
  return out;
}

sha256_digest hmac_sha256(std::string_view key, std::string_view data) {
  sha256_digest out{};
  unsigned int n = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), out.data(), &n);
  return out;
}

std::string to_hex(const std::uint8_t* bytes, std::size_t n) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out(n * 2, '\0');
  for (std::size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[bytes[i] >> 4];
    out[2 * i + 1] = digits[bytes[i] & 0xf];
  }
  return out;
}

std::optional<sha256_digest> sha256_from_hex(std::string_view hex) {
  if (hex.size() != 64) {
    return std::nullopt;
  }
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') {
      return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
      return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
      return c - 'A' + 10;
    }
    return -1;
  };
  sha256_digest out{};
  for (std::size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]);
    int lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return std::nullopt;
    }
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return out;
}

}  // namespace ratewall
