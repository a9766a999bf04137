// key_file_journal: run-time API key changes kept in a file beside the configuration, replayed
// at start, and never lost or half-applied when the file is damaged or cannot be written.

#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
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
    std::optional<key_file_journal> journal;
    journal.emplace(path, keys);
    CHECK(keys->find(sha256("alpha")) == key_meaning{"gold", "acme"});
    CHECK(keys->find(sha256("beta")) == key_meaning{"free", ""});
    CHECK(!keys->find(sha256("gamma")));
    CHECK(record(*journal, put("delta", "gold")) == "");
    journal.reset();  // the process ends
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
  {
    key_file_journal journal(path, keys);
    // The same two keys changed again and again: 2 live changes, thousands of lines.
    for (int i = 0; i < 1100; ++i) {
      REQUIRE(record(journal, put(i % 2 == 0 ? "alpha" : "beta", i % 3 == 0 ? "gold" : "free")) ==
              "");
    }
    CHECK(journal.lines() < 1100);
    CHECK(count_lines(read_all(path)) == journal.lines());
  }
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

TEST_CASE("key file journal: a failed write is cut off the file, so the next change is whole") {
  temp_dir dir;
  const std::string path = dir.path + "/gw.keys.jsonl";
  auto keys = std::make_shared<key_registry>(k_hash_key);
  std::optional<key_file_journal> journal;
  journal.emplace(path, keys);
  REQUIRE(record(*journal, put("alpha", "gold")) == "");
  // The file may not grow past its size plus 10 bytes: the next line is cut short, as on a
  // full disk (SIGXFSZ ignored, so write() fails with EFBIG).
  const auto size = std::filesystem::file_size(path);
  struct sigaction ignore {};
  struct sigaction old {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &old);
  rlimit before{};
  ::getrlimit(RLIMIT_FSIZE, &before);
  rlimit small = before;
  small.rlim_cur = size + 10;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &small) == 0);
  const std::string error = record(*journal, put("beta", "gold"));
  ::setrlimit(RLIMIT_FSIZE, &before);
  ::sigaction(SIGXFSZ, &old, nullptr);
  CHECK(error.find("cannot write " + path) == 0);
  CHECK(error.find("nothing changed") != std::string::npos);
  CHECK(!keys->find(sha256("beta")));
  CHECK(std::filesystem::file_size(path) == size);  // the 10 bytes that went are gone again

  REQUIRE(record(*journal, put("gamma", "gold")) == "");
  journal.reset();  // the process ends
  auto again = std::make_shared<key_registry>(k_hash_key);
  key_file_journal reread(path, again);
  CHECK(again->find(sha256("gamma")) == key_meaning{"gold", ""});
  CHECK(again->changes() == 2);
}

TEST_CASE("key file journal: one file, one gateway; a file replaced underneath refuses changes") {
  temp_dir dir;
  const std::string path = dir.path + "/gw.keys.jsonl";
  auto keys = std::make_shared<key_registry>(k_hash_key);
  key_file_journal journal(path, keys);
  // A second gateway on the same file would rewrite the first one's changes away.
  auto other = std::make_shared<key_registry>(k_hash_key);
  CHECK_THROWS_WITH_AS(key_file_journal(path, other), doctest::Contains("another process uses"),
                       std::runtime_error);
  // Someone replaces the file (an editor's save): the change is refused, not lost.
  std::ofstream(dir.path + "/new") << key_change_json(put("alpha", "gold")) << "\n";
  std::filesystem::rename(dir.path + "/new", path);
  const std::string error = record(journal, put("beta", "gold"));
  CHECK(error.find("was replaced or removed by another process") != std::string::npos);
  CHECK(!keys->find(sha256("beta")));
}

TEST_CASE("key file journal: a file that exists but cannot be read stops the start") {
  temp_dir dir;
  std::filesystem::create_directory(dir.path + "/keys.jsonl");
  auto keys = std::make_shared<key_registry>(k_hash_key);
  CHECK_THROWS_WITH_AS(key_file_journal(dir.path + "/keys.jsonl", keys),
                       doctest::Contains("is a directory"), std::runtime_error);
}

TEST_CASE("key file journal: through a symbolic link, the rewrite replaces the file it points at") {
  temp_dir dir;
  std::filesystem::create_directory(dir.path + "/real");
  const std::string real = dir.path + "/real/keys.jsonl";
  std::ofstream(real) << key_change_json(put("alpha", "gold")) << "\nnot json\n";
  const std::string link = dir.path + "/keys.jsonl";
  std::filesystem::create_symlink(real, link);
  auto keys = std::make_shared<key_registry>(k_hash_key);
  key_file_journal journal(link, keys);  // the damaged line makes it rewrite the file
  CHECK(std::filesystem::is_symlink(link));
  CHECK(count_lines(read_all(real)) == 1);
  // The file as it was is kept for a person to read.
  CHECK(read_all(real + ".damaged").find("not json") != std::string::npos);
  REQUIRE(record(journal, put("beta", "free")) == "");
  CHECK(count_lines(read_all(real)) == 2);
}
