// `identity.jwt`: how bearer tokens are verified. Only the shape is checked here; the secret
// and the JWKS file are read by the http module (http/jwt.hpp) at start, at each reload and by
// `ratewall check`, which names the same line and key on an error.

#include <algorithm>

#include "sections.hpp"

namespace ratewall {

jwt_config read_jwt(const yaml_reader& r, const yaml_field& field) {
  auto m = yaml_map::strict(r, field,
                            {"algorithms", "jwks_file", "hs256_secret_env", "issuer", "audience",
                             "leeway", "require_exp", "plan_claim", "on_invalid"});
  jwt_config jwt;
  jwt.at = location_of(field);
  if (auto f = m.get("jwks_file")) {
    jwt.jwks_file = read_file_path(r, *f);
    jwt.jwks_at = location_of(*f);
  }
  if (auto f = m.get("hs256_secret_env")) {
    jwt.hs256_secret_env = read_secret_env(r, *f);
    jwt.secret_at = location_of(*f);
  }
  if (auto f = m.get("algorithms")) {
    const auto items = read_list(r, *f);
    if (items.empty()) {
      r.fail(*f, "expected at least one of: HS256, RS256, ES256");
    }
    for (const auto& item : items) {
      const jwt_algorithm a = read_enum<jwt_algorithm>(r, item,
                                                       {{"HS256", jwt_algorithm::hs256},
                                                        {"RS256", jwt_algorithm::rs256},
                                                        {"ES256", jwt_algorithm::es256}});
      if (std::find(jwt.algorithms.begin(), jwt.algorithms.end(), a) != jwt.algorithms.end()) {
        r.fail(item, "listed twice");
      }
      // A key is bound to its algorithm: HS256 takes the secret, the others the JWKS file. An
      // HS256 token can never be checked with a public key taken as its secret.
      if (a == jwt_algorithm::hs256 && jwt.hs256_secret_env.empty()) {
        r.fail(item, "HS256 needs identity.jwt.hs256_secret_env (the variable holding the secret)");
      }
      if (a != jwt_algorithm::hs256 && jwt.jwks_file.empty()) {
        r.fail(item, std::string(to_string(a)) + " needs identity.jwt.jwks_file (the public keys)");
      }
      jwt.algorithms.push_back(a);
    }
  } else {
    // What the keys given allow (the JWKS file's are known once it is read).
    if (!jwt.hs256_secret_env.empty()) {
      jwt.algorithms.push_back(jwt_algorithm::hs256);
    }
    jwt.algorithms_from_keys = !jwt.jwks_file.empty();
    if (jwt.algorithms.empty() && !jwt.algorithms_from_keys) {
      r.fail(field, "needs jwks_file (RS256, ES256) or hs256_secret_env (HS256)");
    }
  }
  if (auto f = m.get("issuer")) {
    jwt.issuer = read_nonempty_string(r, *f);
  }
  if (auto f = m.get("audience")) {
    if (f->node.IsSequence()) {
      const auto items = read_list(r, *f);
      if (items.empty()) {
        r.fail(*f, "expected an audience, or a list of them");
      }
      for (const auto& item : items) {
        jwt.audience.push_back(read_nonempty_string(r, item));
      }
    } else {
      jwt.audience.push_back(read_nonempty_string(r, *f));
    }
  }
  if (auto f = m.get("leeway")) {
    jwt.leeway = read_duration(r, *f, true);
    if (jwt.leeway > std::chrono::minutes(5)) {
      r.fail(*f, "at most 5m: a leeway stretches every token's lifetime by as much");
    }
  }
  if (auto f = m.get("require_exp")) {
    jwt.require_exp = read_bool(r, *f);
  }
  if (auto f = m.get("plan_claim")) {
    jwt.plan_claim = read_nonempty_string(r, *f);
  }
  if (auto f = m.get("on_invalid")) {
    jwt.on_invalid = read_enum<invalid_token_policy>(
        r, *f, {{"reject", invalid_token_policy::reject}, {"ip", invalid_token_policy::ip}});
  }
  return jwt;
}

}  // namespace ratewall
