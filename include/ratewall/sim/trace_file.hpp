#pragma once

// The bytes of a trace file for `ratewall simulate`, read whole before the replay: what the
// file held then is the trace, whatever happens to it after (a log rotated by copytruncate
// and written again, a file rewritten in place). A regular file is read into a buffer of its
// size that asks for huge pages: the faults of a gigabyte buffer in 4 KiB pages cost more
// than the copy. A pipe, a socket or a terminal is read to its end (`zcat access.log.gz |
// ratewall simulate --trace -`); "-" and /dev/stdin are the standard input.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "ratewall/sim/trace.hpp"

namespace ratewall {

class trace_file {
 public:
  /// Throws trace_error naming `path`: missing, unreadable, a directory, or a device that would
  /// never end (/dev/zero; /dev/null is an empty trace).
  explicit trace_file(const std::string& path);

  /// The first `size` bytes of the regular file open as `fd` (read from its start; the
  /// descriptor stays the caller's): the file stream_trace began with, whatever `path` names
  /// since (a log rotated meanwhile).
  trace_file(int fd, std::size_t size, const std::string& path);

  /// The whole file, a byte order mark (as some editors write) left out.
  std::string_view text() const { return text_; }

 private:
  void read_regular(int fd, std::size_t size, const std::string& path);

  std::unique_ptr<char[]> file_;  // a regular file
  std::string streamed_;          // anything else
  std::string_view text_;
};

inline constexpr std::size_t k_stream_window = 1 << 15;      // requests held back, at most
inline constexpr std::size_t k_stream_min_window = 1 << 12;  // when lines are long
inline constexpr std::size_t k_stream_piece_bytes = std::size_t{1} << 20;

/// How stream_trace ended.
enum class stream_outcome : std::uint8_t {
  streamed,  // every request was handed over, in time order
  whole,     // none was: the trace was read whole instead (read_trace it)
};

/// Reads the trace in regular file `path` a piece at a time into buffers it reuses, and hands
/// its requests to `each` in time order, as read_trace would order them; `start(origin)`
/// (trace::origin) comes before the first. A replay that keeps only counts (`simulate
/// --summary`) then needs memory for neither the file nor its requests, nor time for the
/// kernel to provide it: on a VM, fresh memory costs more than the replay.
///
/// A log is slightly out of order (trace.hpp), so requests are held back until
/// k_stream_window later ones are read (fewer when its lines are long) and are handed over
/// sorted. A line earlier than a request already handed over cannot be placed: the result is
/// then `whole`, with the file in `whole` (the same file, from its start, as large as it was
/// when it was opened), as for anything that is not a regular file opened by name ("-" is
/// read where the standard input stands). Warnings go to `warnings` only when the result is
/// `streamed` or trace_error is thrown, so a trace read again is not reported twice. Throws
/// trace_error as trace_file and read_trace do. `piece_bytes` is the size of a piece (tests
/// make it small; a longer line doubles it).
stream_outcome stream_trace(const std::string& path, std::optional<trace_format> format,
                            std::ostream& warnings, const std::function<void(nanos)>& start,
                            const std::function<void(const trace_request&)>& each,
                            std::optional<trace_file>& whole,
                            std::size_t piece_bytes = k_stream_piece_bytes);

}  // namespace ratewall
