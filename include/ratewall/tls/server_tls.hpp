#pragma once

// The TLS listener's certificates: one OpenSSL context per certificate of server.tls, chosen for
// each handshake by the name the client asks for (SNI).

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/config/config.hpp"

namespace boost::asio::ssl {
class context;
}  // namespace boost::asio::ssl

namespace ratewall {

/// True when a certificate name `pattern` covers the name `host` a client asked for: equal
/// ignoring ASCII case, or a wildcard `*.example.com` covering exactly one more label
/// ("a.example.com"; neither "example.com" nor "a.b.example.com"). A `*` anywhere else is not a
/// wildcard. Neither side may end with a dot (server_tls::select strips the client's).
bool server_name_matches(std::string_view pattern, std::string_view host);

/// Built from server.tls at start and at each reload, then read-only and shared by every worker
/// thread. A connection holds the shared_ptr for as long as it lives: after a reload the old
/// contexts serve their connections until the last one ends, new handshakes get the new ones.
///
/// Every context: the configured minimum version (TLS 1.2 or 1.3), ECDHE+AEAD suites for
/// TLS 1.2 (OpenSSL's defaults for 1.3), no renegotiation, no compression, ALPN "http/1.1",
/// session tickets and a server-side session cache (shared through the default context, so a
/// session resumes whichever certificate SNI chose). Tickets and cached sessions do not survive
/// a reload.
class server_tls {
 public:
  /// Loads every certificate of `cfg`; paths relative to the directory of `config_file`.
  /// Throws config_error (file: `config_file`, line and key of the certificate entry) naming the
  /// certificate or key file that is missing or unreadable, not PEM, a key that does not match
  /// its certificate, or a certificate that has expired or is not valid yet. `offer_h2`: ALPN
  /// offers h2 before http/1.1 (server.http2.enabled).
  static std::shared_ptr<const server_tls> load(const server_tls_config& cfg, bool offer_h2,
                                                const std::string& config_file);

  ~server_tls();
  server_tls(const server_tls&) = delete;
  server_tls& operator=(const server_tls&) = delete;

  /// The default (first) certificate's context: construct each connection's ssl::stream from
  /// it; the handshake switches to the certificate SNI selects. Thread-safe (OpenSSL contexts
  /// may create connections on any thread).
  boost::asio::ssl::context& context() const;

  /// The number of certificates, in config order.
  std::size_t size() const { return certificates_.size(); }
  /// The names certificate `i` is chosen for: its subject alternative DNS names, or its common
  /// name when it has none; lower case.
  const std::vector<std::string>& names(std::size_t i) const;
  /// The certificate a client asking for `host` gets: the first with that exact name, else the
  /// first with a wildcard covering it, else 0 (the default). Case and one trailing dot ignored.
  std::size_t select(std::string_view host) const;

 private:
  struct certificate;

  server_tls();

  std::vector<std::unique_ptr<certificate>> certificates_;
};

}  // namespace ratewall
