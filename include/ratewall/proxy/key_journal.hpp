#pragma once

// Where the API keys changed at run time (`PUT`/`DELETE /admin/keys/{sha256}`) are kept, so
// that they survive a restart and, with the Redis store, reach every gateway (DESIGN §5b).
//
//   - key_file_journal (memory store): one JSON line per change appended to a file beside the
//     configuration (store.keys_file), written and fsync'ed before the change is applied, and
//     replayed at start. Rewritten (temporary file, fsync, rename) when most of its lines are
//     changes overridden by later ones.
//   - redis_key_journal (Redis store): a hash `rw:keys:{v1}:table` (field: the key's SHA-256
//     in hex; value: the change's JSON) holds every change; a stream `rw:keys:{v1}:changes`
//     (entries numbered by `rw:keys:{v1}:seq`, trimmed to about 100,000) announces each. Both
//     are written by one Lua call. Each gateway loads the hash at start and reads the stream
//     every 500 ms, so a change reaches every gateway within a second; a gateway that missed
//     entries (trimmed away while Redis was unreachable) loads the hash again.
//
// A change line, as stored in both: {"sha256":"<64 hex>","plan":"premium","name":"acme"}
// ("name" absent when none), or {"sha256":"<64 hex>","deleted":true}. Only SHA-256s are kept:
// no raw key reaches a file or Redis.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>

#include "ratewall/http/key_registry.hpp"

namespace ratewall {

class redis_store;

/// A change as one line of JSON (without the newline), and back; nullopt with `*error` for a
/// line that is not one.
std::string key_change_json(const key_change& change);
std::optional<key_change> parse_key_change(std::string_view line, std::string* error);

class key_journal {
 public:
  virtual ~key_journal() = default;

  /// Records `change` durably, then applies it to the registry. "" when done, else why it could
  /// not be recorded (then nothing changed). Called on the admin thread, one at a time.
  virtual boost::asio::awaitable<std::string> record(key_change change) = 0;
  /// Where changes go, for messages: the file's path, or "redis".
  virtual std::string where() const = 0;
  /// False, with `*why`, while the keys changed at run time are not known yet (Redis not
  /// loaded): /readyz says so, since until then a key deleted at run time would be accepted.
  virtual bool ready(std::string* why) const { return true; }
};

/// The memory store's journal. Construction replays the file into `keys`:
///   - a missing file is an empty journal; one that exists but cannot be read (permissions, a
///     directory) throws std::runtime_error, since a key deleted at run time must not come
///     back because its record could not be read;
///   - a line that does not parse is reported with its number and skipped, and the file as it
///     was kept as <file>.damaged before the rewrite drops it; a last line cut short by a crash
///     is cut off;
///   - the file is locked (flock): a second process on the same file throws, since the two
///     would rewrite each other's changes away.
/// A file that cannot be written (a read-only directory) does not stop the start: changes are
/// refused with the reason. A failed write is cut back off the file, so "nothing changed" is
/// true; a file replaced under the gateway (inode changed) refuses changes until a restart.
class key_file_journal final : public key_journal {
 public:
  key_file_journal(std::string path, std::shared_ptr<key_registry> keys);
  ~key_file_journal() override;

  boost::asio::awaitable<std::string> record(key_change change) override;
  std::string where() const override { return path_; }

  /// Lines in the file now (for tests of compaction).
  std::size_t lines() const { return lines_; }

 private:
  std::string read_all(int fd) const;
  void load(std::string& text);
  std::string append(const key_change& change);
  void compact();

  std::string path_;
  std::shared_ptr<key_registry> keys_;
  int fd_ = -1;            // open for appending and locked; -1: read only
  std::string read_only_;  // why fd_ is -1
  std::string broken_;     // set when a failed write could not be cut off the file
  std::size_t lines_ = 0;  // lines in the file
};

/// The Redis store's journal. Loads the hash and follows the stream on a thread of its own
/// (start()), with a connection of its own, until stop() or destruction.
class redis_key_journal final : public key_journal {
 public:
  redis_key_journal(std::shared_ptr<redis_store> store, std::shared_ptr<key_registry> keys);
  ~redis_key_journal() override;

  /// Loads the hash, waiting up to `wait` for it (Redis may be down at start: then the keys of
  /// the configuration serve until it answers), and starts following the stream.
  void start(std::chrono::milliseconds wait);
  void stop();

  boost::asio::awaitable<std::string> record(key_change change) override;
  std::string where() const override { return "redis"; }
  bool ready(std::string* why) const override;

  /// Complete loads of the hash so far (start, and after a gap in the stream).
  std::uint64_t loads() const;

 private:
  struct state;
  std::shared_ptr<state> state_;
};

/// The journal `cfg` asks for: the Redis store's when `store` is one, else a file journal at
/// store.keys_file, or default_keys_file(config_path, $STATE_DIRECTORY).
std::unique_ptr<key_journal> make_key_journal(const config& cfg, const std::string& config_path,
                                              const std::shared_ptr<class store>& store,
                                              std::shared_ptr<key_registry> keys);

/// Where the file journal of `config_path` goes when store.keys_file is not set: beside it
/// ("/etc/ratewall/ratewall.yaml" -> "/etc/ratewall/ratewall.keys.jsonl"), or in
/// `state_directory` when one is given (systemd's StateDirectory= sets $STATE_DIRECTORY, a
/// list separated by ':' of which the first is taken): "/var/lib/ratewall/ratewall.keys.jsonl".
std::string default_keys_file(const std::string& config_path,
                              std::string_view state_directory = {});

/// The file journal's path: store.keys_file from the configuration's directory, or the default
/// beside it (or in $STATE_DIRECTORY).
std::string keys_file_of(const config& cfg, const std::string& config_path);

/// What the file journal of `cfg` cannot be, checked by `ratewall check` and the start alike:
/// a directory or another file that is not a regular one (a FIFO), or a file in a folder that
/// does not exist (a file the gateway may not write is allowed: it serves, refusing changes).
/// Throws config_error naming the line of store.keys_file (or the file, for the default path).
/// Nothing to check for the Redis store, whose keys are kept in Redis.
void check_keys_file(const config& cfg, const std::string& config_path);

}  // namespace ratewall
