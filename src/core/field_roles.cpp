#include "ratewall/core/field_roles.hpp"

#include "ratewall/core/parse.hpp"

namespace ratewall {

bool gateway_owned_field(std::string_view name) {
  return cgi_same(name, "X-Forwarded-For") || cgi_same(name, "X-Forwarded-Proto") ||
         cgi_same(name, "X-Forwarded-Host") || cgi_same(name, "X-Request-Id") ||
         cgi_same(name, "Content-Length") || cgi_same(name, "Transfer-Encoding") ||
         cgi_same(name, "X-Original-URL") || cgi_same(name, "X-Rewrite-URL") ||
         cgi_same(name, "X-Original-URI");
}

bool client_claim_field(std::string_view name) {
  const char first = name.empty() ? '\0' : ascii_lower(name[0]);
  if (first != 'x' && first != 'c' && first != 'f' && first != 't' && first != 'p' &&
      first != 'w' && first != 's') {
    return false;  // most fields (Accept, User-Agent, Authorization) at one compare
  }
  static constexpr std::string_view k_claims[] = {
      // The client's address.
      "Forwarded", "X-Real-IP", "X-Client-IP", "Client-IP", "True-Client-IP", "CF-Connecting-IP",
      "Fastly-Client-IP", "X-Cluster-Client-IP", "Proxy-Client-IP", "WL-Proxy-Client-IP",
      "X-Forwarded", "Forwarded-For", "X-Original-Forwarded-For", "X-AppEngine-User-IP",
      "X-AppEngine-Remote-Addr", "CF-Pseudo-IPv4", "X-ProxyUser-IP", "X-Envoy-External-Address",
      "Fly-Client-IP", "X-Azure-ClientIP", "X-Azure-SocketIP",
      // How it reached the proxy: port, scheme, host, the URL it asked for and where the
      // application is mounted in it.
      "X-Forwarded-Port", "X-Forwarded-Prefix", "X-Forwarded-Server", "X-Forwarded-Scheme",
      "X-Forwarded-Ssl", "X-Forwarded-Protocol", "X-Scheme", "X-Url-Scheme", "Front-End-Https",
      "X-Proxied-Https", "X-Host", "X-Forwarded-Uri", "X-Forwarded-Path", "Script-Name",
      "Path-Info"};
  return cgi_same_any(name, k_claims);
}

}  // namespace ratewall
