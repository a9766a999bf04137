#pragma once

// Reading a file the configuration names (the configuration itself, certificates, a JWK set)
// without waiting on it: a FIFO, a device or a socket there would block the open or the reads,
// and a reload, and with it a SIGTERM's drain, would wait on it for as long as nothing writes.
// And what stands in the way of a file the gateway writes, found before it has to.

#include <cstddef>
#include <string>
#include <string_view>

namespace ratewall {

/// The file's bytes, or why there are none.
struct file_text {
  std::string text;   // at most `limit` + 1 bytes: more than `limit` means the file is larger
  std::string error;  // empty when read: else strerror's text, or that it is not a regular file
};

/// Reads `path` (a regular file, or a link to one) up to `limit` + 1 bytes. A directory gives
/// "Is a directory"; a FIFO, a device or a socket is refused at once, unopened for reading.
file_text read_regular_file(const std::string& path, std::size_t limit);

/// The file `path` names once its symbolic links are followed (up to 8, each relative one from
/// its own folder), whether that file exists or not: where an open with O_CREAT would create
/// it. `path` itself when it is no link.
std::string link_target(const std::string& path);

/// What stands in the way of a file the gateway creates or replaces at `path` (the API keys'
/// journal, a state snapshot), found without opening it, its links followed (link_target).
/// Each caller words its own refusal.
struct write_obstacle {
  enum kind {
    none,
    no_folder,      // its folder does not exist, or is a file
    directory,      // a directory is there
    not_regular,    // a FIFO, a device or a socket is there
    unreadable,     // its status cannot be read (a name too long, a folder not searchable)
    not_readable,   // there, but the gateway's user may not read it (it is read at start)
    folder_locked,  // `beside` asked, and the gateway's user may not write in its folder
    name_too_long,  // its name with `suffix` (a file written beside it) is longer than allowed
  } what = none;
  std::string error;  // strerror's text, for `unreadable`, `not_readable` and `folder_locked`
  std::string path;   // the file looked at: `path` with its links followed
};

/// `beside`: the file is replaced through a new one written in its folder, whose name is the
/// file's and `suffix` (".tmp"); `suffix` is checked for length either way.
write_obstacle obstacle_to_writing(const std::string& path, bool beside, std::string_view suffix);

}  // namespace ratewall
