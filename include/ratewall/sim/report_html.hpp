#pragma once

// `ratewall simulate --html FILE`: one self-contained HTML page (inline CSS and SVG, no script,
// nothing fetched) with allowed and denied requests over time per route, for one config or
// for the two of --compare, and the summary tables. Every text taken from the trace or the
// configs (paths, routes, subjects) is HTML-escaped: a trace is untrusted input.

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/core/clock.hpp"

namespace ratewall {

/// Requests per time bucket of one route under one config.
struct report_series {
  std::string config;                  // the config's file name, as the page shows it
  std::vector<std::uint64_t> allowed;  // allowed and shadow_denied
  std::vector<std::uint64_t> denied;   // denied
};

struct report_chart {
  std::string route;
  std::vector<report_series> runs;  // one per config, all with the same number of buckets
};

/// A table: the first row is the header; `numeric[i]` right-aligns column i.
struct report_table {
  std::string title;
  std::vector<std::vector<std::string>> rows;
  std::vector<bool> numeric;
};

struct report {
  std::string title;
  nanos bucket{0};  // the width of one bucket
  std::vector<report_chart> charts;
  std::vector<report_table> tables;
};

/// `&`, `<`, `>`, `"` and `'` as entities.
std::string html_escape(std::string_view text);

/// Writes the page.
void write_html_report(std::ostream& out, const report& r);

}  // namespace ratewall
