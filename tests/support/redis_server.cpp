#include "support/redis_server.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace ratewall::testing {

namespace {

int open_loopback(std::uint16_t port, std::chrono::milliseconds timeout) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) {
    return -1;
  }
  timeval tv{};
  tv.tv_sec = static_cast<long>(timeout.count() / 1000);
  tv.tv_usec = static_cast<long>((timeout.count() % 1000) * 1000);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool port_free(std::uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

std::uint16_t free_port(bool bus) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = 0;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    socklen_t len = sizeof addr;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    const std::uint16_t port = ntohs(addr.sin_port);
    if (!bus) {
      return port;
    }
    if (port < 55000 && port_free(static_cast<std::uint16_t>(port + 10000))) {
      return port;
    }
  }
  throw std::runtime_error("no free port");
}

bool have_program(const std::string& program) {
  const std::string cmd = "command -v " + program + " >/dev/null 2>&1";
  return std::system(cmd.c_str()) == 0;
}

long long integer_of(const redis::reply& r) {
  return r.type == redis::reply::kind::integer ? r.integer : -1;
}

// ---------------------------------------------------------------------------------------------

owned_process::owned_process(std::vector<std::string> argv, std::vector<std::string> env) {
  static std::atomic<int> counter{0};
  output_path_ = "/tmp/ratewall-redis-test-" + std::to_string(::getpid()) + "-" +
                 std::to_string(++counter) + ".log";
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    throw std::runtime_error("fork failed");
  }
  if (pid_ == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) {
      ::_exit(1);  // the parent died before the line above
    }
    const int fd = ::open(output_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    for (std::string& e : env) {
      ::putenv(e.data());
    }
    std::vector<char*> args;
    for (std::string& a : argv) {
      args.push_back(a.data());
    }
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
}

owned_process::~owned_process() {
  kill();
  ::unlink(output_path_.c_str());
}

void owned_process::kill() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

std::string owned_process::output() const {
  std::ifstream in(output_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool owned_process::wait_for_output(const std::string& text,
                                    std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (output().find(text) != std::string::npos) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

redis_client::redis_client(std::uint16_t port, std::chrono::milliseconds timeout)
    : timeout_(timeout) {
  fd_ = open_loopback(port, timeout);
  if (fd_ < 0) {
    throw std::runtime_error("cannot connect to redis on port " + std::to_string(port));
  }
}

redis_client::~redis_client() {
  if (fd_ >= 0) {
    ::close(fd_);
  }
}

redis::reply redis_client::call(const std::vector<std::string>& args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  const std::string out = redis::format_command(views);
  std::size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      throw std::runtime_error("redis: send failed");
    }
    sent += static_cast<std::size_t>(n);
  }
  char buf[16384];
  for (;;) {
    redis::reply r;
    const auto st = reader_.next(r);
    if (st == redis::reply_reader::status::reply) {
      return r;
    }
    if (st == redis::reply_reader::status::protocol_error) {
      throw std::runtime_error("redis: protocol error");
    }
    const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
    if (n <= 0) {
      throw std::runtime_error("redis: no reply");
    }
    reader_.feed(buf, static_cast<std::size_t>(n));
  }
}

// ---------------------------------------------------------------------------------------------

redis_server::redis_server(options o) : options_(std::move(o)) {
  char tmpl[] = "/tmp/ratewall-redis-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    throw std::runtime_error("mkdtemp failed");
  }
  dir_ = tmpl;
  port_ = free_port(options_.cluster);
  start();
}

redis_server::~redis_server() {
  kill();
  const std::string cmd = "rm -rf '" + dir_ + "'";
  [[maybe_unused]] int ignored = std::system(cmd.c_str());
}

void redis_server::start() {
  std::vector<std::string> argv{"redis-server",
                                "--port",
                                std::to_string(port_),
                                "--bind",
                                "127.0.0.1",
                                "--save",
                                "",
                                "--appendonly",
                                "no",
                                "--dir",
                                dir_,
                                "--daemonize",
                                "no",
                                "--loglevel",
                                "warning"};
  if (options_.cluster) {
    for (const char* a :
         {"--cluster-enabled", "yes", "--cluster-node-timeout", "5000", "--cluster-config-file"}) {
      argv.emplace_back(a);
    }
    argv.push_back("nodes-" + std::to_string(port_) + ".conf");
  }
  if (!options_.password.empty()) {
    argv.emplace_back("--requirepass");
    argv.push_back(options_.password);
  }
  process_ = std::make_unique<owned_process>(argv);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      redis_client c(port_, std::chrono::milliseconds(500));
      if (!options_.password.empty()) {
        c.call({"AUTH", options_.password});
      }
      if (c.call({"PING"}).str == "PONG") {
        return;
      }
    } catch (const std::exception&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("redis-server did not start on port " + std::to_string(port_) + ": " +
                           process_->output());
}

void redis_server::kill() {
  process_.reset();
}

redis::reply redis_server::call(const std::vector<std::string>& args) {
  redis_client c(port_);
  if (!options_.password.empty()) {
    c.call({"AUTH", options_.password});
  }
  return c.call(args);
}

// ---------------------------------------------------------------------------------------------

redis_cluster::redis_cluster(int primaries) {
  std::string create = "redis-cli --cluster create";
  for (int i = 0; i < primaries; ++i) {
    nodes_.push_back(std::make_unique<redis_server>(redis_server::options{true, ""}));
    create += " " + nodes_.back()->address();
  }
  create += " --cluster-replicas 0 --cluster-yes 2>&1";
  FILE* pipe = ::popen(create.c_str(), "r");
  if (pipe == nullptr) {
    throw std::runtime_error("cannot run redis-cli");
  }
  std::string output;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) {
    output.append(buf, n);
  }
  if (::pclose(pipe) != 0) {
    throw std::runtime_error("redis-cli --cluster create failed: " + output);
  }
  // Every node must agree that the cluster is up before a test starts.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (auto& node : nodes_) {
    for (;;) {
      const redis::reply info = node->call({"CLUSTER", "INFO"});
      if (info.str.find("cluster_state:ok") != std::string::npos) {
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("cluster did not come up: " + info.str);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

std::string redis_cluster::id(int i) {
  return node(i).call({"CLUSTER", "MYID"}).str;
}

int redis_cluster::owner(std::uint16_t slot) {
  const redis::reply slots = node(0).call({"CLUSTER", "SLOTS"});
  for (const auto& range : slots.elements) {
    if (range.elements.size() >= 3 && range.elements[0].integer <= slot &&
        slot <= range.elements[1].integer) {
      const long long port = range.elements[2].elements[1].integer;
      for (int i = 0; i < size(); ++i) {
        if (node(i).port() == port) {
          return i;
        }
      }
    }
  }
  return -1;
}

void redis_cluster::move_slot(std::uint16_t slot, int to) {
  const int from = owner(slot);
  if (from < 0 || from == to) {
    throw std::runtime_error("move_slot: bad source");
  }
  const std::string s = std::to_string(slot);
  const std::string from_id = id(from);
  const std::string to_id = id(to);
  // The target first, so that it accepts ASKING before the source starts redirecting.
  node(to).call({"CLUSTER", "SETSLOT", s, "IMPORTING", from_id});
  node(from).call({"CLUSTER", "SETSLOT", s, "MIGRATING", to_id});
  for (;;) {
    const redis::reply keys = node(from).call({"CLUSTER", "GETKEYSINSLOT", s, "100"});
    if (keys.elements.empty()) {
      break;
    }
    std::vector<std::string> migrate{
        "MIGRATE", "127.0.0.1", std::to_string(node(to).port()), "", "0", "5000", "KEYS"};
    for (const auto& k : keys.elements) {
      migrate.push_back(k.str);
    }
    const redis::reply r = node(from).call(migrate);
    if (r.is_error()) {
      throw std::runtime_error("MIGRATE: " + r.str);
    }
  }
  node(to).call({"CLUSTER", "SETSLOT", s, "NODE", to_id});
  node(from).call({"CLUSTER", "SETSLOT", s, "NODE", to_id});
  for (int i = 0; i < size(); ++i) {
    if (i != to && i != from) {
      node(i).call({"CLUSTER", "SETSLOT", s, "NODE", to_id});
    }
  }
}

// ---------------------------------------------------------------------------------------------

fake_redis::fake_redis() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (listen_fd_ < 0 || ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (listen_fd_ >= 0) {
      ::close(listen_fd_);
    }
    throw std::runtime_error("fake_redis: cannot listen on 127.0.0.1");
  }
  port_ = ntohs(addr.sin_port);
  thread_ = std::thread([this] { serve(); });
}

fake_redis::~fake_redis() {
  stop_ = true;
  thread_.join();
  ::close(listen_fd_);
}

void fake_redis::answer_with(std::string bytes) {
  std::lock_guard lock(mutex_);
  answer_ = std::move(bytes);
}

void fake_redis::serve() {
  struct client {
    int fd;
    std::unique_ptr<redis::reply_reader> reader;
  };
  std::vector<client> clients;
  char buf[16384];
  // Polls in short turns, so that the destructor is never kept waiting long.
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
    for (const client& c : clients) {
      fds.push_back({c.fd, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), 20) <= 0) {
      continue;
    }
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd >= 0) {
        // A send waits at most 5 s for a peer that does not read (the gateway's loop is run
        // by the test only while it awaits a check): then that client is dropped, and this
        // thread, which serves every client, never blocks for good.
        const timeval bound{5, 0};
        ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &bound, sizeof bound);
        clients.push_back({fd, std::make_unique<redis::reply_reader>()});
      }
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) {
        continue;
      }
      client& c = clients[i - 1];
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      bool open = n > 0;
      if (open) {
        // A command is a RESP array of bulk strings: the reply reader parses it.
        c.reader->feed(buf, static_cast<std::size_t>(n));
        redis::reply command;
        redis::reply_reader::status st;
        while ((st = c.reader->next(command)) == redis::reply_reader::status::reply) {
          std::string out;
          {
            std::lock_guard lock(mutex_);
            out = answer_;
          }
          ++commands_;
          open = open && ::send(c.fd, out.data(), out.size(), MSG_NOSIGNAL) ==
                             static_cast<ssize_t>(out.size());
        }
        open = open && st != redis::reply_reader::status::protocol_error;
      }
      if (!open) {
        ::close(c.fd);
        c.fd = -1;
      }
    }
    std::erase_if(clients, [](const client& c) { return c.fd < 0; });
  }
  for (const client& c : clients) {
    ::close(c.fd);
  }
}

}  // namespace ratewall::testing
