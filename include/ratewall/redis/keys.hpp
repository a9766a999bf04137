#pragma once

#include <string>
#include <string_view>

#include "ratewall/core/hash.hpp"

namespace ratewall::redis {

/// Every key ratewall writes starts with this (v1: the layout of the values below).
inline constexpr std::string_view k_key_prefix = "rw:v1:";

/// The hash tag that names a subject in Redis: the first 16 hex digits of
/// HMAC-SHA-256(hash_key, subject). Subjects are keyed hashes or "ip:..." already; hashing
/// them again keeps client addresses out of Redis too, and every key of a subject in one
/// cluster slot (the tag is what CRC16 hashes).
std::string subject_tag(const hmac_sha256_key& hash_key, std::string_view subject);
std::string subject_tag(std::string_view hash_key, std::string_view subject);

/// rw:v1:{<tag>}:<limit id>, where the limit id is policy::key, limit_identity::key():
/// "<route>:<limit>:<8 hex of the definition's signature>". Names, not indexes, so they survive
/// reloads and reordering; the signature gives a limit whose numbers or algorithm changed
/// fresh state, as the memory store does, instead of state of another meaning or type.
std::string limit_key(std::string_view tag, std::string_view limit_id);

}  // namespace ratewall::redis
