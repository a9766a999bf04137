#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ratewall::redis {

/// One RESP2 reply, owned (converted from hiredis's redisReply and freed at once).
struct reply {
  enum class kind { string, status, error, integer, nil, array };

  kind type = kind::nil;
  std::int64_t integer = 0;
  std::string str;  // string, status, error
  std::vector<reply> elements;

  bool is_error() const { return type == kind::error; }
  bool is_string() const { return type == kind::string || type == kind::status; }
  /// The first word of an error ("MOVED", "NOSCRIPT", "ERR"); empty for other kinds.
  std::string_view error_code() const;

  static reply make_string(std::string s);
  static reply make_status(std::string s);
  static reply make_error(std::string s);
  static reply make_integer(std::int64_t v);
  static reply make_array(std::vector<reply> items);
};

/// An incremental RESP parser: hiredis's redisReader (redisReaderCreate / Feed / GetReply).
/// Bytes go in as they arrive; whole replies come out in order. Not thread-safe.
///
/// Bounded: a reply of more than k_max_reply_bytes, or with an array of more than
/// k_max_elements, is a protocol error. hiredis 0.14 refuses only a count below -1 or past an
/// int: a server (or whatever answers on its port) could make it buffer a bulk string of up
/// to 512 MiB, or allocate an array of two billion elements from one line. The gateway's own
/// replies are a few integers; the largest it reads, CLUSTER SLOTS, is one entry per slot
/// range (16,384 at most, a few hundred bytes each with its replicas).
class reply_reader {
 public:
  static constexpr std::size_t k_max_reply_bytes = 32 * 1024 * 1024;
  static constexpr long long k_max_elements = 65536;

  reply_reader();
  ~reply_reader();
  reply_reader(const reply_reader&) = delete;
  reply_reader& operator=(const reply_reader&) = delete;

  void feed(const char* data, std::size_t n);

  enum class status { reply, incomplete, protocol_error };
  /// The next complete reply into `out`; protocol_error leaves the reader unusable.
  status next(reply& out);
  /// Drops buffered bytes and any error: for a new connection.
  void reset();
  std::string error() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

/// Appends one command in RESP (hiredis redisFormatCommandArgv) to `out`.
void append_command(std::string& out, std::span<const std::string_view> args);
std::string format_command(std::span<const std::string_view> args);
inline std::string format_command(std::initializer_list<std::string_view> args) {
  return format_command(std::span<const std::string_view>(args.begin(), args.size()));
}

}  // namespace ratewall::redis
