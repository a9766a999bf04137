#pragma once

// redis-server processes that tests start themselves on loopback ports (no persistence, data
// in a temporary directory), a blocking client to drive them, and a Redis Cluster of a few
// primaries made with `redis-cli --cluster create`. Processes are ended by PID.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <sys/types.h>

#include "ratewall/redis/reply.hpp"

namespace ratewall::testing {

/// A program a test starts (redis-server, ratewall) with its output in a temporary file. It is
/// killed by its PID when destroyed, and dies with the test process even if that crashes
/// (PR_SET_PDEATHSIG), so that a failed run leaves no server behind.
class owned_process {
 public:
  explicit owned_process(std::vector<std::string> argv, std::vector<std::string> env = {});
  ~owned_process();
  owned_process(const owned_process&) = delete;
  owned_process& operator=(const owned_process&) = delete;

  pid_t pid() const { return pid_; }
  std::string output() const;
  /// Waits until the output contains `text`; false after `timeout`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds timeout) const;
  /// SIGKILL, and waits for it to be gone.
  void kill();

 private:
  pid_t pid_ = -1;
  std::string output_path_;
};

/// A loopback port nobody listens on now; with `bus`, port + 10000 is free too (cluster bus).
std::uint16_t free_port(bool bus = false);

/// Whether `program` is on the PATH (tests that need redis-server skip without it).
bool have_program(const std::string& program);

/// One blocking connection to 127.0.0.1:port; every call bounded by `timeout`.
class redis_client {
 public:
  explicit redis_client(std::uint16_t port,
                        std::chrono::milliseconds timeout = std::chrono::seconds(5));
  ~redis_client();
  redis_client(const redis_client&) = delete;
  redis_client& operator=(const redis_client&) = delete;

  /// The reply (error replies too); throws std::runtime_error when the connection fails.
  redis::reply call(const std::vector<std::string>& args);

 private:
  int fd_ = -1;
  std::chrono::milliseconds timeout_;
  redis::reply_reader reader_;
};

class redis_server {
 public:
  struct options {
    bool cluster = false;
    std::string password;  // requirepass
  };
  /// Starts on a free port and waits until it answers PING.
  explicit redis_server(options o);
  redis_server() : redis_server(options{}) {}
  ~redis_server();
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  /// redis://127.0.0.1:<port>/0
  std::string url() const { return "redis://" + address() + "/0"; }

  /// A command on a fresh connection (a killed server is restarted between calls).
  redis::reply call(const std::vector<std::string>& args);
  /// SIGKILL: the server is gone at once, mid-request, as in a crash.
  void kill();
  /// Starts again on the same port (empty: nothing was saved); waits for PING.
  void start();

 private:
  options options_;
  std::uint16_t port_ = 0;
  std::string dir_;
  std::unique_ptr<owned_process> process_;
};

/// A Redis Cluster of `primaries` nodes and no replicas, on loopback.
class redis_cluster {
 public:
  explicit redis_cluster(int primaries = 3);

  int size() const { return static_cast<int>(nodes_.size()); }
  redis_server& node(int i) { return *nodes_[static_cast<std::size_t>(i)]; }
  std::string id(int i);
  /// The index of the node that serves `slot`.
  int owner(std::uint16_t slot);
  /// Moves `slot` to node `to` as redis-cli --cluster reshard does, keys included:
  /// IMPORTING / MIGRATING, MIGRATE in batches, then SETSLOT NODE on every node.
  void move_slot(std::uint16_t slot, int to);

 private:
  std::vector<std::unique_ptr<redis_server>> nodes_;
};

/// A server on 127.0.0.1 (a port the kernel picks) that speaks RESP but is not Redis: it answers
/// every command on every connection with the bytes last given to `answer_with` (a test's
/// hostile replies). Runs on its own thread until destroyed.
class fake_redis {
 public:
  fake_redis();
  ~fake_redis();
  fake_redis(const fake_redis&) = delete;
  fake_redis& operator=(const fake_redis&) = delete;

  std::uint16_t port() const { return port_; }
  /// redis://127.0.0.1:<port>/0
  std::string url() const { return "redis://127.0.0.1:" + std::to_string(port_) + "/0"; }
  /// What every command is answered with from now on (RESP, sent as is).
  void answer_with(std::string bytes);
  /// Commands answered so far.
  std::size_t commands() const { return commands_.load(); }

 private:
  void serve();

  int listen_fd_ = -1;
  std::uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<std::size_t> commands_{0};
  mutable std::mutex mutex_;
  std::string answer_;
  std::thread thread_;
};

/// The integer of an integer reply, or -1.
long long integer_of(const redis::reply& r);

}  // namespace ratewall::testing
