#pragma once

// The client side of TLS towards an https:// upstream: one OpenSSL context per upstream, with
// the upstream's trust anchors, client certificate and a cache of sessions to resume.

#include <openssl/types.h>

#include <boost/system/error_code.hpp>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

// As <openssl/ssl.h> declares it, without the rest of that header.
typedef struct ssl_session_st SSL_SESSION;

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace ratewall {

/// Built for each https upstream at start and at each reload, then shared by every worker
/// thread; a connection holds the shared_ptr while it lives. The context: TLS 1.2 or later,
/// ECDHE+AEAD suites for 1.2, ALPN offering "http/1.1", the peer verified (upstreams.*.tls.verify,
/// against ca_file or the system's CAs) and the client certificate presented when configured.
class upstream_tls {
 public:
  /// Throws config_error (file: `config_file`, the line and key that named the file) for a
  /// ca_file, client_cert or client_key that is missing, unreadable or not PEM, a client key
  /// that does not match its certificate, or a client certificate that has expired or is not
  /// valid yet. Paths relative to the directory of `config_file`.
  static std::shared_ptr<const upstream_tls> load(const upstream_config& cfg,
                                                  const std::string& config_file);

  ~upstream_tls();
  upstream_tls(const upstream_tls&) = delete;
  upstream_tls& operator=(const upstream_tls&) = delete;

  /// The context to construct each connection's ssl::stream from. Thread-safe.
  boost::asio::ssl::context& context() const;

  /// Call on a new connection's SSL before its handshake to `target_host` (a target's host as
  /// configured: a name, or an IP literal without brackets). Sets SNI to tls.server_name, else
  /// the host (none for an IP literal), and, with verify on, the name (or IP address) the
  /// certificate must carry. Offers the last session of `target_host`:`target_port` for
  /// resumption; new sessions of this connection are kept for the next one. False when OpenSSL
  /// refuses a setting (the connection should not be used). Thread-safe.
  bool prepare(SSL* ssl, std::string_view target_host, std::uint16_t target_port = 0) const;

  /// A short reason a handshake failed, for logs: "certificate verify failed: unable to get
  /// local issuer certificate", "certificate verify failed: hostname mismatch", else `ec`'s
  /// message. `ssl` may be null.
  static std::string failure_reason(SSL* ssl, const boost::system::error_code& ec);

  const upstream_tls_config& settings() const { return settings_; }

 private:
  struct session_free {
    void operator()(SSL_SESSION* s) const;
  };
  using session_ptr = std::unique_ptr<SSL_SESSION, session_free>;

  explicit upstream_tls(const upstream_tls_config& settings);
  static int on_new_session(SSL* ssl, SSL_SESSION* session);

  upstream_tls_config settings_;
  std::unique_ptr<boost::asio::ssl::context> context_;
  mutable std::mutex sessions_mutex_;
  mutable std::map<std::string, session_ptr, std::less<>> sessions_;  // by "host:port"
};

}  // namespace ratewall
