#include "ratewall/proxy/key_journal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <thread>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "ratewall/config/loader.hpp"
#include "ratewall/core/log.hpp"
#include "ratewall/redis/redis_store.hpp"

namespace ratewall {

namespace asio = boost::asio;
using nlohmann::json;

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
  std::ifstream in(path_, std::ios::binary);
  if (!in) {
    return;  // none yet: nothing was changed at run time
  }
  std::vector<key_change> changes;
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
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
  if (cut && ::truncate(path_.c_str(), static_cast<off_t>(text.size())) != 0) {
    // Else the next change would be appended to the cut line, and both be lost.
    log_warn("cannot cut " + path_ + " back to its last whole line: " + std::strerror(errno));
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
    fd_ = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      return "cannot write " + path_ + ": " + std::strerror(errno);
    }
  }
  std::string line = key_change_json(change);
  line += '\n';
  if (std::string error = write_all(fd_, line); !error.empty()) {
    return "cannot write " + path_ + ": " + error;
  }
  if (::fdatasync(fd_) != 0) {
    return "cannot write " + path_ + ": " + std::strerror(errno);
  }
  ++lines_;
  return {};
}

void key_file_journal::compact() {
  const std::vector<key_change> live = keys_->all_changes();
  const std::string tmp = path_ + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    log_warn("cannot rewrite " + path_ + " (" + std::strerror(errno) + "); it keeps growing");
    return;
  }
  std::string text;
  for (const key_change& c : live) {
    text += key_change_json(c);
    text += '\n';
  }
  std::string error = write_all(fd, text);
  if (error.empty() && ::fsync(fd) != 0) {
    error = std::strerror(errno);
  }
  ::close(fd);
  if (error.empty() && std::rename(tmp.c_str(), path_.c_str()) != 0) {
    error = std::strerror(errno);
  }
  if (!error.empty()) {
    std::remove(tmp.c_str());
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
  if (fd_ >= 0) {
    ::close(fd_);  // it names the old file: appends go to the new one
    fd_ = -1;
  }
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
constexpr std::string_view k_stream_length = "100000";
constexpr auto k_poll = std::chrono::milliseconds(500);
constexpr std::string_view k_scan_count = "1000";
constexpr std::string_view k_read_count = "1000";

// One change, atomically: the table holds it, the stream announces it under the next number.
constexpr std::string_view k_record_script = R"lua(
local seq = redis.call('INCR', KEYS[3])
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', ARGV[3], '*', 's', seq, 'k', ARGV[1], 'v', ARGV[2])
return seq
)lua";

// Where the stream is now, in one atomic read: the counter and the newest entry.
constexpr std::string_view k_position_script = R"lua(
return {redis.call('GET', KEYS[1]) or '0', redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)}
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
  // Where the stream was read up to (the follower's coroutine only).
  std::string last_id;
  std::uint64_t last_seq = 0;
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
  const std::string position = redis::format_command(
      std::initializer_list<std::string_view>{"EVAL", k_position_script, "2", k_seq, k_stream});
  auto head = co_await store->run_commands(std::string(k_table), position, 1, &error);
  if (!head || head->front().type != redis::reply::kind::array ||
      head->front().elements.size() != 2) {
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
  keys->replace_changes(changes);
  last_id = at_id;
  last_seq = at_seq;
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
        "XRANGE", k_stream, from, "+", "COUNT", k_read_count});
    auto r = co_await store->run_commands(std::string(k_table), read, 1, &error);
    if (!r || r->front().type != redis::reply::kind::array) {
      report("cannot read " + std::string(k_stream), r ? "unexpected reply" : error);
      co_return false;
    }
    const auto& entries = r->front().elements;
    for (const redis::reply& item : entries) {
      auto e = read_entry(item);
      if (!e || e->seq != last_seq + 1) {
        log_warn(
            "run-time API keys: changes were missed (the stream was trimmed, or reset); "
            "loading every key again");
        co_return co_await load();
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
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
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
  asio::co_spawn(state_->ioc, state_->run(first), asio::detached);
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
  const std::string cmds = redis::format_command(std::initializer_list<std::string_view>{
      "EVAL", k_record_script, "3", k_table, k_stream, k_seq, sha, value, k_stream_length});
  std::string error;
  auto r = co_await state_->store->run_commands(std::string(k_table), cmds, 1, &error);
  if (!r) {
    co_return "Redis: " + error;
  }
  if (r->front().type != redis::reply::kind::integer) {
    co_return "Redis: " +
        (r->front().is_error() ? r->front().str : std::string("unexpected reply"));
  }
  // Applied here at once (this gateway answers with it); the follower applies it again when
  // it reads the stream, which changes nothing.
  state_->keys->apply(change);
  co_return std::string();
}

std::unique_ptr<key_journal> make_key_journal(const config& cfg, const std::string& config_path,
                                              const std::shared_ptr<store>& backing,
                                              std::shared_ptr<key_registry> keys) {
  if (auto redis = std::dynamic_pointer_cast<redis_store>(backing)) {
    auto journal = std::make_unique<redis_key_journal>(std::move(redis), std::move(keys));
    journal->start(std::chrono::milliseconds(3000));
    return journal;
  }
  const char* state = std::getenv("STATE_DIRECTORY");
  const std::string path =
      cfg.store.keys_file.empty()
          ? default_keys_file(config_path, state == nullptr ? std::string_view() : state)
          : resolve_config_path(cfg.store.keys_file, config_path);
  return std::make_unique<key_file_journal>(path, std::move(keys));
}

}  // namespace ratewall
