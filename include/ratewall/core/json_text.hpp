#pragma once

#include <string>
#include <string_view>

namespace ratewall {

/// Appends `s` as a JSON string literal, quotes included. '"' and '\' are escaped; '\n', '\r'
/// and '\t' get their short escapes, other control characters (and DEL) \u00XX; bytes that are
/// not valid UTF-8 become U+FFFD (\ufffd), so the output always parses whatever `s` holds.
void append_json_string(std::string& out, std::string_view s);

/// The same escaping without the quotes: for a string literal written in pieces. Pieces that
/// split a UTF-8 sequence escape its parts as invalid bytes, so cut only where ASCII is.
void append_json_escaped(std::string& out, std::string_view s);

}  // namespace ratewall
