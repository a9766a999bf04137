#include "ratewall/config/loader.hpp"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <regex>

#include "ratewall/core/cpus.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/core/parse.hpp"
#include "ratewall/core/read_file.hpp"
#include "ratewall/redis/url.hpp"
#include "sections.hpp"
#include "yaml_reader.hpp"

namespace ratewall {
namespace {

// More would only add contention; a typo like 800 instead of 8 should not start 800 loops.
constexpr std::uint64_t k_max_threads = 1024;

// server.http2's bounds. Below 16KiB, one DATA frame of the default SETTINGS_MAX_FRAME_SIZE, a
// window would hold bodies to smaller frames; above 2^31 - 1 it is a flow-control error (RFC 9113
// §6.9.1, §6.9.2).
constexpr std::uint64_t k_max_http2_streams = 1000;
constexpr std::uint64_t k_min_http2_window = 16384;
// A connection's window starts at 65535 and only grows (WINDOW_UPDATE): no setting shrinks it.
constexpr std::uint64_t k_min_http2_connection_window = 65535;
constexpr std::uint64_t k_max_http2_window = 2147483647;
constexpr std::uint64_t k_max_http2_resets_per_second = 100000;
constexpr std::uint64_t k_max_http2_header_table = 64 * 1024;
// Acknowledging our SETTINGS takes a client a round trip, more on a lossy mobile link: below a
// second the gateway would close connections that are merely slow. Above five minutes a client
// that never acknowledges holds its connection long past any reasonable wait (RFC 9113 §6.5.3).
constexpr nanos k_min_http2_settings_timeout = std::chrono::seconds(1);
constexpr nanos k_max_http2_settings_timeout = std::chrono::minutes(5);

std::string format_what(const std::string& file, int line, const std::string& key_path,
                        const std::string& message) {
  std::string out = file;
  if (line > 0) {
    out += ":" + std::to_string(line);
  }
  out += ": ";
  if (!key_path.empty()) {
    out += key_path + ": ";
  }
  return out + message;
}

unsigned resolve_threads(std::uint64_t configured) {
  if (configured != 0) {
    return static_cast<unsigned>(configured);
  }
  return usable_cpus();
}

path_options read_paths(const yaml_reader& r, const yaml_field& field) {
  using o = path_options;
  auto m = yaml_map::strict(
      r, field,
      {"merge_slashes", "escaped_slashes", "backslashes", "semicolons", "case_insensitive"});
  path_options p;
  if (auto f = m.get("merge_slashes")) {
    p.merge_slashes = read_bool(r, *f);
  }
  if (auto f = m.get("escaped_slashes")) {
    p.escaped_slashes = read_enum<o::escaped_slash>(r, *f,
                                                    {{"reject", o::escaped_slash::reject},
                                                     {"keep", o::escaped_slash::keep},
                                                     {"decode", o::escaped_slash::decode}});
  }
  if (auto f = m.get("backslashes")) {
    p.backslashes = read_enum<o::backslash>(
        r, *f, {{"reject", o::backslash::reject}, {"keep", o::backslash::keep}});
  }
  if (auto f = m.get("semicolons")) {
    p.semicolons = read_enum<o::semicolon>(r, *f,
                                           {{"keep", o::semicolon::keep},
                                            {"strip_params", o::semicolon::strip_params},
                                            {"reject", o::semicolon::reject}});
  }
  if (auto f = m.get("case_insensitive")) {
    p.case_insensitive = read_bool(r, *f);
  }
  return p;
}

// A flow-control window of server.http2, in bytes, at least `least` for the reason `why`.
std::uint32_t read_http2_window(const yaml_reader& r, const yaml_field& field, std::uint64_t least,
                                std::string_view why) {
  const std::uint64_t bytes = read_byte_size(r, field);
  if (bytes < least) {
    r.fail(field, "must be at least " + std::to_string(least) + " (" + std::string(why) + ")");
  }
  if (bytes > k_max_http2_window) {
    r.fail(field, "must be at most " + std::to_string(k_max_http2_window) +
                      " (2GiB - 1): the largest HTTP/2 window");
  }
  return static_cast<std::uint32_t>(bytes);
}

http2_config read_http2(const yaml_reader& r, const yaml_field& field) {
  auto m =
      yaml_map::strict(r, field,
                       {"enabled", "max_concurrent_streams", "initial_window", "connection_window",
                        "max_resets_per_second", "header_table_size", "settings_timeout"});
  http2_config h;
  if (auto f = m.get("enabled")) {
    h.enabled = read_bool(r, *f);
  }
  if (auto f = m.get("max_concurrent_streams")) {
    const std::uint64_t streams = read_uint(r, *f, 1);
    if (streams > k_max_http2_streams) {
      r.fail(*f, "must be at most " + std::to_string(k_max_http2_streams) +
                     " (each stream may hold an upstream connection and a window of request "
                     "body)");
    }
    h.max_concurrent_streams = static_cast<std::uint32_t>(streams);
  }
  auto initial = m.get("initial_window");
  if (initial) {
    h.initial_window = read_http2_window(r, *initial, k_min_http2_window,
                                         "16KiB: one DATA frame of the default size");
  }
  auto connection = m.get("connection_window");
  if (connection) {
    h.connection_window =
        read_http2_window(r, *connection, k_min_http2_connection_window,
                          "a connection's window starts at 65535 and can only grow");
  }
  // One stream must be able to use its whole window.
  if (h.connection_window < h.initial_window) {
    if (connection) {
      r.fail(*connection, "must be at least server.http2.initial_window (" +
                              std::to_string(h.initial_window) + ")");
    }
    r.fail(*initial, "must be at most server.http2.connection_window (" +
                         std::to_string(h.connection_window) + ", its default)");
  }
  if (auto f = m.get("max_resets_per_second")) {
    h.max_resets_per_second =
        static_cast<std::uint32_t>(read_uint(r, *f, 1, k_max_http2_resets_per_second));
  }
  if (auto f = m.get("header_table_size")) {
    const std::uint64_t bytes = read_byte_size(r, *f);
    if (bytes > k_max_http2_header_table) {
      r.fail(*f, "must be at most " + std::to_string(k_max_http2_header_table) +
                     " (64KiB: the table is kept per connection)");
    }
    h.header_table_size = static_cast<std::uint32_t>(bytes);
  }
  if (auto f = m.get("settings_timeout")) {
    // 0s passes read_duration to get the lower bound's message, which says more.
    const nanos timeout = read_duration(r, *f, true);
    if (timeout < k_min_http2_settings_timeout) {
      r.fail(*f, "must be at least " + format_duration(k_min_http2_settings_timeout) +
                     " (a client needs a round trip to acknowledge SETTINGS)");
    }
    if (timeout > k_max_http2_settings_timeout) {
      r.fail(*f, "must be at most " + format_duration(k_max_http2_settings_timeout) +
                     " (a client that never acknowledges SETTINGS holds its connection that long)");
    }
    h.settings_timeout = timeout;
  }
  return h;
}

server_config read_server(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::strict(
      r, field,
      {"listen", "threads", "max_header_bytes", "max_body_bytes", "header_timeout", "body_timeout",
       "idle_timeout", "drain_timeout", "paths", "max_connections", "max_connections_per_client",
       "request_buffer_bytes", "tunnel_idle_timeout", "tls", "http2"});
  server_config s;
  auto listen = m.get("listen");
  if (listen && listen->node.IsScalar() && listen->node.Scalar() == "off") {
    s.plain_listener = false;
  } else if (listen) {
    s.listen = read_listen_endpoint(r, *listen);
  }
  if (auto f = m.get("threads")) {
    s.threads = static_cast<unsigned>(read_uint(r, *f, 0, k_max_threads));
  }
  if (auto f = m.get("max_header_bytes")) {
    const std::uint64_t bytes = read_byte_size(r, *f, 1);
    // The HTTP parser's field set holds a field of less than 64 KiB and throws past it; a head
    // of 64 KiB cannot carry one (nginx's largest line is 8 KiB by default, HAProxy's head 16).
    if (bytes > 64 * 1024) {
      r.fail(*f,
             "must be at most 64KiB (65536): no field of a head that size is past what "
             "the HTTP parser holds");
    }
    s.max_header_bytes = static_cast<std::size_t>(bytes);
  }
  if (auto f = m.get("max_body_bytes")) {
    s.max_body_bytes = read_byte_size(r, *f);
  }
  if (auto f = m.get("header_timeout")) {
    s.header_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("body_timeout")) {
    s.body_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("idle_timeout")) {
    s.idle_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("drain_timeout")) {
    // 0s is meaningful here: stop at once without waiting for requests in flight.
    s.drain_timeout = read_duration(r, *f, true);
  }
  if (auto f = m.get("paths")) {
    s.paths = read_paths(r, *f);
  }
  if (auto f = m.get("max_connections")) {
    s.max_connections = read_uint(r, *f, 0, UINT32_MAX);
  }
  if (auto f = m.get("max_connections_per_client")) {
    s.max_connections_per_client = read_uint(r, *f, 0, UINT32_MAX);
  }
  if (auto f = m.get("request_buffer_bytes")) {
    // 0 is meaningful: every body streams.
    s.request_buffer_bytes = read_byte_size(r, *f, 0);
  }
  if (auto f = m.get("tunnel_idle_timeout")) {
    s.tunnel_idle_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("tls")) {
    s.tls = read_server_tls(r, *f, s.plain_listener ? std::optional(s.listen) : std::nullopt);
  }
  if (auto f = m.get("http2")) {
    s.http2 = read_http2(r, *f);
  }
  if (!s.plain_listener && !s.tls) {
    r.fail(*listen, "off needs server.tls (with neither listener nothing would be served)");
  }
  return s;
}

}  // namespace

std::string read_secret_env(const yaml_reader& r, const yaml_field& field) {
  std::string name = read_nonempty_string(r, field);
  bool valid = !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) {
    valid = valid && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      c == '_');
  }
  if (!valid) {
    r.fail(field, "\"" + name + "\" is not a valid environment variable name");
  }
  if (name == "RATEWALL_HASH_KEY") {
    r.fail(field,
           "must not be RATEWALL_HASH_KEY: the secret that names clients in logs, metrics and "
           "stores would be handed to whoever holds this one; give each secret a variable of "
           "its own");
  }
  return name;
}

namespace {

// An admin listener on the same port as a proxy listener, on an address one of them covers:
// else the start fails on the second bind ("address already in use"), which `check` cannot see.
void check_admin_port(const yaml_reader& r, const server_config& server, const endpoint& admin,
                      int line, const std::string& path) {
  const char* clash = nullptr;
  if (server.plain_listener && listeners_overlap(server.listen, admin)) {
    clash = "server.listen";
  } else if (server.tls && listeners_overlap(server.tls->listen, admin)) {
    clash = "server.tls.listen";
  }
  if (clash != nullptr) {
    r.fail(line, path,
           "the same port as " + std::string(clash) +
               " on an address it covers (the admin API needs a port of its own)");
  }
}

admin_config read_admin(const yaml_reader& r, const yaml_field& field,
                        const server_config& server) {
  auto m = yaml_map::strict(r, field,
                            {"enabled", "listen", "listen_without_token", "token_env",
                             "allowed_hosts", "header_timeout", "max_connections", "top_window"});
  admin_config a;
  a.listen_at = location_of(field);
  if (auto f = m.get("enabled")) {
    a.enabled = read_bool(r, *f);
  }
  if (auto f = m.get("listen")) {
    a.listen = read_listen_endpoint(r, *f);
    a.listen_at = location_of(*f);
  }
  if (a.enabled) {
    check_admin_port(r, server, a.listen, a.listen_at.line, a.listen_at.key_path);
  }
  if (auto f = m.get("listen_without_token")) {
    a.listen_without_token = read_listen_endpoint(r, *f);
    if (a.enabled) {
      check_admin_port(r, server, *a.listen_without_token, f->line, f->path);
    }
    if (!is_loopback_host(a.listen_without_token->host)) {
      r.fail(*f,
             "expected a loopback address (127.0.0.1:9090): without a token the admin API "
             "must not be reachable from other hosts");
    }
  }
  a.token_env_at = a.listen_at;
  if (auto f = m.get("token_env")) {
    a.token_env = read_secret_env(r, *f);
    a.token_env_at = location_of(*f);
  }
  if (auto f = m.get("allowed_hosts")) {
    for (const auto& item : read_list(r, *f)) {
      std::string host = read_nonempty_string(r, item);
      for (char& c : host) {
        c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      }
      // A host name or address as a Host header carries it, without the port.
      const bool valid = std::all_of(host.begin(), host.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || c == '-' || c == '.' ||
               c == ':' || c == '[' || c == ']' || c == '_';
      });
      if (!valid) {
        r.fail(item, "\"" + host + "\" is not a host name (write it without scheme, port or path)");
      }
      a.allowed_hosts.push_back(std::move(host));
    }
  }
  if (auto f = m.get("header_timeout")) {
    a.header_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("max_connections")) {
    a.max_connections = read_uint(r, *f, 1, 65536);
  }
  if (auto f = m.get("top_window")) {
    a.top_window = read_duration(r, *f);
    // Counts are kept in tenths of the window: from slices of 100ms (1s) to 2.4h (24h).
    // Shorter, the list turns over before anyone reads it; longer, it says little of now.
    if (a.top_window < std::chrono::seconds(1)) {
      r.fail(*f, "must be at least 1s");
    }
    if (a.top_window > std::chrono::hours(24)) {
      r.fail(*f, "must be at most 24h");
    }
  }
  return a;
}

// A field HTTP or the gateway gives a meaning of its own, in either spelling ('_' for '-').
bool standard_request_field(std::string_view name) {
  static constexpr std::string_view k_fields[] = {"accept",
                                                  "accept-charset",
                                                  "accept-encoding",
                                                  "accept-language",
                                                  "authorization",
                                                  "cache-control",
                                                  "connection",
                                                  "content-encoding",
                                                  "content-language",
                                                  "content-length",
                                                  "content-location",
                                                  "content-range",
                                                  "content-type",
                                                  "cookie",
                                                  "date",
                                                  "expect",
                                                  "forwarded",
                                                  "from",
                                                  "host",
                                                  "if-match",
                                                  "if-modified-since",
                                                  "if-none-match",
                                                  "if-range",
                                                  "if-unmodified-since",
                                                  "keep-alive",
                                                  "max-forwards",
                                                  "origin",
                                                  "pragma",
                                                  "proxy-authorization",
                                                  "range",
                                                  "referer",
                                                  "te",
                                                  "trailer",
                                                  "transfer-encoding",
                                                  "upgrade",
                                                  "user-agent",
                                                  "via",
                                                  "x-forwarded-for",
                                                  "x-forwarded-host",
                                                  "x-forwarded-proto",
                                                  "x-real-ip",
                                                  "x-request-id"};
  return cgi_same_any(name, k_fields);
}

// Whether a trusted_proxies entry holds all of IPv4 (::/8 does, as ::ffff:0:0/96 does) or
// all of IPv6, or a block wider than an IPv4 /8 (10.0.0.0/8) or the IPv6 private /7
// (fc00::/7): far more than proxies.
bool trusts_too_wide(const cidr& c) {
  if (c.prefix <= 96 && mask_ip(k_v4_mapped_any, c.prefix) == c.address) {
    return true;
  }
  return is_v4_mapped(c.address) ? c.prefix < 96 + 8 : c.prefix < 7;
}

identity_config read_identity(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::strict(r, field,
                            {"api_key_header", "user_header", "trusted_proxies", "unknown_api_key",
                             "ipv6_prefix", "reject_limit", "bearer", "jwt"});
  identity_config id;
  if (auto f = m.get("api_key_header")) {
    id.api_key_header = read_token(r, *f);
    // X-Forwarded-For or X-Real-IP would take a client's key for its address (and drop it on
    // the way upstream); Connection or TE are read by HTTP itself.
    if (is_gateway_field(id.api_key_header) || cgi_same(id.api_key_header, "cookie")) {
      r.fail(*f, "\"" + id.api_key_header +
                     "\": the gateway reads, writes or drops this field for its own purpose, so "
                     "it cannot carry an API key; name a field of your own (X-API-Key)");
    }
    // The user header is dropped from untrusted clients, the API key with it (a user_header
    // of its own is checked against the key below).
    if (!m.get("user_header") && cgi_same(id.api_key_header, id.user_header)) {
      r.fail(*f, "must differ from identity.user_header (\"" + id.user_header +
                     "\", its default), '_' read as '-'");
    }
  }
  if (auto f = m.get("user_header")) {
    id.user_header = read_token(r, *f);
    // In either spelling: the user header is dropped from untrusted clients in both, and the
    // API key with it.
    if (cgi_same(id.user_header, id.api_key_header)) {
      r.fail(*f, "must differ from identity.api_key_header (\"" + id.api_key_header +
                     "\"), '_' read as '-'");
    }
    if (standard_request_field(id.user_header) || is_gateway_field(id.user_header)) {
      r.fail(*f,
             "\"" + id.user_header +
                 (standard_request_field(id.user_header)
                      ? "\" is a standard request field"
                      : "\" is a field the gateway reads, writes or drops for its own purpose") +
                 ": the user header reaches the upstream from trusted proxies alone, so every "
                 "other client's would be dropped; name a field of your own (X-User-ID)");
    }
  }
  if (auto f = m.get("trusted_proxies")) {
    for (const auto& item : read_list(r, *f)) {
      id.trusted_proxies.push_back(read_cidr(r, item));
      if (trusts_too_wide(id.trusted_proxies.back())) {
        r.warn(item,
               "trusts every address, or a block far wider than a set of proxies: a client in it "
               "can name its own address in X-Forwarded-For, and its own user in " +
                   id.user_header +
                   ", and so take a fresh budget with each request; list only your proxies");
      }
    }
  }
  if (auto f = m.get("unknown_api_key")) {
    id.unknown_api_key = read_enum<unknown_key_policy>(r, *f,
                                                       {{"ip", unknown_key_policy::ip},
                                                        {"reject", unknown_key_policy::reject},
                                                        {"allow", unknown_key_policy::allow}});
  }
  if (auto f = m.get("ipv6_prefix")) {
    id.ipv6_prefix = static_cast<unsigned>(read_uint(r, *f, 1, 128));
  }
  if (auto f = m.get("reject_limit")) {
    auto limit = yaml_map::strict(r, *f, {"rate", "burst"});
    if (auto rate = limit.get("rate")) {
      id.reject_rate = read_rate(r, *rate);
    }
    if (auto burst = limit.get("burst")) {
      id.reject_burst = read_uint(r, *burst, 1, 1000000);
    }
  }
  if (auto f = m.get("jwt")) {
    id.jwt = read_jwt(r, *f);
    id.bearer = bearer_use::jwt;
  }
  if (auto f = m.get("bearer")) {
    id.bearer = read_enum<bearer_use>(r, *f,
                                      {{"api_key", bearer_use::api_key},
                                       {"jwt", bearer_use::jwt},
                                       {"ignore", bearer_use::ignore}});
    if (id.bearer == bearer_use::jwt && !id.jwt) {
      r.fail(*f, "bearer: jwt needs identity.jwt (how tokens are verified)");
    }
  }
  return id;
}

redis_config read_redis(const yaml_reader& r, const yaml_field& field) {
  auto m =
      yaml_map::strict(r, field,
                       {"url", "cluster", "seeds", "password_env", "timeout", "connect_timeout",
                        "on_error", "instances", "breaker", "slot_ttl", "denied_cache"});
  redis_config redis;
  unsigned db = 0;
  if (auto f = m.get("url")) {
    redis.url_at = location_of(*f);
    redis.url = read_nonempty_string(r, *f);
    std::string error;
    auto url = redis::parse_redis_url(redis.url, &error);
    if (!url) {
      r.fail(*f, error);
    }
    db = url->db;
  }
  if (auto f = m.get("cluster")) {
    redis.cluster = read_bool(r, *f);
    if (redis.cluster && db != 0) {
      r.fail(*f, "Redis Cluster has only database 0: drop the /" + std::to_string(db) +
                     " from store.redis.url");
    }
  }
  if (auto f = m.get("seeds")) {
    if (!redis.cluster) {
      r.fail(*f, "seeds are for cluster: true (a single server is store.redis.url)");
    }
    for (const auto& item : read_list(r, *f)) {
      endpoint seed = read_endpoint(r, item);
      if (seed.port == 0) {
        r.fail(item, "a seed node needs a port other than 0");
      }
      redis.seeds.push_back(std::move(seed));
    }
  }
  if (auto f = m.get("password_env")) {
    redis.password_env = read_secret_env(r, *f);
    redis.password_env_at = location_of(*f);
  }
  if (auto f = m.get("timeout")) {
    redis.timeout = read_duration(r, *f);
  }
  if (auto f = m.get("connect_timeout")) {
    redis.connect_timeout = read_duration(r, *f);
  }
  if (auto f = m.get("on_error")) {
    redis.on_error = read_store_failure(r, *f);
  }
  if (auto f = m.get("instances")) {
    redis.instances = static_cast<unsigned>(read_uint(r, *f, 1, UINT32_MAX));
  }
  if (auto f = m.get("breaker")) {
    auto b = yaml_map::strict(r, *f, {"failures", "cooldown"});
    if (auto g = b.get("failures")) {
      redis.breaker_failures = static_cast<unsigned>(read_uint(r, *g, 1, 1000000));
    }
    if (auto g = b.get("cooldown")) {
      redis.breaker_cooldown = read_duration(r, *g);
    }
  }
  if (auto f = m.get("slot_ttl")) {
    redis.slot_ttl = read_duration(r, *f);
    if (redis.slot_ttl < std::chrono::seconds(3)) {
      r.fail(*f, "must be at least 3s (units are refreshed every third of it)");
    }
  }
  if (auto f = m.get("denied_cache")) {
    redis.denied_cache = read_bool(r, *f);
  }
  return redis;
}

store_config read_store(const yaml_reader& r, const yaml_field& field) {
  auto m =
      yaml_map::strict(r, field, {"type", "max_keys", "on_full", "redis", "keys_file", "snapshot"});
  store_config store;
  if (auto f = m.get("type")) {
    store.type = read_enum<store_type>(
        r, *f, {{"memory", store_type::memory}, {"redis", store_type::redis}});
    store.type_at = location_of(*f);
  }
  if (auto f = m.get("max_keys")) {
    store.max_keys = read_uint(r, *f, 1);
  }
  if (auto f = m.get("on_full")) {
    store.on_full =
        read_enum<store_full>(r, *f, {{"deny", store_full::deny}, {"allow", store_full::allow}});
  }
  if (auto f = m.get("redis")) {
    store.redis = read_redis(r, *f);
  }
  if (auto f = m.get("keys_file")) {
    if (store.type == store_type::redis) {
      r.fail(*f,
             "the Redis store keeps run-time API keys in Redis (every gateway sees them); "
             "keys_file is for the memory store");
    }
    store.keys_file = read_file_path(r, *f);
    store.keys_file_at = location_of(*f);
  }
  if (auto f = m.get("snapshot")) {
    if (store.type == store_type::redis) {
      r.fail(*f, "the Redis store keeps its state in Redis; snapshot is for the memory store");
    }
    auto snapshot = yaml_map::strict(r, *f, {"path", "interval"});
    auto path = snapshot.get("path");
    if (!path) {
      r.fail(*f, "needs a path (the file the limit state is written to)");
    }
    store.snapshot_path = read_file_path(r, *path);
    store.snapshot_at = location_of(*f);
    if (auto g = snapshot.get("interval")) {
      store.snapshot_interval = read_duration(r, *g);
      if (store.snapshot_interval < std::chrono::seconds(1) ||
          store.snapshot_interval > std::chrono::hours(24)) {
        r.fail(*g, "must be between 1s and 24h");
      }
    }
  }
  return store;
}

// The key of an open mapping (an upstream or plan name) must itself be a valid name.
void check_name_key(const yaml_reader& r, const std::string& name, const yaml_field& value) {
  read_name(r, yaml_field{YAML::Node(name), value.path, value.line});
}

// "host:port" (http), "http://host:port" or "https://host:port", appended to `targets`;
// returns whether it was https.
bool read_target(const yaml_reader& r, const yaml_field& item, std::vector<endpoint>& targets) {
  std::string text = read_string(r, item);
  bool https = false;
  if (auto scheme_end = text.find("://"); scheme_end != std::string::npos) {
    const std::string scheme = text.substr(0, scheme_end);
    if (scheme != "http" && scheme != "https") {
      r.fail(item, "unknown scheme \"" + scheme + "\" (expected http:// or https://)");
    }
    https = scheme == "https";
    text.erase(0, scheme_end + 3);
  }
  if (text.find('/') != std::string::npos) {
    r.fail(item, "expected [http:// or https://]host:port, without a path");
  }
  auto target = parse_endpoint(text);
  if (!target) {
    r.fail(item, target.error());
  }
  if (target->port == 0) {
    r.fail(item, "an upstream target needs a port other than 0");
  }
  targets.push_back(std::move(*target));
  return https;
}

// The target as a Host field writes it: to_string's "host:port" (an IPv6 address in brackets),
// the port left out when it is the scheme's default.
std::string authority_of(const endpoint& target, bool https) {
  std::string out = to_string(target);
  if (target.port == (https ? 443 : 80)) {
    out.resize(out.rfind(':'));
  }
  return out;
}

std::vector<upstream_config> read_upstreams(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::open(r, field);
  if (m.entries().empty()) {
    r.fail(field, "declare at least one upstream");
  }
  std::vector<upstream_config> upstreams;
  for (const auto& [name, value] : m.entries()) {
    check_name_key(r, name, value);
    auto um = yaml_map::strict(r, value,
                               {"targets", "connect_timeout", "response_timeout", "read_timeout",
                                "max_idle", "max_connections", "queue_timeout", "tls"});
    upstream_config u;
    u.name = name;
    auto targets = um.require("targets");
    for (const auto& item : read_list(r, targets)) {
      const bool https = read_target(r, item, u.targets);
      u.targets_at.push_back(location_of(item));
      if (u.targets.size() > 1 && https != u.https) {
        r.fail(item, std::string("all targets of an upstream use one scheme (targets[0] is ") +
                         (u.https ? "https://" : "http://") + ")");
      }
      u.https = https;
    }
    if (u.targets.empty()) {
      r.fail(targets, "expected at least one target");
    }
    u.tls.at = config_location{value.line, value.path};
    if (auto f = um.get("tls")) {
      u.tls = read_upstream_tls(r, *f, u.https);
    }
    u.default_host =
        u.tls.server_name.empty() ? authority_of(u.targets.front(), u.https) : u.tls.server_name;
    if (auto f = um.get("connect_timeout")) {
      u.connect_timeout = read_duration(r, *f);
    }
    if (auto f = um.get("response_timeout")) {
      u.response_timeout = read_duration(r, *f);
    }
    if (auto f = um.get("read_timeout")) {
      u.read_timeout = read_duration(r, *f);
    }
    if (auto f = um.get("max_idle")) {
      // 0 is meaningful: no keep-alive towards this upstream.
      u.max_idle = static_cast<unsigned>(read_uint(r, *f, 0, UINT32_MAX));
    }
    if (auto f = um.get("max_connections")) {
      u.max_connections = read_uint(r, *f, 0, UINT32_MAX);
    }
    if (auto f = um.get("queue_timeout")) {
      // 0s is meaningful: no wait, a 503 at once.
      u.queue_timeout = read_duration(r, *f, true);
    }
    upstreams.push_back(std::move(u));
  }
  return upstreams;
}

std::vector<std::string> read_plans(const yaml_reader& r, const yaml_field& field) {
  std::vector<std::string> plans;
  yaml_map map = yaml_map::open(r, field);
  for (const auto& [name, value] : map.entries()) {
    check_name_key(r, name, value);
    // Plans carry no settings yet: their limits live in routes[].limits[].plans.
    auto settings = yaml_map::open(r, value);
    if (!settings.entries().empty()) {
      const auto& [key, first] = settings.entries().front();
      r.fail(first.line, first.path,
             "unknown key (a plan takes no settings yet; write \"" + name +
                 ": {}\" and set its limits under routes[].limits[].plans)");
    }
    plans.push_back(name);
  }
  return plans;
}

std::vector<api_key_config> read_api_keys(const yaml_reader& r, const yaml_field& field,
                                          const std::vector<std::string>& plans) {
  std::vector<api_key_config> keys;
  std::map<std::array<std::uint8_t, 32>, std::size_t> seen;  // a seed set may be large
  for (const auto& item : read_list(r, field)) {
    auto m = yaml_map::strict(r, item, {"key", "key_sha256", "plan", "name"});
    auto raw = m.get("key");
    auto hashed = m.get("key_sha256");
    if (raw && hashed) {
      r.fail(*hashed, "set either key or key_sha256, not both");
    }
    if (!raw && !hashed) {
      r.fail(item, "expected one of key (the raw key) or key_sha256 (its SHA-256 in hex)");
    }
    api_key_config key;
    if (raw) {
      key.sha256 = sha256(read_nonempty_string(r, *raw));
    } else {
      auto digest = sha256_from_hex(read_string(r, *hashed));
      if (!digest) {
        r.fail(*hashed, "expected 64 hex digits (the SHA-256 of the key)");
      }
      key.sha256 = *digest;
    }
    auto plan = m.require("plan");
    key.plan = read_name(r, plan);
    check_plan(r, plan, key.plan, plans);
    if (auto f = m.get("name")) {
      key.name = read_string(r, *f);
      if (std::string problem = key_name_problem(key.name); !problem.empty()) {
        r.fail(*f, problem);
      }
    }
    if (auto [it, added] = seen.try_emplace(key.sha256, keys.size()); !added) {
      r.fail(item, "the same key as api_keys[" + std::to_string(it->second) + "]");
    }
    keys.push_back(std::move(key));
  }
  return keys;
}

std::string_view line_text(std::string_view text, int line) {
  for (int i = 1; i < line; ++i) {
    auto newline = text.find('\n');
    if (newline == std::string_view::npos) {
      return {};
    }
    text.remove_prefix(newline + 1);
  }
  return text.substr(0, text.find('\n'));
}

YAML::Node load_document(const yaml_reader& r, std::string_view yaml_text) {
  std::vector<YAML::Node> documents;
  try {
    documents = YAML::LoadAll(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    int line = e.mark.is_null() ? 0 : e.mark.line + 1;
    std::string message = "invalid YAML: " + e.msg;
    // The one syntax error the reference file invites: unquoted [::]:8080 starts a list.
    static const std::regex k_bare_ipv6(R"(:\s*\[[0-9A-Fa-f:.]*\]:[0-9])");
    if (line > 0 && std::regex_search(std::string(line_text(yaml_text, line)), k_bare_ipv6)) {
      message += R"( (quote IPv6 endpoints: "[::]:8080"))";
    }
    r.fail(line, "", message);
  }
  if (documents.empty()) {
    r.fail(1, "", "the file is empty (expected a mapping with at least upstreams and routes)");
  }
  if (documents.size() > 1) {
    r.fail(documents[1].Mark().line + 1, "", "expected one YAML document, found more");
  }
  return documents.front();
}

}  // namespace

void check_plan(const yaml_reader& r, const yaml_field& field, const std::string& plan,
                const std::vector<std::string>& plans) {
  if (std::find(plans.begin(), plans.end(), plan) != plans.end()) {
    return;
  }
  std::string declared = plans.empty() ? "none" : join_names(plans);
  r.fail(field, "unknown plan \"" + plan + "\" (declared under plans: " + declared + ")");
}

store_failure read_store_failure(const yaml_reader& r, const yaml_field& field) {
  return read_enum(r, field, {store_failure::allow, store_failure::deny, store_failure::local});
}

config_error::config_error(std::string file, int line, std::string key_path, std::string message)
    : std::runtime_error(format_what(file, line, key_path, message)),
      file_(std::move(file)),
      line_(line),
      key_path_(std::move(key_path)),
      message_(std::move(message)) {}

config parse_config(std::string_view yaml_text, const std::string& source_name) {
  yaml_reader r(source_name);
  YAML::Node root = load_document(r, yaml_text);
  yaml_field root_field{root, "", root.Mark().is_null() ? 1 : root.Mark().line + 1};
  if (!root.IsMap()) {
    r.fail(root_field,
           "expected a mapping with the sections server, admin, identity, store, "
           "upstreams, plans, api_keys and routes");
  }
  auto top = yaml_map::strict(r, root_field,
                              {"server", "admin", "identity", "store", "log", "headers",
                               "upstreams", "plans", "api_keys", "routes"});
  config c;
  c.source = source_name;
  // Sections are read in dependency order, whatever their order in the file: routes refer to
  // upstreams and plans, api_keys to plans.
  if (auto f = top.get("server")) {
    c.server = read_server(r, *f);
  }
  c.server.threads = resolve_threads(c.server.threads);
  if (auto f = top.get("admin")) {
    c.admin = read_admin(r, *f, c.server);
  } else {
    check_admin_port(r, c.server, c.admin.listen, 0, "admin.listen");
  }
  if (auto f = top.get("identity")) {
    c.identity = read_identity(r, *f);
  }
  if (auto f = top.get("store")) {
    c.store = read_store(r, *f);
  }
  if (auto f = top.get("log")) {
    c.log = read_log(r, *f);
  }
  // Before routes: a route's `headers:` overrides these key by key.
  if (auto f = top.get("headers")) {
    c.headers = read_headers(r, *f, c.headers);
  }
  if (auto f = top.get("plans")) {
    c.plans = read_plans(r, *f);
  }
  if (auto f = top.get("api_keys")) {
    c.api_keys = read_api_keys(r, *f, c.plans);
  }
  c.upstreams = read_upstreams(r, top.require("upstreams"));
  c.routes = read_routes(r, top.require("routes"), c);
  c.warnings = r.warnings();
  for (const route_config& route : c.routes) {
    for (const identity_descriptor& d : route.identify_by) {
      for (const identity_part& part : d.parts) {
        const std::string field = part.source == identity_source::header   ? part.name
                                  : part.source == identity_source::cookie ? "cookie"
                                                                           : "";
        auto& fields = c.identity.descriptor_fields;
        if (!field.empty() && std::find(fields.begin(), fields.end(), field) == fields.end()) {
          fields.push_back(field);
        }
      }
    }
  }
  return c;
}

std::string resolve_config_path(const std::string& path, const std::string& config_file) {
  const std::filesystem::path p(path);
  if (p.is_absolute()) {
    return path;
  }
  return (std::filesystem::path(config_file).parent_path() / p).string();
}

config load_config_file(const std::string& path) {
  constexpr std::size_t k_max_config_bytes = 64 * 1024 * 1024;
  const file_text file = read_regular_file(path, k_max_config_bytes);
  if (!file.error.empty()) {
    throw config_error(path, 0, "", "cannot read file: " + file.error);
  }
  if (file.text.size() > k_max_config_bytes) {
    throw config_error(path, 0, "", "larger than 64MiB: not a configuration");
  }
  return parse_config(file.text, path);
}

}  // namespace ratewall
