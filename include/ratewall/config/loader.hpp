#pragma once

// YAML -> config, validated once. Every problem becomes one config_error that names the
// file, the line and the key, so `ratewall check` and a failed reload print something an
// operator can act on without reading the source.

#include <stdexcept>
#include <string>
#include <string_view>

#include "ratewall/config/config.hpp"

namespace ratewall {

/// A config file that cannot be used. what() is "<file>:<line>: <key.path>: <message>", e.g.
///   config/ratewall.yaml:14: routes[1].limits[0].rate: expected "<count>/<unit>" like "10/s"
/// The key path is left out when there is none (YAML syntax errors) and the line when there is
/// none (the file cannot be read).
class config_error : public std::runtime_error {
 public:
  config_error(std::string file, int line, std::string key_path, std::string message);

  const std::string& file() const { return file_; }
  int line() const { return line_; }  // 1-based; 0 when the error is not about a line
  const std::string& key_path() const { return key_path_; }
  const std::string& message() const { return message_; }

 private:
  std::string file_;
  int line_;
  std::string key_path_;
  std::string message_;
};

/// Parses and validates `yaml_text`; `source_name` is the file name used in messages and
/// stored in config::source. Resolves defaults (threads: 0 -> hardware threads, burst of a
/// token bucket -> its rate count) and hashes raw API keys. Throws config_error.
config parse_config(std::string_view yaml_text, const std::string& source_name);

/// Reads `path` and parses it with parse_config. Throws config_error, also when the file
/// cannot be read.
config load_config_file(const std::string& path);

/// A file path written in the config file at `config_file`, as it is opened: an absolute path as
/// written, a relative one relative to the directory holding the config file (a service's
/// working directory is arbitrary). For certificate and key files; log.access stays as written.
std::string resolve_config_path(const std::string& path, const std::string& config_file);

}  // namespace ratewall
