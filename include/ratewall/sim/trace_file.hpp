#pragma once

// The bytes of a trace file for `ratewall simulate`. A regular file is mapped, not copied: a
// log may be gigabytes, and a mapping of the page cache costs neither a copy nor memory of the
// process's own. Anything else (a pipe: `zcat access.log.gz | ratewall simulate --trace
// /dev/stdin`) is read whole.
//
// A mapped file truncated while it is read (a log rotated with `copytruncate`) would kill the
// process with SIGBUS: while a trace_file maps a file, a fault inside the mapping prints what
// happened and exits with status 2, as for any trace that cannot be read. One trace_file maps
// at a time (the command reads one trace).

#include <cstddef>
#include <string>
#include <string_view>

namespace ratewall {

class trace_file {
 public:
  /// Throws trace_error naming `path`: missing, unreadable, or a directory.
  explicit trace_file(const std::string& path);
  ~trace_file();
  trace_file(const trace_file&) = delete;
  trace_file& operator=(const trace_file&) = delete;

  /// The whole file, a byte order mark (as some editors write) left out.
  std::string_view text() const { return text_; }

 private:
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  std::string read_;  // what was read when the file could not be mapped
  std::string_view text_;
};

}  // namespace ratewall
