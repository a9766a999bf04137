#include <doctest/doctest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "../../support/temp_dir.hpp"
#include "limit_fixtures.hpp"
#include "ratewall/core/hash.hpp"
#include "ratewall/limit/limiter.hpp"
#include "ratewall/limit/memory_store.hpp"
#include "ratewall/limit/snapshot.hpp"

using namespace ratewall;
using ratewall::testing::admitting;
using ratewall::testing::temp_dir;
using std::chrono::hours;
using std::chrono::minutes;
using std::chrono::seconds;

namespace {

// The algorithms with state to keep (concurrency's units belong to the process).
constexpr algorithm k_stateful[] = {algorithm::token_bucket, algorithm::leaky_bucket,
                                    algorithm::fixed_window, algorithm::sliding_window_log,
                                    algorithm::sliding_window_counter};

// Three requests an hour: a client that spent them stays limited for most of an hour.
limit_config three_an_hour(algorithm a, std::uint64_t n = 3) {
  return admitting("hourly", a, n);
}

config one_route(limit_config limit, std::uint64_t max_keys = 1000000) {
  config cfg;
  route_config route;
  route.name = "api";
  route.limits.push_back(std::move(limit));
  cfg.routes.push_back(std::move(route));
  cfg.store.max_keys = max_keys;
  return cfg;
}

// One gateway's limiter and store on a manual clock, started `at` into the clock's time.
struct gateway_state {
  gateway_state(config c, nanos at) : cfg(std::move(c)), clk(at) {
    auto owned = std::make_shared<memory_store>(cfg);
    store = owned.get();
    lim = std::make_unique<limiter>(cfg, clk, std::move(owned));
  }

  route_decision ask(std::string_view subject) { return *lim->try_check({0, subject, "", "GET"}); }
  void save(const std::string& path, std::uint64_t tag = 1) {
    save_snapshot(*store, path, clk.now(), tag);
  }
  snapshot_loaded load(const std::string& path, std::uint64_t tag = 1) {
    return load_snapshot(*store, path, clk.now(), tag);
  }

  config cfg;
  manual_clock clk;
  memory_store* store = nullptr;
  std::unique_ptr<limiter> lim;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// A file with the header and checksum of a real one around `body`.
std::string wrap_body(const std::string& body, std::int64_t written_at,
                      std::uint32_t version = k_snapshot_version) {
  std::string file = "ratewall-snapshot\n";
  byte_writer out(file);
  out.u32(version);
  out.i64(written_at);
  out.u64(1);
  out.u64(body.size());
  file += body;
  const sha256_digest d = sha256(file);
  file.append(reinterpret_cast<const char*>(d.data()), d.size());
  return file;
}

const nanos k_start = hours(24 * 365 * 6);  // a clock reading about 2026

}  // namespace

TEST_CASE("a restarted store decides as the one that wrote the snapshot, for every algorithm") {
  for (const algorithm a : k_stateful) {
    CAPTURE(to_string(a));
    temp_dir dir;
    const std::string path = dir.path + "/state.bin";
    gateway_state before(one_route(three_an_hour(a)), k_start);
    for (int i = 0; i < 3; ++i) {
      REQUIRE(before.ask("ip:192.0.2.1").allowed);  // spent
    }
    before.clk.advance(seconds(1));
    REQUIRE(before.ask("key:0123456789abcdef0123456789abcdef").allowed);  // one of three
    before.save(path);

    // The new process starts ten minutes later.
    gateway_state after(one_route(three_an_hour(a)), k_start + minutes(10));
    before.clk.advance(minutes(10) - seconds(1));
    const snapshot_loaded r = after.load(path);
    CHECK(r.found);
    CHECK(r.problem == "");
    CHECK(r.rows == 2);
    CHECK(r.age_ms == 10 * 60 * 1000 - 1000);
    CHECK(after.store->size() == 2);

    for (const char* who : {"ip:192.0.2.1", "key:0123456789abcdef0123456789abcdef", "ip:new"}) {
      CAPTURE(who);
      const route_decision b = before.ask(who);
      const route_decision c = after.ask(who);
      CHECK(b.allowed == c.allowed);
      CHECK(b.headline.remaining == c.headline.remaining);
      CHECK(b.headline.reset_after == c.headline.reset_after);
      CHECK(b.headline.retry_after == c.headline.retry_after);
    }
    // The spent client is still held: the restart gave it nothing.
    CHECK_FALSE(after.ask("ip:192.0.2.1").allowed);
  }
}

TEST_CASE("a snapshot drops what no longer applies: a changed limit, a lapsed state") {
  temp_dir dir;
  const std::string path = dir.path + "/state.bin";
  gateway_state before(one_route(three_an_hour(algorithm::fixed_window)), k_start);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(before.ask("ip:192.0.2.1").allowed);
  }
  before.save(path);

  SUBCASE("the limit is defined otherwise: its state means something else") {
    gateway_state after(one_route(three_an_hour(algorithm::fixed_window, 5)), k_start);
    const snapshot_loaded r = after.load(path);
    CHECK(r.problem == "");
    CHECK(r.rows == 0);
    CHECK(r.changed == 1);
    CHECK(after.store->size() == 0);
  }
  SUBCASE("the window ended while the gateway was down") {
    gateway_state after(one_route(three_an_hour(algorithm::fixed_window)), k_start + hours(2));
    const snapshot_loaded r = after.load(path);
    CHECK(r.problem == "");
    CHECK(r.rows == 0);
    CHECK(r.expired == 1);
    CHECK(after.ask("ip:192.0.2.1").allowed);
  }
  SUBCASE("the store has room for fewer rows than the snapshot holds: limited clients first") {
    // 600 clients that used one request of three, and 20 held to the limit (written last).
    for (int i = 0; i < 600; ++i) {
      REQUIRE(before.ask("ip:10.0.0." + std::to_string(i)).allowed);
    }
    for (int i = 0; i < 20; ++i) {
      for (int n = 0; n < 3; ++n) {
        REQUIRE(before.ask("ip:10.1.0." + std::to_string(i)).allowed);
      }
    }
    before.save(path);
    gateway_state after(one_route(three_an_hour(algorithm::fixed_window), 256), k_start);
    const snapshot_loaded r = after.load(path);
    CHECK(r.problem == "");
    CHECK(after.store->size() == 256);
    CHECK(r.rows == 256);
    CHECK(r.full == 621 - 256);
    CHECK_FALSE(after.ask("ip:192.0.2.1").allowed);
    for (int i = 0; i < 20; ++i) {
      CHECK_FALSE(after.ask("ip:10.1.0." + std::to_string(i)).allowed);
    }
  }
}

TEST_CASE("a snapshot of another hash key gives back only client addresses") {
  temp_dir dir;
  const std::string path = dir.path + "/state.bin";
  gateway_state before(one_route(three_an_hour(algorithm::token_bucket)), k_start);
  REQUIRE(before.ask("ip:192.0.2.1").allowed);
  REQUIRE(before.ask("key:0123456789abcdef0123456789abcdef").allowed);
  REQUIRE(before.ask("user:0123456789abcdef0123456789abcdef").allowed);
  before.save(path, snapshot_key_tag("the old secret"));

  gateway_state after(one_route(three_an_hour(algorithm::token_bucket)), k_start);
  const snapshot_loaded r = after.load(path, snapshot_key_tag("a new secret"));
  CHECK(r.problem == "");
  CHECK(r.rows == 1);
  CHECK(r.other_key == 2);
  CHECK(snapshot_key_tag("a") != snapshot_key_tag("b"));
}

TEST_CASE("a damaged, foreign or future snapshot is reported and ignored, and changes nothing") {
  temp_dir dir;
  const std::string path = dir.path + "/state.bin";
  gateway_state before(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
  REQUIRE(before.ask("ip:192.0.2.1").allowed);
  REQUIRE(before.ask("ip:192.0.2.2").allowed);
  before.save(path);
  const std::string good = read_file(path);
  REQUIRE(good.size() > 100);

  auto ignored = [&](const std::string& bytes, const std::string& why) {
    write_file(path, bytes);
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    const snapshot_loaded r = after.load(path);
    CHECK(r.found);
    CHECK_FALSE(r.problem.empty());
    CHECK(r.problem.find(why) != std::string::npos);
    CHECK(r.rows == 0);
    CHECK(after.store->size() == 0);
  };

  SUBCASE("no file: a first start, no problem") {
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    const snapshot_loaded r = after.load(dir.path + "/none.bin");
    CHECK_FALSE(r.found);
    CHECK(r.problem == "");
  }
  SUBCASE("an empty file: as if there were none") {
    write_file(path, "");
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    const snapshot_loaded r = after.load(path);
    CHECK_FALSE(r.found);
    CHECK(r.problem == "");
    CHECK_FALSE(r.keep_out);
  }
  SUBCASE("cut anywhere: reported, and replaced by the next write (even within the magic)") {
    for (std::size_t n = 1; n < good.size(); ++n) {
      CAPTURE(n);
      ignored(good.substr(0, n), n < 18 ? "truncated" : "");
      gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
      CHECK_FALSE(after.load(path).keep_out);
    }
  }
  SUBCASE("any one byte flipped") {
    for (std::size_t i = 0; i < good.size(); ++i) {
      CAPTURE(i);
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0x20);
      ignored(bad, "");
    }
  }
  SUBCASE("bytes after the end") {
    ignored(good + "x", "longer than its header says");
  }
  SUBCASE("another program's file is left as it is") {
    ignored("PK\x03\x04 not ours", "not a ratewall snapshot: it is left as it is");
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    CHECK(after.load(path).keep_out);
  }
  SUBCASE("a directory is not read, and is left as it is") {
    const std::string where = dir.path + "/a-directory";
    std::filesystem::create_directory(where);
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    const snapshot_loaded r = after.load(where);
    CHECK(r.keep_out);
    CHECK(r.problem.find("not a regular file") == 0);
  }
  SUBCASE("another version") {
    ignored(wrap_body("", k_start.count(), 2), "version 2");
  }
  SUBCASE("written later than now: the wall clock went back") {
    ignored(wrap_body(std::string(4, '\0'), (k_start + minutes(5)).count()), "in the future");
    // Within a minute (an NTP step at boot) it is taken: holding clients a few seconds longer
    // is better than forgetting them.
    write_file(path, wrap_body(std::string(4, '\0'), (k_start + seconds(30)).count()));
    gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
    CHECK(after.load(path).problem == "");
  }
  SUBCASE("a time no limit can reach: the file is not trusted") {
    std::string body;
    byte_writer out(body);
    out.u32(1);
    out.text("api");
    out.text("hourly");
    out.u64(0);
    out.u8(0);  // token bucket
    out.u64(1);
    out.text("ip:192.0.2.9");
    out.u64(0);
    out.i64(std::numeric_limits<std::int64_t>::max() - 1000000000);  // its TAT
    ignored(wrap_body(body, k_start.count()), "beyond any limit's reach");
  }
  SUBCASE("a body the checksum vouches for but that is malformed: nothing of it is kept") {
    // One good section, then a second one cut short: the first is not restored either.
    std::string body;
    byte_writer out(body);
    out.u32(2);
    out.text("api");
    out.text("hourly");
    out.u64(0);
    out.u8(3);
    out.u64(1);
    out.text("ip:192.0.2.9");
    out.u64(0);
    out.u32(1);
    out.i64(k_start.count());
    out.text("api");
    ignored(wrap_body(body, k_start.count()), "truncated");
    ignored(wrap_body(std::string("\0\0\0\0", 4) + "x", k_start.count()), "after the last row");
  }
  // The good file itself loads (the loop above did not pass for want of a valid file).
  write_file(path, good);
  gateway_state after(one_route(three_an_hour(algorithm::sliding_window_log)), k_start);
  CHECK(after.load(path).rows == 2);
}

TEST_CASE("a snapshot replaces the previous one whole, or leaves it as it was") {
  temp_dir dir;
  const std::string path = dir.path + "/state.bin";
  gateway_state g(one_route(three_an_hour(algorithm::token_bucket)), k_start);
  REQUIRE(g.ask("ip:192.0.2.1").allowed);
  g.save(path);
  const std::string first = read_file(path);
  struct stat st {};
  REQUIRE(::stat(path.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  SUBCASE("a failed write keeps the previous snapshot") {
    // Something that is not ours sits where the temporary file would go.
    const std::string tmp = path + "." + std::to_string(::getpid()) + ".tmp";
    std::filesystem::create_directory(tmp);
    std::filesystem::create_directory(tmp + "/x");
    REQUIRE(g.ask("ip:192.0.2.2").allowed);
    CHECK_THROWS_AS(g.save(path), std::system_error);
    CHECK(read_file(path) == first);
  }
  SUBCASE("a symbolic link keeps naming the snapshot") {
    const std::string link = dir.path + "/link.bin";
    std::filesystem::create_symlink(path, link);
    REQUIRE(g.ask("ip:192.0.2.2").allowed);
    g.save(link);
    CHECK(std::filesystem::is_symlink(link));
    CHECK(read_file(path) != first);
    gateway_state after(one_route(three_an_hour(algorithm::token_bucket)), k_start);
    CHECK(after.load(link).rows == 2);
  }
  SUBCASE("a missing directory is an error naming the file") {
    const std::string nowhere = dir.path + "/missing/state.bin";
    try {
      g.save(nowhere);
      FAIL("no error");
    } catch (const std::system_error& e) {
      CHECK(std::string(e.what()).find(nowhere) != std::string::npos);
    }
  }
}
