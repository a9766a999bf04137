#include "ratewall/core/cpus.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>
#include <thread>

namespace ratewall {

namespace {

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return std::nullopt;
  }
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::optional<std::int64_t> read_int(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc{} || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return v;
}

// The quota of the cgroup this process is in, v2 first, then v1.
std::optional<unsigned> cgroup_quota_cpus() {
  const auto self = read_text("/proc/self/cgroup");
  if (!self) {
    return std::nullopt;
  }
  if (auto path = cgroup_path(*self, "")) {
    if (auto text = read_text("/sys/fs/cgroup" + *path + "/cpu.max")) {
      return cpus_of_cpu_max(*text);
    }
  }
  if (auto path = cgroup_path(*self, "cpu")) {
    const std::string dir = "/sys/fs/cgroup/cpu" + *path;
    const auto quota = read_text(dir + "/cpu.cfs_quota_us");
    const auto period = read_text(dir + "/cpu.cfs_period_us");
    if (quota && period) {
      auto q = read_int(*quota);
      auto p = read_int(*period);
      if (q && p) {
        return cpus_of_quota(*q, *p);
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<unsigned> cpus_of_quota(std::int64_t quota, std::int64_t period) {
  if (quota <= 0 || period <= 0) {
    return std::nullopt;  // v1 writes -1 for no quota
  }
  return static_cast<unsigned>(std::max<std::int64_t>(1, (quota + period - 1) / period));
}

std::optional<unsigned> cpus_of_cpu_max(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) {
    text.remove_suffix(1);
  }
  const auto space = text.find(' ');
  if (space == std::string_view::npos) {
    return std::nullopt;
  }
  const auto period = read_int(text.substr(space + 1));
  if (!period) {
    return std::nullopt;
  }
  if (text.substr(0, space) == "max") {
    return std::nullopt;
  }
  const auto quota = read_int(text.substr(0, space));
  if (!quota) {
    return std::nullopt;
  }
  return cpus_of_quota(*quota, *period);
}

std::optional<std::string> cgroup_path(std::string_view text, std::string_view controller) {
  while (!text.empty()) {
    const auto end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    // "<id>:<controllers>:<path>"; the path may itself hold ':'.
    const auto first = line.find(':');
    const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) {
      continue;
    }
    const std::string_view id = line.substr(0, first);
    const std::string_view controllers = line.substr(first + 1, second - first - 1);
    const std::string_view path = line.substr(second + 1);
    if (controller.empty()) {
      if (id == "0" && controllers.empty()) {
        return std::string(path == "/" ? "" : path);
      }
      continue;
    }
    for (std::string_view rest = controllers; !rest.empty();) {
      const auto comma = rest.find(',');
      if (rest.substr(0, comma) == controller) {
        return std::string(path == "/" ? "" : path);
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return std::nullopt;
}

unsigned usable_cpus() {
  unsigned cpus = 0;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0) {
    cpus = static_cast<unsigned>(CPU_COUNT(&set));
  }
  if (cpus == 0) {
    cpus = std::thread::hardware_concurrency();  // may be 0 when it cannot tell
  }
  if (auto quota = cgroup_quota_cpus()) {
    cpus = cpus == 0 ? *quota : std::min(cpus, *quota);
  }
  return std::max(1u, cpus);
}

}  // namespace ratewall
