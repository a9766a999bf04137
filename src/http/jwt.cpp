#include "ratewall/http/jwt.hpp"

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/read_file.hpp"

namespace ratewall {
namespace {

using json = nlohmann::json;

constexpr std::size_t k_min_secret_bytes = 32;  // RFC 7518 §3.2: at least the hash's size
constexpr int k_min_rsa_bits = 2048;
constexpr std::size_t k_max_jwks_keys = 64;

// base64url without padding (RFC 7515 §2), canonical only: the unused low bits of the last
// character must be zero, so that one encoding has one spelling (an ECDSA signature still has
// two, (r, s) and (r, n - s): both name the same claims).
std::optional<std::string> base64url_decode(std::string_view in) {
  if (in.size() % 4 == 1) {
    return std::nullopt;
  }
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z')
      return c - 'A';
    if (c >= 'a' && c <= 'z')
      return c - 'a' + 26;
    if (c >= '0' && c <= '9')
      return c - '0' + 52;
    if (c == '-')
      return 62;
    if (c == '_')
      return 63;
    return -1;
  };
  std::string out;
  out.reserve(in.size() * 3 / 4);
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) {
      return std::nullopt;
    }
    bits = (bits << 6) | static_cast<std::uint32_t>(v);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out += static_cast<char>((bits >> count) & 0xff);
    }
  }
  if ((bits & ((1u << count) - 1)) != 0) {
    return std::nullopt;
  }
  return out;
}

// A JSON object, or nullopt (no exceptions: this reads what clients send).
std::optional<json> json_object(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return std::nullopt;
  }
  return j;
}

// A NumericDate (RFC 7519 §2): seconds, fractions allowed; nullopt when not a number.
std::optional<std::int64_t> numeric_date(const json& v) {
  // Unsigned first: is_number_integer() holds for both, and 2^63 and more would wrap.
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    return static_cast<std::int64_t>(std::min<std::uint64_t>(u, INT64_MAX));
  }
  if (v.is_number_integer()) {
    return v.get<std::int64_t>();
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::fabs(d) > 9e15) {
      return std::nullopt;
    }
    return static_cast<std::int64_t>(std::floor(d));
  }
  return std::nullopt;
}

struct pkey_free {
  void operator()(EVP_PKEY* p) const { EVP_PKEY_free(p); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

struct bn_free {
  void operator()(BIGNUM* b) const { BN_free(b); }
};
using bn_ptr = std::unique_ptr<BIGNUM, bn_free>;

// A public key from OpenSSL parameters: type "RSA" or "EC".
pkey_ptr key_from_params(const char* type, OSSL_PARAM_BLD* build) {
  std::unique_ptr<OSSL_PARAM, decltype(&OSSL_PARAM_free)> params(OSSL_PARAM_BLD_to_param(build),
                                                                 &OSSL_PARAM_free);
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_from_name(nullptr, type, nullptr), &EVP_PKEY_CTX_free);
  EVP_PKEY* key = nullptr;
  if (!params || !ctx || EVP_PKEY_fromdata_init(ctx.get()) != 1 ||
      EVP_PKEY_fromdata(ctx.get(), &key, EVP_PKEY_PUBLIC_KEY, params.get()) != 1) {
    return nullptr;
  }
  pkey_ptr out(key);
  // fromdata takes an EC point as given: check that it is on the curve.
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> check(
      EVP_PKEY_CTX_new_from_pkey(nullptr, key, nullptr), &EVP_PKEY_CTX_free);
  if (!check || EVP_PKEY_public_check(check.get()) != 1) {
    return nullptr;
  }
  return out;
}

std::string text_member(const json& jwk, const char* name) {
  auto it = jwk.find(name);
  return it != jwk.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The raw r || s of a JWS ECDSA signature (RFC 7518 §3.4) as the DER OpenSSL verifies.
std::optional<std::string> ecdsa_der(std::string_view raw) {
  if (raw.size() != 64) {
    return std::nullopt;
  }
  ECDSA_SIG* sig = ECDSA_SIG_new();
  if (sig == nullptr) {
    return std::nullopt;
  }
  BIGNUM* r = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data()), 32, nullptr);
  BIGNUM* s = BN_bin2bn(reinterpret_cast<const unsigned char*>(raw.data() + 32), 32, nullptr);
  if (r == nullptr || s == nullptr || ECDSA_SIG_set0(sig, r, s) != 1) {
    BN_free(r);
    BN_free(s);
    ECDSA_SIG_free(sig);
    ERR_clear_error();
    return std::nullopt;
  }
  unsigned char* der = nullptr;
  const int n = i2d_ECDSA_SIG(sig, &der);
  ECDSA_SIG_free(sig);
  if (n <= 0) {
    ERR_clear_error();
    return std::nullopt;
  }
  std::string out(reinterpret_cast<const char*>(der), static_cast<std::size_t>(n));
  OPENSSL_free(der);
  return out;
}

bool evp_verify(EVP_PKEY* key, std::string_view signed_text, std::string_view signature) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
  const bool ok =
      md && EVP_DigestVerifyInit(md.get(), nullptr, EVP_sha256(), nullptr, key) == 1 &&
      EVP_DigestVerify(md.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                       signature.size(), reinterpret_cast<const unsigned char*>(signed_text.data()),
                       signed_text.size()) == 1;
  if (!ok) {
    // A failed check leaves its reasons in this thread's OpenSSL error queue: nothing of ours
    // reads them, and a TLS call on this thread must not find them.
    ERR_clear_error();
  }
  return ok;
}

}  // namespace

struct jwt_verifier::public_key {
  jwt_algorithm alg;  // RS256 for an RSA key, ES256 for a P-256 one
  std::string kid;
  pkey_ptr key;
};

std::string_view to_string(jwt_error e) {
  switch (e) {
    case jwt_error::none:
      return "valid";
    case jwt_error::malformed:
      return "the bearer token is not a well-formed JWT";
    case jwt_error::algorithm:
      return "the bearer token's algorithm is not accepted";
    case jwt_error::unknown_key:
      return "the bearer token's key id names no known key";
    case jwt_error::signature:
      return "the bearer token's signature does not verify";
    case jwt_error::issuer:
      return "the bearer token's issuer is not accepted";
    case jwt_error::audience:
      return "the bearer token is not for this audience";
    case jwt_error::no_expiry:
      return "the bearer token has no expiry";
    case jwt_error::expired:
      return "the bearer token has expired";
    case jwt_error::not_yet_valid:
      return "the bearer token is not valid yet";
    case jwt_error::unchecked:
      return "too many invalid bearer tokens from this client";
  }
  return "the bearer token is not valid";
}

std::optional<std::string_view> jwt_token::claim(std::string_view name) const {
  for (const auto& [n, v] : claims) {
    if (n == name) {
      return std::string_view(v);
    }
  }
  return std::nullopt;
}

jwt_verifier::jwt_verifier(const jwt_config& cfg, const std::string& config_file,
                           std::vector<std::string> claims_read)
    : cfg_(cfg), claims_read_(std::move(claims_read)) {
  const auto uses = [&](jwt_algorithm a) {
    return std::find(cfg.algorithms.begin(), cfg.algorithms.end(), a) != cfg.algorithms.end();
  };
  if (uses(jwt_algorithm::hs256)) {
    const config_location& at = cfg.secret_at.line != 0 ? cfg.secret_at : cfg.at;
    const char* secret = std::getenv(cfg.hs256_secret_env.c_str());
    if (secret == nullptr || *secret == 0) {
      throw config_error(
          config_file, at.line, at.key_path,
          "the environment variable " + cfg.hs256_secret_env + " (the HS256 secret) is not set");
    }
    if (std::string_view(secret).size() < k_min_secret_bytes) {
      throw config_error(config_file, at.line, at.key_path,
                         "the HS256 secret in " + cfg.hs256_secret_env + " has " +
                             std::to_string(std::string_view(secret).size()) +
                             " bytes; at least 32 are needed (RFC 7518 §3.2)");
    }
    secret_.emplace(secret);
  }
  if (cfg.jwks_file.empty()) {
    return;
  }
  const config_location& at = cfg.jwks_at;
  auto fail = [&](const std::string& message) {
    throw config_error(config_file, at.line, at.key_path, cfg.jwks_file + ": " + message);
  };
  constexpr std::size_t k_max_jwks_bytes = 1024 * 1024;
  const file_text file =
      read_regular_file(resolve_config_path(cfg.jwks_file, config_file), k_max_jwks_bytes);
  if (!file.error.empty()) {
    fail("cannot read the file: " + file.error);
  }
  if (file.text.size() > k_max_jwks_bytes) {
    fail("larger than 1MiB: not a JWK set");
  }
  std::optional<json> set = json_object(file.text);
  if (!set || !set->contains("keys") || !(*set)["keys"].is_array()) {
    fail("not a JWK set (a JSON object with a \"keys\" list)");
  }
  const json& keys = (*set)["keys"];
  if (keys.size() > k_max_jwks_keys) {
    fail("more than " + std::to_string(k_max_jwks_keys) + " keys");
  }
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const json& jwk = keys[i];
    const std::string where = "keys[" + std::to_string(i) + "]";
    if (!jwk.is_object()) {
      fail(where + " is not an object");
    }
    const std::string kty = text_member(jwk, "kty");
    const std::string use = text_member(jwk, "use");
    const std::string alg = text_member(jwk, "alg");
    if (jwk.contains("d")) {
      fail(where + " holds a private key (\"d\"): give the public keys only");
    }
    if (!use.empty() && use != "sig") {
      continue;  // an encryption key: not for signatures
    }
    auto bytes = [&](const char* name) {
      std::optional<std::string> b = base64url_decode(text_member(jwk, name));
      if (!b || b->empty()) {
        fail(where + "." + name + " is not base64url");
      }
      return std::move(*b);
    };
    auto key = std::make_unique<public_key>();
    key->kid = text_member(jwk, "kid");
    std::unique_ptr<OSSL_PARAM_BLD, decltype(&OSSL_PARAM_BLD_free)> build(OSSL_PARAM_BLD_new(),
                                                                          &OSSL_PARAM_BLD_free);
    if (kty == "RSA") {
      if (!alg.empty() && alg != "RS256") {
        continue;  // a key for another algorithm (RS384, PS256...)
      }
      const std::string n = bytes("n");
      const std::string e = bytes("e");
      bn_ptr bn_n(BN_bin2bn(reinterpret_cast<const unsigned char*>(n.data()),
                            static_cast<int>(n.size()), nullptr));
      bn_ptr bn_e(BN_bin2bn(reinterpret_cast<const unsigned char*>(e.data()),
                            static_cast<int>(e.size()), nullptr));
      if (!build || !bn_n || !bn_e ||
          OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_N, bn_n.get()) != 1 ||
          OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_RSA_E, bn_e.get()) != 1) {
        fail(where + ": cannot build the RSA key");
      }
      key->alg = jwt_algorithm::rs256;
      key->key = key_from_params("RSA", build.get());
      if (!key->key) {
        fail(where + " is not a valid RSA public key");
      }
      if (EVP_PKEY_get_bits(key->key.get()) < k_min_rsa_bits) {
        fail(where + " is an RSA key of " + std::to_string(EVP_PKEY_get_bits(key->key.get())) +
             " bits; at least 2048 are needed");
      }
    } else if (kty == "EC") {
      const std::string crv = text_member(jwk, "crv");
      if (crv != "P-256" || (!alg.empty() && alg != "ES256")) {
        continue;  // another curve (ES384, ES512): not an algorithm of ours
      }
      const std::string x = bytes("x");
      const std::string y = bytes("y");
      if (x.size() != 32 || y.size() != 32) {
        fail(where + ": x and y of a P-256 key are 32 bytes each");
      }
      const std::string point = '\x04' + x + y;  // uncompressed (SEC 1 §2.3.3)
      char group[] = "prime256v1";
      if (!build ||
          OSSL_PARAM_BLD_push_utf8_string(build.get(), OSSL_PKEY_PARAM_GROUP_NAME, group, 0) != 1 ||
          OSSL_PARAM_BLD_push_octet_string(build.get(), OSSL_PKEY_PARAM_PUB_KEY, point.data(),
                                           point.size()) != 1) {
        fail(where + ": cannot build the EC key");
      }
      key->alg = jwt_algorithm::es256;
      key->key = key_from_params("EC", build.get());
      if (!key->key) {
        fail(where + " is not a valid P-256 public key (a point on the curve)");
      }
    } else {
      continue;  // "oct" (a shared secret has no place in a public set), "OKP": not ours
    }
    keys_.push_back(std::move(key));
  }
  for (jwt_algorithm a : {jwt_algorithm::rs256, jwt_algorithm::es256}) {
    const bool have =
        std::any_of(keys_.begin(), keys_.end(), [&](const auto& k) { return k->alg == a; });
    if (cfg.algorithms_from_keys && have) {
      cfg_.algorithms.push_back(a);
    } else if (uses(a) && !have) {
      fail("no " + std::string(to_string(a)) + " key (identity.jwt.algorithms lists it)");
    }
  }
  if (cfg.algorithms_from_keys && keys_.empty()) {
    fail("no RS256 or ES256 signing key");
  }
}

jwt_verifier::~jwt_verifier() = default;

std::size_t jwt_verifier::public_keys() const {
  return keys_.size();
}

bool jwt_verifier::verify_signature(jwt_algorithm alg, std::string_view kid, bool has_kid,
                                    std::string_view signed_text, std::string_view signature,
                                    jwt_error& error) const {
  if (alg == jwt_algorithm::hs256) {
    const sha256_digest mac = secret_->mac(signed_text);
    if (signature.size() != mac.size() ||
        CRYPTO_memcmp(mac.data(), signature.data(), mac.size()) != 0) {
      error = jwt_error::signature;
      return false;
    }
    return true;
  }
  std::string der;
  if (alg == jwt_algorithm::es256) {
    std::optional<std::string> d = ecdsa_der(signature);
    if (!d) {
      error = jwt_error::signature;
      return false;
    }
    der = std::move(*d);
    signature = der;
  }
  std::size_t tried = 0;
  for (const auto& key : keys_) {
    if (key->alg != alg || (has_kid && key->kid != kid)) {
      continue;
    }
    if (!has_kid && tried == k_max_keys_without_kid) {
      break;  // each try costs a signature check: a large set needs "kid"
    }
    ++tried;
    if (evp_verify(key->key.get(), signed_text, signature)) {
      return true;
    }
  }
  error = tried > 0 ? jwt_error::signature : jwt_error::unknown_key;
  return false;
}

jwt_token jwt_verifier::verify(std::string_view token) const {
  jwt_token out;
  auto fail = [&](jwt_error e) {
    out.error = e;
    out.claims.clear();
    return out;
  };
  const auto dot1 = token.find('.');
  const auto dot2 = dot1 == std::string_view::npos ? dot1 : token.find('.', dot1 + 1);
  if (token.size() > k_max_jwt_bytes || dot2 == std::string_view::npos ||
      token.find('.', dot2 + 1) != std::string_view::npos) {
    return fail(jwt_error::malformed);
  }
  const std::optional<std::string> header_text = base64url_decode(token.substr(0, dot1));
  const std::optional<std::string> payload_text =
      base64url_decode(token.substr(dot1 + 1, dot2 - dot1 - 1));
  const std::optional<std::string> signature = base64url_decode(token.substr(dot2 + 1));
  if (!header_text || !payload_text || !signature) {
    return fail(jwt_error::malformed);
  }
  const std::optional<json> header = json_object(*header_text);
  if (!header) {
    return fail(jwt_error::malformed);
  }
  const std::string alg_name = text_member(*header, "alg");
  std::optional<jwt_algorithm> alg;
  for (jwt_algorithm a : cfg_.algorithms) {
    if (alg_name == to_string(a)) {
      alg = a;
    }
  }
  // RFC 7515 §4.1.11: an extension the verifier does not know makes the token invalid.
  if (!alg || header->contains("crit")) {
    return fail(jwt_error::algorithm);
  }
  const auto kid = header->find("kid");
  if (kid != header->end() && !kid->is_string()) {
    return fail(jwt_error::malformed);
  }
  const std::string kid_text = kid != header->end() ? kid->get<std::string>() : std::string();
  // The signature first: nothing of an unsigned payload is read beyond this point.
  jwt_error error = jwt_error::none;
  if (!verify_signature(*alg, kid_text, kid != header->end(), token.substr(0, dot2), *signature,
                        error)) {
    return fail(error);
  }
  const std::optional<json> payload = json_object(*payload_text);
  if (!payload) {
    return fail(jwt_error::malformed);
  }
  for (const auto& [name, value] : payload->items()) {
    if (name == "exp" || name == "nbf") {
      const std::optional<std::int64_t> t = numeric_date(value);
      if (!t) {
        return fail(jwt_error::malformed);
      }
      (name == "exp" ? out.expires : out.not_before) = t;
    }
    if (std::find(claims_read_.begin(), claims_read_.end(), name) == claims_read_.end()) {
      continue;
    }
    if (value.is_string()) {
      out.claims.emplace_back(name, value.get<std::string>());
    } else if (value.is_number_unsigned()) {
      out.claims.emplace_back(name, std::to_string(value.get<std::uint64_t>()));
    } else if (value.is_number_integer()) {
      out.claims.emplace_back(name, std::to_string(value.get<std::int64_t>()));
    } else if (value.is_boolean()) {
      out.claims.emplace_back(name, value.get<bool>() ? "true" : "false");
    }
  }
  if (!cfg_.issuer.empty()) {
    const auto iss = payload->find("iss");
    if (iss == payload->end() || !iss->is_string() ||
        iss->get_ref<const std::string&>() != cfg_.issuer) {
      return fail(jwt_error::issuer);
    }
  }
  if (!cfg_.audience.empty()) {
    // RFC 7519 §4.1.3: one string, or a list of them.
    const auto aud = payload->find("aud");
    bool match = false;
    auto accept = [&](const json& v) {
      if (v.is_string() && std::find(cfg_.audience.begin(), cfg_.audience.end(),
                                     v.get_ref<const std::string&>()) != cfg_.audience.end()) {
        match = true;
      }
    };
    if (aud != payload->end() && aud->is_array()) {
      for (const json& v : *aud) {
        accept(v);
      }
    } else if (aud != payload->end()) {
      accept(*aud);
    }
    if (!match) {
      return fail(jwt_error::audience);
    }
  }
  if (cfg_.require_exp && !out.expires) {
    return fail(jwt_error::no_expiry);
  }
  return out;
}

jwt_error jwt_verifier::time_error(const jwt_token& token, std::int64_t now) const {
  const std::int64_t leeway = std::chrono::duration_cast<std::chrono::seconds>(cfg_.leeway).count();
  // exp is the first second it is no longer valid (RFC 7519 §4.1.4).
  if (token.expires && now - leeway >= *token.expires) {
    return jwt_error::expired;
  }
  if (token.not_before && now + leeway < *token.not_before) {
    return jwt_error::not_yet_valid;
  }
  return jwt_error::none;
}

}  // namespace ratewall
