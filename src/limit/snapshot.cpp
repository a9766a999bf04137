#include "ratewall/limit/snapshot.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "ratewall/core/hash.hpp"
#include "ratewall/core/read_file.hpp"
#include "ratewall/limit/memory_store.hpp"

namespace ratewall {

namespace {

constexpr std::string_view k_magic = "ratewall-snapshot\n";
constexpr std::size_t k_header_bytes = k_magic.size() + 4 + 8 + 8 + 8;
constexpr std::size_t k_digest_bytes = 32;
// A snapshot written up to this far in the future is taken as it is: NTP steps a wall clock
// by seconds at boot, and holding clients that much longer is better than forgetting them
// all. Further, the wall clock went back while the gateway was down, and every time in the
// file would hold clients that much longer.
constexpr nanos k_clock_slack = std::chrono::minutes(1);

std::system_error file_error(const std::string& what, const std::string& path) {
  return std::system_error(errno, std::generic_category(), what + " " + path);
}

void write_all(int fd, std::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      throw file_error("store.snapshot: cannot write", path);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Writes `data` to `path` whole or not at all: a new file beside it, synced, renamed over it,
// then the directory synced so that the rename itself survives a crash.
void replace_file(const std::string& link_or_path, std::string_view data) {
  // A symbolic link keeps pointing at the snapshot: the file it names is the one replaced (or
  // made, when the link is dangling).
  const std::string path = link_target(link_or_path);
  // Named by the process: two gateways given the same path (a mistake) each rename a whole
  // file of their own, never the other's half-written one.
  const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
  ::unlink(tmp.c_str());  // left by a crash; O_EXCL then refuses anything put there meanwhile
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw file_error("store.snapshot: cannot create", tmp);
  }
  try {
    write_all(fd, data, tmp);
    if (::fsync(fd) != 0) {
      throw file_error("store.snapshot: cannot sync", tmp);
    }
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::system_error e = file_error("store.snapshot: cannot rename " + tmp + " to", path);
    ::unlink(tmp.c_str());
    throw e;
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) {
    dir = ".";
  }
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::string digest_bytes(std::string_view data) {
  const sha256_digest d = sha256(data);
  return {reinterpret_cast<const char*>(d.data()), d.size()};
}

}  // namespace

void byte_writer::text(std::string_view s) {
  u32(static_cast<std::uint32_t>(s.size()));
  out_.append(s);
}

void byte_writer::put(std::uint64_t v, int bytes) {
  char le[8];
  for (int i = 0; i < bytes; ++i) {
    le[i] = static_cast<char>(v >> (8 * i));
  }
  out_.append(le, static_cast<std::size_t>(bytes));
}

void byte_writer::patch_u64(std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) {
    out_[at + i] = static_cast<char>(v >> (8 * i));
  }
}

std::uint64_t byte_reader::get(int bytes) {
  if (left() < static_cast<std::size_t>(bytes)) {
    throw snapshot_error("truncated");
  }
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= std::uint64_t{static_cast<unsigned char>(in_[at_ + i])} << (8 * i);
  }
  at_ += bytes;
  return v;
}

std::string_view byte_reader::bytes(std::size_t n) {
  if (left() < n) {
    throw snapshot_error("truncated");
  }
  const std::string_view v = in_.substr(at_, n);
  at_ += n;
  return v;
}

std::string_view byte_reader::text(std::size_t max) {
  const std::uint32_t n = u32();
  if (n > max) {
    throw snapshot_error("a string of " + std::to_string(n) + " bytes");
  }
  return bytes(n);
}

std::uint64_t snapshot_key_tag(std::string_view hash_key) {
  const sha256_digest d = hmac_sha256(hash_key, "ratewall snapshot");
  std::uint64_t tag = 0;
  for (int i = 0; i < 8; ++i) {
    tag |= std::uint64_t{d[i]} << (8 * i);
  }
  return tag;
}

snapshot_saved save_snapshot(const memory_store& store, const std::string& path, nanos now,
                             std::uint64_t key_tag) {
  std::string file;
  // Most rows take 50 to 60 bytes (a keyed subject and one to three words of state): one
  // allocation rather than a dozen doublings of a string of tens of megabytes.
  file.reserve(k_header_bytes + store.size() * 64 + k_digest_bytes);
  byte_writer out(file);
  file.append(k_magic);
  out.u32(k_snapshot_version);
  out.i64(now.count());
  out.u64(key_tag);
  const std::size_t body_at = out.position();
  out.u64(0);
  snapshot_saved saved;
  saved.rows = store.save_rows(out, now);
  out.patch_u64(body_at, file.size() - k_header_bytes);
  file.append(digest_bytes(file));
  replace_file(path, file);
  saved.bytes = file.size();
  return saved;
}

snapshot_loaded load_snapshot(memory_store& store, const std::string& path, nanos now,
                              std::uint64_t key_tag) {
  snapshot_loaded loaded;
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (status.type() == std::filesystem::file_type::not_found) {
    return loaded;
  }
  loaded.found = true;
  // A device, a pipe or a directory is read no further (a FIFO would block the start) and
  // never replaced.
  if (!ec && status.type() != std::filesystem::file_type::regular) {
    loaded.problem = "not a regular file: it is left as it is, and no snapshot is written";
    loaded.keep_out = true;
    return loaded;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    loaded.problem = "cannot be read (" + std::string(std::strerror(errno)) + ")";
    return loaded;
  }
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (file.empty()) {
    loaded.found = false;  // as if there were none: nothing to lose
    return loaded;
  }
  // Shorter than the magic and a start of it: a snapshot cut short (the disk filled), not
  // another program's file.
  if (!file.starts_with(k_magic) && !k_magic.starts_with(file)) {
    // Another file, given as store.snapshot.path by mistake (the configuration, the keys
    // file): replacing it would destroy it.
    loaded.problem =
        "not a ratewall snapshot: it is left as it is, and no snapshot is written "
        "(move it away, or give store.snapshot another path)";
    loaded.keep_out = true;
    return loaded;
  }
  try {
    if (file.size() < k_header_bytes + k_digest_bytes) {
      throw snapshot_error("truncated");
    }
    byte_reader header(std::string_view(file).substr(k_magic.size()));
    const std::uint32_t version = header.u32();
    if (version != k_snapshot_version) {
      throw snapshot_error("version " + std::to_string(version) + ", this build reads " +
                           std::to_string(k_snapshot_version));
    }
    const nanos written_at{header.i64()};
    const std::uint64_t tag = header.u64();
    const std::uint64_t body_bytes = header.u64();
    const std::uint64_t held = file.size() - k_header_bytes - k_digest_bytes;
    if (body_bytes > held) {
      throw snapshot_error("truncated (its header promises " + std::to_string(body_bytes) +
                           " bytes of rows, the file holds " + std::to_string(held) + ")");
    }
    if (body_bytes < held) {
      throw snapshot_error("longer than its header says");
    }
    const std::string_view signed_part =
        std::string_view(file).substr(0, file.size() - k_digest_bytes);
    if (digest_bytes(signed_part) != std::string_view(file).substr(signed_part.size())) {
      throw snapshot_error("its checksum does not match (the file is corrupt)");
    }
    if (written_at > now + k_clock_slack) {
      throw snapshot_error("written " +
                           std::to_string((written_at - now) / std::chrono::milliseconds(1)) +
                           " ms in the future: the wall clock went back since");
    }
    loaded.age_ms = (now - written_at) / std::chrono::milliseconds(1);
    const std::string_view body = signed_part.substr(k_header_bytes);
    // Checked whole first, so that a malformed body changes nothing; then the limited rows,
    // which a full shard must keep, then the others.
    using pass = memory_store::restore_pass;
    for (const pass p : {pass::check, pass::limited, pass::rest}) {
      byte_reader rows(body);
      store.restore_rows(rows, now, tag == key_tag, p, loaded);
    }
  } catch (const snapshot_error& e) {
    loaded.problem = e.what();
  }
  return loaded;
}

}  // namespace ratewall
