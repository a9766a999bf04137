#pragma once

// Reading a file the configuration names (the configuration itself, certificates, a JWK set)
// without waiting on it: a FIFO, a device or a socket there would block the open or the reads,
// and a reload, and with it a SIGTERM's drain, would wait on it for as long as nothing writes.
// And what stands in the way of a file the gateway writes, found before it has to.

#include <cstddef>
#include <string>

namespace ratewall {

/// The file's bytes, or why there are none.
struct file_text {
  std::string text;   // at most `limit` + 1 bytes: more than `limit` means the file is larger
  std::string error;  // empty when read: else strerror's text, or that it is not a regular file
};

/// Reads `path` (a regular file, or a link to one) up to `limit` + 1 bytes. A directory gives
/// "Is a directory"; a FIFO, a device or a socket is refused at once, unopened for reading.
file_text read_regular_file(const std::string& path, std::size_t limit);

/// What stands in the way of a file the gateway creates or replaces at `path` (the API keys'
/// journal, a state snapshot), found without opening it. Each caller words its own refusal.
struct write_obstacle {
  enum kind {
    none,
    no_folder,    // its folder does not exist, or is not a folder
    directory,    // a directory is there
    not_regular,  // a FIFO, a device or a socket is there
    unreadable,   // its status cannot be read (a name too long, a folder not searchable)
  } what = none;
  std::string error;  // strerror's text, for `unreadable`
};

write_obstacle obstacle_to_writing(const std::string& path);

}  // namespace ratewall
