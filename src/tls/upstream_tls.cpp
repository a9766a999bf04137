#include "ratewall/tls/upstream_tls.hpp"

#include <openssl/x509v3.h>

#include <boost/asio/ssl/context.hpp>

#include "pem_files.hpp"
#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace {

// Where a context keeps its upstream_tls and a connection the key of its target, for the
// new-session callback. Asio uses the "app data" slots itself.
int context_index() {
  static const int index = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

int connection_index() {
  static const int index = SSL_get_ex_new_index(
      0, nullptr, nullptr, nullptr, +[](void*, void* key, CRYPTO_EX_DATA*, int, long, void*) {
        delete static_cast<std::string*>(key);
      });
  return index;
}

}  // namespace

void upstream_tls::session_free::operator()(SSL_SESSION* s) const {
  SSL_SESSION_free(s);
}

upstream_tls::upstream_tls(const upstream_tls_config& settings)
    : settings_(settings),
      context_(std::make_unique<boost::asio::ssl::context>(boost::asio::ssl::context::tls_client)) {
}

upstream_tls::~upstream_tls() = default;

std::shared_ptr<const upstream_tls> upstream_tls::load(const upstream_config& cfg,
                                                       const std::string& config_file) {
  const upstream_tls_config& s = cfg.tls;
  tls_detail::pem_reader files(config_file);
  std::shared_ptr<upstream_tls> tls(new upstream_tls(s));
  SSL_CTX* ctx = tls->context_->native_handle();
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_cipher_list(ctx, tls_detail::k_tls12_ciphers);
  static constexpr unsigned char k_alpn[] = "\x08http/1.1";
  SSL_CTX_set_alpn_protos(ctx, k_alpn, sizeof k_alpn - 1);  // 0 is success here
  if (s.verify) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nullptr);
    if (!s.ca_file.empty()) {
      // The file replaces the system's CAs (as nginx's proxy_ssl_trusted_certificate does).
      X509_STORE* store = SSL_CTX_get_cert_store(ctx);
      for (const auto& ca : files.certificates(s.ca_file, s.ca_file_at, "CA")) {
        X509_STORE_add_cert(store, ca.get());
      }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
      files.fail(s.at, "cannot load the system's CA certificates: " +
                           tls_detail::last_openssl_error("unknown error"));
    }
  } else {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, nullptr);
  }
  if (!s.client_cert.empty()) {
    files.use_certificate(ctx, s.client_cert, s.client_cert_at, s.client_key, s.client_key_at);
  }
  // OpenSSL's client cache stores nothing by itself; sessions are kept per target in
  // sessions_ and offered again by prepare().
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
  SSL_CTX_set_ex_data(ctx, context_index(), tls.get());
  SSL_CTX_sess_set_new_cb(ctx, &upstream_tls::on_new_session);
  return tls;
}

boost::asio::ssl::context& upstream_tls::context() const {
  return *context_;
}

bool upstream_tls::prepare(SSL* ssl, std::string_view target_host,
                           std::uint16_t target_port) const {
  const std::string name =
      settings_.server_name.empty() ? std::string(target_host) : settings_.server_name;
  const bool ip_literal = parse_ip(name).has_value();
  // RFC 6066: SNI carries host names only, never an address.
  if (!ip_literal && SSL_set_tlsext_host_name(ssl, name.c_str()) != 1) {
    return false;
  }
  if (settings_.verify) {
    if (ip_literal) {
      if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name.c_str()) != 1) {
        return false;
      }
    } else {
      SSL_set_hostflags(ssl, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
      if (SSL_set1_host(ssl, name.c_str()) != 1) {
        return false;
      }
    }
  }
  auto key =
      std::make_unique<std::string>(std::string(target_host) + ":" + std::to_string(target_port));
  {
    std::lock_guard lock(sessions_mutex_);
    if (auto it = sessions_.find(*key); it != sessions_.end()) {
      SSL_set_session(ssl, it->second.get());
    }
  }
  delete static_cast<std::string*>(SSL_get_ex_data(ssl, connection_index()));  // prepared twice
  if (SSL_set_ex_data(ssl, connection_index(), key.get()) != 1) {
    return false;
  }
  key.release();  // freed with the SSL (connection_index's free callback)
  return true;
}

int upstream_tls::on_new_session(SSL* ssl, SSL_SESSION* session) {
  auto* self =
      static_cast<const upstream_tls*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), context_index()));
  auto* key = static_cast<const std::string*>(SSL_get_ex_data(ssl, connection_index()));
  if (self == nullptr || key == nullptr || SSL_SESSION_is_resumable(session) != 1) {
    return 0;
  }
  // A copy: OpenSSL marks its own object unresumable when the connection is freed without a
  // close_notify sent, as pooled connections often are (the upstream closed first, a timeout).
  session_ptr copy(SSL_SESSION_dup(session));
  if (copy) {
    std::lock_guard lock(self->sessions_mutex_);
    self->sessions_.insert_or_assign(*key, std::move(copy));
  }
  return 0;  // OpenSSL keeps (and frees) the original
}

std::string upstream_tls::failure_reason(SSL* ssl, const boost::system::error_code& ec) {
  // With verify off OpenSSL still records what it would have refused; that is not the reason.
  if (ssl != nullptr && (SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER) != 0) {
    const long result = SSL_get_verify_result(ssl);
    if (result != X509_V_OK) {
      return std::string("certificate verify failed: ") + X509_verify_cert_error_string(result);
    }
  }
  return ec ? ec.message() : "no error";
}

}  // namespace ratewall
