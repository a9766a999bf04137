#pragma once

// Reading a file the configuration names (the configuration itself, certificates, a JWK set)
// without waiting on it: a FIFO, a device or a socket there would block the open or the reads,
// and a reload, and with it a SIGTERM's drain, would wait on it for as long as nothing writes.

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

}  // namespace ratewall
