#include "pem_files.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/read_file.hpp"

namespace ratewall::tls_detail {

namespace {

struct bio_free {
  void operator()(BIO* b) const { BIO_free(b); }
};
using bio_ptr = std::unique_ptr<BIO, bio_free>;

// A PEM file is a few kilobytes; anything this large is the wrong file.
constexpr long k_max_pem_bytes = 1024 * 1024;

// Never prompt on the terminal for a passphrase: an encrypted key is refused instead.
int no_passphrase(char*, int, int, void*) {
  return -1;
}

bio_ptr memory_bio(const std::string& text) {
  return bio_ptr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

std::string utc_text(const ASN1_TIME* time) {
  std::tm tm{};
  if (ASN1_TIME_to_tm(time, &tm) != 1) {
    return "an unreadable date";
  }
  char out[32];
  std::strftime(out, sizeof out, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return out;
}

}  // namespace

std::string last_openssl_error(std::string_view fallback) {
  const unsigned long code = ERR_peek_last_error();
  ERR_clear_error();
  const char* reason = code == 0 ? nullptr : ERR_reason_error_string(code);
  return reason != nullptr ? reason : std::string(fallback);
}

void pem_reader::fail(const config_location& at, const std::string& message) const {
  throw config_error(config_file_, at.line, at.key_path, message);
}

std::string pem_reader::resolve(const std::string& path) const {
  return resolve_config_path(path, config_file_);
}

std::string pem_reader::read_file(const std::string& resolved, const config_location& at,
                                  std::string_view what) const {
  const std::string noun = std::string(what) + " file " + resolved;
  file_text file = read_regular_file(resolved, static_cast<std::size_t>(k_max_pem_bytes));
  if (!file.error.empty()) {
    fail(at, "cannot read " + noun + ": " + file.error);
  }
  if (file.text.size() > static_cast<std::size_t>(k_max_pem_bytes)) {
    fail(at, noun + " is larger than 1MiB: not a PEM file");
  }
  return std::move(file.text);
}

std::vector<x509_ptr> pem_reader::certificates(const std::string& path, const config_location& at,
                                               std::string_view what) const {
  const std::string resolved = resolve(path);
  const std::string text = read_file(resolved, at, what);
  bio_ptr bio = memory_bio(text);
  std::vector<x509_ptr> out;
  ERR_clear_error();
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
    out.emplace_back(x);
  }
  // The loop ends at the first block it cannot read: the end of the file after at least one
  // certificate, or a damaged block.
  const unsigned long error = ERR_peek_last_error();
  ERR_clear_error();
  const bool at_end =
      ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE;
  if (out.empty() || !at_end) {
    fail(at, std::string(what) + " file " + resolved +
                 " is not PEM (expected -----BEGIN CERTIFICATE----- blocks" +
                 (out.empty() ? ")"
                              : "; block " + std::to_string(out.size() + 1) + " cannot be read)"));
  }
  return out;
}

pkey_ptr pem_reader::private_key(const std::string& path, const config_location& at) const {
  const std::string resolved = resolve(path);
  const std::string text = read_file(resolved, at, "key");
  bio_ptr bio = memory_bio(text);
  ERR_clear_error();
  pkey_ptr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr));
  ERR_clear_error();
  if (!key) {
    fail(at, "key file " + resolved +
                 " is not a PEM private key (expected -----BEGIN PRIVATE KEY-----; encrypted "
                 "keys are not supported)");
  }
  return key;
}

void pem_reader::use_certificate(SSL_CTX* ctx, const std::string& cert_path,
                                 const config_location& cert_at, const std::string& key_path,
                                 const config_location& key_at) const {
  std::vector<x509_ptr> chain = certificates(cert_path, cert_at, "certificate");
  pkey_ptr key = private_key(key_path, key_at);
  X509* leaf = chain.front().get();
  const std::string cert_file = resolve(cert_path);
  if (X509_check_private_key(leaf, key.get()) != 1) {
    ERR_clear_error();
    fail(key_at, "key file " + resolve(key_path) + " does not match certificate " + cert_file +
                     " (the first certificate of the file must be the one the key belongs to)");
  }
  // Only the leaf: a chain may carry an expired cross-signed certificate on purpose, for old
  // clients, and newer clients build a path around it.
  if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0) {
    fail(cert_at, "certificate " + cert_file + " expired on " + utc_text(X509_get0_notAfter(leaf)));
  }
  if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0) {
    fail(cert_at, "certificate " + cert_file + " is not valid before " +
                      utc_text(X509_get0_notBefore(leaf)));
  }
  ERR_clear_error();
  if (SSL_CTX_use_certificate(ctx, leaf) != 1) {
    // The security level refuses weak keys and signatures (RSA below 2048 bits, SHA-1).
    fail(cert_at, "certificate " + cert_file +
                      " refused by OpenSSL: " + last_openssl_error("unusable certificate"));
  }
  for (std::size_t i = 1; i < chain.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, chain[i].get()) != 1) {
      fail(cert_at, "certificate " + cert_file + ": chain certificate " + std::to_string(i + 1) +
                        " refused by OpenSSL: " + last_openssl_error("unusable certificate"));
    }
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    fail(key_at, "key file " + resolve(key_path) +
                     " refused by OpenSSL: " + last_openssl_error("unusable key"));
  }
}

}  // namespace ratewall::tls_detail
