#include "ratewall/core/json_text.hpp"

#include <array>
#include <cstddef>

namespace ratewall {

namespace {

// Length of the valid UTF-8 sequence at the start of `s` (non-empty), 0 if it is not one.
std::size_t utf8_sequence_length(std::string_view s) {
  auto b = [&](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  auto cont = [&](std::size_t i) { return i < s.size() && (b(i) & 0xc0) == 0x80; };
  unsigned char c = b(0);
  if (c < 0x80) {
    return 1;
  }
  if (c >= 0xc2 && c <= 0xdf) {
    return cont(1) ? 2 : 0;
  }
  if (c >= 0xe0 && c <= 0xef) {
    if (!cont(1) || !cont(2)) {
      return 0;
    }
    // Overlong forms and UTF-16 surrogates are not characters.
    if ((c == 0xe0 && b(1) < 0xa0) || (c == 0xed && b(1) > 0x9f)) {
      return 0;
    }
    return 3;
  }
  if (c >= 0xf0 && c <= 0xf4) {
    if (!cont(1) || !cont(2) || !cont(3)) {
      return 0;
    }
    // Overlong forms and code points above U+10FFFF.
    if ((c == 0xf0 && b(1) < 0x90) || (c == 0xf4 && b(1) > 0x8f)) {
      return 0;
    }
    return 4;
  }
  return 0;
}

// Bytes copied as they are: printable ASCII other than '"' and '\\'.
constexpr std::array<bool, 256> k_plain = [] {
  std::array<bool, 256> plain{};
  for (int b = 0x20; b < 0x7f; ++b) {
    plain[b] = b != '"' && b != '\\';
  }
  return plain;
}();

}  // namespace

void append_json_string(std::string& out, std::string_view s) {
  out.push_back('"');
  append_json_escaped(out, s);
  out.push_back('"');
}

void append_json_escaped(std::string& out, std::string_view s) {
  static constexpr char hex[] = "0123456789abcdef";
  while (!s.empty()) {
    // Plain printable ASCII, the usual case, is copied in one run.
    std::size_t plain = 0;
    while (plain < s.size() && k_plain[static_cast<unsigned char>(s[plain])]) {
      ++plain;
    }
    if (plain > 0) {
      out.append(s.data(), plain);
      s.remove_prefix(plain);
      continue;
    }
    auto c = static_cast<unsigned char>(s.front());
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') {
      out.append("\\n");
    } else if (c == '\r') {
      out.append("\\r");
    } else if (c == '\t') {
      out.append("\\t");
    } else if (c < 0x20 || c == 0x7f) {
      // DEL needs no escape in JSON, but a raw one in a log line can upset a terminal.
      out.append("\\u00");
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 0xf]);
    } else if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (std::size_t n = utf8_sequence_length(s); n != 0) {
      out.append(s.substr(0, n));
      s.remove_prefix(n);
      continue;
    } else {
      out.append("\\ufffd");
    }
    s.remove_prefix(1);
  }
}

}  // namespace ratewall
