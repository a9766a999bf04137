#include "yaml_reader.hpp"

#include <algorithm>

#include "ratewall/core/parse.hpp"

namespace ratewall {
namespace {

std::string child_path(const std::string& parent, std::string_view key) {
  if (parent.empty()) {
    return std::string(key);
  }
  return parent + "." + std::string(key);
}

// yaml-cpp marks are 0-based; an implicit null (`key:` and nothing) is marked at the next
// token, possibly lines away, so such values are reported at their key's line instead.
int line_of(const YAML::Node& node, int fallback) {
  if (node.IsNull() || node.Mark().is_null()) {
    return fallback;
  }
  return node.Mark().line + 1;
}

}  // namespace

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    out += out.empty() ? "" : ", ";
    out += n;
  }
  return out;
}

void yaml_reader::fail(int line, const std::string& path, const std::string& message) const {
  throw config_error(source_, line, path, message);
}

void yaml_reader::warn(const yaml_field& field, const std::string& message) const {
  warnings_.push_back(config_error(source_, field.line, field.path, message).what());
}

yaml_map yaml_map::strict(const yaml_reader& reader, const yaml_field& field,
                          std::initializer_list<std::string_view> allowed) {
  yaml_map map(reader, field);
  std::vector<std::string_view> keys(allowed);
  map.load(&keys);
  return map;
}

yaml_map yaml_map::open(const yaml_reader& reader, const yaml_field& field) {
  yaml_map map(reader, field);
  map.load(nullptr);
  return map;
}

void yaml_map::load(const std::vector<std::string_view>* allowed) {
  const YAML::Node& node = self_.node;
  mapping_line_ = line_of(node, self_.line);
  if (node.IsNull()) {
    return;
  }
  if (!node.IsMap()) {
    reader_->fail(self_, "expected a mapping");
  }
  // Range-for keeps yaml-cpp's temporary (key, value) pair alive; it->first would dangle.
  for (const auto& entry : node) {
    const YAML::Node& key = entry.first;
    int key_line = line_of(key, mapping_line_);
    if (!key.IsScalar()) {
      reader_->fail(key_line, self_.path, "expected a mapping with text keys");
    }
    const std::string& name = key.Scalar();
    std::string path = child_path(self_.path, name);
    if (allowed != nullptr && std::find(allowed->begin(), allowed->end(), name) == allowed->end()) {
      std::string expected;
      for (std::string_view k : *allowed) {
        expected += expected.empty() ? "" : ", ";
        expected += k;
      }
      reader_->fail(key_line, path, "unknown key (expected one of: " + expected + ")");
    }
    // yaml-cpp keeps both entries of a repeated key; a silent "last one wins" hides typos.
    for (const auto& entry : entries_) {
      if (entry.first == name) {
        reader_->fail(
            key_line, path,
            "duplicate key (first set on line " + std::to_string(entry.second.line) + ")");
      }
    }
    entries_.emplace_back(name, yaml_field{entry.second, path, key_line});
  }
}

std::optional<yaml_field> yaml_map::get(std::string_view key) const {
  for (const auto& entry : entries_) {
    if (entry.first == key) {
      return entry.second;
    }
  }
  return std::nullopt;
}

yaml_field yaml_map::require(std::string_view key, std::string_view note) const {
  if (auto field = get(key)) {
    return *field;
  }
  std::string message = "missing required key";
  if (!note.empty()) {
    message += " (" + std::string(note) + ")";
  }
  reader_->fail(mapping_line_, child_path(self_.path, key), message);
}

std::vector<yaml_field> read_list(const yaml_reader& reader, const yaml_field& field) {
  std::vector<yaml_field> items;
  if (field.node.IsNull()) {
    return items;
  }
  if (!field.node.IsSequence()) {
    reader.fail(field, "expected a list");
  }
  std::size_t i = 0;
  for (const auto& item : field.node) {
    std::string path = field.path + "[" + std::to_string(i++) + "]";
    items.push_back(yaml_field{item, path, line_of(item, field.line)});
  }
  return items;
}

std::string read_string(const yaml_reader& reader, const yaml_field& field) {
  if (!field.node.IsScalar()) {
    reader.fail(field, "expected a string");
  }
  return field.node.Scalar();
}

std::string read_nonempty_string(const yaml_reader& reader, const yaml_field& field) {
  std::string text = read_string(reader, field);
  if (text.empty()) {
    reader.fail(field, "must not be empty");
  }
  return text;
}

std::string read_name(const yaml_reader& reader, const yaml_field& field) {
  std::string text = read_nonempty_string(reader, field);
  for (char c : text) {
    bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) {
      reader.fail(field,
                  "\"" + text + "\" is not a valid name (use letters, digits, '_', '-', '.')");
    }
  }
  return text;
}

std::string read_token(const yaml_reader& reader, const yaml_field& field) {
  std::string text = read_nonempty_string(reader, field);
  if (!is_token(text)) {
    reader.fail(field, "\"" + text + "\" is not a valid HTTP token");
  }
  return text;
}

std::uint64_t read_uint(const yaml_reader& reader, const yaml_field& field, std::uint64_t min,
                        std::uint64_t max) {
  static const std::string k_expected = "expected a non-negative integer";
  if (!field.node.IsScalar()) {
    reader.fail(field, k_expected);
  }
  const std::string& text = field.node.Scalar();
  if (text.empty() ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    reader.fail(field, k_expected);
  }
  std::uint64_t value = 0;
  for (char c : text) {
    if (value > (UINT64_MAX - (c - '0')) / 10) {
      reader.fail(field, "number too large");
    }
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  if (value < min) {
    reader.fail(field, "must be at least " + std::to_string(min));
  }
  if (value > max) {
    reader.fail(field, "must be at most " + std::to_string(max));
  }
  return value;
}

bool read_bool(const yaml_reader& reader, const yaml_field& field) {
  // YAML 1.2 booleans only: "yes"/"on" as booleans surprise people ("country: no").
  if (field.node.IsScalar()) {
    const std::string& text = field.node.Scalar();
    if (text == "true" || text == "True" || text == "TRUE") {
      return true;
    }
    if (text == "false" || text == "False" || text == "FALSE") {
      return false;
    }
  }
  reader.fail(field, "expected true or false");
}

nanos read_duration(const yaml_reader& reader, const yaml_field& field, bool allow_zero) {
  auto parsed = parse_duration(read_string(reader, field));
  if (!parsed) {
    reader.fail(field, parsed.error());
  }
  if (!allow_zero && parsed->count() == 0) {
    reader.fail(field, "must be greater than 0");
  }
  return *parsed;
}

rate_spec read_rate(const yaml_reader& reader, const yaml_field& field) {
  auto parsed = parse_rate(read_string(reader, field));
  if (!parsed) {
    reader.fail(field, parsed.error());
  }
  return *parsed;
}

endpoint read_endpoint(const yaml_reader& reader, const yaml_field& field) {
  auto parsed = parse_endpoint(read_string(reader, field));
  if (!parsed) {
    reader.fail(field, parsed.error());
  }
  return *parsed;
}

endpoint read_listen_endpoint(const yaml_reader& reader, const yaml_field& field) {
  endpoint e = read_endpoint(reader, field);
  if (e.host == "localhost") {
    e.host = "127.0.0.1";
  } else if (!parse_ip(e.host)) {
    reader.fail(field, "\"" + e.host +
                           "\" is not an IP address: listen on one (127.0.0.1:8080, "
                           "[::1]:8080, 0.0.0.0:8080 for every interface); host names are not "
                           "looked up");
  }
  return e;
}

cidr read_cidr(const yaml_reader& reader, const yaml_field& field) {
  auto parsed = parse_cidr(read_string(reader, field));
  if (!parsed) {
    reader.fail(field, parsed.error());
  }
  return *parsed;
}

std::uint64_t read_byte_size(const yaml_reader& reader, const yaml_field& field,
                             std::uint64_t min) {
  auto parsed = parse_byte_size(read_string(reader, field));
  if (!parsed) {
    reader.fail(field, parsed.error());
  }
  if (*parsed < min) {
    reader.fail(field, "must be at least " + std::to_string(min));
  }
  return *parsed;
}

config_location location_of(const yaml_field& field) {
  return config_location{field.line, field.path};
}

std::string read_file_path(const yaml_reader& r, const yaml_field& field) {
  std::string path = read_nonempty_string(r, field);
  for (char c : path) {
    if (static_cast<unsigned char>(c) < 0x20) {
      r.fail(field, "expected a file path");
    }
  }
  if (path.back() == '/') {
    r.fail(field, "expected a file path, not a directory");
  }
  return path;
}

}  // namespace ratewall
