#pragma once

// Certificates made at test time: a CA of its own and leaf certificates it signs, written as
// PEM files to a fresh directory under /tmp that the destructor removes. EC P-256 keys, so
// making one costs well under a millisecond. A second test_pki is a CA the first one's
// certificates do not chain to ("a wrong CA").

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ratewall::testing {

class test_pki {
 public:
  /// A certificate and its key as PEM file paths.
  struct issued {
    std::string cert;
    std::string key;
  };

  test_pki() {
    char pattern[] = "/tmp/ratewall-pki-XXXXXX";
    if (::mkdtemp(pattern) == nullptr) {
      throw std::runtime_error("test_pki: mkdtemp failed");
    }
    dir_ = pattern;
    ca_key_ = new_key();
    // A name of its own: another test_pki's CA must not look like this one's issuer.
    ca_cert_ = new_certificate("ratewall test CA " + dir_.substr(dir_.rfind('-') + 1), -1, 365);
    X509_set_issuer_name(ca_cert_.get(), X509_get_subject_name(ca_cert_.get()));
    add_extension(ca_cert_.get(), ca_cert_.get(), NID_basic_constraints, "critical,CA:TRUE");
    add_extension(ca_cert_.get(), ca_cert_.get(), NID_key_usage, "critical,keyCertSign,cRLSign");
    add_extension(ca_cert_.get(), ca_cert_.get(), NID_subject_key_identifier, "hash");
    sign(ca_cert_.get(), ca_key_.get());
    ca_path_ = dir_ + "/ca.pem";
    write_certificate(ca_path_, ca_cert_.get());
  }

  ~test_pki() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  test_pki(const test_pki&) = delete;
  test_pki& operator=(const test_pki&) = delete;

  const std::string& dir() const { return dir_; }
  /// The CA certificate (PEM): what a client verifying this pki's certificates trusts.
  const std::string& ca_cert() const { return ca_path_; }

  /// A certificate for `cn` with these subject alternative names, signed by this CA, valid from
  /// `valid_from_days` to `valid_to_days` days from now (a negative end: expired; a positive
  /// start: not valid yet). Usable for servers and clients alike.
  issued issue(const std::string& cn, const std::vector<std::string>& dns_names,
               const std::vector<std::string>& ip_addresses = {}, int valid_from_days = -1,
               int valid_to_days = 30) {
    if (valid_to_days <= valid_from_days) {
      valid_from_days = valid_to_days - 1;
    }
    key_ptr key = new_key();
    x509_ptr cert = new_certificate(cn, valid_from_days, valid_to_days, key.get());
    X509_set_issuer_name(cert.get(), X509_get_subject_name(ca_cert_.get()));
    std::string names;
    for (const auto& n : dns_names) {
      names += (names.empty() ? "DNS:" : ",DNS:") + n;
    }
    for (const auto& ip : ip_addresses) {
      names += (names.empty() ? "IP:" : ",IP:") + ip;
    }
    if (!names.empty()) {
      add_extension(cert.get(), ca_cert_.get(), NID_subject_alt_name, names);
    }
    add_extension(cert.get(), ca_cert_.get(), NID_basic_constraints, "critical,CA:FALSE");
    add_extension(cert.get(), ca_cert_.get(), NID_ext_key_usage, "serverAuth,clientAuth");
    add_extension(cert.get(), ca_cert_.get(), NID_authority_key_identifier, "keyid:always");
    sign(cert.get(), ca_key_.get());
    const std::string base = dir_ + "/leaf-" + std::to_string(++issued_count_);
    issued out{base + ".pem", base + ".key"};
    write_certificate(out.cert, cert.get());
    write_key(out.key, key.get());
    return out;
  }

  /// As issue(), but the key file holds a different key than the certificate's.
  issued key_mismatch(const std::string& cn, const std::vector<std::string>& dns_names,
                      const std::vector<std::string>& ip_addresses = {}) {
    issued out = issue(cn, dns_names, ip_addresses);
    key_ptr other = new_key();
    write_key(out.key, other.get());
    return out;
  }

  /// Writes `content` to `name` in dir() and returns its path (for "not PEM" files).
  std::string write_file(const std::string& name, std::string_view content) const {
    const std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    if (!out) {
      throw std::runtime_error("test_pki: cannot write " + path);
    }
    return path;
  }

 private:
  struct key_free {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
  };
  struct x509_free {
    void operator()(X509* x) const { X509_free(x); }
  };
  using key_ptr = std::unique_ptr<EVP_PKEY, key_free>;
  using x509_ptr = std::unique_ptr<X509, x509_free>;

  static void check(bool ok, const char* what) {
    if (!ok) {
      throw std::runtime_error(std::string("test_pki: ") + what + " failed");
    }
  }

  static key_ptr new_key() {
    key_ptr key(EVP_EC_gen("P-256"));
    check(key != nullptr, "EVP_EC_gen");
    return key;
  }

  // Subject, validity, serial and public key (the CA's own when `key` is null).
  x509_ptr new_certificate(const std::string& cn, int from_days, int to_days,
                           EVP_PKEY* key = nullptr) {
    x509_ptr cert(X509_new());
    check(cert != nullptr, "X509_new");
    X509_set_version(cert.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), static_cast<long>(++serial_));
    X509_gmtime_adj(X509_getm_notBefore(cert.get()), static_cast<long>(from_days) * 86400);
    X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(to_days) * 86400);
    X509_NAME* subject = X509_get_subject_name(cert.get());
    X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_UTF8,
                               reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
    check(X509_set_pubkey(cert.get(), key != nullptr ? key : ca_key_.get()) == 1,
          "X509_set_pubkey");
    return cert;
  }

  static void add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
    X509V3_CTX ctx;
    X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    check(ext != nullptr, "X509V3_EXT_conf_nid");
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }

  static void sign(X509* cert, EVP_PKEY* key) {
    check(X509_sign(cert, key, EVP_sha256()) > 0, "X509_sign");
  }

  static void write_certificate(const std::string& path, X509* cert) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    check(f != nullptr, "fopen");
    const bool ok = PEM_write_X509(f, cert) == 1;
    std::fclose(f);
    check(ok, "PEM_write_X509");
  }

  static void write_key(const std::string& path, EVP_PKEY* key) {
    std::FILE* f = std::fopen(path.c_str(), "wb");
    check(f != nullptr, "fopen");
    const bool ok = PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
    std::fclose(f);
    check(ok, "PEM_write_PrivateKey");
  }

  std::string dir_;
  std::string ca_path_;
  key_ptr ca_key_;
  x509_ptr ca_cert_;
  long serial_ = 0;
  int issued_count_ = 0;
};

}  // namespace ratewall::testing
