#pragma once

// The whole configuration as plain structs. Built and validated once by the loader
// (loader.hpp); everything downstream may assume the invariants documented here.

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/core/clock.hpp"
#include "ratewall/core/log.hpp"

namespace ratewall {

/// host:port. IPv6 hosts are stored without brackets ("::", "::1").
struct endpoint {
  std::string host;
  std::uint16_t port = 0;
};

/// An address range: 16 bytes (IPv4 as v4-mapped IPv6, ::ffff:a.b.c.d) and a prefix length
/// counted on those 128 bits (an IPv4 /8 is stored as /104).
struct cidr {
  std::array<std::uint8_t, 16> address{};
  unsigned prefix = 0;
};

/// "10/s", "1000/h", "5/60s": `count` events per `period`.
struct rate_spec {
  std::uint64_t count = 0;
  nanos period{0};
};

enum class algorithm {
  token_bucket,  // GCRA
  leaky_bucket,
  fixed_window,
  sliding_window_log,
  sliding_window_counter,
  concurrency,
};

/// What a limit answers when its store (Redis) fails.
enum class store_failure { allow, deny, local };

/// What names a client (DESIGN §5, §5b). api_key, user and ip read what identity: configures;
/// the others read the field, query parameter, cookie, path segment or verified token claim
/// their `name` says.
enum class identity_source { api_key, user, ip, header, query, cookie, path, jwt };

/// One source of an `identify_by` entry: "api_key", "user", "ip", "header:X-Tenant",
/// "query:tenant", "cookie:session", "path:tenant" (a `{tenant}` of match.path_template),
/// "jwt:sub" (a claim of the verified bearer token, identity.jwt).
struct identity_part {
  identity_source source = identity_source::ip;
  std::string name;         // header: lower case; query, cookie, path, jwt: as written; else empty
  std::size_t segment = 0;  // path: which segment of the path holds it (0 = the first)
  bool operator==(const identity_part&) const = default;
};

/// An entry of `identify_by`: one source, or a composite (a list in the list) that names one
/// client from all of its parts and is present only when every part is.
struct identity_descriptor {
  std::vector<identity_part> parts;
  bool operator==(const identity_descriptor&) const = default;
};

/// A descriptor of one source without a name: api_key, user or ip.
inline identity_descriptor single_source(identity_source s) {
  return identity_descriptor{{identity_part{s, {}, 0}}};
}

/// The word the config file uses for each value ("token_bucket", "deny", "api_key"); the loader
/// parses exactly these, and the admin API and logs print them.
std::string_view to_string(algorithm a);
std::string_view to_string(store_failure f);
std::string_view to_string(identity_source s);
/// "127.0.0.1:8000", "[::1]:8000".
std::string to_string(const endpoint& e);
/// "api_key", "header:x-tenant", "header:x-tenant+ip": how logs, subjects and the admin API
/// name a descriptor.
std::string to_string(const identity_descriptor& d);

/// What happens to an API key that is not declared under `api_keys`.
enum class unknown_key_policy {
  ip,      // ignored: the client is identified by the next sources (user, ip)
  reject,  // 401 from the gateway
  allow,   // the key is its own subject, with the default plan
};

/// Per-plan values that replace the limit's own. Unset fields keep the limit's value.
struct limit_override {
  std::optional<rate_spec> rate;
  std::optional<std::uint64_t> burst;
  std::optional<std::uint64_t> limit;
  std::optional<nanos> window;
};

/// One limit of a route. Which fields are meaningful depends on `algo`:
///   token_bucket, leaky_bucket: rate (required), burst (default: rate.count for token_bucket,
///                               0 for leaky_bucket), delay (leaky_bucket only)
///   fixed_window, sliding_window_log, sliding_window_counter: limit and window (required)
///   concurrency: limit (required)
struct limit_config {
  std::string name;
  algorithm algo = algorithm::token_bucket;
  rate_spec rate;
  std::uint64_t burst = 0;
  std::uint64_t limit = 0;
  nanos window{0};
  bool delay = false;
  std::map<std::string, limit_override> plans;  // key: a name declared under `plans`
  std::optional<store_failure> on_store_error;  // unset: store.redis.on_error
  bool shadow = false;
};

/// How a route matches a request. Exactly one of the path fields is set (default:
/// path_prefix "/"). Empty `methods` matches every method; `host` empty matches any host.
struct route_match {
  std::string path_exact;
  std::string path_prefix;
  std::string path_regex;            // ECMAScript, matched against the whole path (without query)
  std::vector<std::string> methods;  // upper case; GET also matches HEAD
  std::string host;                  // compared case-insensitively, without port
  // "/tenants/{tenant}/items": the path has exactly these segments, each {name} any one
  // non-empty segment (path: descriptors read it). Literal segments are canonical.
  std::string path_template;
  std::optional<bool> case_insensitive;  // unset: server.paths.case_insensitive
};

/// How the rate-limit headers are written (DESIGN §6). The top-level `headers:` sets them for
/// every route; `routes[].headers` overrides them key by key.
struct header_options {
  bool enabled = true;       // false: no X-RateLimit-* / RateLimit* (Retry-After stays on 429)
  bool reset_epoch = false;  // X-RateLimit-Reset as Unix seconds instead of seconds from now
  bool ietf_draft = false;   // add RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit)
};

/// The answer to a request a limit denied (`routes[].deny`).
struct deny_config {
  unsigned status = 429;            // 400..599
  std::optional<std::string> body;  // unset: the JSON problem body (render_problem_body)
  // Resolved by the loader: application/problem+json for the problem body, text/plain;
  // charset=utf-8 for a custom body, unless set. Never contains CR or LF.
  std::string content_type = "application/problem+json";
};

/// `routes[].cost_from_response`: the cost of a request is what its upstream reports in the
/// response (LLM tokens, rows, bytes), charged when the response ends. Admission only asks
/// that the subject have room left (a 1-unit request would pass) and charges nothing.
struct cost_from_response_config {
  enum class source { header, json };
  source from = source::header;
  std::string header;              // source::header: a field of the final response head
  std::vector<std::string> json;   // source::json: the path, "usage.total_tokens" split at '.'
  std::uint64_t default_cost = 1;  // charged when the response reports no usable value
  std::uint64_t max = 1000000;     // reported values are clamped to this
  std::uint64_t max_body = 1024 * 1024;  // source::json: larger bodies are not read
};

/// The bounds of cost_from_response: `max` and `default` at most k_max_response_cost (the
/// Redis script counts exactly below 2^49), a JSON path at most k_max_json_path_depth keys.
inline constexpr std::uint64_t k_max_response_cost = 1'000'000'000'000;
inline constexpr std::size_t k_max_json_path_depth = 16;
inline constexpr std::uint64_t k_max_cost_body_bytes = 16 * 1024 * 1024;

/// `routes[].adaptive` (issue 17): the route's limits tighten while its upstream struggles and
/// relax when it recovers. Every `window` the gateway compares what the route's upstream
/// exchanges showed with the targets (at least one is set) and moves a factor in
/// [min_factor, 1] by which every limit of the route is applied (limit/adaptive.hpp).
struct adaptive_config {
  nanos latency_target{0};                  // mean time to the response head; 0: not watched
  std::optional<double> error_rate_target;  // (5xx + 502 + 504) / exchanges, in [0, 1)
  double min_factor = 0.1;                  // in (0, 1]
  nanos window = std::chrono::seconds(5);
};

/// The bounds of adaptive.window.
inline constexpr nanos k_min_adaptive_window = std::chrono::seconds(1);
inline constexpr nanos k_max_adaptive_window = std::chrono::minutes(10);

struct route_config {
  std::string name;
  route_match match;
  std::string upstream;  // names an entry of config::upstreams
  std::vector<identity_descriptor> identify_by{single_source(identity_source::api_key),
                                               single_source(identity_source::user),
                                               single_source(identity_source::ip)};
  std::uint64_t cost = 1;                            // cost of a request on this route
  std::map<std::string, std::uint64_t> method_cost;  // per method (upper case), overrides cost
  std::vector<limit_config> limits;
  bool shadow = false;     // every limit of the route is computed but never enforced
  header_options headers;  // resolved: the top-level `headers:` with this route's overrides
  deny_config deny;
  // The request body is read whole (up to server.request_buffer_bytes) before an upstream
  // connection is taken, so a slow client holds none; larger bodies and false: streamed.
  // The loader makes false the default on a grpc route, where true is refused.
  bool request_buffering = true;
  // Answers to gRPC calls take gRPC's form (grpc-status in trailers); bodies stream.
  bool grpc = false;
  std::optional<cost_from_response_config> cost_from_response;  // unset: cost / method_cost
  std::optional<adaptive_config> adaptive;                      // unset: limits as configured
};

/// How a request path is made canonical before it is routed and forwarded (DESIGN §5a). Dot
/// segments are always removed and percent-encoded unreserved characters always decoded.
struct path_options {
  enum class escaped_slash { reject, keep, decode };  // %2F and %5C
  enum class backslash { reject, keep };
  enum class semicolon { keep, strip_params, reject };

  bool merge_slashes = true;
  escaped_slash escaped_slashes = escaped_slash::reject;
  backslash backslashes = backslash::reject;
  semicolon semicolons = semicolon::keep;
  bool case_insensitive = false;  // routes compare paths without case (the path is not changed)
};

/// Where a value was written, for errors found after loading (a certificate that does not load):
/// they name the same line and key path a loader error would.
struct config_location {
  int line = 0;
  std::string key_path;
};

enum class tls_version { v1_2, v1_3 };

/// "1.2", "1.3": the words of server.tls.min_version.
std::string_view to_string(tls_version v);

/// One certificate of the TLS listener. Paths are as written; a relative one is relative to the
/// directory of the config file (resolve_config_path in loader.hpp).
struct tls_certificate_files {
  std::string cert;  // PEM chain, leaf first
  std::string key;   // PEM private key, unencrypted
  config_location cert_at;
  config_location key_at;
};

/// `server.tls`: the TLS listener.
struct server_tls_config {
  endpoint listen{"0.0.0.0", 8443};
  // At least one. The first is the default: for clients without SNI, or whose name no
  // certificate has.
  std::vector<tls_certificate_files> certificates;
  tls_version min_version = tls_version::v1_2;
};

/// `server.http2` (DESIGN §12): HTTP/2 to clients, by ALPN h2 on the TLS listener and by prior
/// knowledge (h2c) on plain ones. Sizes fit the 32 bits of an HTTP/2 setting; the loader keeps
/// each within its bounds. A reload's values apply to new connections.
struct http2_config {
  bool enabled = false;                        // off unless asked for
  std::uint32_t max_concurrent_streams = 100;  // SETTINGS_MAX_CONCURRENT_STREAMS, 1..1000
  // Request body bytes in flight per stream (SETTINGS_INITIAL_WINDOW_SIZE) and on the whole
  // connection (at least initial_window); each 16KiB .. 2GiB - 1.
  std::uint32_t initial_window = 64 * 1024;
  std::uint32_t connection_window = 1024 * 1024;
  // RST_STREAM frames either way, per connection and second, with a burst of as many: the
  // rapid-reset attack (CVE-2023-44487).
  std::uint32_t max_resets_per_second = 100;
  std::uint32_t header_table_size = 4096;  // HPACK decoder table (SETTINGS_HEADER_TABLE_SIZE)
  nanos settings_timeout = std::chrono::seconds(10);  // for our SETTINGS to be acknowledged
};

struct server_config {
  endpoint listen{"0.0.0.0", 8080};
  bool plain_listener = true;  // false: `listen: off`, only the TLS listener (tls is set)
  unsigned threads = 0;        // resolved by the loader: 0 becomes the hardware thread count
  std::size_t max_header_bytes = 16384;
  std::uint64_t max_body_bytes = 10 * 1024 * 1024;
  nanos header_timeout = std::chrono::seconds(10);
  nanos body_timeout = std::chrono::seconds(60);  // whole request body, once the head is in
  nanos idle_timeout = std::chrono::seconds(60);
  nanos drain_timeout = std::chrono::seconds(10);
  path_options paths;
  std::uint64_t max_connections = 0;             // 0: derived from the descriptor limit
  std::uint64_t max_connections_per_client = 0;  // per client address; 0: no limit
  // Bodies up to this size are read whole before forwarding (routes[].request_buffering);
  // 0: every body streams.
  std::uint64_t request_buffer_bytes = 1024 * 1024;
  // An upgraded connection (WebSocket) with no bytes either way for this long is closed.
  nanos tunnel_idle_timeout = std::chrono::hours(1);
  std::optional<server_tls_config> tls;  // unset: no TLS listener
  http2_config http2;
};

enum class access_log_sink { off, stdout_stream, stderr_stream, file };
/// How the access log shows the client's address: as it is, as a keyed hash, or not at all.
enum class client_address_log { raw, hashed, off };
std::string_view to_string(client_address_log c);

struct log_config {
  access_log_sink access = access_log_sink::off;
  // access_log_sink::file: as written; a relative path is relative to the configuration
  // file's directory, as every other path in it.
  std::string access_path;
  config_location access_at;          // log.access
  log_level level = log_level::info;  // of the error log (stderr)
  client_address_log client_address = client_address_log::hashed;
};

struct admin_config {
  bool enabled = true;  // false: no admin listener at all
  endpoint listen{"127.0.0.1", 9090};
  // Where to listen instead when the token is not set, a loopback address (a container's image
  // listens on every interface only once it has a token); unset: such a start is refused.
  std::optional<endpoint> listen_without_token;
  std::string token_env = "RATEWALL_ADMIN_TOKEN";
  config_location listen_at;     // admin.listen, or the admin mapping (line 0 without either)
  config_location token_env_at;  // admin.token_env, else as listen_at
  // Host values accepted besides loopback addresses and localhost (DNS rebinding), lower case,
  // without port.
  std::vector<std::string> allowed_hosts;
  nanos header_timeout = std::chrono::seconds(5);  // a request head, and each idle gap
  std::uint64_t max_connections = 64;              // the oldest idle one is closed for a new one
  // /admin/top counts each subject's denials over this long (1s .. 24h).
  nanos top_window = std::chrono::minutes(10);
};

/// What `Authorization: Bearer <token>` is (identity.bearer).
enum class bearer_use {
  api_key,  // an API key, like the api_key header (the default without identity.jwt)
  jwt,      // a JSON Web Token, verified by identity.jwt (the default with it)
  ignore,   // neither: the field is passed on and names no one
};

/// The signature algorithms identity.jwt accepts ("alg" of a token's header).
enum class jwt_algorithm { hs256, rs256, es256 };

/// What a bearer token that does not verify (signature, expiry, issuer, audience) leads to.
enum class invalid_token_policy {
  reject,  // 401 with a problem body (and reject_limit counts it)
  ip,      // as if no token had been sent: the next source of identify_by
};

/// identity.jwt: how bearer tokens are verified (DESIGN §5b). The keys themselves (the secret
/// from its environment variable, the JWKS file) are loaded by the http module at start, at
/// each reload and by `ratewall check`, which name `at`'s line and key on an error.
struct jwt_config {
  std::vector<jwt_algorithm> algorithms;  // accepted; a token with any other "alg" is invalid
  // `algorithms` not written: RS256 and ES256 as the JWKS file's keys allow (HS256 is listed
  // when the secret is set).
  bool algorithms_from_keys = false;
  std::string jwks_file;                    // RS256, ES256 keys; relative to the config's directory
  std::string hs256_secret_env;             // HS256: the secret is this variable's value
  std::string issuer;                       // "iss" must equal it; "" = not checked
  std::vector<std::string> audience;        // "aud" must hold one of them; empty = not checked
  nanos leeway = std::chrono::seconds(30);  // allowed clock skew for exp and nbf
  bool require_exp = true;                  // a token without "exp" is invalid
  std::string plan_claim;                   // a string claim naming the client's plan; "" = none
  invalid_token_policy on_invalid = invalid_token_policy::reject;
  config_location at;         // identity.jwt
  config_location jwks_at;    // identity.jwt.jwks_file
  config_location secret_at;  // identity.jwt.hs256_secret_env
};

/// "api_key", "jwt", "ignore"; "HS256", "RS256", "ES256"; "reject", "ip".
std::string_view to_string(bearer_use b);
std::string_view to_string(jwt_algorithm a);
std::string_view to_string(invalid_token_policy p);

struct identity_config {
  std::string api_key_header = "X-API-Key";
  std::string user_header = "X-User-ID";
  std::vector<cidr> trusted_proxies;
  unknown_key_policy unknown_api_key = unknown_key_policy::ip;
  unsigned ipv6_prefix = 64;  // IPv6 clients are grouped by this prefix (128: one per address)
  // unknown_api_key: reject: 401s per client address, a token bucket (reject_limit).
  rate_spec reject_rate{10, std::chrono::seconds(1)};
  std::uint64_t reject_burst = 20;
  bearer_use bearer = bearer_use::api_key;  // the loader makes jwt the default with `jwt`
  std::optional<jwt_config> jwt;
  // Set by the loader: the fields that routes' header: and cookie: descriptors read (lower
  // case, "cookie" for cookie:). A request whose Connection names one is refused, as for the
  // API key header: the field would be dropped before the upstream could check it.
  std::vector<std::string> descriptor_fields;
};

struct redis_config {
  // redis://[[user]:password@]host[:port][/db]; validated by the loader (redis/url.hpp).
  std::string url = "redis://127.0.0.1:6379/0";
  config_location url_at;
  bool cluster = false;
  std::vector<endpoint> seeds;  // cluster: more nodes to learn the slot map from (after url's)
  // The password from this environment variable (it wins over one in the URL), so that it need
  // not sit in the file. Empty: none.
  std::string password_env;
  config_location password_env_at;
  nanos timeout = std::chrono::milliseconds(5);  // a whole limit check, redirects included
  nanos connect_timeout = std::chrono::seconds(1);
  store_failure on_error = store_failure::allow;
  unsigned instances = 1;         // gateways sharing the store, for on_error: local
  unsigned breaker_failures = 5;  // consecutive failures that open a breaker
  nanos breaker_cooldown = std::chrono::seconds(1);  // open this long before a probe
  // A concurrency unit lapses this long after it was last refreshed; live requests refresh
  // theirs every third of it, so only a gateway that died leaves units behind, for this long.
  nanos slot_ttl = std::chrono::seconds(30);
  bool denied_cache = true;  // answer a denied subject locally until its retry time
};

enum class store_type { memory, redis };

/// What a memory store at max_keys answers a new subject when no entry can be evicted safely.
enum class store_full { deny, allow };

struct store_config {
  store_type type = store_type::memory;
  config_location type_at;  // store.type (line 0 when not written)
  std::uint64_t max_keys = 1000000;
  store_full on_full = store_full::deny;  // deny: 503 with Retry-After; allow: not recorded
  redis_config redis;
  // Where the API keys changed at run time (/admin/keys) are kept with the memory store, relative
  // to the configuration file; "" = "<config file without .yaml/.yml>.keys.jsonl" beside it. With
  // the Redis store they are kept in Redis and this must stay unset.
  std::string keys_file;
  config_location keys_file_at;
  // store.snapshot (memory store): the limit state is written to `snapshot_path` every
  // `snapshot_interval` and at shutdown, and read back at start (limit/snapshot.hpp). Relative
  // to the configuration file; "" = off.
  std::string snapshot_path;
  nanos snapshot_interval = std::chrono::seconds(10);
  config_location snapshot_at;
};

/// `upstreams.<name>.tls`, for an upstream with https:// targets. Paths as in
/// tls_certificate_files.
struct upstream_tls_config {
  bool verify = true;   // the upstream's certificate chain and name
  std::string ca_file;  // PEM CA certificates to verify with; empty: the system's default paths
  // The name sent as SNI and verified against the certificate; empty: the target's host (an IP
  // literal is sent no SNI and is verified against the certificate's IP addresses).
  std::string server_name;
  std::string
      client_cert;  // PEM chain presented to the upstream; set with client_key or not at all
  std::string client_key;
  config_location at;  // of the `tls` mapping (the upstream's line when it has none)
  config_location ca_file_at;
  config_location client_cert_at;
  config_location client_key_at;
};

struct upstream_config {
  std::string name;
  std::vector<endpoint> targets;            // at least one
  std::vector<config_location> targets_at;  // where each was written, for errors found later
  bool https = false;  // the targets were written https://host:port (all alike)
  // The Host sent with a request that named none (HTTP/1.0 allows it, HTTP/1.1 to an upstream
  // does not): tls.server_name if set, else targets[0]'s authority, its port left out when the
  // scheme's own (nginx sends $proxy_host).
  std::string default_host;
  upstream_tls_config tls;  // meaningful when https
  nanos connect_timeout = std::chrono::seconds(1);
  nanos response_timeout = std::chrono::seconds(30);  // until the response head
  nanos read_timeout = std::chrono::seconds(60);      // each gap while relaying a body
  unsigned max_idle = 64;  // idle keep-alive connections kept per target and thread
  // Connections open at once to this upstream, per process (all threads); 0: no bound. A request
  // that finds none free waits up to queue_timeout, then gets a 503.
  std::uint64_t max_connections = 0;
  nanos queue_timeout = std::chrono::seconds(1);
};

/// A declared API key. Raw keys from the file are hashed at load and never kept.
struct api_key_config {
  std::array<std::uint8_t, 32> sha256{};
  std::string plan;  // names an entry of config::plans
  std::string name;  // shown instead of the subject by the admin API and the access log; "" = none
};

/// Why an API key's name cannot be used, or "" when it can: 1 to 64 printable ASCII
/// characters, no quote or backslash (names go into logs and JSON as they are).
std::string key_name_problem(std::string_view name);

struct config {
  std::string source;  // the file it was loaded from, for messages
  // Valid, but most likely not what was meant (a path_regex anchored at one end only, a
  // trusted_proxies entry that trusts every address), each naming file, line and key: printed
  // by `ratewall check`, logged at start and at each reload.
  std::vector<std::string> warnings;
  server_config server;
  admin_config admin;
  identity_config identity;
  store_config store;
  log_config log;
  header_options headers;                  // the defaults; each route holds its resolved copy
  std::vector<upstream_config> upstreams;  // in file order; names unique
  std::vector<std::string> plans;          // declared plan names
  std::vector<api_key_config> api_keys;
  std::vector<route_config> routes;  // in file order: the first that matches wins

  const upstream_config* find_upstream(const std::string& name) const {
    for (const auto& u : upstreams) {
      if (u.name == name) {
        return &u;
      }
    }
    return nullptr;
  }
};

}  // namespace ratewall
