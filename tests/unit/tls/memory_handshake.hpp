#pragma once

// TLS handshakes without sockets: a client and a server SSL joined by an in-memory BIO pair.

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

namespace ratewall::testing {

struct ssl_free {
  void operator()(SSL* s) const { SSL_free(s); }
};
struct ssl_ctx_free {
  void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
};
using ssl_ptr = std::unique_ptr<SSL, ssl_free>;
using ssl_ctx_ptr = std::unique_ptr<SSL_CTX, ssl_ctx_free>;

/// A client context that verifies nothing: for tests that look at what the server chose.
inline ssl_ctx_ptr plain_client_context() {
  ssl_ctx_ptr ctx(SSL_CTX_new(TLS_client_method()));
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_NONE, nullptr);
  return ctx;
}

/// A client SSL of `ctx` asking for `sni` (none when empty).
inline ssl_ptr client_of(SSL_CTX* ctx, const std::string& sni = {}) {
  ssl_ptr ssl(SSL_new(ctx));
  if (!sni.empty()) {
    SSL_set_tlsext_host_name(ssl.get(), sni.c_str());
  }
  return ssl;
}

/// Runs the handshake of `client` against `server` until both finish (true) or either fails
/// (false; each SSL keeps its error state). Then lets the client read what the server sent
/// after its Finished (TLS 1.3 session tickets).
inline bool handshake(SSL* client, SSL* server) {
  BIO* client_end = nullptr;
  BIO* server_end = nullptr;
  BIO_new_bio_pair(&client_end, 0, &server_end, 0);
  SSL_set_bio(client, client_end, client_end);
  SSL_set_bio(server, server_end, server_end);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  auto step = [](SSL* ssl, bool& done) {
    if (done) {
      return true;
    }
    const int rc = SSL_do_handshake(ssl);
    if (rc == 1) {
      done = true;
      return true;
    }
    const int error = SSL_get_error(ssl, rc);
    return error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE;
  };
  bool client_done = false;
  bool server_done = false;
  for (int round = 0; round < 20 && !(client_done && server_done); ++round) {
    if (!step(client, client_done) || !step(server, server_done)) {
      ERR_clear_error();
      return false;
    }
  }
  char byte = 0;
  SSL_read(client, &byte, 1);  // WANT_READ once the tickets are in
  ERR_clear_error();
  return client_done && server_done;
}

/// Sends close_notify both ways. A server frees the cached session of a connection freed
/// without one (TLS 1.2 without tickets could not resume).
inline void close_both(SSL* client, SSL* server) {
  SSL_shutdown(client);
  SSL_shutdown(server);
  SSL_shutdown(client);
  ERR_clear_error();
}

/// The common name of the certificate the client was shown ("" if none).
inline std::string peer_common_name(SSL* client) {
  X509* cert = SSL_get0_peer_certificate(client);
  if (cert == nullptr) {
    return {};
  }
  char cn[256] = {};
  X509_NAME_get_text_by_NID(X509_get_subject_name(cert), NID_commonName, cn, sizeof cn);
  return cn;
}

/// The ALPN protocol the handshake settled on ("" if none).
inline std::string alpn_selected(SSL* ssl) {
  const unsigned char* data = nullptr;
  unsigned int length = 0;
  SSL_get0_alpn_selected(ssl, &data, &length);
  return std::string(reinterpret_cast<const char*>(data), length);
}

}  // namespace ratewall::testing
