// `ratewall simulate --summary` reads a regular file a piece at a time (stream_trace): what it
// hands over must be what read_trace gives for the whole text, request for request, in the
// same order and with the same origin, whatever the size of the pieces; a log too far out of
// order is left to the whole-file path, having reported nothing.

#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ratewall/sim/trace.hpp"
#include "ratewall/sim/trace_file.hpp"
#include "support/temp_dir.hpp"

using namespace ratewall;
using ratewall::testing::temp_dir;

namespace {

// Everything a replay reads of a request, as one line of text.
std::string describe(const trace_request& r) {
  std::ostringstream s;
  s << r.line << ' ' << r.time.count() << ' ' << r.method << ' ' << r.path << ' ' << r.api_key
    << ' ' << r.user << ' ' << r.ip << ' ' << (r.cost ? std::to_string(*r.cost) : "-") << ' '
    << r.latency.count() << ' ' << r.status << ' ' << r.logged_identity << ' ' << r.subject << ' '
    << r.plan << ' ' << r.key_name;
  return s.str();
}

struct streamed {
  stream_outcome how = stream_outcome::whole;
  nanos origin{-1};
  std::vector<std::string> requests;
  std::string warnings;
  std::string whole_text;  // what the file held, when it was read whole
};

streamed stream(const std::string& path, std::size_t piece_bytes,
                std::optional<trace_format> format = std::nullopt) {
  streamed out;
  std::ostringstream warnings;
  std::optional<trace_file> whole;
  out.how = stream_trace(
      path, format, warnings, [&](nanos origin) { out.origin = origin; },
      [&](const trace_request& r) { out.requests.push_back(describe(r)); }, whole, piece_bytes);
  CHECK((out.how == stream_outcome::whole) == whole.has_value());
  if (whole) {
    out.whole_text = std::string(whole->text());
  }
  out.warnings = warnings.str();
  return out;
}

struct whole {
  nanos origin{0};
  std::vector<std::string> requests;
  std::string warnings;
};

whole read_whole(const std::string& text, const std::string& path) {
  whole out;
  std::ostringstream warnings;
  std::string_view t = text;
  if (t.starts_with("\xEF\xBB\xBF")) {
    t.remove_prefix(3);
  }
  const trace read = read_trace(t, path, detect_trace_format(t), warnings);
  out.origin = read.origin;
  for (const auto& r : read.requests) {
    out.requests.push_back(describe(r));
  }
  out.warnings = warnings.str();
  return out;
}

// An access log line at `ms` milliseconds after 2024-10-10T13:00:00Z; `path` may need escapes.
std::string log_line(int ms, const std::string& path, const std::string& subject = "00ab") {
  char time[64];
  std::snprintf(time, sizeof time, "2024-10-10T13:%02d:%02d.%03dZ", ms / 60000 % 60, ms / 1000 % 60,
                ms % 1000);
  return std::string(R"({"time":")") + time + R"(","method":"GET","path":")" + path +
         R"(","subject":")" + subject + R"(","plan":"gold","key":"k1","client":"192.0.2.7",)" +
         R"("status":200,"upstream_ms":1.5,"cost":2})" + "\n";
}

void check_same(const std::string& text, const std::string& path, std::size_t piece_bytes) {
  const whole expected = read_whole(text, path);
  const streamed got = stream(path, piece_bytes);
  REQUIRE(got.how == stream_outcome::streamed);
  CHECK(got.warnings == expected.warnings);
  CHECK(got.requests.size() == expected.requests.size());
  CHECK(got.requests == expected.requests);
  if (!expected.requests.empty()) {
    CHECK(got.origin == expected.origin);
  }
}

}  // namespace

TEST_CASE("trace stream: a CSV trace, cut anywhere, is handed over as read whole") {
  temp_dir dir;
  std::string text = "\xEF\xBB\xBFtime_s,method,path,api_key,user,ip,cost,latency_ms,status\r\n";
  for (int i = 0; i < 3000; ++i) {
    text += std::to_string(i / 7) + "." + std::to_string(i % 7) + ",GET,\"/a/" + std::to_string(i) +
            "?q=\"\"x\"\"\",key-" + std::to_string(i % 13) + ",,192.0.2." +
            std::to_string(i % 200) + "," + (i % 3 == 0 ? "" : std::to_string(i % 3)) + ",1.5," +
            (i % 5 == 0 ? "503" : "200") + (i % 2 == 0 ? "\r\n" : "\n");
    if (i % 100 == 0) {
      text += "# a comment\n\n";
    }
  }
  text += "9999,GET,/last,,,::1";  // no final newline
  const std::string path = dir.write("t.csv", text);
  for (std::size_t piece : {100, 257, 4096, 1 << 20}) {
    CAPTURE(piece);
    check_same(text, path, piece);
  }
}

TEST_CASE("trace stream: a log out of order within the window is sorted as read whole") {
  temp_dir dir;
  std::string text;
  // Workers' buffers interleaved: blocks of lines, each block a little behind the one before,
  // equal times among them (kept in file order), escapes that are undone into storage.
  for (int i = 0; i < 4000; ++i) {
    const int ms = (i / 50) * 40 + (i % 50) + ((i / 50) % 2 == 0 ? 30 : 0);
    text += log_line(ms, "/p/" + std::to_string(i) + (i % 9 == 0 ? "\\u00e9\\\"" : ""));
    if (i % 500 == 7) {
      text += "{\"time\": not json}\n";  // a malformed line, reported once
    }
  }
  const std::string path = dir.write("t.log", text);
  for (std::size_t piece : {512, 1000, 4096, 65536, 1 << 20}) {
    CAPTURE(piece);
    check_same(text, path, piece);
  }
  CHECK(read_whole(text, path).warnings.find("t.log:9: ") != std::string::npos);
}

TEST_CASE("trace stream: a request held back over many pieces keeps its text") {
  // Its time is the trace's latest: it waits until the end, long after its piece's buffer
  // was used again, so its fields are copied out (and its escapes, from its piece's storage).
  temp_dir dir;
  std::string text = log_line(3'000'000, "/late/\\u00e9", "ffff");
  for (int i = 0; i < 2000; ++i) {
    text += log_line(i, "/p/" + std::to_string(i));
  }
  const std::string path = dir.write("t.log", text);
  check_same(text, path, 512);
  CHECK(stream(path, 512).requests.back().find("/late/\xC3\xA9") != std::string::npos);
}

TEST_CASE("trace stream: a line longer than a piece grows the buffer") {
  temp_dir dir;
  const std::string long_path = "/" + std::string(100'000, 'x');
  std::string text = log_line(0, "/a") + log_line(1, long_path) + log_line(2, "/b");
  const std::string csv = "0,GET,/a,,,::1\n1," + std::string("GET,") + long_path + ",,,::1\n";
  check_same(text, dir.write("t.log", text), 256);  // over 64 KiB: malformed, reported
  check_same(csv, dir.write("t.csv", csv), 256);    // CSV has no limit
}

TEST_CASE("trace stream: a line earlier than one handed over leaves it to the whole path") {
  temp_dir dir;
  std::string text;
  for (std::size_t i = 0; i <= k_stream_window + 1000; ++i) {
    text += log_line(static_cast<int>(1000 + i), "/p");
  }
  text += "not json\n";
  text += log_line(0, "/early");  // before all of them, after k_stream_window lines
  const std::string path = dir.write("t.log", text);
  const streamed got = stream(path, 4096);
  CHECK(got.how == stream_outcome::whole);
  CHECK(got.warnings.empty());  // the whole path reports the malformed line, once
  // What the whole path gives: the early line first.
  CHECK(read_whole(text, path).requests.front().find("/early") != std::string::npos);
}

TEST_CASE("trace stream: what is not a regular file, or empty, is left to the whole path") {
  temp_dir dir;
  CHECK(stream(dir.write("empty.log", ""), 4096).how == stream_outcome::whole);
  CHECK(stream("/dev/null", 4096).how == stream_outcome::whole);
  CHECK_THROWS_AS(stream(dir.path + "/missing.log", 4096), trace_error);
}

TEST_CASE("trace stream: errors are the whole path's, with the warnings before them") {
  temp_dir dir;
  const std::string csv = "0,GET,/a,,,::1\n2,GET,/b,,,::1\n1,GET,/c,,,::1\n";
  const std::string csv_path = dir.write("t.csv", csv);
  CHECK_THROWS_WITH_AS(
      stream(csv_path, 16),
      (csv_path + ":3: time_s: 1 is earlier than the 2 before it (times must not decrease)")
          .c_str(),
      trace_error);
  const std::string log = "x\ny\n" + log_line(0, "/a");
  const std::string log_path = dir.write("t.log", log);
  std::ostringstream warnings;
  std::optional<trace_file> unused;
  CHECK_THROWS_WITH_AS(
      stream_trace(
          log_path, trace_format::access_log, warnings, [](nanos) {}, [](const trace_request&) {},
          unused, 16),
      (log_path + ": more malformed lines than requests as format access-log (--format names "
                  "another)")
          .c_str(),
      trace_error);
  CHECK(warnings.str().find(log_path + ":1: ") != std::string::npos);
}

TEST_CASE("trace stream: a file cut while it is read ends the trace there, with a warning") {
  // copytruncate during the replay: what was read is the trace, and the user is told.
  temp_dir dir;
  std::string text;
  for (int i = 0; i < 200; ++i) {
    text += std::to_string(i) + ",GET,/a,,,192.0.2.1\n";
  }
  const std::string path = dir.write("t.csv", text);
  std::ostringstream warnings;
  std::size_t requests = 0;
  std::optional<trace_file> whole;
  const auto how = stream_trace(
      path, std::nullopt, warnings, [](nanos) {},
      [&](const trace_request&) {
        if (++requests == 1) {
          REQUIRE(::truncate(path.c_str(), 0) == 0);
        }
      },
      whole, 256);
  CHECK(how == stream_outcome::streamed);
  CHECK(requests < 200);
  CHECK(warnings.str() == path +
                              ": the file shrank while it was read (rotated with copytruncate?): "
                              "replay a copy\n");
}

TEST_CASE("trace stream: a format detected from a line the first piece does not hold whole") {
  // More than a piece of empty lines, or a first line cut by the piece's end: the format is
  // not guessed from what the piece holds (CSV, for want of a line), the whole path decides.
  temp_dir dir;
  const std::string nginx_line =
      "198.51.7.170 - - [10/Oct/2024:13:00:00 +0200] \"GET /api/a HTTP/1.1\" 200 512 \"-\" "
      "\"curl\"\n";
  const std::string blanks = std::string(300, '\n') + " \r\n\t\n";
  const std::string path = dir.write("blank.log", blanks + nginx_line + nginx_line);
  CHECK(stream(path, 256).how == stream_outcome::whole);
  CHECK(stream(path, 4096).how == stream_outcome::streamed);
  check_same(blanks + nginx_line + nginx_line, path, 4096);
  const std::string cut = dir.write("cut.log", std::string(250, '\n') + nginx_line);
  CHECK(stream(cut, 256).how == stream_outcome::whole);  // "198.51.7.170 - -" cut after 6
  // A line of only "\r " is not empty: it is the first line, read as CSV either way.
  const std::string odd = "\r \n" + nginx_line;
  CHECK_THROWS_AS(stream(dir.write("odd.log", odd), 4096), trace_error);
}

TEST_CASE("trace stream: read whole after all, it is the file it began with") {
  // Out of order beyond the window: the file is read again from the same descriptor, as large
  // as it was, though the name now holds another file (a log rotated meanwhile) and the old
  // one grew.
  temp_dir dir;
  std::string text;
  for (std::size_t i = 0; i <= k_stream_window + 1000; ++i) {
    text += log_line(static_cast<int>(1000 + i), "/p");
  }
  text += log_line(0, "/early");
  const std::string path = dir.write("t.log", text);
  std::optional<trace_file> whole;
  std::ostringstream warnings;
  bool rotated = false;
  const auto how = stream_trace(
      path, std::nullopt, warnings, [](nanos) {},
      [&](const trace_request&) {
        if (!rotated) {
          rotated = true;
          REQUIRE(std::rename(path.c_str(), (path + ".1").c_str()) == 0);
          std::ofstream(path + ".1", std::ios::app) << log_line(5, "/appended");
          dir.write("t.log", log_line(0, "/new"));
        }
      },
      whole, 4096);
  CHECK(how == stream_outcome::whole);
  REQUIRE(whole);
  CHECK(whole->text() == text);
}

TEST_CASE("trace stream: a FIFO and the standard input are read once, whole") {
  temp_dir dir;
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  const std::string text = log_line(0, "/a") + log_line(1, "/b");
  std::thread writer([&] { std::ofstream(fifo) << text; });
  const streamed got = stream(fifo, 4096);
  writer.join();
  CHECK(got.how == stream_outcome::whole);
  CHECK(got.whole_text == text);
  // The standard input (a file here, at its end): its offset is not ours to move back.
  const std::string file = dir.write("stdin.log", text);
  const int saved = ::dup(STDIN_FILENO);
  const int in = ::open(file.c_str(), O_RDONLY);
  REQUIRE(::lseek(in, static_cast<off_t>(text.size()), SEEK_SET) > 0);
  REQUIRE(::dup2(in, STDIN_FILENO) == STDIN_FILENO);
  ::close(in);
  const streamed from_stdin = stream("-", 4096);
  ::dup2(saved, STDIN_FILENO);
  ::close(saved);
  CHECK(from_stdin.how == stream_outcome::whole);
  CHECK(from_stdin.whole_text.empty());  // what the pipe path reads there too
}
