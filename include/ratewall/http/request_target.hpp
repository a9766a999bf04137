#pragma once

// One meaning for every request-target (DESIGN §5a). The target is parsed and its path made
// canonical once, and that one canonical path is both what routes match and what the upstream
// receives: the gateway and the upstream can never disagree about which route a request is.
//
// Accepted forms: origin-form ("/p?q") and absolute-form ("http://host/p?q", http or https; its
// authority then replaces Host, RFC 9112 §3.2.2). Refused (the caller answers 400): any byte
// outside RFC 3986 (space, controls, `"` `<` `>` `\` `^` backtick `{` `|` `}`, `#`, non-ASCII),
// a malformed %-escape, userinfo, other forms, and what `path_options` rejects.
//
// The canonical path (RFC 3986 §6.2.2, as nginx and Envoy normalise):
//   - percent-encoded unreserved characters (A-Z a-z 0-9 - . _ ~) are decoded, the hex digits of
//     every other escape upper-cased;
//   - %2F and %5C are rejected, kept encoded (not separators) or decoded, per escaped_slashes;
//   - a raw backslash is rejected or kept (not a separator), per backslashes;
//   - ";params" are kept, stripped from every segment, or rejected, per semicolons;
//   - "." and ".." segments are resolved (".." never climbs above "/"), and runs of "/" merged
//     unless merge_slashes is off.
// The query is kept as received.

#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

namespace ratewall {

struct canonical_target {
  std::string authority;   // absolute-form only ("" otherwise): host[:port]
  std::string path;        // canonical, starts with '/'
  std::string query;       // with its '?', as received; "" when there is none
  std::string_view error;  // why it was refused (fixed text), "" when accepted
};

/// Parses `target` into `out` (its strings are reused, so a connection can keep one). Returns
/// false, with out.error set, when the target is refused.
bool canonicalize_target(std::string_view target, const path_options& opts, canonical_target& out);

/// host [":" port], the host a reg-name or a bracketed IP-literal, no userinfo (RFC 3986 §3.2):
/// an absolute-form authority or a Host value.
bool valid_authority(std::string_view authority);

/// The canonical form of a path written in the configuration (routes' path_exact and
/// path_prefix): the same steps, but nothing is refused.
std::string canonical_config_path(std::string_view path, const path_options& opts);

}  // namespace ratewall
