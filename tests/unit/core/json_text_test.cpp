#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "ratewall/core/json_text.hpp"

using namespace ratewall;

namespace {

std::string json_string(std::string_view s) {
  std::string out;
  append_json_string(out, s);
  return out;
}

}  // namespace

TEST_CASE("append_json_string quotes text and appends to what is there") {
  std::string out = "x=";
  append_json_string(out, "plain text/123");
  CHECK(out == "x=\"plain text/123\"");
  CHECK(json_string("") == "\"\"");
}

TEST_CASE("append_json_string escapes quotes, backslashes and control characters") {
  CHECK(json_string("a\"b\\c") == R"("a\"b\\c")");
  CHECK(json_string("\n\r\t") == R"("\n\r\t")");
  CHECK(json_string(std::string_view("\0\x01\x1f\x7f", 4)) == R"("\u0000\u0001\u001f\u007f")");
  CHECK(json_string("\x08\x0c") == R"("\u0008\u000c")");
  CHECK(json_string(" ~") == "\" ~\"");
}

TEST_CASE("append_json_string keeps valid UTF-8 as it is") {
  // 2, 3 and 4 bytes, including the edges: U+0080, U+07FF, U+0800, U+FFFF, U+10000, U+10FFFF.
  for (std::string_view s :
       {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\x80", "\xdf\xbf", "\xe0\xa0\x80",
        "\xef\xbf\xbf", "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"}) {
    CAPTURE(s);
    CHECK(json_string(s) == "\"" + std::string(s) + "\"");
  }
}

TEST_CASE("append_json_string turns each byte that is not UTF-8 into U+FFFD") {
  SUBCASE("stray and impossible bytes") {
    CHECK(json_string("\xff\xfe") == R"("\ufffd\ufffd")");
    CHECK(json_string("a\x80z") == R"("a\ufffdz")");
  }
  SUBCASE("overlong forms") {
    CHECK(json_string("\xc0\xaf") == R"("\ufffd\ufffd")");
    CHECK(json_string("\xe0\x9f\xbf") == R"("\ufffd\ufffd\ufffd")");
    CHECK(json_string("\xf0\x8f\xbf\xbf") == R"("\ufffd\ufffd\ufffd\ufffd")");
  }
  SUBCASE("UTF-16 surrogates and code points above U+10FFFF") {
    CHECK(json_string("\xed\xa0\x80") == R"("\ufffd\ufffd\ufffd")");
    CHECK(json_string("\xf4\x90\x80\x80") == R"("\ufffd\ufffd\ufffd\ufffd")");
  }
  SUBCASE("a sequence cut short, then text") {
    CHECK(json_string("\xe2\x82") == R"("\ufffd\ufffd")");
    CHECK(json_string("\xe2\x82z\xc3") == R"("\ufffd\ufffdz\ufffd")");
  }
}

TEST_CASE("append_json_escaped in pieces cut at ASCII gives what one string gives") {
  // The pieces of a 429's "detail": fixed text between names that may hold anything.
  const std::string_view pieces[] = {"Limit \"", "per\x01key\xc3", "\" of route \"", "r\\t",
                                     "\xe2\x82\xac\" exceeded"};
  std::string whole;
  std::string out = "\"";
  for (std::string_view p : pieces) {
    whole.append(p);
    append_json_escaped(out, p);
  }
  out.push_back('"');
  CHECK(out == json_string(whole));
  CHECK(out == R"("Limit \"per\u0001key\ufffd\" of route \"r\\t€\" exceeded")");
}
