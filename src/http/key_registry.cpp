#include "ratewall/http/key_registry.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>

namespace ratewall {

std::size_t key_registry::subject_hash::operator()(const subject_id& s) const noexcept {
  // The bytes are a keyed hash already: any eight of them are as good as a hash function.
  std::size_t h = 0;
  std::memcpy(&h, s.data(), sizeof h);
  return h;
}

key_registry::key_registry(std::string_view hash_key) : mac_key_(hash_key) {}

key_registry::subject_id key_registry::subject_of(const sha256_digest& sha256) const {
  const sha256_digest mac =
      mac_key_.mac(std::string_view(reinterpret_cast<const char*>(sha256.data()), sha256.size()));
  subject_id id;
  std::memcpy(id.data(), mac.data(), id.size());
  return id;
}

std::string key_registry::subject(const sha256_digest& sha256) const {
  const subject_id id = subject_of(sha256);
  return "key:" + to_hex(id.data(), id.size());
}

void key_registry::set_seed(const std::vector<api_key_config>& keys) {
  std::array<boost::unordered_flat_map<subject_id, entry, subject_hash>, k_shards> fresh;
  for (const api_key_config& k : keys) {
    const subject_id id = subject_of(k.sha256);
    // A key declared twice keeps its first plan, as routes do: file order decides.
    fresh[id[0] % k_shards].try_emplace(id, entry{k.sha256, key_meaning{k.plan, k.name}});
  }
  for (std::size_t i = 0; i < k_shards; ++i) {
    std::unique_lock lock(shards_[i].mutex);
    shards_[i].seed.swap(fresh[i]);
  }
  bump();
  // The old seed maps are freed here, outside the locks.
}

bool key_registry::apply(const key_change& change) {
  const subject_id id = subject_of(change.sha256);
  shard& s = shard_of(id);
  {
    std::unique_lock lock(s.mutex);
    auto [it, added] = s.changes.try_emplace(id, entry{change.sha256, change.meaning});
    if (!added) {
      if (it->second.meaning == change.meaning) {
        return false;
      }
      it->second.meaning = change.meaning;
    }
  }
  bump();
  return true;
}

void key_registry::replace_changes(const std::vector<key_change>& changes) {
  std::array<boost::unordered_flat_map<subject_id, entry, subject_hash>, k_shards> fresh;
  for (const key_change& c : changes) {
    const subject_id id = subject_of(c.sha256);
    fresh[id[0] % k_shards].insert_or_assign(id, entry{c.sha256, c.meaning});
  }
  for (std::size_t i = 0; i < k_shards; ++i) {
    std::unique_lock lock(shards_[i].mutex);
    shards_[i].changes.swap(fresh[i]);
  }
  bump();
}

std::vector<key_change> key_registry::all_changes() const {
  std::vector<key_change> out;
  for (const shard& s : shards_) {
    std::shared_lock lock(s.mutex);
    for (const auto& [id, e] : s.changes) {
      out.push_back(key_change{e.sha256, e.meaning});
    }
  }
  return out;
}

std::optional<key_meaning> key_registry::find(const sha256_digest& sha256) const {
  const subject_id id = subject_of(sha256);
  const shard& s = shard_of(id);
  std::shared_lock lock(s.mutex);
  if (auto it = s.changes.find(id); it != s.changes.end()) {
    return it->second.meaning;
  }
  if (auto it = s.seed.find(id); it != s.seed.end()) {
    return it->second.meaning;
  }
  return std::nullopt;
}

std::optional<listed_key> key_registry::find_subject(std::string_view subject) const {
  subject_id id;
  if (!subject.starts_with("key:") || !from_hex(subject.substr(4), id)) {
    return std::nullopt;
  }
  const shard& s = shard_of(id);
  std::shared_lock lock(s.mutex);
  if (auto it = s.changes.find(id); it != s.changes.end()) {
    if (!it->second.meaning) {
      return std::nullopt;
    }
    return listed_key{it->second.sha256, *it->second.meaning, false};
  }
  if (auto it = s.seed.find(id); it != s.seed.end()) {
    return listed_key{it->second.sha256, *it->second.meaning, true};
  }
  return std::nullopt;
}

std::vector<listed_key> key_registry::list(std::optional<std::string_view> plan,
                                           std::optional<sha256_digest> after,
                                           std::size_t limit) const {
  std::vector<listed_key> out;
  auto wanted = [&](const sha256_digest& sha256, const key_meaning& meaning) {
    return (!plan || meaning.plan == *plan) && (!after || sha256 > *after);
  };
  // Keep the `limit` smallest as the scan goes: a heap, so listing a page of a million keys
  // holds one page, not a copy of them all.
  auto by_sha = [](const listed_key& a, const listed_key& b) { return a.sha256 < b.sha256; };
  auto offer = [&](listed_key k) {
    if (limit == 0) {
      return;
    }
    if (out.size() < limit) {
      out.push_back(std::move(k));
      std::push_heap(out.begin(), out.end(), by_sha);
    } else if (k.sha256 < out.front().sha256) {
      std::pop_heap(out.begin(), out.end(), by_sha);
      out.back() = std::move(k);
      std::push_heap(out.begin(), out.end(), by_sha);
    }
  };
  for (const shard& s : shards_) {
    std::shared_lock lock(s.mutex);
    for (const auto& [id, e] : s.changes) {
      if (e.meaning && wanted(e.sha256, *e.meaning)) {
        offer(listed_key{e.sha256, *e.meaning, false});
      }
    }
    for (const auto& [id, e] : s.seed) {
      if (!s.changes.contains(id) && wanted(e.sha256, *e.meaning)) {
        offer(listed_key{e.sha256, *e.meaning, true});
      }
    }
  }
  std::sort_heap(out.begin(), out.end(), by_sha);
  return out;
}

std::size_t key_registry::changes() const {
  std::size_t n = 0;
  for (const shard& s : shards_) {
    std::shared_lock lock(s.mutex);
    n += s.changes.size();
  }
  return n;
}

}  // namespace ratewall
