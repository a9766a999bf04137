#include "ratewall/proxy/h2_preface.hpp"

#include <doctest/doctest.h>

#include <string>

using namespace ratewall;

static_assert(k_h2_preface.size() == 24);

TEST_CASE("h2 preface: the first bytes of a connection, whole, in part or not at all") {
  const std::string preface(k_h2_preface);
  // A SETTINGS frame with no settings: 9 bytes of frame header.
  const std::string settings("\x00\x00\x00\x04\x00\x00\x00\x00\x00", 9);
  struct row {
    const char* what;
    std::string received;
    preface_match match;
  };
  const row rows[] = {
      {"nothing yet", "", preface_match::partial},
      {"1 byte", "P", preface_match::partial},
      {"23 bytes", preface.substr(0, 23), preface_match::partial},
      {"all 24", preface, preface_match::yes},
      {"24 and frames", preface + settings, preface_match::yes},
      {"differs at byte 0", "XRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", preface_match::no},
      {"differs at byte 18", "PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", preface_match::no},
      {"differs at byte 18, seen so far", "PRI * HTTP/2.0\r\n\r\nX", preface_match::no},
      {"differs at the last byte", preface.substr(0, 23) + "\t", preface_match::no},
      {"an HTTP/1.1 request", "GET / HTTP/1.1\r\nHost: a\r\n\r\n", preface_match::no},
      {"an HTTP/1.1 PRI request", "PRI / HTTP/1.1\r\n", preface_match::no},
      {"lower case", "pri * http/2.0\r\n\r\nsm\r\n\r\n", preface_match::no},
  };
  for (const row& r : rows) {
    CAPTURE(r.what);
    CHECK(h2_preface_match(r.received) == r.match);
  }
}
