#pragma once

// A directory under /tmp for one test's files, removed with everything in it at the end.

#include <doctest/doctest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ratewall::testing {

struct temp_dir {
  temp_dir() {
    char tmpl[] = "/tmp/ratewall-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  ~temp_dir() { std::filesystem::remove_all(path); }
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;

  /// Writes (or replaces) `name` in the directory with `text`; gives its path.
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path + "/" + name, std::ios::trunc) << text;
    return path + "/" + name;
  }

  std::string path;
};

}  // namespace ratewall::testing
