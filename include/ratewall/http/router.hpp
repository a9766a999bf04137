#pragma once

// Picks the route of a request: the first route of the config, in file order, whose host,
// method and path all match.
//
// Routes match the canonical path of request_target.hpp, never the raw target, and that same
// canonical path is what the upstream receives: "/api//search", "/x/../api/search" or
// "/api/%73earch" cannot slip past a stricter route into a laxer one, and the upstream cannot
// read the request as a route other than the one the gateway limited. Routes' path_exact and
// path_prefix are made canonical the same way when the router is built.
//
//   path_exact   the whole canonical path equals it, or equals it plus one trailing "/" (an
//                upstream such as Flask or Express serves both spellings the same).
//   path_prefix  plain string prefix, like an nginx `location` prefix: "/api" also matches
//                "/apix"; write "/api/" to match the folder only.
//   path_template "/tenants/{tenant}/items": the same segments, each {name} any one non-empty
//                segment (what path: descriptors of identify_by read), one trailing "/"
//                allowed. Literal segments are made canonical as path_exact is.
//   path_regex   ECMAScript, must match the whole canonical path. Run by an automaton that is
//                linear in the path length (no back-references), so a long path cannot blow the
//                stack or the CPU.
//   case         paths compare case-sensitively unless the route's match.case_insensitive (or
//                server.paths.case_insensitive) says otherwise.
//   methods      exact, case-sensitive (RFC 9110 §9.1); empty = any. A route that lists GET
//                also takes HEAD (RFC 9110 §9.3.2: HEAD is GET without the body), so HEAD cannot
//                go around a GET route's limits.
//   host         case-insensitive, port and one trailing dot ignored; empty = any host. An
//                IPv4 address matches in every spelling of it ("127.1", "0x7f.0.0.1",
//                "2130706433", "[::ffff:127.0.0.1]"). The caller passes the absolute-form
//                authority when there is one (RFC 9112 §3.2.2), else the Host header.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/config/config.hpp"

namespace ratewall {

class router {
 public:
  /// Copies what it needs from `cfg.routes`; `cfg` may be destroyed afterwards.
  /// Throws std::invalid_argument naming the route when a path_regex does not compile.
  explicit router(const config& cfg);
  router(const router&);
  router(router&&) noexcept;
  router& operator=(const router&);
  router& operator=(router&&) noexcept;
  ~router();

  /// Index into `config::routes` of the first route that matches, nullopt if none (404).
  /// `path` is canonical (canonicalize_target), `host` the authority or Host value ("" if
  /// absent). Thread-safe (const, no shared mutable state); allocates nothing for
  /// case-sensitive routes.
  std::optional<std::size_t> match(std::string_view method, std::string_view host,
                                   std::string_view path) const;

  std::size_t size() const;

 private:
  struct compiled_route;
  std::vector<compiled_route> routes_;
};

/// Whether `pattern` compiles as a path_regex the router accepts; the error message if not.
/// For the config loader, so that `ratewall check` rejects what the router would.
std::optional<std::string> path_regex_error(std::string_view pattern);

}  // namespace ratewall
