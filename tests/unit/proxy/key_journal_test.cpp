// key_file_journal: run-time API key changes kept in a file beside the configuration, replayed
// at start, and never lost or half-applied when the file is damaged or cannot be written.

#include <doctest/doctest.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <fstream>
#include <sstream>
#include <string>

#include "ratewall/proxy/key_journal.hpp"
#include "support/temp_dir.hpp"

using namespace ratewall;
using ratewall::testing::temp_dir;
namespace asio = boost::asio;

namespace {

constexpr std::string_view k_hash_key = "journal-test-secret";

std::string record(key_journal& journal, key_change change) {
  asio::io_context ioc;
  std::string error = "not run";
  asio::co_spawn(
      ioc, [&]() -> asio::awaitable<void> { error = co_await journal.record(std::move(change)); },
      asio::detached);
  ioc.run();
  return error;
}

key_change put(std::string_view raw, std::string plan, std::string name = "") {
  return key_change{sha256(raw), key_meaning{std::move(plan), std::move(name)}};
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("key file journal: changes survive a restart, the latest of each key wins") {
  temp_dir dir;
  const std::string path = dir.path + "/gw.keys.jsonl";
  {
    auto keys = std::make_shared<key_registry>(k_hash_key);
    key_file_journal journal(path, keys);
    CHECK(record(journal, put("alpha", "free")) == "");
    CHECK(record(journal, put("alpha", "gold", "acme")) == "");
    CHECK(record(journal, put("beta", "free")) == "");
    CHECK(record(journal, key_change{sha256("beta"), std::nullopt}) == "");
    CHECK(keys->find(sha256("alpha")) == key_meaning{"gold", "acme"});
  }
  const std::string text = read_all(path);
  CHECK(count_lines(text) == 4);
  CHECK(text.find("alpha") == std::string::npos);  // only SHA-256s reach the file
  // A new process: the registry starts empty and the file brings the changes back.
  auto keys = std::make_shared<key_registry>(k_hash_key);
  keys->set_seed({api_key_config{sha256("beta"), "free", ""}});
  key_file_journal journal(path, keys);
  CHECK(keys->find(sha256("alpha")) == key_meaning{"gold", "acme"});
  CHECK(!keys->find(sha256("beta")));  // deleted at run time: the configuration's key stays hidden
  CHECK(keys->changes() == 2);
}

TEST_CASE("key file journal: a damaged file loses only its damaged lines") {
  temp_dir dir;
  const std::string path = dir.path + "/gw.keys.jsonl";
  const std::string good =
      key_change_json(put("alpha", "gold", "acme")) + "\n" + key_change_json(put("beta", "free"));
  SUBCASE("a last line cut short by a crash is dropped, and the next change is whole") {
    std::ofstream(path) << good << "\n" << key_change_json(put("gamma", "gold")).substr(0, 30);
    auto keys = std::make_shared<key_registry>(k_hash_key);
    key_file_journal journal(path, keys);
    CHECK(keys->find(sha256("alpha")) == key_meaning{"gold", "acme"});
    CHECK(keys->find(sha256("beta")) == key_meaning{"free", ""});
    CHECK(!keys->find(sha256("gamma")));
    CHECK(record(journal, put("delta", "gold")) == "");
    auto again = std::make_shared<key_registry>(k_hash_key);
    key_file_journal reread(path, again);
    CHECK(again->find(sha256("delta")) == key_meaning{"gold", ""});
    CHECK(again->changes() == 3);
  }
  SUBCASE("a line that is not a change is skipped, the lines around it are kept") {
    std::ofstream(path) << key_change_json(put("alpha", "gold", "acme")) << "\n"
                        << "{\"sha256\":\"zz\",\"plan\":\"gold\"}\n"
                        << "not json at all\n"
                        << "{\"sha256\":\"" << to_hex(sha256("x"))
                        << "\",\"plan\":\"gold\",\"name\":\"with \\\"quote\"}\n"
                        << key_change_json(put("beta", "free")) << "\n";
    auto keys = std::make_shared<key_registry>(k_hash_key);
    key_file_journal journal(path, keys);
    CHECK(keys->changes() == 2);
    CHECK(!keys->find(sha256("x")));
    CHECK(keys->find(sha256("beta")) == key_meaning{"free", ""});
    // The file was rewritten without them.
    CHECK(count_lines(read_all(path)) == 2);
  }
}

TEST_CASE("key file journal: a file that cannot be written refuses the change and keeps the old") {
  // A path under a regular file cannot be created by anyone, root included.
  temp_dir dir;
  const std::string blocker = dir.write("not-a-directory", "x");
  auto keys = std::make_shared<key_registry>(k_hash_key);
  keys->set_seed({api_key_config{sha256("alpha"), "free", ""}});
  key_file_journal journal(blocker + "/gw.keys.jsonl", keys);
  const std::string error = record(journal, put("alpha", "gold"));
  CHECK(error.find("cannot write " + blocker + "/gw.keys.jsonl") == 0);
  CHECK(keys->find(sha256("alpha")) == key_meaning{"free", ""});
}

TEST_CASE("key file journal: a file of mostly overridden lines is rewritten to the live ones") {
  temp_dir dir;
  const std::string path = dir.path + "/gw.keys.jsonl";
  auto keys = std::make_shared<key_registry>(k_hash_key);
  key_file_journal journal(path, keys);
  // The same two keys changed again and again: 2 live changes, thousands of lines.
  for (int i = 0; i < 1100; ++i) {
    REQUIRE(record(journal, put(i % 2 == 0 ? "alpha" : "beta", i % 3 == 0 ? "gold" : "free")) ==
            "");
  }
  CHECK(journal.lines() < 1100);
  const std::string text = read_all(path);
  CHECK(count_lines(text) == journal.lines());
  auto again = std::make_shared<key_registry>(k_hash_key);
  key_file_journal reread(path, again);
  CHECK(again->find(sha256("alpha")) == keys->find(sha256("alpha")));
  CHECK(again->find(sha256("beta")) == keys->find(sha256("beta")));
}

TEST_CASE("key file journal: the default file sits beside the configuration") {
  CHECK(default_keys_file("/etc/ratewall/ratewall.yaml") == "/etc/ratewall/ratewall.keys.jsonl");
  CHECK(default_keys_file("/etc/ratewall/gw.yml") == "/etc/ratewall/gw.keys.jsonl");
  CHECK(default_keys_file("conf/gw") == "conf/gw.keys.jsonl");
  // Under systemd (StateDirectory=), in the one directory the service may write.
  CHECK(default_keys_file("/usr/local/etc/ratewall/ratewall.yaml", "/var/lib/ratewall") ==
        "/var/lib/ratewall/ratewall.keys.jsonl");
  CHECK(default_keys_file("/etc/ratewall/gw.yaml", "/var/lib/ratewall:/var/lib/other") ==
        "/var/lib/ratewall/gw.keys.jsonl");
}
