#include "ratewall/redis/cluster.hpp"

#include <charconv>

namespace ratewall::redis {

std::string node_address::to_string() const {
  if (host.find(':') != std::string::npos) {
    return "[" + host + "]:" + std::to_string(port);
  }
  return host + ":" + std::to_string(port);
}

std::optional<node_address> parse_node_address(std::string_view text) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos) {
    return std::nullopt;
  }
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc{} || end != port.data() + port.size() || value == 0 || value > 65535) {
    return std::nullopt;
  }
  return node_address{std::string(host), static_cast<std::uint16_t>(value)};
}

namespace {

// The host to connect to: empty or "?" (unknown endpoint) means the node we asked.
std::string usable_host(std::string_view host, const node_address& asked) {
  if (host.empty() || host == "?") {
    return asked.host;
  }
  return std::string(host);
}

}  // namespace

std::optional<redirect> parse_redirect(const reply& r, const node_address& answered_by) {
  const std::string_view code = r.error_code();
  redirect out;
  if (code == "MOVED") {
    out.type = redirect::kind::moved;
  } else if (code == "ASK") {
    out.type = redirect::kind::ask;
  } else {
    return std::nullopt;
  }
  std::string_view rest = std::string_view(r.str).substr(code.size());
  while (!rest.empty() && rest.front() == ' ') {
    rest.remove_prefix(1);
  }
  const auto space = rest.find(' ');
  if (space == std::string_view::npos) {
    return std::nullopt;
  }
  unsigned slot = 0;
  auto [end, ec] = std::from_chars(rest.data(), rest.data() + space, slot);
  if (ec != std::errc{} || end != rest.data() + space || slot >= k_cluster_slots) {
    return std::nullopt;
  }
  auto to = parse_node_address(rest.substr(space + 1));
  if (!to) {
    return std::nullopt;
  }
  to->host = usable_host(to->host, answered_by);
  out.slot = static_cast<std::uint16_t>(slot);
  out.to = std::move(*to);
  return out;
}

const node_address* slot_map::node_for(std::uint16_t slot) const {
  if (slot >= k_cluster_slots || owner_[slot] < 0) {
    return nullptr;
  }
  return &nodes_[static_cast<std::size_t>(owner_[slot])];
}

std::size_t slot_map::covered() const {
  std::size_t n = 0;
  for (std::int16_t o : owner_) {
    n += o >= 0 ? 1 : 0;
  }
  return n;
}

std::uint16_t slot_map::add_node(node_address node) {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i] == node) {
      return static_cast<std::uint16_t>(i);
    }
  }
  nodes_.push_back(std::move(node));
  return static_cast<std::uint16_t>(nodes_.size() - 1);
}

bool slot_map::assign(std::int64_t first, std::int64_t last, std::uint16_t node) {
  if (first < 0 || last < first || last >= k_cluster_slots) {
    return false;
  }
  for (std::int64_t s = first; s <= last; ++s) {
    owner_[static_cast<std::size_t>(s)] = static_cast<std::int16_t>(node);
  }
  return true;
}

namespace {

std::optional<std::int64_t> as_integer(const reply& r) {
  if (r.type == reply::kind::integer) {
    return r.integer;
  }
  if (r.is_string()) {
    std::int64_t v = 0;
    auto [end, ec] = std::from_chars(r.str.data(), r.str.data() + r.str.size(), v);
    if (ec == std::errc{} && end == r.str.data() + r.str.size()) {
      return v;
    }
  }
  return std::nullopt;
}

template <class T>
std::optional<T> failed(std::string* error, std::string what) {
  if (error != nullptr) {
    *error = std::move(what);
  }
  return std::nullopt;
}

// A RESP2 map: a flat array of key, value, key, value.
const reply* field(const reply& map, std::string_view name) {
  if (map.type != reply::kind::array) {
    return nullptr;
  }
  for (std::size_t i = 0; i + 1 < map.elements.size(); i += 2) {
    if (map.elements[i].is_string() && map.elements[i].str == name) {
      return &map.elements[i + 1];
    }
  }
  return nullptr;
}

}  // namespace

std::optional<slot_map> slot_map::from_cluster_slots(const reply& r, const node_address& asked,
                                                     std::string* error) {
  if (r.type != reply::kind::array) {
    return failed<slot_map>(error, "CLUSTER SLOTS: expected an array, got " +
                                       (r.is_error() ? r.str : std::string("another type")));
  }
  slot_map map;
  for (const reply& range : r.elements) {
    if (range.type != reply::kind::array || range.elements.size() < 3) {
      return failed<slot_map>(error, "CLUSTER SLOTS: a range without a primary");
    }
    auto first = as_integer(range.elements[0]);
    auto last = as_integer(range.elements[1]);
    const reply& primary = range.elements[2];
    if (!first || !last || primary.type != reply::kind::array || primary.elements.size() < 2 ||
        !primary.elements[0].is_string()) {
      return failed<slot_map>(error, "CLUSTER SLOTS: malformed range");
    }
    auto port = as_integer(primary.elements[1]);
    if (!port || *port <= 0 || *port > 65535) {
      return failed<slot_map>(error, "CLUSTER SLOTS: bad port");
    }
    const std::uint16_t node = map.add_node(
        {usable_host(primary.elements[0].str, asked), static_cast<std::uint16_t>(*port)});
    if (!map.assign(*first, *last, node)) {
      return failed<slot_map>(error, "CLUSTER SLOTS: slot range out of bounds");
    }
  }
  return map;
}

std::optional<slot_map> slot_map::from_cluster_shards(const reply& r, const node_address& asked,
                                                      std::string* error) {
  if (r.type != reply::kind::array) {
    return failed<slot_map>(error, "CLUSTER SHARDS: expected an array, got " +
                                       (r.is_error() ? r.str : std::string("another type")));
  }
  slot_map map;
  for (const reply& shard : r.elements) {
    const reply* slots = field(shard, "slots");
    const reply* nodes = field(shard, "nodes");
    if (slots == nullptr || nodes == nullptr || slots->type != reply::kind::array ||
        nodes->type != reply::kind::array || slots->elements.size() % 2 != 0) {
      return failed<slot_map>(error, "CLUSTER SHARDS: a shard without slots or nodes");
    }
    if (slots->elements.empty()) {
      continue;  // a shard of replicas only, or an empty primary
    }
    const reply* primary = nullptr;
    for (const reply& node : nodes->elements) {
      const reply* role = field(node, "role");
      if (role != nullptr && role->is_string() &&
          (role->str == "master" || role->str == "primary")) {
        primary = &node;
        break;
      }
    }
    if (primary == nullptr) {
      return failed<slot_map>(error, "CLUSTER SHARDS: a shard with slots but no primary");
    }
    const reply* endpoint = field(*primary, "endpoint");
    const reply* ip = field(*primary, "ip");
    const reply* port_field = field(*primary, "port");
    std::optional<std::int64_t> port = port_field ? as_integer(*port_field) : std::nullopt;
    if (!port || *port <= 0 || *port > 65535) {
      return failed<slot_map>(error, "CLUSTER SHARDS: a primary without a port");
    }
    std::string host;
    if (endpoint != nullptr && endpoint->is_string() && !endpoint->str.empty() &&
        endpoint->str != "?") {
      host = endpoint->str;
    } else if (ip != nullptr && ip->is_string()) {
      host = ip->str;
    }
    const std::uint16_t node =
        map.add_node({usable_host(host, asked), static_cast<std::uint16_t>(*port)});
    for (std::size_t i = 0; i < slots->elements.size(); i += 2) {
      auto first = as_integer(slots->elements[i]);
      auto last = as_integer(slots->elements[i + 1]);
      if (!first || !last || !map.assign(*first, *last, node)) {
        return failed<slot_map>(error, "CLUSTER SHARDS: bad slot range");
      }
    }
  }
  return map;
}

}  // namespace ratewall::redis
