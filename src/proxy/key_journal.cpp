#include "ratewall/proxy/key_journal.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/core/read_file.hpp"
#include "ratewall/core/use_tuple.hpp"
#include "ratewall/redis/redis_store.hpp"

namespace ratewall {

namespace asio = boost::asio;
using nlohmann::json;

// The longest suffix of a file written beside the journal: the copy of a damaged one kept for a
// person to read (its rewrites go through PATH.tmp).
constexpr std::string_view k_damaged_suffix = ".damaged";

std::string key_change_json(const key_change& change) {
  json j{{"sha256", to_hex(change.sha256)}};
  if (!change.meaning) {
    j["deleted"] = true;
  } else {
    j["plan"] = change.meaning->plan;
    if (!change.meaning->name.empty()) {
      j["name"] = change.meaning->name;
    }
  }
  return j.dump();
}

std::optional<key_change> parse_key_change(std::string_view line, std::string* error) {
  auto fail = [&](std::string why) -> std::optional<key_change> {
    if (error != nullptr) {
      *error = std::move(why);
    }
    return std::nullopt;
  };
  json j = json::parse(line, nullptr, false);
  if (!j.is_object()) {
    return fail("not a JSON object");
  }
  key_change change;
  auto sha = j.find("sha256");
  std::optional<sha256_digest> digest;
  if (sha == j.end() || !sha->is_string() ||
      !(digest = sha256_from_hex(sha->get_ref<const std::string&>()))) {
    return fail("sha256: expected 64 hex digits");
  }
  change.sha256 = *digest;
  if (auto d = j.find("deleted"); d != j.end()) {
    if (*d != true) {
      return fail("deleted: expected true");
    }
    return change;
  }
  auto plan = j.find("plan");
  if (plan == j.end() || !plan->is_string()) {
    return fail("plan: expected a string");
  }
  key_meaning meaning{plan->get<std::string>(), {}};
  if (auto name = j.find("name"); name != j.end()) {
    if (!name->is_string() || !key_name_problem(name->get_ref<const std::string&>()).empty()) {
      return fail("name: " + (name->is_string()
                                  ? key_name_problem(name->get_ref<const std::string&>())
                                  : std::string("expected a string")));
    }
    meaning.name = name->get<std::string>();
  }
  change.meaning = std::move(meaning);
  return change;
}

std::string default_keys_file(const std::string& config_path, std::string_view state_directory) {
  std::filesystem::path p(config_path);
  const std::string ext = p.extension().string();
  if (ext == ".yaml" || ext == ".yml") {
    p.replace_extension();
  }
  p += ".keys.jsonl";
  state_directory = state_directory.substr(0, state_directory.find(':'));
  if (!state_directory.empty()) {
    return (std::filesystem::path(state_directory) / p.filename()).string();
  }
  return p.string();
}

// ---------------------------------------------------------------------------------------------
// The file journal.

namespace {

// Writes all of `text` to `fd`; errno's text when it cannot.
std::string write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return std::strerror(errno);
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

key_file_journal::key_file_journal(std::string path, std::shared_ptr<key_registry> keys)
    : path_(std::move(path)), keys_(std::move(keys)) {
  // A symbolic link is followed once, here, to the file it names (created there when it does
  // not exist yet): rewrites then replace that file, not the link.
  path_ = link_target(path_);
  std::error_code ec;
  if (auto real = std::filesystem::weakly_canonical(path_, ec); !ec) {
    path_ = real.string();
  }
  if (std::filesystem::is_directory(path_, ec)) {
    throw std::runtime_error("store.keys_file " + path_ + " is a directory, not a file");
  }
  fd_ = ::open(path_.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  int read_fd = fd_;
  if (fd_ < 0) {
    // Not writable (a read-only directory, or a file of another user): the gateway starts, and
    // refuses changes saying why. Changes already made must still be read: a key deleted at run
    // time must not come back because its journal could not be opened.
    read_only_ = std::string("cannot write ") + path_ + ": " + std::strerror(errno);
    read_fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (read_fd < 0 && errno != ENOENT && errno != ENOTDIR) {
      throw std::runtime_error("cannot read " + path_ + " (store.keys_file, the API keys changed " +
                               "at run time): " + std::strerror(errno));
    }
  } else if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(
        error == EWOULDBLOCK
            ? "another process uses " + path_ +
                  " (store.keys_file): each gateway needs a file of its own (gateways share "
                  "run-time API keys through the Redis store)"
            : "cannot lock " + path_ + ": " + std::strerror(error));
  }
  std::string text;
  if (read_fd >= 0) {
    text = read_all(read_fd);
    if (read_fd != fd_) {
      ::close(read_fd);
    }
  }
  load(text);
}

std::string key_file_journal::read_all(int fd) const {
  std::string text;
  char buf[64 * 1024];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fd, buf, sizeof buf, at);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n < 0) {
      throw std::runtime_error("cannot read " + path_ + ": " + std::strerror(errno));
    }
    if (n == 0) {
      return text;
    }
    text.append(buf, static_cast<std::size_t>(n));
    at += n;
  }
}

void key_file_journal::load(std::string& text) {
  std::vector<key_change> changes;
  std::size_t line_no = 0;
  std::size_t skipped = 0;
  bool cut = false;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = text.find('\n', at);
    ++line_no;
    if (end == std::string::npos) {
      // A crash between write and fsync leaves a line without its newline: that change was
      // never acknowledged, so it is dropped (the next append starts on a line of its own).
      log_warn(path_ + ":" + std::to_string(line_no) +
               ": the last line is cut short (a change that was not finished); ignored");
      cut = true;
      text.resize(at);
      break;
    }
    std::string_view line(text.data() + at, end - at);
    at = end + 1;
    if (line.empty()) {
      continue;
    }
    ++lines_;
    std::string error;
    if (auto change = parse_key_change(line, &error)) {
      changes.push_back(std::move(*change));
    } else {
      ++skipped;
      log_warn(path_ + ":" + std::to_string(line_no) + ": " + error + "; this line is ignored");
    }
  }
  // Later lines override earlier ones: replayed in order into a map first.
  std::map<sha256_digest, std::optional<key_meaning>> last;
  for (key_change& c : changes) {
    last.insert_or_assign(c.sha256, std::move(c.meaning));
  }
  std::vector<key_change> live;
  live.reserve(last.size());
  for (auto& [sha, meaning] : last) {
    live.push_back(key_change{sha, std::move(meaning)});
  }
  keys_->replace_changes(live);
  log_info("run-time API keys: " + std::to_string(live.size()) + " changes loaded from " + path_ +
           (skipped > 0 ? " (" + std::to_string(skipped) + " lines ignored)" : std::string()));
  if (fd_ < 0) {
    return;  // read only: nothing to repair
  }
  if (cut && ::ftruncate(fd_, static_cast<off_t>(text.size())) != 0) {
    // Else the next change would be appended to the cut line, and both be lost.
    broken_ = "cannot cut " + path_ + " back to its last whole line: " + std::strerror(errno);
    log_error(broken_);
  }
  if (skipped > 0) {
    // The damaged lines go with the rewrite below; the file as it was is kept for a person to
    // read (a damaged line may have been a revocation).
    const std::string copy = path_ + std::string(k_damaged_suffix);
    std::error_code ec;
    std::filesystem::copy_file(path_, copy, std::filesystem::copy_options::overwrite_existing, ec);
    log_warn(ec ? "cannot keep a copy of " + path_ + " before rewriting it: " + ec.message()
                : "the file as it was is kept as " + copy);
  }
  if (lines_ > 2 * live.size() + 1024 || skipped > 0) {
    compact();
  }
}

key_file_journal::~key_file_journal() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

std::string key_file_journal::append(const key_change& change) {
  if (fd_ < 0) {
    return read_only_ + "; nothing changed";
  }
  if (!broken_.empty()) {
    return broken_ + "; restart ratewall to repair the file; nothing changed";
  }
  // Another process replaced or removed the file (an editor, a second gateway's rewrite):
  // appending to the old one would lose the change at the next start.
  struct stat open_file {};
  struct stat named {};
  if (::fstat(fd_, &open_file) != 0 || ::stat(path_.c_str(), &named) != 0 ||
      open_file.st_ino != named.st_ino || open_file.st_dev != named.st_dev) {
    return path_ +
           " was replaced or removed by another process: restart ratewall to read it "
           "again; nothing changed";
  }
  std::string line = key_change_json(change);
  line += '\n';
  std::string error = write_all(fd_, line);
  if (error.empty() && ::fdatasync(fd_) != 0) {
    error = std::strerror(errno);
  }
  if (!error.empty()) {
    // A part of the line may be in the file: cut it off, or the next change would be glued to
    // it and both lost at the next start.
    if (::ftruncate(fd_, open_file.st_size) != 0) {
      broken_ = "cannot cut " + path_ + " back after a failed write: " + std::strerror(errno);
      log_error(broken_);
    }
    return "cannot write " + path_ + ": " + error + "; nothing changed";
  }
  ++lines_;
  return {};
}

void key_file_journal::compact() {
  const std::vector<key_change> live = keys_->all_changes();
  const std::string tmp = path_ + ".tmp";
  ::unlink(tmp.c_str());  // a leftover of a crash: never written through (O_EXCL below)
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    log_warn("cannot rewrite " + path_ + " (" + std::strerror(errno) + "); it keeps growing");
    return;
  }
  std::string text;
  for (const key_change& c : live) {
    text += key_change_json(c);
    text += '\n';
  }
  std::string error;
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    error = std::strerror(errno);
  }
  if (error.empty()) {
    error = write_all(fd, text);
  }
  if (error.empty() && ::fsync(fd) != 0) {
    error = std::strerror(errno);
  }
  if (error.empty() && std::rename(tmp.c_str(), path_.c_str()) != 0) {
    error = std::strerror(errno);
  }
  if (!error.empty()) {
    ::close(fd);
    ::unlink(tmp.c_str());
    log_warn("cannot rewrite " + path_ + " (" + error + "); it keeps growing");
    return;
  }
  // The directory entry too, so the rename survives a crash.
  const std::string dir = std::filesystem::path(path_).parent_path().string();
  if (const int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      d >= 0) {
    ::fsync(d);
    ::close(d);
  }
  // The new file, locked before it got the name, takes the old one's place.
  ::close(fd_);
  fd_ = fd;
  lines_ = live.size();
}

asio::awaitable<std::string> key_file_journal::record(key_change change) {
  if (std::string error = append(change); !error.empty()) {
    co_return error;
  }
  keys_->apply(change);
  if (lines_ > 2 * keys_->changes() + 1024) {
    compact();
  }
  co_return std::string();
}

// ---------------------------------------------------------------------------------------------
// The Redis journal.

namespace {

constexpr std::string_view k_table = "rw:keys:{v1}:table";
constexpr std::string_view k_stream = "rw:keys:{v1}:changes";
constexpr std::string_view k_seq = "rw:keys:{v1}:seq";
// Set once, by the first change: a Redis that lost its data (a restart without persistence,
// FLUSHALL, eviction) has another epoch or none, which every gateway notices at its next read.
constexpr std::string_view k_epoch = "rw:keys:{v1}:epoch";
constexpr std::string_view k_stream_length = "100000";
constexpr auto k_poll = std::chrono::milliseconds(500);
constexpr std::string_view k_scan_count = "1000";
constexpr std::string_view k_read_count = "1000";

// One change, atomically: the table holds it, the stream announces it under the next number.
constexpr std::string_view k_record_script = R"lua(
redis.call('SET', KEYS[4], ARGV[4], 'NX')
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 's', seq, 'k', ARGV[1], 'v', ARGV[2])
return seq
)lua";

// Where the stream is now, in one atomic read: the counter, the newest entry and the epoch.
constexpr std::string_view k_position_script = R"lua(
return {redis.call('GET', KEYS[1]) or '0', redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1),
        redis.call('GET', KEYS[3]) or ''}
)lua";

// The entries after ARGV[1] (exclusive), with the epoch they belong to.
constexpr std::string_view k_follow_script = R"lua(
return {redis.call('GET', KEYS[1]) or '',
        redis.call('XRANGE', KEYS[2], ARGV[1], '+', 'COUNT', ARGV[2])}
)lua";

std::optional<std::uint64_t> parse_u64(std::string_view text) {
  std::uint64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

// A stream entry as XRANGE returns it: [id, [field, value, ...]].
struct stream_entry {
  std::string id;
  std::uint64_t seq = 0;
  std::string value;
};

std::optional<stream_entry> read_entry(const redis::reply& r) {
  if (r.type != redis::reply::kind::array || r.elements.size() != 2 || !r.elements[0].is_string() ||
      r.elements[1].type != redis::reply::kind::array) {
    return std::nullopt;
  }
  stream_entry e;
  e.id = r.elements[0].str;
  const auto& fields = r.elements[1].elements;
  bool seq_seen = false;
  for (std::size_t i = 0; i + 1 < fields.size(); i += 2) {
    if (!fields[i].is_string() || !fields[i + 1].is_string()) {
      return std::nullopt;
    }
    if (fields[i].str == "s") {
      auto seq = parse_u64(fields[i + 1].str);
      if (!seq) {
        return std::nullopt;
      }
      e.seq = *seq;
      seq_seen = true;
    } else if (fields[i].str == "v") {
      e.value = fields[i + 1].str;
    }
  }
  if (!seq_seen) {
    return std::nullopt;
  }
  return e;
}

}  // namespace

struct redis_key_journal::state {
  state(std::shared_ptr<redis_store> s, std::shared_ptr<key_registry> k)
      : store(std::move(s)), keys(std::move(k)) {}

  std::shared_ptr<redis_store> store;
  std::shared_ptr<key_registry> keys;
  asio::io_context ioc{1};
  std::thread thread;
  std::atomic<std::uint64_t> loads{0};
  // Changes reach the registry in the stream's order: the follower applies entries and the
  // admin thread its own acknowledged change under this lock, the latter only when the
  // follower has not passed it (else a gateway's older change could land over a newer one).
  std::mutex apply_mutex;
  std::uint64_t last_seq = 0;  // guarded by apply_mutex
  // Where the stream was read up to, and its epoch (the follower's coroutine only).
  std::string last_id;
  std::string epoch;
  bool loaded = false;
  bool reported_down = false;

  asio::awaitable<bool> load();
  asio::awaitable<bool> follow();
  asio::awaitable<void> run(std::shared_ptr<std::promise<void>> first);
  void report(const std::string& what, const std::string& error) {
    if (!reported_down) {
      log_warn("run-time API keys: " + what + ": " + error + " (retrying every second)");
      reported_down = true;
    }
  }
};

// The whole table, then the stream from the point where the table was read: a change made
// while the table is scanned comes again from the stream (applying one twice changes nothing).
asio::awaitable<bool> redis_key_journal::state::load() {
  std::string error;
  const std::string position = redis::format_command(std::initializer_list<std::string_view>{
      "EVAL", k_position_script, "3", k_seq, k_stream, k_epoch});
  auto head = co_await store->run_commands(std::string(k_table), position, 1, &error);
  if (!head || head->front().type != redis::reply::kind::array ||
      head->front().elements.size() != 3 || !head->front().elements[2].is_string()) {
    report("cannot read the stream's position", head ? "unexpected reply" : error);
    co_return false;
  }
  const redis::reply& seq = head->front().elements[0];
  const redis::reply& newest = head->front().elements[1];
  std::uint64_t at_seq = 0;
  std::string at_id = "0-0";
  if (seq.is_string()) {
    at_seq = parse_u64(seq.str).value_or(0);
  }
  if (newest.type == redis::reply::kind::array && !newest.elements.empty()) {
    if (auto e = read_entry(newest.elements[0])) {
      at_id = e->id;
      at_seq = e->seq;
    }
  }
  std::vector<key_change> changes;
  std::string cursor = "0";
  do {
    const std::string scan = redis::format_command(
        std::initializer_list<std::string_view>{"HSCAN", k_table, cursor, "COUNT", k_scan_count});
    auto r = co_await store->run_commands(std::string(k_table), scan, 1, &error);
    if (!r || r->front().type != redis::reply::kind::array || r->front().elements.size() != 2 ||
        !r->front().elements[0].is_string()) {
      report("cannot read " + std::string(k_table), r ? "unexpected reply" : error);
      co_return false;
    }
    cursor = r->front().elements[0].str;
    const auto& items = r->front().elements[1].elements;
    for (std::size_t i = 0; i + 1 < items.size(); i += 2) {
      std::string why;
      if (auto c = parse_key_change(items[i + 1].str, &why)) {
        changes.push_back(std::move(*c));
      } else {
        log_warn("run-time API keys: " + std::string(k_table) + " field " + items[i].str + ": " +
                 why + "; ignored");
      }
    }
  } while (cursor != "0");
  {
    std::lock_guard lock(apply_mutex);
    keys->replace_changes(changes);
    last_seq = at_seq;
  }
  last_id = at_id;
  epoch = head->front().elements[2].str;
  loaded = true;
  loads.fetch_add(1, std::memory_order_relaxed);
  if (reported_down) {
    log_info("run-time API keys: Redis answers again");
    reported_down = false;
  }
  log_info("run-time API keys: " + std::to_string(changes.size()) + " changes loaded from Redis");
  co_return true;
}

// Applies the stream's entries after last_id; false when Redis did not answer. A gap in the
// numbers (entries trimmed before they were read) loads the whole table again.
asio::awaitable<bool> redis_key_journal::state::follow() {
  for (;;) {
    std::string error;
    const std::string from = "(" + last_id;
    const std::string read = redis::format_command(std::initializer_list<std::string_view>{
        "EVAL", k_follow_script, "2", k_epoch, k_stream, from, k_read_count});
    auto r = co_await store->run_commands(std::string(k_table), read, 1, &error);
    if (!r || r->front().type != redis::reply::kind::array || r->front().elements.size() != 2 ||
        !r->front().elements[0].is_string() ||
        r->front().elements[1].type != redis::reply::kind::array) {
      report("cannot read " + std::string(k_stream), r ? "unexpected reply" : error);
      co_return false;
    }
    const std::string& now_epoch = r->front().elements[0].str;
    if (!epoch.empty() && now_epoch != epoch) {
      log_error(
          "run-time API keys: Redis lost them (its epoch changed or went: a restart without "
          "persistence, FLUSHALL, eviction); loading what it holds now. Keys deleted at run "
          "time may be accepted again until they are deleted again. Give Redis persistence "
          "(AOF or RDB) and maxmemory-policy noeviction or volatile-*");
      co_return co_await load();
    }
    epoch = now_epoch;  // the first change since this gateway loaded made it
    const auto& entries = r->front().elements[1].elements;
    bool gap = false;
    for (const redis::reply& item : entries) {
      auto e = read_entry(item);
      std::lock_guard lock(apply_mutex);
      if (!e || e->seq != last_seq + 1) {
        gap = true;
        break;
      }
      std::string why;
      if (auto c = parse_key_change(e->value, &why)) {
        keys->apply(*c);
      } else {
        log_warn("run-time API keys: stream entry " + e->id + ": " + why + "; ignored");
      }
      last_id = e->id;
      last_seq = e->seq;
    }
    if (gap) {
      log_warn(
          "run-time API keys: changes were missed (the stream was trimmed, or reset); loading "
          "every key again");
      co_return co_await load();
    }
    if (entries.size() < 1000) {
      co_return true;
    }
  }
}

asio::awaitable<void> redis_key_journal::state::run(std::shared_ptr<std::promise<void>> first) {
  asio::steady_timer timer(ioc);
  for (;;) {
    const bool ok = loaded ? co_await follow() : co_await load();
    if (first) {
      first->set_value();  // start() waits for the first load, whatever its outcome
      first.reset();
    }
    timer.expires_after(ok ? std::chrono::duration_cast<std::chrono::milliseconds>(k_poll)
                           : std::chrono::milliseconds(1000));
    auto [ec] = co_await timer.async_wait(use_tuple);
    if (ec) {
      co_return;
    }
  }
}

redis_key_journal::redis_key_journal(std::shared_ptr<redis_store> store,
                                     std::shared_ptr<key_registry> keys)
    : state_(std::make_shared<state>(std::move(store), std::move(keys))) {}

redis_key_journal::~redis_key_journal() {
  stop();
}

void redis_key_journal::start(std::chrono::milliseconds wait) {
  auto first = std::make_shared<std::promise<void>>();
  auto loaded = first->get_future();
  asio::co_spawn(state_->ioc, state_->run(first), log_failure{"key journal"});
  state_->thread = std::thread([s = state_] { s->ioc.run(); });
  if (loaded.wait_for(wait) != std::future_status::ready) {
    log_warn("run-time API keys: Redis did not answer within " + std::to_string(wait.count()) +
             " ms; the configuration's keys serve until it does");
  }
}

void redis_key_journal::stop() {
  state_->ioc.stop();
  if (state_->thread.joinable()) {
    state_->thread.join();
  }
}

std::uint64_t redis_key_journal::loads() const {
  return state_->loads.load(std::memory_order_relaxed);
}

asio::awaitable<std::string> redis_key_journal::record(key_change change) {
  const std::string sha = to_hex(change.sha256);
  const std::string value = key_change_json(change);
  const std::string new_epoch = to_hex(
      sha256(std::to_string(std::chrono::system_clock::now().time_since_epoch().count()) + sha));
  const std::string cmds = redis::format_command(std::initializer_list<std::string_view>{
      "EVAL", k_record_script, "4", k_table, k_stream, k_seq, k_epoch, sha, value, k_stream_length,
      new_epoch});
  std::string error;
  auto r = co_await state_->store->run_commands(std::string(k_table), cmds, 1, &error);
  if (!r) {
    // Sent, perhaps run: the answer is what was lost.
    co_return "Redis: " + error +
        "; the change may have been kept or not: GET the key to see, and repeat the request "
        "(it is idempotent)";
  }
  if (r->front().type != redis::reply::kind::integer) {
    co_return "Redis: " +
        (r->front().is_error() ? r->front().str : std::string("unexpected reply")) +
        "; nothing changed";
  }
  // Applied here at once (this gateway answers with it), unless the follower has already
  // applied this change, and perhaps a newer one of another gateway, from the stream.
  std::lock_guard lock(state_->apply_mutex);
  if (static_cast<std::uint64_t>(r->front().integer) > state_->last_seq) {
    state_->keys->apply(change);
  }
  co_return std::string();
}

bool redis_key_journal::ready(std::string* why) const {
  if (loads() > 0) {
    return true;
  }
  if (why != nullptr) {
    *why = "the run-time API keys are not loaded from Redis yet";
  }
  return false;
}

std::string keys_file_of(const config& cfg, const std::string& config_path) {
  const char* state = std::getenv("STATE_DIRECTORY");
  return cfg.store.keys_file.empty()
             ? default_keys_file(config_path, state == nullptr ? std::string_view() : state)
             : resolve_config_path(cfg.store.keys_file, config_path);
}

std::unique_ptr<key_journal> make_key_journal(const config& cfg, const std::string& config_path,
                                              const std::shared_ptr<store>& backing,
                                              std::shared_ptr<key_registry> keys) {
  if (auto redis = std::dynamic_pointer_cast<redis_store>(backing)) {
    auto journal = std::make_unique<redis_key_journal>(std::move(redis), std::move(keys));
    journal->start(std::chrono::milliseconds(3000));
    return journal;
  }
  check_keys_file(cfg, config_path);
  return std::make_unique<key_file_journal>(keys_file_of(cfg, config_path), std::move(keys));
}

void check_keys_file(const config& cfg, const std::string& config_path) {
  if (cfg.store.type == store_type::redis) {
    return;
  }
  const std::string path = keys_file_of(cfg, config_path);
  // A file that cannot be written is the read-only journal the start allows (changes are
  // refused, saying why); one that cannot be read is refused by the start.
  const write_obstacle obstacle = obstacle_to_writing(path, false, k_damaged_suffix);
  const std::string folder = std::filesystem::path(obstacle.path).parent_path().string();
  std::string what;
  switch (obstacle.what) {
    case write_obstacle::none:
      return;
    case write_obstacle::no_folder:
      what = std::filesystem::exists(folder) ? "whose folder " + folder + " is not a folder"
                                             : "in a folder that does not exist";
      break;
    case write_obstacle::directory:
      what = "which is a directory, not a file";
      break;
    case write_obstacle::not_regular:
      what = "which is not a regular file";
      break;
    case write_obstacle::unreadable:
      what = "which cannot be read: " + obstacle.error;  // a name too long, a folder not searchable
      break;
    case write_obstacle::not_readable:
      what = "which the gateway's user may not read: " + obstacle.error;
      break;
    case write_obstacle::folder_locked:  // not asked: a journal that cannot be written is read-only
      what = "in a folder the gateway's user may not write in: " + obstacle.error;
      break;
    case write_obstacle::name_too_long:
      what = "whose name is too long for the copies written beside it (" +
             std::string(k_damaged_suffix) + ", .tmp)";
      break;
  }
  if (cfg.store.keys_file.empty()) {
    // No line sets it: say where the default came from, and what to set instead.
    const char* state = std::getenv("STATE_DIRECTORY");
    what += state != nullptr && *state != 0
                ? " (store.keys_file's default in $STATE_DIRECTORY; set store.keys_file)"
                : " (store.keys_file's default, beside the configuration; set store.keys_file)";
  }
  throw config_error(config_path, cfg.store.keys_file_at.line,
                     cfg.store.keys_file.empty() ? "" : "store.keys_file",
                     "the API keys changed at run time would be kept in " + path + ", " + what);
}

}  // namespace ratewall
