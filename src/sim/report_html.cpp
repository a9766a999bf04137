#include "ratewall/sim/report_html.hpp"

#include <algorithm>
#include <cstdio>

namespace ratewall {

namespace {

constexpr int k_chart_width = 800;
constexpr int k_chart_height = 160;
constexpr int k_margin = 40;

constexpr std::string_view k_style = R"(<style>
body{font-family:sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin-bottom:2em}
td,th{border:1px solid #ccc;padding:2px 8px}
td.n{text-align:right}
svg{background:#fafafa;border:1px solid #ddd}
.allowed{stroke:#2a7;fill:none;stroke-width:1.5}
.denied{stroke:#c33;fill:none;stroke-width:1.5}
.b{stroke-dasharray:5 3}
.legend{font-size:90%;margin:0 0 0.5em 0}
</style>
)";

std::string seconds_text(nanos d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", static_cast<double>(d.count()) / 1e9);
  return buf;
}

// The points of one series, scaled to the chart.
std::string polyline(const std::vector<std::uint64_t>& counts, std::uint64_t top) {
  std::string points;
  const double dx = counts.size() > 1
                        ? static_cast<double>(k_chart_width - 2 * k_margin) / (counts.size() - 1)
                        : 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const double x = k_margin + dx * static_cast<double>(i);
    const double y = k_chart_height - k_margin / 2.0 -
                     (k_chart_height - k_margin) * static_cast<double>(counts[i]) /
                         static_cast<double>(std::max<std::uint64_t>(top, 1));
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%.1f,%.1f", points.empty() ? "" : " ", x, y);
    points += buf;
  }
  return points;
}

void write_chart(std::ostream& out, const report_chart& chart, nanos bucket) {
  std::uint64_t top = 0;
  std::size_t buckets = 0;
  for (const auto& run : chart.runs) {
    for (std::size_t i = 0; i < run.allowed.size(); ++i) {
      top = std::max({top, run.allowed[i], run.denied[i]});
    }
    buckets = std::max(buckets, run.allowed.size());
  }
  out << "<h3>route " << html_escape(chart.route) << "</h3>\n<p class=\"legend\">";
  for (std::size_t i = 0; i < chart.runs.size(); ++i) {
    out << (i == 0 ? "solid" : "; dashed") << ": " << html_escape(chart.runs[i].config);
  }
  out << "; green allowed, red denied; requests per " << seconds_text(bucket) << "</p>\n";
  out << "<svg width=\"" << k_chart_width << "\" height=\"" << k_chart_height
      << "\" role=\"img\">\n";
  out << "<text x=\"4\" y=\"14\" font-size=\"11\">" << top << "</text>";
  out << "<text x=\"4\" y=\"" << k_chart_height - 4 << "\" font-size=\"11\">0</text>";
  out << "<text x=\"" << k_chart_width - k_margin << "\" y=\"" << k_chart_height - 4
      << "\" font-size=\"11\">" << seconds_text(bucket * static_cast<std::int64_t>(buckets))
      << "</text>\n";
  for (std::size_t i = 0; i < chart.runs.size(); ++i) {
    const char* dash = i == 0 ? "" : " b";
    out << "<polyline class=\"allowed" << dash << "\" points=\""
        << polyline(chart.runs[i].allowed, top) << "\"/>\n";
    out << "<polyline class=\"denied" << dash << "\" points=\""
        << polyline(chart.runs[i].denied, top) << "\"/>\n";
  }
  out << "</svg>\n";
}

void write_table(std::ostream& out, const report_table& table) {
  out << "<h2>" << html_escape(table.title) << "</h2>\n<table>\n";
  for (std::size_t r = 0; r < table.rows.size(); ++r) {
    out << "<tr>";
    for (std::size_t c = 0; c < table.rows[r].size(); ++c) {
      const bool numeric = r > 0 && c < table.numeric.size() && table.numeric[c];
      out << (r == 0    ? "<th>"
              : numeric ? "<td class=\"n\">"
                        : "<td>")
          << html_escape(table.rows[r][c]) << (r == 0 ? "</th>" : "</td>");
    }
    out << "</tr>\n";
  }
  out << "</table>\n";
}

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

void write_html_report(std::ostream& out, const report& r) {
  out << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>"
      << html_escape(r.title) << "</title>\n"
      << k_style << "</head>\n<body>\n<h1>" << html_escape(r.title) << "</h1>\n";
  out << "<h2>allowed and denied over time</h2>\n";
  for (const auto& chart : r.charts) {
    write_chart(out, chart, r.bucket);
  }
  for (const auto& table : r.tables) {
    write_table(out, table);
  }
  out << "</body>\n</html>\n";
}

}  // namespace ratewall
