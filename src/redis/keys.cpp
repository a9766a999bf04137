#include "ratewall/redis/keys.hpp"

namespace ratewall::redis {

std::string subject_tag(const hmac_sha256_key& hash_key, std::string_view subject) {
  const sha256_digest mac = hash_key.mac(subject);
  return to_hex(mac.data(), 8);
}

std::string subject_tag(std::string_view hash_key, std::string_view subject) {
  return subject_tag(hmac_sha256_key(hash_key), subject);
}

std::string limit_key(std::string_view tag, std::string_view limit_id) {
  std::string key;
  key.reserve(k_key_prefix.size() + tag.size() + limit_id.size() + 3);
  key.append(k_key_prefix).append("{").append(tag).append("}:").append(limit_id);
  return key;
}

}  // namespace ratewall::redis
