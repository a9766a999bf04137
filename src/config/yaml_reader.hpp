#pragma once

// Private to the loader: typed, path-aware access to a yaml-cpp tree. Every accessor either
// returns a valid value or throws config_error naming the file, line and key path, so the
// section readers stay a flat list of "read this key as that".

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ratewall/config/config.hpp"
#include "ratewall/config/loader.hpp"

namespace ratewall {

/// One value of the tree and where it came from.
struct yaml_field {
  YAML::Node node;
  std::string path;  // "routes[1].limits[0].rate"; empty for the document root
  int line = 1;      // 1-based: the key's line for a mapping value, the item's for a list item
};

/// Raises config_error for one source file.
class yaml_reader {
 public:
  explicit yaml_reader(std::string source) : source_(std::move(source)) {}

  [[noreturn]] void fail(int line, const std::string& path, const std::string& message) const;
  [[noreturn]] void fail(const yaml_field& field, const std::string& message) const {
    fail(field.line, field.path, message);
  }

  /// Notes something valid that is most likely not what was meant (config::warnings), in the
  /// form of an error: file, line, key path, message.
  void warn(const yaml_field& field, const std::string& message) const;
  const std::vector<std::string>& warnings() const { return warnings_; }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  mutable std::vector<std::string> warnings_;  // readers are handed around as const
};

/// A mapping whose keys have been checked: strings, no duplicates and, for a strict mapping,
/// only the allowed ones. A null value (`server:` with nothing after it) reads as empty.
class yaml_map {
 public:
  /// Keys must be among `allowed`; anything else is "unknown key (expected one of: ...)".
  static yaml_map strict(const yaml_reader& reader, const yaml_field& field,
                         std::initializer_list<std::string_view> allowed);
  /// Any string key: for mappings whose keys are names (upstreams, plans, per-method cost).
  static yaml_map open(const yaml_reader& reader, const yaml_field& field);

  std::optional<yaml_field> get(std::string_view key) const;
  /// A missing key is reported at the line of this mapping; `note` is added in parentheses.
  yaml_field require(std::string_view key, std::string_view note = {}) const;
  bool has(std::string_view key) const { return get(key).has_value(); }

  /// In file order.
  const std::vector<std::pair<std::string, yaml_field>>& entries() const { return entries_; }
  const yaml_field& self() const { return self_; }

 private:
  yaml_map(const yaml_reader& reader, const yaml_field& field) : reader_(&reader), self_(field) {}
  void load(const std::vector<std::string_view>* allowed);

  const yaml_reader* reader_;
  yaml_field self_;
  int mapping_line_ = 0;
  std::vector<std::pair<std::string, yaml_field>> entries_;
};

/// The items of a sequence (null reads as empty), with paths "name[i]".
std::vector<yaml_field> read_list(const yaml_reader& reader, const yaml_field& field);

/// Any scalar as text (numbers and booleans too: `key: 12345` is the string "12345").
std::string read_string(const yaml_reader& reader, const yaml_field& field);
/// As read_string, and at least one character.
std::string read_nonempty_string(const yaml_reader& reader, const yaml_field& field);
/// A name used in keys, metrics and messages: letters, digits, '_', '-', '.'.
std::string read_name(const yaml_reader& reader, const yaml_field& field);
/// An HTTP token (RFC 9110 tchar), e.g. a header name or a method.
std::string read_token(const yaml_reader& reader, const yaml_field& field);

/// Decimal digits only; `min`/`max` bound the value with a message saying so.
std::uint64_t read_uint(const yaml_reader& reader, const yaml_field& field, std::uint64_t min = 0,
                        std::uint64_t max = UINT64_MAX);
bool read_bool(const yaml_reader& reader, const yaml_field& field);
/// A duration; zero is rejected unless `allow_zero`.
nanos read_duration(const yaml_reader& reader, const yaml_field& field, bool allow_zero = false);
rate_spec read_rate(const yaml_reader& reader, const yaml_field& field);
endpoint read_endpoint(const yaml_reader& reader, const yaml_field& field);
/// An address to listen on: an IP address, or `localhost` (taken as 127.0.0.1). No other name
/// is looked up, so `check` refuses what a start could not bind.
endpoint read_listen_endpoint(const yaml_reader& reader, const yaml_field& field);
cidr read_cidr(const yaml_reader& reader, const yaml_field& field);
std::uint64_t read_byte_size(const yaml_reader& reader, const yaml_field& field,
                             std::uint64_t min = 0);

/// Where `field` was written, for errors found after loading (a file that does not load).
config_location location_of(const yaml_field& field);
/// A path to a file (a certificate, a key set): any text but control characters (a pasted PEM
/// block is not a path), not ending in '/'.
std::string read_file_path(const yaml_reader& reader, const yaml_field& field);

/// "a, b, c": lists names in messages.
std::string join_names(const std::vector<std::string>& names);

/// One of a fixed set of words: "expected one of: ip, reject, allow".
template <class E>
E read_enum(const yaml_reader& reader, const yaml_field& field,
            std::initializer_list<std::pair<std::string_view, E>> choices) {
  std::string text = read_string(reader, field);
  std::string names;
  for (const auto& [name, value] : choices) {
    if (name == text) {
      return value;
    }
    names += names.empty() ? "" : ", ";
    names += name;
  }
  reader.fail(field, "expected one of: " + names);
}

/// The same, for an enum whose words are its `to_string` (config.hpp), so that what the loader
/// reads and what the admin API prints cannot drift apart.
template <class E>
E read_enum(const yaml_reader& reader, const yaml_field& field, std::initializer_list<E> choices) {
  std::string text = read_string(reader, field);
  std::string names;
  for (E value : choices) {
    if (to_string(value) == text) {
      return value;
    }
    names += names.empty() ? "" : ", ";
    names += to_string(value);
  }
  reader.fail(field, "expected one of: " + names);
}

}  // namespace ratewall
