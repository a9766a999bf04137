#pragma once

// GET /dashboard: one self-contained page (inline CSS and JS, nothing fetched from elsewhere)
// that polls GET /admin/dashboard every 2 s and draws each route's allowed, denied and
// shadow-denied rates as inline SVG, with the most limited subjects, upstream health, the store
// and a summary of the configuration. The script writes text only (textContent, SVG
// attributes), never markup, so nothing in the data (a key name, a path) can become script.

#include <string_view>

namespace ratewall {

/// The page, UTF-8.
std::string_view dashboard_page();

/// Its Content-Security-Policy: inline script and style, requests to its own origin only; no
/// other source, no frames, no forms, no plugins.
inline constexpr std::string_view k_dashboard_csp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

}  // namespace ratewall
