// The TLS keys: `server.tls` (the TLS listener) and `upstreams.<name>.tls` (https:// upstreams).
// Only the shape is checked here; the files themselves are opened by the tls module (at start,
// at each reload and by `ratewall check`), which names the same line and key on an error.

#include <algorithm>
#include <cctype>

#include "ratewall/core/parse.hpp"
#include "sections.hpp"

namespace ratewall {
namespace {

// A DNS name or an IP address, as SNI and certificate checks take it: lower case, no port.
std::string read_server_name(const yaml_reader& r, const yaml_field& field) {
  std::string name = read_nonempty_string(r, field);
  if (parse_ip(name)) {
    return name;
  }
  for (char& c : name) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const bool valid =
      name.front() != '.' && name.front() != '-' &&
      std::all_of(name.begin(), name.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '.';
      });
  if (!valid) {
    r.fail(field, "\"" + name +
                      "\" is not a host name or IP address (write it without scheme, port or "
                      "brackets)");
  }
  return name;
}

tls_certificate_files read_certificate(const yaml_reader& r, const yaml_field& item) {
  auto m = yaml_map::strict(r, item, {"cert", "key"});
  tls_certificate_files files;
  auto cert = m.require("cert", "a PEM certificate chain, leaf first");
  files.cert = read_file_path(r, cert);
  files.cert_at = location_of(cert);
  auto key = m.require("key", "the certificate's PEM private key");
  files.key = read_file_path(r, key);
  files.key_at = location_of(key);
  return files;
}

}  // namespace

bool listeners_overlap(const endpoint& a, const endpoint& b) {
  if (a.port == 0 || a.port != b.port) {
    return false;
  }
  // [::] takes every address (IPv4 too: the listeners do not set IPV6_V6ONLY), 0.0.0.0 every
  // IPv4 one; a name (localhost) may be any of its addresses.
  const auto covers = [](const std::optional<ip_address>& w, const std::optional<ip_address>& x) {
    return !w || !x || *w == *x || *w == ip_address{} ||
           (*w == k_v4_mapped_any && is_v4_mapped(*x));
  };
  const auto x = parse_ip(a.host);
  const auto y = parse_ip(b.host);
  return covers(x, y) || covers(y, x);
}

server_tls_config read_server_tls(const yaml_reader& r, const yaml_field& field,
                                  const std::optional<endpoint>& plain_listen) {
  auto m = yaml_map::strict(r, field, {"listen", "certificates", "min_version"});
  server_tls_config tls;
  auto listen = m.get("listen");
  if (listen) {
    tls.listen = read_listen_endpoint(r, *listen);
  }
  if (plain_listen && listeners_overlap(*plain_listen, tls.listen)) {
    r.fail(listen ? *listen : field,
           "the same port as server.listen on an address it covers (the TLS listener needs a "
           "port of its own)");
  }
  auto certificates = m.require("certificates", "at least one { cert, key }");
  for (const auto& item : read_list(r, certificates)) {
    tls.certificates.push_back(read_certificate(r, item));
  }
  if (tls.certificates.empty()) {
    r.fail(certificates, "expected at least one certificate (the first is the default)");
  }
  if (auto f = m.get("min_version")) {
    tls.min_version = read_enum(r, *f, {tls_version::v1_2, tls_version::v1_3});
  }
  return tls;
}

upstream_tls_config read_upstream_tls(const yaml_reader& r, const yaml_field& field, bool https) {
  if (!https) {
    r.fail(field, "tls settings need https:// targets");
  }
  auto m =
      yaml_map::strict(r, field, {"verify", "ca_file", "server_name", "client_cert", "client_key"});
  upstream_tls_config tls;
  tls.at = location_of(field);
  if (auto f = m.get("verify")) {
    tls.verify = read_bool(r, *f);
  }
  if (auto f = m.get("ca_file")) {
    if (!tls.verify) {
      r.fail(*f, "not used with verify: false");
    }
    tls.ca_file = read_file_path(r, *f);
    tls.ca_file_at = location_of(*f);
  }
  if (auto f = m.get("server_name")) {
    tls.server_name = read_server_name(r, *f);
  }
  auto cert = m.get("client_cert");
  auto key = m.get("client_key");
  if (cert && !key) {
    r.fail(*cert, "client_cert needs client_key (its private key) too");
  }
  if (key && !cert) {
    r.fail(*key, "client_key needs client_cert (its certificate chain) too");
  }
  if (cert) {
    tls.client_cert = read_file_path(r, *cert);
    tls.client_cert_at = location_of(*cert);
    tls.client_key = read_file_path(r, *key);
    tls.client_key_at = location_of(*key);
  }
  return tls;
}

}  // namespace ratewall
