#pragma once

// Request fields the gateway gives a role of its own, read in any spelling (cgi_same: case, and
// '_' for '-'): the proxy drops or rewrites them on the way upstream, and the configuration
// refuses them where a client would name itself by them.

#include <string_view>

namespace ratewall {

/// A field the gateway writes itself (its framing, X-Forwarded-*, X-Request-Id), so that no
/// upstream that reads '_' as '-' finds a second, client-made one; and the URL a request
/// "really" asked for, which IIS's URL Rewrite module and Symfony serve in place of the
/// request line (X-Original-URL, X-Rewrite-URL; X-Original-URI, nginx's name for it): the gateway
/// routed and priced the line, so no one, a trusted proxy relaying its client's field included, may
/// name another.
bool gateway_owned_field(std::string_view name);

/// What a client may claim about itself, believed only from a trusted proxy: its address,
/// under every name a framework or library reads one (Express's request-ip takes X-Client-IP
/// first, PHP applications HTTP_CLIENT_IP and HTTP_FORWARDED_FOR, Java ones Proxy-Client-IP
/// and WL-Proxy-Client-IP; ingress-nginx, App Engine, Cloudflare, Fly, Azure, Google's and
/// Envoy's own), and how it reached the proxy: the port, scheme (Gunicorn and Echo read
/// X-Forwarded-Protocol, Tornado X-Scheme, Jetty X-Proxied-Https), host and URL it asked the
/// proxy for (X-Forwarded-Uri is Traefik's, X-Forwarded-Path Kong's), and the prefix the
/// application is mounted at (Gunicorn takes a SCRIPT_NAME field's value off the front of the
/// path it routes on).
bool client_claim_field(std::string_view name);

}  // namespace ratewall
