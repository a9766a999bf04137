#pragma once

// Private to the loader: the readers of the sections that are long enough for their own file.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/config/config.hpp"
#include "yaml_reader.hpp"

namespace ratewall {

/// allow | deny | local (store.redis.on_error, and on_store_error of a limit).
store_failure read_store_failure(const yaml_reader& reader, const yaml_field& field);

/// Fails unless `plan` (the value of `field`) is one of the declared `plans`.
void check_plan(const yaml_reader& reader, const yaml_field& field, const std::string& plan,
                const std::vector<std::string>& plans);

/// `log:`.
log_config read_log(const yaml_reader& reader, const yaml_field& field);

/// `headers:`; keys left out keep their value in `defaults` (the top level's, for a route).
header_options read_headers(const yaml_reader& reader, const yaml_field& field,
                            const header_options& defaults);

/// `routes[].deny`. On a `grpc` route a body or content_type is refused: gRPC calls are denied
/// Trailers-Only, which has no body.
deny_config read_deny(const yaml_reader& reader, const yaml_field& field, bool grpc);

/// Reads `routes:`. Needs the upstreams and plans of `declared` already read, to check the
/// names that routes and limits refer to.
std::vector<route_config> read_routes(const yaml_reader& reader, const yaml_field& field,
                                      const config& declared);

/// A field the gateway writes itself, drops or turns into its own before the upstream sees it
/// (hop-by-hop fields, Host, its framing, X-Forwarded-*, a client's claims about its address:
/// core/field_roles.hpp), in either spelling ('_' for '-', as a client's field is read): a
/// client could send anything in it and the upstream could not check it.
bool is_gateway_field(std::string_view name);

/// `identity.jwt`.
jwt_config read_jwt(const yaml_reader& reader, const yaml_field& field);

/// The name of an environment variable that holds a secret (admin.token_env,
/// store.redis.password_env, identity.jwt.hs256_secret_env): a valid name, and not
/// RATEWALL_HASH_KEY, whose secret must not double as another.
std::string read_secret_env(const yaml_reader& reader, const yaml_field& field);

/// Whether two listeners would take the same port on one address: the same non-zero port, on
/// the same address (not spelling: [::1] is [0:0::1], 127.0.0.1 is [::ffff:127.0.0.1]) or where
/// one is a wildcard that takes the other's address ([::] every address, 0.0.0.0 every IPv4
/// one) or a name (localhost), which may be any address.
bool listeners_overlap(const endpoint& a, const endpoint& b);

/// `server.tls`. `plain_listen`: the plain listener's address, which the TLS one must differ
/// from (unset: `listen: off`).
server_tls_config read_server_tls(const yaml_reader& reader, const yaml_field& field,
                                  const std::optional<endpoint>& plain_listen);

/// `upstreams.<name>.tls`; `https`: the upstream's targets are https:// (else the key is an
/// error).
upstream_tls_config read_upstream_tls(const yaml_reader& reader, const yaml_field& field,
                                      bool https);

}  // namespace ratewall
