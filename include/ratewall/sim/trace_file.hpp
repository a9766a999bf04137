#pragma once

// The bytes of a trace file for `ratewall simulate`, read whole before the replay: what the
// file held then is the trace, whatever happens to it after (a log rotated by copytruncate
// and written again, a file rewritten in place). A regular file is read into a buffer of its
// size that asks for huge pages: the faults of a gigabyte buffer in 4 KiB pages cost more
// than the copy. A pipe, a socket or a terminal is read to its end (`zcat access.log.gz |
// ratewall simulate --trace -`); "-" and /dev/stdin are the standard input.

#include <memory>
#include <string>
#include <string_view>

namespace ratewall {

class trace_file {
 public:
  /// Throws trace_error naming `path`: missing, unreadable, a directory, or a device that would
  /// never end (/dev/zero; /dev/null is an empty trace).
  explicit trace_file(const std::string& path);

  /// The whole file, a byte order mark (as some editors write) left out.
  std::string_view text() const { return text_; }

 private:
  std::unique_ptr<char[]> file_;  // a regular file
  std::string streamed_;          // anything else
  std::string_view text_;
};

}  // namespace ratewall
