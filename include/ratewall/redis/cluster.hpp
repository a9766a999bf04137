#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ratewall/redis/crc16.hpp"
#include "ratewall/redis/reply.hpp"

namespace ratewall::redis {

/// A Redis node as host and port. IPv6 hosts are kept without brackets.
struct node_address {
  std::string host;
  std::uint16_t port = 0;

  /// "host:port", IPv6 in brackets: the key of per-node state and what logs print.
  std::string to_string() const;
  friend bool operator==(const node_address&, const node_address&) = default;
};

/// "host:port" as Redis writes it in MOVED/ASK and CLUSTER NODES ("::1:6380" and
/// "[::1]:6380" both work; the port is after the last ':'). An empty host stays empty.
std::optional<node_address> parse_node_address(std::string_view text);

/// -MOVED <slot> <host:port> and -ASK <slot> <host:port>. An empty host ("MOVED 3999 :6381",
/// sent when the node does not know its own address) means the host of the node that answered.
struct redirect {
  enum class kind { moved, ask };
  kind type = kind::moved;
  std::uint16_t slot = 0;
  node_address to;
};
std::optional<redirect> parse_redirect(const reply& r, const node_address& answered_by);

/// Which primary serves each of the 16384 slots.
class slot_map {
 public:
  /// The primary of `slot`, or nullptr when no node serves it.
  const node_address* node_for(std::uint16_t slot) const;
  /// The index in primaries() of the node serving `slot`, or -1.
  int owner(std::uint16_t slot) const { return slot < k_cluster_slots ? owner_[slot] : -1; }
  /// Every primary that serves at least one slot, in the order first seen.
  const std::vector<node_address>& primaries() const { return nodes_; }
  /// Slots with an owner (16384 in a healthy cluster).
  std::size_t covered() const;

  /// From a CLUSTER SLOTS reply: [[start, end, [host, port, id, ...], replicas...], ...].
  /// An empty host means the node that was asked.
  static std::optional<slot_map> from_cluster_slots(const reply& r, const node_address& asked,
                                                    std::string* error);
  /// From a CLUSTER SHARDS reply (Redis 7): [["slots", [s, e, ...], "nodes", [[k, v, ...]]]].
  /// The node with role "master" serves the shard's slots.
  static std::optional<slot_map> from_cluster_shards(const reply& r, const node_address& asked,
                                                     std::string* error);

 private:
  std::uint16_t add_node(node_address node);
  bool assign(std::int64_t first, std::int64_t last, std::uint16_t node);

  std::vector<node_address> nodes_;
  std::vector<std::int16_t> owner_ = std::vector<std::int16_t>(k_cluster_slots, -1);
};

}  // namespace ratewall::redis
