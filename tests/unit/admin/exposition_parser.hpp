#pragma once

// A strict reader of the Prometheus text exposition format 0.0.4, for tests: every line must
// be a HELP, TYPE or sample line of the grammar, samples must follow their family's TYPE, and
// histograms must be complete (cumulative buckets, +Inf equal to _count, _sum present).
// Shared by the unit and integration tests of the admin module.

#include <cmath>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace ratewall::testing {

struct exposition {
  bool ok = true;
  std::string error;                         // the first problem, with its line
  std::map<std::string, std::string> types;  // family -> counter | gauge | histogram | ...
  // "name{a=\"x\",b=\"y\"}" (labels as written) -> value
  std::map<std::string, double> samples;

  double value(const std::string& series) const {
    auto it = samples.find(series);
    return it == samples.end() ? std::nan("") : it->second;
  }
  bool has(const std::string& series) const { return samples.count(series) > 0; }
};

namespace detail {

inline bool name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
inline bool name_char(char c) {
  return name_start(c) || (c >= '0' && c <= '9');
}

inline bool read_name(std::string_view& s, std::string& out, bool label) {
  out.clear();
  if (s.empty() || !name_start(s.front()) || (label && s.front() == ':')) {
    return false;
  }
  while (!s.empty() && name_char(s.front()) && !(label && s.front() == ':')) {
    out += s.front();
    s.remove_prefix(1);
  }
  return true;
}

inline bool read_value(std::string_view text, double& out) {
  if (text == "+Inf" || text == "Inf") {
    out = INFINITY;
    return true;
  }
  if (text == "-Inf") {
    out = -INFINITY;
    return true;
  }
  if (text == "NaN") {
    out = NAN;
    return true;
  }
  if (text.empty()) {
    return false;
  }
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return false;
    }
  }
  std::string copy(text);
  char* end = nullptr;
  out = std::strtod(copy.c_str(), &end);
  return end == copy.c_str() + copy.size();
}

// The family a sample belongs to: histogram samples drop their suffix.
inline std::string family_of(const std::string& name, const std::map<std::string, std::string>& t) {
  for (std::string_view suffix : {"_bucket", "_sum", "_count"}) {
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      std::string base = name.substr(0, name.size() - suffix.size());
      auto it = t.find(base);
      if (it != t.end() && it->second == "histogram") {
        return base;
      }
    }
  }
  return name;
}

}  // namespace detail

inline exposition parse_exposition(std::string_view text) {
  exposition ex;
  int line_no = 0;
  std::string current_family;
  std::set<std::string> finished;  // families whose samples are over
  std::set<std::string> helped;
  auto fail = [&](const std::string& why) {
    if (ex.ok) {
      ex.ok = false;
      ex.error = "line " + std::to_string(line_no) + ": " + why;
    }
  };
  if (!text.empty() && text.back() != '\n') {
    fail("the text must end with a newline");
  }
  // Per histogram series (labels without le): the buckets seen, for the completeness checks.
  struct series_state {
    double last = -1;
    bool inf = false;
    double inf_value = 0;
    bool sum = false;
    bool count = false;
    double count_value = 0;
  };
  std::map<std::string, series_state> histograms;

  while (!text.empty()) {
    ++line_no;
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty()) {
      continue;
    }
    if (line.front() == '#') {
      std::string_view rest = line.substr(1);
      if (!rest.starts_with(" HELP ") && !rest.starts_with(" TYPE ")) {
        continue;  // a plain comment
      }
      bool is_type = rest.starts_with(" TYPE ");
      rest.remove_prefix(6);
      std::string name;
      if (!detail::read_name(rest, name, false)) {
        fail("bad metric name in HELP/TYPE");
        continue;
      }
      if (is_type) {
        if (rest.empty() || rest.front() != ' ') {
          fail("TYPE needs a type");
          continue;
        }
        std::string type(rest.substr(1));
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" &&
            type != "untyped") {
          fail("unknown type " + type);
        }
        if (ex.types.count(name) > 0) {
          fail("second TYPE for " + name);
        }
        ex.types[name] = type;
      } else {
        if (!rest.empty() && rest.front() != ' ') {
          fail("HELP text must follow a space");
        }
        for (std::size_t i = 0; i < rest.size(); ++i) {
          if (rest[i] == '\\') {
            if (i + 1 >= rest.size() || (rest[i + 1] != '\\' && rest[i + 1] != 'n')) {
              fail("bad escape in HELP");
            }
            ++i;
          }
        }
        if (!helped.insert(name).second) {
          fail("second HELP for " + name);
        }
      }
      if (name != current_family) {
        if (!current_family.empty()) {
          finished.insert(current_family);
        }
        if (finished.count(name) > 0) {
          fail("family " + name + " appears twice");
        }
        current_family = name;
      }
      continue;
    }

    // name{label="value",...} value [timestamp]
    std::string_view rest = line;
    std::string name;
    if (!detail::read_name(rest, name, false)) {
      fail("bad metric name");
      continue;
    }
    std::string key = name;
    std::string series_labels;  // without le
    std::string le;
    if (!rest.empty() && rest.front() == '{') {
      rest.remove_prefix(1);
      key += '{';
      bool first = true;
      std::set<std::string> seen;
      while (!rest.empty() && rest.front() != '}') {
        if (!first) {
          if (rest.front() != ',') {
            fail("expected , between labels");
            break;
          }
          rest.remove_prefix(1);
          if (!rest.empty() && rest.front() == '}') {
            break;  // a trailing comma is allowed
          }
        }
        std::string label;
        if (!detail::read_name(rest, label, true)) {
          fail("bad label name");
          break;
        }
        if (!seen.insert(label).second) {
          fail("label " + label + " twice");
        }
        if (rest.size() < 2 || rest[0] != '=' || rest[1] != '"') {
          fail("expected =\" after a label name");
          break;
        }
        rest.remove_prefix(2);
        std::string value;
        bool closed = false;
        while (!rest.empty()) {
          char c = rest.front();
          rest.remove_prefix(1);
          if (c == '"') {
            closed = true;
            break;
          }
          if (c == '\\') {
            if (rest.empty() ||
                (rest.front() != '\\' && rest.front() != '"' && rest.front() != 'n')) {
              fail("bad escape in a label value");
              break;
            }
            value += rest.front() == 'n' ? '\n' : rest.front();
            rest.remove_prefix(1);
            continue;
          }
          if (c == '\n') {
            fail("raw newline in a label value");
          }
          value += c;
        }
        if (!closed) {
          fail("unterminated label value");
          break;
        }
        if (!first) {
          key += ',';
        }
        key += label + "=\"" + value + "\"";
        if (label == "le") {
          le = value;
        } else {
          series_labels += label + "=\"" + value + "\",";
        }
        first = false;
      }
      if (rest.empty() || rest.front() != '}') {
        fail("unterminated label set");
        continue;
      }
      rest.remove_prefix(1);
      key += '}';
    }
    if (rest.empty() || rest.front() != ' ') {
      fail("expected a space before the value");
      continue;
    }
    while (!rest.empty() && rest.front() == ' ') {
      rest.remove_prefix(1);
    }
    auto space = rest.find(' ');
    std::string_view value_text = rest.substr(0, space);
    double value = 0;
    if (!detail::read_value(value_text, value)) {
      fail("bad value \"" + std::string(value_text) + "\"");
      continue;
    }
    if (space != std::string_view::npos) {
      std::string_view ts = rest.substr(space + 1);
      if (ts.empty() || ts.find_first_not_of("-0123456789") != std::string_view::npos) {
        fail("bad timestamp");
      }
    }
    std::string family = detail::family_of(name, ex.types);
    if (ex.types.count(family) == 0) {
      fail("sample " + name + " before its TYPE");
    }
    if (family != current_family) {
      fail("sample " + name + " outside its family's block");
    }
    if (ex.samples.count(key) > 0) {
      fail("duplicate series " + key);
    }
    ex.samples[key] = value;

    if (ex.types[family] == "histogram") {
      auto& h = histograms[family + "{" + series_labels + "}"];
      if (name == family + "_bucket") {
        double bound = 0;
        if (le.empty() || !detail::read_value(le, bound)) {
          fail("bucket without a valid le");
        }
        if (value < h.last) {
          fail("buckets not cumulative");
        }
        h.last = value;
        if (std::isinf(bound)) {
          h.inf = true;
          h.inf_value = value;
        }
      } else if (name == family + "_sum") {
        h.sum = true;
      } else if (name == family + "_count") {
        h.count = true;
        h.count_value = value;
      } else {
        fail("unexpected sample " + name + " in histogram " + family);
      }
    } else if (ex.types[family] == "counter" && value < 0) {
      fail("negative counter " + key);
    }
  }
  for (const auto& [series, h] : histograms) {
    if (!h.inf || !h.sum || !h.count) {
      fail("incomplete histogram " + series);
    } else if (h.inf_value != h.count_value) {
      fail("+Inf bucket differs from _count in " + series);
    }
  }
  return ex;
}

}  // namespace ratewall::testing
