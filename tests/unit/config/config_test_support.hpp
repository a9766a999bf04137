#pragma once

#include <string>
#include <string_view>

#include "ratewall/config/loader.hpp"

namespace ratewall::testing {

/// The repository root, found from this file's own path so tests need no build settings.
inline std::string repo_root() {
  std::string here = __FILE__;
  auto pos = here.rfind("tests/unit/config/");
  return pos == 0 ? std::string(".") : here.substr(0, pos == std::string::npos ? 0 : pos - 1);
}

inline std::string repo_file(std::string_view relative) {
  return repo_root() + "/" + std::string(relative);
}

/// The what() of the config_error that `yaml` raises, or "loaded" when it loads.
inline std::string config_error_of(std::string_view yaml, const std::string& source = "test.yaml") {
  try {
    parse_config(yaml, source);
  } catch (const config_error& e) {
    return e.what();
  }
  return "loaded";
}

}  // namespace ratewall::testing
