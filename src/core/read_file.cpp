#include "ratewall/core/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

namespace ratewall {

file_text read_regular_file(const std::string& path, std::size_t limit) {
  file_text out;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    out.error = std::strerror(errno);
    return out;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    out.error = std::strerror(errno);
  } else if (S_ISDIR(st.st_mode)) {
    out.error = std::strerror(EISDIR);
  } else if (!S_ISREG(st.st_mode)) {
    out.error = "not a regular file (a FIFO, a device or a socket), which is not waited on";
  }
  char buf[64 * 1024];
  while (out.error.empty() && out.text.size() <= limit) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      out.error = std::strerror(errno);
    } else if (n == 0) {
      break;
    } else {
      out.text.append(buf, static_cast<std::size_t>(n));
    }
  }
  ::close(fd);
  if (!out.error.empty()) {
    out.text.clear();
  } else if (out.text.size() > limit + 1) {
    out.text.resize(limit + 1);
  }
  return out;
}

std::string link_target(const std::string& path) {
  std::filesystem::path at(path);
  std::error_code ec;
  for (int hops = 0; hops < 8 && std::filesystem::is_symlink(at, ec); ++hops) {
    const std::filesystem::path target = std::filesystem::read_symlink(at, ec);
    if (ec) {
      break;
    }
    at = target.is_absolute() ? target : at.parent_path() / target;
  }
  return at.string();
}

write_obstacle obstacle_to_writing(const std::string& path, bool beside, std::string_view suffix) {
  write_obstacle out;
  out.path = link_target(path);
  const std::filesystem::path file(out.path);
  std::string folder = file.parent_path().string();
  if (folder.empty()) {
    folder = ".";
  }
  const auto fail = [&out](write_obstacle::kind what, std::string error = {}) {
    out.what = what;
    out.error = std::move(error);
    return out;
  };
  std::error_code ec;
  const auto status = std::filesystem::status(file, ec);
  if (ec == std::errc::not_a_directory) {
    return fail(write_obstacle::no_folder);  // a file where a folder of the path should be
  }
  if (ec && ec != std::errc::no_such_file_or_directory) {
    return fail(write_obstacle::unreadable, ec.message());
  }
  if (std::filesystem::is_directory(status)) {
    return fail(write_obstacle::directory);
  }
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status)) {
    return fail(write_obstacle::not_regular);
  }
  if (!std::filesystem::exists(status) && !std::filesystem::is_directory(folder, ec)) {
    return fail(write_obstacle::no_folder);
  }
  // Asked with the effective ids, as the gateway's open and rename will be.
  if (std::filesystem::exists(status) &&
      ::faccessat(AT_FDCWD, out.path.c_str(), R_OK, AT_EACCESS) != 0) {
    return fail(write_obstacle::not_readable, std::strerror(errno));
  }
  if (beside && ::faccessat(AT_FDCWD, folder.c_str(), W_OK | X_OK, AT_EACCESS) != 0) {
    return fail(write_obstacle::folder_locked, std::strerror(errno));
  }
  const long name_max = ::pathconf(folder.c_str(), _PC_NAME_MAX);
  if (name_max > 0 &&
      file.filename().string().size() + suffix.size() > static_cast<std::size_t>(name_max)) {
    return fail(write_obstacle::name_too_long);
  }
  return out;
}

}  // namespace ratewall
