#pragma once

// JSON Web Tokens minted in the tests with OpenSSL: fresh RSA 2048 and P-256 keys, their
// public JWKs, and tokens signed HS256, RS256 or ES256 (RFC 7515 compact form), so the
// gateway's verifier is checked against signatures it did not make.

#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ecdsa.h>
#include <openssl/evp.h>
#include <openssl/rsa.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/core/hash.hpp"

namespace ratewall::testing {

/// Seconds since the Unix epoch, as exp and nbf count them.
inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

inline std::string base64url(std::string_view in) {
  static constexpr char k_alphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  std::string out;
  std::uint32_t bits = 0;
  int count = 0;
  for (unsigned char c : in) {
    bits = (bits << 8) | c;
    count += 8;
    while (count >= 6) {
      count -= 6;
      out += k_alphabet[(bits >> count) & 63];
    }
  }
  if (count > 0) {
    out += k_alphabet[(bits << (6 - count)) & 63];
  }
  return out;
}

class jwt_signer {
 public:
  /// A new RSA key of `bits` bits (RS256).
  static jwt_signer rsa(std::string kid, int bits = 2048) {
    jwt_signer s("RS256", std::move(kid));
    s.key_.reset(EVP_RSA_gen(static_cast<unsigned>(bits)));
    if (!s.key_) {
      throw std::runtime_error("RSA key generation failed");
    }
    return s;
  }
  /// A new P-256 key (ES256).
  static jwt_signer ec(std::string kid) {
    jwt_signer s("ES256", std::move(kid));
    s.key_.reset(EVP_EC_gen("P-256"));
    if (!s.key_) {
      throw std::runtime_error("EC key generation failed");
    }
    return s;
  }
  /// HS256 under `secret`.
  static jwt_signer hs(std::string secret) {
    jwt_signer s("HS256", "");
    s.secret_ = std::move(secret);
    return s;
  }

  const std::string& alg() const { return alg_; }
  const std::string& kid() const { return kid_; }

  /// The public JWK (RSA: n, e; EC: crv, x, y), with kid and alg.
  nlohmann::json public_jwk() const {
    nlohmann::json j{{"kid", kid_}, {"alg", alg_}, {"use", "sig"}};
    if (alg_ == "RS256") {
      j["kty"] = "RSA";
      j["n"] = base64url(bn_param(OSSL_PKEY_PARAM_RSA_N, 0));
      j["e"] = base64url(bn_param(OSSL_PKEY_PARAM_RSA_E, 0));
    } else {
      j["kty"] = "EC";
      j["crv"] = "P-256";
      j["x"] = base64url(bn_param(OSSL_PKEY_PARAM_EC_PUB_X, 32));
      j["y"] = base64url(bn_param(OSSL_PKEY_PARAM_EC_PUB_Y, 32));
    }
    return j;
  }

  /// A compact token of `payload`; `header` adds to (or replaces) alg, typ and kid.
  std::string sign(const nlohmann::json& payload, const nlohmann::json& header = {}) const {
    nlohmann::json h{{"alg", alg_}, {"typ", "JWT"}};
    if (!kid_.empty()) {
      h["kid"] = kid_;
    }
    for (const auto& [k, v] : header.items()) {
      h[k] = v;
    }
    const std::string signed_text = base64url(h.dump()) + "." + base64url(payload.dump());
    return signed_text + "." + base64url(signature(signed_text));
  }

  /// The signature of `text` under this key, as JWS puts it (ECDSA as raw r || s).
  std::string signature(std::string_view text) const {
    if (alg_ == "HS256") {
      const sha256_digest mac = hmac_sha256(secret_, text);
      return std::string(reinterpret_cast<const char*>(mac.data()), mac.size());
    }
    std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> md(EVP_MD_CTX_new(), &EVP_MD_CTX_free);
    std::size_t n = 0;
    const auto* data = reinterpret_cast<const unsigned char*>(text.data());
    if (EVP_DigestSignInit(md.get(), nullptr, EVP_sha256(), nullptr, key_.get()) != 1 ||
        EVP_DigestSign(md.get(), nullptr, &n, data, text.size()) != 1) {
      throw std::runtime_error("signing failed");
    }
    std::string sig(n, '\0');
    if (EVP_DigestSign(md.get(), reinterpret_cast<unsigned char*>(sig.data()), &n, data,
                       text.size()) != 1) {
      throw std::runtime_error("signing failed");
    }
    sig.resize(n);
    if (alg_ != "ES256") {
      return sig;
    }
    const auto* der = reinterpret_cast<const unsigned char*>(sig.data());
    ECDSA_SIG* ecdsa = d2i_ECDSA_SIG(nullptr, &der, static_cast<long>(sig.size()));
    const BIGNUM* r = nullptr;
    const BIGNUM* s = nullptr;
    ECDSA_SIG_get0(ecdsa, &r, &s);
    std::string raw(64, '\0');
    BN_bn2binpad(r, reinterpret_cast<unsigned char*>(raw.data()), 32);
    BN_bn2binpad(s, reinterpret_cast<unsigned char*>(raw.data()) + 32, 32);
    ECDSA_SIG_free(ecdsa);
    return raw;
  }

 private:
  jwt_signer(std::string alg, std::string kid)
      : alg_(std::move(alg)), kid_(std::move(kid)), key_(nullptr, &EVP_PKEY_free) {}

  // A big-endian number parameter of the key; `width` > 0 pads it to that many bytes.
  std::string bn_param(const char* name, int width) const {
    BIGNUM* bn = nullptr;
    if (EVP_PKEY_get_bn_param(key_.get(), name, &bn) != 1) {
      throw std::runtime_error(std::string("no key parameter ") + name);
    }
    const int n = width > 0 ? width : BN_num_bytes(bn);
    std::string out(static_cast<std::size_t>(n), '\0');
    BN_bn2binpad(bn, reinterpret_cast<unsigned char*>(out.data()), n);
    BN_free(bn);
    return out;
  }

  std::string alg_;
  std::string kid_;
  std::string secret_;
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key_;
};

/// {"keys": [...]} of the signers' public keys.
inline std::string jwks_of(const std::vector<const jwt_signer*>& signers) {
  nlohmann::json keys = nlohmann::json::array();
  for (const jwt_signer* s : signers) {
    keys.push_back(s->public_jwk());
  }
  return nlohmann::json{{"keys", keys}}.dump();
}

}  // namespace ratewall::testing
