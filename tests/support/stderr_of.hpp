#pragma once

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace ratewall::testing {

/// What `f` writes to stderr (the error log's one destination), caught in a temporary file.
template <class F>
std::string stderr_of(F f) {
  std::FILE* file = std::tmpfile();
  REQUIRE(file != nullptr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(file), STDERR_FILENO);
  f();
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::string out;
  std::rewind(file);
  char buffer[512];
  for (std::size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) {
    out.append(buffer, n);
  }
  std::fclose(file);
  return out;
}

}  // namespace ratewall::testing
