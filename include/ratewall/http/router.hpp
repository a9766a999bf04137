#pragma once

// Picks the route of a request: the first route of the config, in file order, whose host,
// method and path all match.
//
// Path matching is done on a normalized copy of the request path, never on the raw target, so
// that "/api//search", "/x/../api/search" or "/api/%73earch" cannot slip past a stricter route
// into a laxer one. Normalization (RFC 3986 §6.2.2, as nginx and Envoy do it):
//   - the query ("?…") and fragment ("#…") are dropped;
//   - percent-encoded unreserved characters (A-Z a-z 0-9 - . _ ~) are decoded, the hex digits of
//     every other escape are upper-cased; "%2F" stays encoded (it is not a separator);
//   - runs of "/" are merged and "." / ".." segments are resolved (".." never climbs above "/").
// Routes' path_exact and path_prefix are normalized the same way when the router is built.
//
//   path_exact   the whole normalized path equals it.
//   path_prefix  plain string prefix, like an nginx `location` prefix: "/api" also matches
//                "/apix"; write "/api/" to match the folder only. Case-sensitive.
//   path_regex   ECMAScript, must match the whole normalized path. Run by an automaton that is
//                linear in the path length (no back-references), so a long path cannot blow the
//                stack or the CPU.
//   methods      exact, case-sensitive (RFC 9110 §9.1); empty = any. HEAD is not implied by GET.
//   host         case-insensitive, port and one trailing dot ignored; empty = any host. For an
//                absolute-form target ("http://h/p") the target's authority is the host
//                (RFC 9112 §3.2.2), else the Host header.

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
  /// `target` is the request-target as received (origin-form or absolute-form), `host` the Host
  /// header value ("" if absent). Thread-safe (const, no shared mutable state); allocates only
  /// when the path needs normalizing.
  std::optional<std::size_t> match(std::string_view method, std::string_view host,
                                   std::string_view target) const;

  std::size_t size() const;

 private:
  struct compiled_route;
  std::vector<compiled_route> routes_;
};

/// The normalized path of a request-target (see above). Returns a view of `target` when it is
/// already normal, else a view of `scratch`, which it overwrites.
std::string_view normalize_request_path(std::string_view target, std::string& scratch);

/// Whether `pattern` compiles as a path_regex the router accepts; the error message if not.
/// For the config loader, so that `ratewall check` rejects what the router would.
std::optional<std::string> path_regex_error(std::string_view pattern);

}  // namespace ratewall
