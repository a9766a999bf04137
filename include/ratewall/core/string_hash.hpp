#pragma once

#include <cstddef>
#include <functional>
#include <string_view>

namespace ratewall {

/// A transparent string hasher: maps keyed by std::string looked up with a std::string_view
/// (with std::equal_to<>), without making a string per lookup.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace ratewall
