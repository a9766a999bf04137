#include "ratewall/proxy/grpc_status.hpp"

#include <boost/beast/core/string.hpp>
#include <charconv>

namespace ratewall {

namespace {

constexpr std::string_view k_grpc_type = "application/grpc";

// Byte `i` of `text` goes as it is: printable ASCII but '%', and no space at either end (an
// HTTP/2 field value neither begins nor ends with one, RFC 9113 §8.2.1).
bool plain_at(std::string_view text, std::size_t i) {
  const auto byte = static_cast<unsigned char>(text[i]);
  if (byte == ' ') {
    return i != 0 && i + 1 != text.size();
  }
  return byte > 0x20 && byte <= 0x7e && byte != '%';
}

// Hands `append` the encoded text in pieces: each run of plain bytes as it is, each other byte
// as its three characters. One encoder for both kinds of output, with no string in between.
template <class Append>
void percent_encode(std::string_view text, Append&& append) {
  constexpr char hex[] = "0123456789ABCDEF";
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t run = i;
    while (run < text.size() && plain_at(text, run)) {
      ++run;
    }
    if (run > i) {
      append(text.substr(i, run - i));
      i = run;
      continue;
    }
    const auto byte = static_cast<unsigned char>(text[i]);
    const char escape[3] = {'%', hex[byte >> 4], hex[byte & 0xf]};
    append(std::string_view(escape, 3));
    ++i;
  }
}

}  // namespace

grpc_code grpc_code_for(unsigned http_status) {
  switch (http_status) {
    case 400:
      return grpc_code::internal;
    case 401:
      return grpc_code::unauthenticated;
    case 403:
      return grpc_code::permission_denied;
    case 404:
      return grpc_code::unimplemented;
    case 408:
      return grpc_code::deadline_exceeded;
    case 413:
    case 429:
    case 431:
      return grpc_code::resource_exhausted;
    case 502:
    case 503:
    case 504:
      return grpc_code::unavailable;
    default:
      return grpc_code::unknown;
  }
}

std::string percent_encode_grpc_message(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  percent_encode(text, [&out](std::string_view piece) { out.append(piece); });
  return out;
}

bool is_grpc_request(std::string_view content_type) {
  if (content_type.size() < k_grpc_type.size() ||
      !boost::beast::iequals(content_type.substr(0, k_grpc_type.size()), k_grpc_type)) {
    return false;
  }
  if (content_type.size() == k_grpc_type.size()) {
    return true;
  }
  const char next = content_type[k_grpc_type.size()];
  return next == '+' || next == ';';
}

void grpc_trailers_only(grpc_code code, std::string_view message, const header_list& extra,
                        h2_fields& out) {
  out.clear();
  out.add(":status", "200");
  out.add("content-type", k_grpc_type);
  char digits[4];
  const char* end = std::to_chars(digits, digits + sizeof digits, static_cast<unsigned>(code)).ptr;
  out.add("grpc-status", std::string_view(digits, static_cast<std::size_t>(end - digits)));
  if (!message.empty()) {
    out.add("grpc-message", {});
    percent_encode(message, [&out](std::string_view piece) { out.extend_value(piece); });
  }
  out.add_own(extra);
}

}  // namespace ratewall
