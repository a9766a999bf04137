#pragma once

// Private to the tls module: OpenSSL ownership, PEM files read with errors an operator can act
// on, and the settings both sides share.

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/config/config.hpp"

namespace ratewall::tls_detail {

struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using x509_ptr = std::unique_ptr<X509, x509_free>;
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;

// Mozilla's "intermediate" list without the DHE suites (no DH parameters are configured): ECDHE
// with AEAD only, for TLS 1.2. TLS 1.3 keeps OpenSSL's default suites, which are all AEAD.
inline constexpr const char* k_tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

/// Opens files named in one config file and raises config_error at the line and key that named
/// them, with the file's resolved path in the message.
class pem_reader {
 public:
  explicit pem_reader(std::string config_file) : config_file_(std::move(config_file)) {}

  [[noreturn]] void fail(const config_location& at, const std::string& message) const;

  /// The path as opened (resolve_config_path).
  std::string resolve(const std::string& path) const;

  /// Every certificate of a PEM file, in file order (at least one). `what` names the file in
  /// messages ("certificate", "CA").
  std::vector<x509_ptr> certificates(const std::string& path, const config_location& at,
                                     std::string_view what) const;
  /// The (unencrypted) private key of a PEM file.
  pkey_ptr private_key(const std::string& path, const config_location& at) const;

  /// Loads a certificate chain (leaf first) and its key into `ctx`: the files must be PEM, the
  /// key must match the leaf, and the leaf must be valid now.
  void use_certificate(SSL_CTX* ctx, const std::string& cert_path, const config_location& cert_at,
                       const std::string& key_path, const config_location& key_at) const;

 private:
  std::string read_file(const std::string& resolved, const config_location& at,
                        std::string_view what) const;

  std::string config_file_;
};

/// The text of OpenSSL's most recent error (and the queue cleared), or `fallback`.
std::string last_openssl_error(std::string_view fallback);

}  // namespace ratewall::tls_detail
