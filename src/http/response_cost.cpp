#include "ratewall/http/response_cost.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include "ratewall/core/parse.hpp"

namespace ratewall {

namespace {

constexpr std::uint64_t k_saturated = std::numeric_limits<std::uint64_t>::max();

char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) { return lower(x) == y; });
}

bool ends_with_ci(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && iequals(s.substr(s.size() - suffix.size()), suffix);
}

// Finds the values at a path while the parser streams events. Only the chain of open
// containers that lie on the path is kept (at most path.size() frames); everything else is a
// depth count.
class path_finder final : public nlohmann::json_sax<nlohmann::json> {
 public:
  explicit path_finder(std::span<const std::string> path) : path_(path) {}

  bool null() override { return scalar(std::nullopt); }
  bool boolean(bool) override { return scalar(std::nullopt); }
  bool number_integer(number_integer_t v) override {
    return scalar(v >= 0 ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(v))
                         : std::nullopt);
  }
  bool number_unsigned(number_unsigned_t v) override { return scalar(v); }
  bool number_float(number_float_t v, const string_t&) override {
    if (!std::isfinite(v) || v < 0 || std::floor(v) != v) {
      return scalar(std::nullopt);
    }
    // 2^64 and above (a huge integer the parser could only read as a float): saturated.
    return scalar(v >= 18446744073709551616.0 ? k_saturated : static_cast<std::uint64_t>(v));
  }
  bool string(string_t&) override { return scalar(std::nullopt); }
  bool binary(binary_t&) override { return scalar(std::nullopt); }

  bool start_object(std::size_t) override { return open(false); }
  bool start_array(std::size_t) override { return open(true); }
  bool end_object() override { return close(); }
  bool end_array() override { return close(); }

  bool key(string_t& k) override {
    key_hit_ = on_path_container() && k == path_[depth_ - 1];
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override {
    return false;
  }

  std::optional<std::uint64_t> result() const {
    if (bad_ || !found_) {
      return std::nullopt;
    }
    return best_;
  }

 private:
  struct frame {
    bool array = false;
    std::uint64_t next_index = 0;
  };

  // The innermost open container is on the path: its children are matched against
  // path_[depth_ - 1].
  bool on_path_container() const {
    return depth_ > 0 && chain_.size() == depth_ && depth_ <= path_.size();
  }

  // Whether the value that starts now sits at the path's position for its depth.
  bool value_hit() {
    if (depth_ == 0) {
      return true;  // the root: where every path starts
    }
    if (!on_path_container()) {
      return false;
    }
    frame& f = chain_.back();
    if (!f.array) {
      return std::exchange(key_hit_, false);
    }
    const std::string& want = path_[depth_ - 1];
    const std::string index = std::to_string(f.next_index++);
    return want == index;
  }

  bool scalar(std::optional<std::uint64_t> v) {
    if (value_hit() && depth_ == path_.size() && depth_ > 0) {
      found_ = true;
      if (v) {
        best_ = std::max(best_, *v);
      } else {
        bad_ = true;
      }
    }
    return true;
  }

  bool open(bool array) {
    const bool hit = value_hit();
    if (hit && depth_ == path_.size() && depth_ > 0) {
      found_ = true;
      bad_ = true;  // the path names an object or array, not a count
    } else if (hit && depth_ < path_.size()) {
      chain_.push_back({array, 0});
    }
    ++depth_;
    return true;
  }

  bool close() {
    if (chain_.size() == depth_) {
      chain_.pop_back();
    }
    --depth_;
    return true;
  }

  std::span<const std::string> path_;
  std::vector<frame> chain_;
  std::size_t depth_ = 0;
  bool key_hit_ = false;
  bool found_ = false;
  bool bad_ = false;
  std::uint64_t best_ = 0;
};

}  // namespace

std::optional<std::uint64_t> parse_reported_cost(std::string_view text) {
  text = trim(text);
  if (text.empty()) {
    return std::nullopt;
  }
  std::uint64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') {
      return std::nullopt;
    }
    const auto digit = static_cast<std::uint64_t>(c - '0');
    v = v > (k_saturated - digit) / 10 ? k_saturated : v * 10 + digit;
  }
  return v;
}

std::optional<std::uint64_t> json_reported_cost(std::string_view body,
                                                std::span<const std::string> path) {
  if (path.empty()) {
    return std::nullopt;
  }
  path_finder finder(path);
  // Strict: the whole text is one JSON value. Malformed input ends in parse_error, not a throw.
  const bool ok = nlohmann::json::sax_parse(body.data(), body.data() + body.size(), &finder,
                                            nlohmann::json::input_format_t::json, true);
  if (!ok) {
    return std::nullopt;
  }
  return finder.result();
}

bool is_json_media_type(std::string_view content_type) {
  const std::string_view type = trim(content_type.substr(0, content_type.find(';')));
  return iequals(type, "application/json") || ends_with_ci(type, "+json");
}

void response_cost::header_values(std::span<const std::string_view> values) {
  std::optional<std::uint64_t> best;
  for (std::string_view value : values) {
    // A list ("5, 7") is several values, as the same field sent twice would be.
    for (;;) {
      const std::size_t comma = value.find(',');
      const std::optional<std::uint64_t> v = parse_reported_cost(value.substr(0, comma));
      if (!v) {
        reported_.reset();
        return;
      }
      best = std::max(best.value_or(0), *v);
      if (comma == std::string_view::npos) {
        break;
      }
      value.remove_prefix(comma + 1);
    }
  }
  reported_ = best;
}

bool response_cost::keep_body(bool has_body, std::optional<std::uint64_t> content_length,
                              std::string_view content_type) {
  keeping_ = has_body && content_length && *content_length > 0 &&
             *content_length <= cfg_.max_body && is_json_media_type(content_type);
  if (keeping_) {
    body_.reserve(static_cast<std::size_t>(*content_length));
  }
  return keeping_;
}

void response_cost::body_piece(std::string_view piece) {
  if (!keeping_) {
    return;
  }
  const std::size_t room = static_cast<std::size_t>(cfg_.max_body) - body_.size();
  body_.append(piece.substr(0, room));
}

void response_cost::body_end() {
  if (keeping_) {
    reported_ = json_reported_cost(body_, cfg_.json);
    std::string().swap(body_);
    keeping_ = false;
  }
}

void response_cost::client_gone() {
  if (keeping_) {
    reported_ = cfg_.max;
    std::string().swap(body_);
    keeping_ = false;
  }
}

std::uint64_t response_cost::cost() const {
  return reported_ ? std::min(*reported_, cfg_.max) : cfg_.default_cost;
}

}  // namespace ratewall
