#include "ratewall/tls/server_tls.hpp"

#include <openssl/x509v3.h>

#include <algorithm>
#include <boost/asio/ssl/context.hpp>

#include "pem_files.hpp"
#include "ratewall/config/loader.hpp"

namespace ratewall {

namespace {

using tls_detail::x509_ptr;

// Set on every context (OpenSSL refuses to resume without one once client certificates are
// verified), the same everywhere: a session belongs to the listener, not to the certificate SNI
// chose. The cache and the ticket keys are the default context's, where every handshake starts.
constexpr unsigned char k_session_id_context[] = "ratewall";

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

std::string lower_copy(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    c = lower(c);
  }
  return out;
}

bool is_wildcard(std::string_view name) {
  return name.size() > 2 && name.starts_with("*.");
}

// The DNS names of the leaf's subjectAltName; its CN only when there are none (as browsers
// no longer do, but certificates made by hand for tests and internal names often have only a CN).
std::vector<std::string> certificate_names(X509* leaf) {
  std::vector<std::string> names;
  auto* sans =
      static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(leaf, NID_subject_alt_name, nullptr, nullptr));
  if (sans != nullptr) {
    for (int i = 0; i < sk_GENERAL_NAME_num(sans); ++i) {
      const GENERAL_NAME* name = sk_GENERAL_NAME_value(sans, i);
      if (name->type != GEN_DNS) {
        continue;
      }
      const ASN1_STRING* text = name->d.dNSName;
      std::string_view value(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                             static_cast<std::size_t>(ASN1_STRING_length(text)));
      // A NUL inside a name is an attack on C-string comparisons, never a real name.
      if (!value.empty() && value.find('\0') == std::string_view::npos) {
        names.push_back(lower_copy(value));
      }
    }
    GENERAL_NAMES_free(sans);
  }
  if (!names.empty()) {
    return names;
  }
  X509_NAME* subject = X509_get_subject_name(leaf);
  const int index = X509_NAME_get_index_by_NID(subject, NID_commonName, -1);
  if (index >= 0) {
    const ASN1_STRING* text = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subject, index));
    std::string_view value(reinterpret_cast<const char*>(ASN1_STRING_get0_data(text)),
                           static_cast<std::size_t>(ASN1_STRING_length(text)));
    if (!value.empty() && value.find('\0') == std::string_view::npos) {
      names.push_back(lower_copy(value));
    }
  }
  return names;
}

// ALPN: h2 (when server.http2 is on) before http/1.1, in our order. A client that offers ALPN
// with neither is refused with the no_application_protocol alert, as nginx does since 1.21.4
// (RFC 7301 section 3.2); a client that offers no ALPN never reaches this callback and gets
// HTTP/1.1.
constexpr unsigned char k_alpn_h2[] = "\x02h2\x08http/1.1";
constexpr unsigned char k_alpn_http1[] = "\x08http/1.1";

int select_alpn(SSL*, const unsigned char** out, unsigned char* out_length,
                const unsigned char* offered, unsigned int offered_length, void* arg) {
  const bool h2 = arg != nullptr;
  const unsigned char* ours = h2 ? k_alpn_h2 : k_alpn_http1;
  const unsigned int ours_length = h2 ? sizeof k_alpn_h2 - 1 : sizeof k_alpn_http1 - 1;
  unsigned char* chosen = nullptr;
  if (SSL_select_next_proto(&chosen, out_length, ours, ours_length, offered, offered_length) !=
      OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_ALERT_FATAL;
  }
  *out = chosen;
  return SSL_TLSEXT_ERR_OK;
}

void configure(SSL_CTX* ctx, tls_version min_version, bool offer_h2) {
  SSL_CTX_set_min_proto_version(ctx,
                                min_version == tls_version::v1_3 ? TLS1_3_VERSION : TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_cipher_list(ctx, tls_detail::k_tls12_ciphers);
  SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
  SSL_CTX_set_session_id_context(ctx, k_session_id_context, sizeof k_session_id_context - 1);
  // The argument only says whether h2 is offered: any non-null pointer does.
  SSL_CTX_set_alpn_select_cb(ctx, select_alpn,
                             offer_h2 ? const_cast<unsigned char*>(k_alpn_h2) : nullptr);
}

}  // namespace

struct server_tls::certificate {
  boost::asio::ssl::context context{boost::asio::ssl::context::tls_server};
  std::vector<std::string> names;
};

bool server_name_matches(std::string_view pattern, std::string_view host) {
  if (host.empty() || pattern.empty()) {
    return false;
  }
  if (!is_wildcard(pattern)) {
    return iequals(pattern, host);
  }
  const std::string_view suffix = pattern.substr(1);  // ".example.com"
  if (host.size() <= suffix.size() || !iequals(host.substr(host.size() - suffix.size()), suffix)) {
    return false;
  }
  // One whole label of a host name: no dot, no '*', no byte a name cannot hold.
  const std::string_view label = host.substr(0, host.size() - suffix.size());
  return std::all_of(label.begin(), label.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  });
}

server_tls::server_tls() = default;
server_tls::~server_tls() = default;

std::shared_ptr<const server_tls> server_tls::load(const server_tls_config& cfg, bool offer_h2,
                                                   const std::string& config_file) {
  tls_detail::pem_reader files(config_file);
  std::shared_ptr<server_tls> tls(new server_tls());
  for (const auto& c : cfg.certificates) {
    auto cert = std::make_unique<certificate>();
    SSL_CTX* ctx = cert->context.native_handle();
    configure(ctx, cfg.min_version, offer_h2);
    files.use_certificate(ctx, c.cert, c.cert_at, c.key, c.key_at);
    cert->names = certificate_names(SSL_CTX_get0_certificate(ctx));
    tls->certificates_.push_back(std::move(cert));
  }
  if (tls->certificates_.empty()) {
    throw config_error(config_file, 0, "server.tls.certificates", "no certificate");
  }
  // Only the default context is ever handed to a connection, so only it needs the callback.
  SSL_CTX* default_ctx = tls->context().native_handle();
  SSL_CTX_set_tlsext_servername_arg(default_ctx, tls.get());
  SSL_CTX_set_tlsext_servername_callback(
      default_ctx, +[](SSL* ssl, int*, void* arg) -> int {
        const auto* self = static_cast<const server_tls*>(arg);
        const char* name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        if (name == nullptr) {
          return SSL_TLSEXT_ERR_OK;  // no SNI: the default certificate
        }
        const std::size_t chosen = self->select(name);
        if (chosen != 0) {
          SSL_set_SSL_CTX(ssl, self->certificates_[chosen]->context.native_handle());
        }
        return SSL_TLSEXT_ERR_OK;
      });
  return tls;
}

boost::asio::ssl::context& server_tls::context() const {
  return certificates_.front()->context;
}

const std::vector<std::string>& server_tls::names(std::size_t i) const {
  return certificates_.at(i)->names;
}

std::size_t server_tls::select(std::string_view host) const {
  if (host.ends_with('.')) {
    host.remove_suffix(1);
  }
  for (bool wildcards : {false, true}) {
    for (std::size_t i = 0; i < certificates_.size(); ++i) {
      for (const auto& name : certificates_[i]->names) {
        if (is_wildcard(name) == wildcards && server_name_matches(name, host)) {
          return i;
        }
      }
    }
  }
  return 0;
}

}  // namespace ratewall
