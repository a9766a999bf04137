#pragma once

// Telling an HTTP/2 connection from an HTTP/1.1 one by its first bytes (DESIGN §12): a client
// that speaks HTTP/2 without ALPN (prior knowledge, h2c) opens with the connection preface of
// RFC 9113 §3.4, which no HTTP/1.1 request line can begin with.

#include <string_view>

namespace ratewall {

/// The client connection preface: 24 bytes.
inline constexpr std::string_view k_h2_preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

enum class preface_match {
  no,       // these bytes are not the preface: HTTP/1.1 (or garbage) for the h1 session
  partial,  // so far the preface, but not all of it: read more before deciding
  yes,      // the whole preface, maybe followed by frames: the h2 session
};

/// How the first bytes read from a connection, `received`, compare with the preface. Empty is
/// `partial`: nothing has been seen yet, and the caller decides only once there is a byte.
constexpr preface_match h2_preface_match(std::string_view received) {
  if (received.starts_with(k_h2_preface)) {
    return preface_match::yes;
  }
  return k_h2_preface.starts_with(received) ? preface_match::partial : preface_match::no;
}

}  // namespace ratewall
