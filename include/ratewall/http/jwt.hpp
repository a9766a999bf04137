#pragma once

// Bearer tokens as JSON Web Tokens (RFC 7519) in the compact form (RFC 7515 §7.1), signed
// HS256, RS256 or ES256 (RFC 7518 §3), checked against identity.jwt: the secret from an
// environment variable, public keys from a JWKS file (RFC 7517). Signatures are verified by
// OpenSSL; the rest (base64url, JSON, claims) is read here.
//
// A token is valid when all of these hold:
//   - three base64url parts, header and payload JSON objects, at most k_max_jwt_bytes;
//   - its "alg" is one of identity.jwt.algorithms ("none" never is), no "crit" header;
//   - the signature verifies under the secret (HS256) or under a JWKS key of that algorithm:
//     the one its "kid" names, or, without "kid", any of them (a set holding more than
//     k_max_keys_without_kid keys of the algorithm needs "kid": each try is a signature check);
//   - "iss" equals identity.jwt.issuer and "aud" holds one of identity.jwt.audience, when set;
//   - "exp" (required unless require_exp: false) is not past and "nbf" not ahead, both give or
//     take identity.jwt.leeway.
// Only the last depends on the time, so jwt_verifier::verify gives everything else, which a
// cache may keep per token, and jwt_verifier::time_error the rest at each use.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/core/hash.hpp"

namespace ratewall {

/// Longer tokens are refused unread.
constexpr std::size_t k_max_jwt_bytes = 8192;
/// A token without "kid" is tried against at most this many keys of its algorithm (a key set
/// during a rotation holds two or three).
constexpr std::size_t k_max_keys_without_kid = 3;

/// Why a token is not valid; each is also what the 401's detail says.
enum class jwt_error {
  none,
  malformed,      // not three base64url parts of JSON objects, or a claim of the wrong type
  algorithm,      // "alg" not accepted here, or "crit" present
  unknown_key,    // "kid" names no key of this algorithm
  signature,      // does not verify
  issuer,         // "iss" is not identity.jwt.issuer
  audience,       // "aud" holds none of identity.jwt.audience
  no_expiry,      // no "exp" and require_exp
  expired,        // "exp" is past
  not_yet_valid,  // "nbf" is ahead
  unchecked,      // not checked: its sender's identity.reject_limit is spent
};

/// "the bearer token has expired", ...: fixed text for a 401's detail.
std::string_view to_string(jwt_error e);

/// What a token says, once read: everything but the time checks.
struct jwt_token {
  jwt_error error = jwt_error::none;       // of the checks that do not depend on the time
  std::optional<std::int64_t> expires;     // "exp", Unix seconds
  std::optional<std::int64_t> not_before;  // "nbf", Unix seconds
  // The claims the configuration reads (jwt: sources, plan_claim) that the token has with a
  // string, integer or boolean value, as text (42, true); others (objects, arrays,
  // fractions) are not kept. Only a valid token's.
  std::vector<std::pair<std::string, std::string>> claims;

  /// The value of claim `name`; nullopt when absent or not kept.
  std::optional<std::string_view> claim(std::string_view name) const;
};

/// The keys and rules of identity.jwt, loaded once (at start, at each reload, by `ratewall
/// check`) and then read-only: verify() is const and thread-safe.
class jwt_verifier {
 public:
  /// Reads the secret from its environment variable (at least 32 bytes, RFC 7518 §3.2) and the
  /// JWKS file (relative paths from the directory of `config_file`). Throws config_error naming
  /// `config_file` and the line and key of what failed: a variable unset or short, a file that
  /// does not read or parse, a key that is malformed, private, an RSA key under 2048 bits, or
  /// no key for an algorithm of `cfg.algorithms`.
  /// `claims_read`: the claims jwt_token::claims keeps.
  jwt_verifier(const jwt_config& cfg, const std::string& config_file,
               std::vector<std::string> claims_read = {});
  ~jwt_verifier();
  jwt_verifier(const jwt_verifier&) = delete;
  jwt_verifier& operator=(const jwt_verifier&) = delete;

  /// Reads and checks `token` (the text after "Bearer "), all but the time.
  jwt_token verify(std::string_view token) const;

  /// The time checks of a token verify() passed, at `now` (Unix seconds).
  jwt_error time_error(const jwt_token& token, std::int64_t now) const;

  /// How many public keys the JWKS file gave (for messages and tests).
  std::size_t public_keys() const;

 private:
  struct public_key;
  bool verify_signature(jwt_algorithm alg, std::string_view kid, bool has_kid,
                        std::string_view signed_text, std::string_view signature,
                        jwt_error& error) const;

  jwt_config cfg_;
  std::vector<std::string> claims_read_;
  std::optional<hmac_sha256_key> secret_;
  std::vector<std::unique_ptr<public_key>> keys_;
};

}  // namespace ratewall
