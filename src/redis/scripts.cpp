#include "ratewall/redis/scripts.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <iterator>

#include "ratewall/core/hash.hpp"
#include "ratewall/redis/reply.hpp"

namespace ratewall::redis {

namespace {

// A route's script is the prelude, the units of the algorithms its limits use, and the driver.
// Redis runs a script's whole text on every call, so everything here is written to allocate
// little: state and parameters in small arrays, decisions written straight into the reply.
//
// Lua numbers in Redis are doubles: every integer below 2^53 is exact, and the store keeps
// its numbers below 2^49 (redis_store checks the policies), so times, counts and the products
// below stay exact.
constexpr std::string_view k_prelude = R"lua(-- ratewall limiter v2
local floor, max, min, tonumber = math.floor, math.max, math.min, tonumber
local call, KEYS, ARGV = redis.call, KEYS, ARGV
local now
if ARGV[1] == '' then
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local mode, ttl = ARGV[2], tonumber(ARGV[3])
-- How far a forced charge may take a limit past what it holds (k_max_debt_us): a bucket's TAT
-- at most this far ahead, a window's count at most this many units. Checked requests never
-- come near it (redis_store keeps every policy below 2^49).
local D = 562949953421312
-- The request being decided: its cost, its concurrency unit, where its keys start (KEYS[K + i]
-- is the key of its limit i), and its limits: Q[i] is algorithm, limit, interval, burst,
-- window, delay, shadow. S[i]: the state of its limit i, as L loaded it.
-- L, C, M: load, check and commit, by algorithm.
local cost, unit, K, Q = 0, '', 0, nil
local S, L, C, M = {}, {}, {}, {}
local out, o = {}, 0

-- The state of limit i: up to three numbers, in a table kept from request to request.
local function state(i, a, b, c)
  local s = S[i]
  if not s then
    s = {}
    S[i] = s
  end
  s[1], s[2], s[3] = a, b, c
end

-- floor(a / b), exact for integers below 2^52 and b > 0
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then return q - 1 end
  if (q + 1) * b <= a then return q + 1 end
  return q
end

-- One decision into the reply, in three integers: remaining × 4 + impossible × 2 + allowed;
-- reset_after; the delay when allowed, else retry_after (-1: never). Returns `allowed`.
local function emit(allowed, impossible, remaining, reset, retry, delay)
  local wait = retry
  if allowed == 1 then wait = delay end
  out[o + 1], out[o + 2], out[o + 3] = remaining * 4 + impossible * 2 + allowed, reset, wait
  o = o + 3
  return allowed
end

-- Keeps `key` until `expires` (ms rounded up: never early), or drops it when the state has
-- lapsed already: it equals no state.
local function store(key, value, expires)
  if expires <= now then
    call('DEL', key)
  else
    call('SET', key, value, 'PX', idiv(expires - now + 999, 1000))
  end
end
)lua";

// Token bucket (GCRA): the state is the theoretical arrival time. See gcra.hpp.
constexpr std::string_view k_token_bucket = R"lua(
L[1] = function(i)
  state(i, tonumber(call('GET', KEYS[K + i])) or 0)
end
C[1] = function(i, c)
  local p = Q[i]
  local t = p[3]
  local tau = p[4] * t
  local base = max(S[i][1], now)
  local free = max(tau - (base - now), 0)
  if c > p[2] then return emit(0, 1, idiv(free, t), base - now, -1, 0) end
  local used = base + t * c - now
  if used <= tau then return emit(1, 0, idiv(tau - used, t), used, 0, 0) end
  return emit(0, 0, idiv(free, t), base - now, used - tau, 0)
end
M[1] = function(i)
  local tat = min(max(S[i][1], now) + Q[i][3] * cost, now + D)
  store(KEYS[K + i], string.format('%d', tat), tat)
end
)lua";

// Leaky bucket, nginx limit_req: one in service and `burst` queued. See leaky_bucket.hpp.
constexpr std::string_view k_leaky_bucket = R"lua(
L[2] = function(i)
  state(i, tonumber(call('GET', KEYS[K + i])) or 0)
end
C[2] = function(i, c)
  local p = Q[i]
  local t = p[3]
  local capacity = (p[4] + 1) * t
  local served = max(S[i][1], now)
  local free = max(capacity - (served - now), 0)
  if c > p[2] then return emit(0, 1, idiv(free, t), served - now, -1, 0) end
  local used = served + t * c - now
  if used <= capacity then
    local delay = 0
    if p[6] and c > 0 then delay = used - t end
    return emit(1, 0, idiv(capacity - used, t), used, 0, delay)
  end
  return emit(0, 0, idiv(free, t), served - now, used - capacity, 0)
end
M[2] = function(i)
  local tat = min(max(S[i][1], now) + Q[i][3] * cost, now + D)
  store(KEYS[K + i], string.format('%d', tat), tat)
end
)lua";

// Fixed window aligned to the Unix epoch: "window:count". See fixed_window.hpp.
constexpr std::string_view k_fixed_window = R"lua(
L[3] = function(i)
  local v = call('GET', KEYS[K + i])
  if v then
    local w, c = string.match(v, '^(%-?%d+):(%d+)$')
    state(i, tonumber(w) or 0, tonumber(c) or 0)
  else
    state(i, 0, 0)
  end
end
C[3] = function(i, c)
  local p, s = Q[i], S[i]
  local limit, w = p[2], p[5]
  local index = max(idiv(now, w), s[1])
  local count = 0
  if index == s[1] then count = s[2] end
  local until_end = (index + 1) * w - now
  local free = limit - min(count, limit)
  if c > limit then
    if count > 0 then return emit(0, 1, free, until_end, -1, 0) end
    return emit(0, 1, free, 0, -1, 0)
  end
  if c <= free then
    if count + c > 0 then return emit(1, 0, free - c, until_end, 0, 0) end
    return emit(1, 0, free - c, 0, 0, 0)
  end
  return emit(0, 0, free, until_end, until_end, 0)
end
M[3] = function(i)
  local s, w = S[i], Q[i][5]
  local index = max(idiv(now, w), s[1])
  local count = min(cost, D)
  if index == s[1] then count = min(s[2] + cost, max(s[2], D)) end
  local expires = 0
  if count > 0 then expires = (index + 1) * w end
  store(KEYS[K + i], string.format('%d:%d', index, count), expires)
end
)lua";

// Sliding window log: a list with one timestamp per admitted unit, oldest first.
// See sliding_window_log.hpp.
constexpr std::string_view k_sliding_log = R"lua(
L[4] = function(i)
  local key, w = KEYS[K + i], Q[i][5]
  -- Stamps that have left the window are at the head: drop them (equal to no stamp).
  while true do
    local head = call('LRANGE', key, 0, 127)
    local k = 0
    for j = 1, #head do
      if tonumber(head[j]) + w <= now then k = j else break end
    end
    if k == 0 then break end
    call('LTRIM', key, k, -1)
    if k < #head then break end
  end
  local live = call('LLEN', key)
  local newest = 0
  if live > 0 then newest = tonumber(call('LINDEX', key, -1)) end
  state(i, live, newest)
end
C[4] = function(i, c)
  local p, s = Q[i], S[i]
  local limit, w, live = p[2], p[5], s[1]
  local until_empty = 0
  if live > 0 then until_empty = s[2] + w - now end
  local free = limit - min(live, limit)
  if c > limit then return emit(0, 1, free, until_empty, -1, 0) end
  if c <= free then
    if c > 0 then return emit(1, 0, free - c, max(until_empty, w), 0, 0) end
    return emit(1, 0, free, until_empty, 0, 0)
  end
  -- Fits once the oldest (live + cost - limit) units have left the window.
  local oldest = tonumber(call('LINDEX', KEYS[K + i], live + c - limit - 1))
  return emit(0, 0, free, until_empty, oldest + w - now, 0)
end
M[4] = function(i)
  if cost == 0 then return end
  local s, key = S[i], KEYS[K + i]
  local stamp = now
  if s[1] > 0 then stamp = max(now, s[2]) end
  local batch, text = {}, string.format('%d', stamp)
  for j = 1, min(cost, 1000) do batch[j] = text end
  local left = cost
  while left > 0 do
    local k = min(left, 1000)
    call('RPUSH', key, unpack(batch, 1, k))
    left = left - k
  end
  local expires = stamp + Q[i][5]
  if expires <= now then
    call('DEL', key)
  else
    call('PEXPIRE', key, idiv(expires - now + 999, 1000))
  end
end
)lua";

// Sliding window counter: "window:previous:current"; the estimate
// previous × (window − elapsed) / window + current, exact. See sliding_window_counter.hpp.
constexpr std::string_view k_sliding_counter = R"lua(
-- floor(a * b / c) and the remainder, exact while the quotient and 3c stay below 2^53
local function muldiv(a, b, c)
  local q0 = 0
  if b >= c then
    local k = idiv(b, c)
    q0 = a * k
    b = b - k * c
  end
  local prod = a * b
  if prod < 4503599627370496 then
    local q = idiv(prod, c)
    return q0 + q, prod - q * c
  end
  -- Long multiplication over the bits of a, keeping the remainder below c.
  local bits = {}
  while a > 0 do
    local h = floor(a / 2)
    bits[#bits + 1] = a - 2 * h
    a = h
  end
  local q, r = 0, 0
  for j = #bits, 1, -1 do
    q = q * 2
    r = r * 2
    if bits[j] == 1 then r = r + b end
    while r >= c do
      r = r - c
      q = q + 1
    end
  end
  return q0 + q, r
end

-- The state rolled forward to the window of now: window, previous, current, elapsed.
local function counter_view(s, w)
  local index = idiv(now, w)
  local win, prev, cur = s[1], s[2], s[3]
  if index == win + 1 then
    win, prev, cur = index, cur, 0
  elseif index > win + 1 then
    win, prev, cur = index, 0, 0
  end
  local e = now - win * w
  if e < 0 then e = 0 elseif e > w - 1 then e = w - 1 end
  return win, prev, cur, e
end

L[5] = function(i)
  local v = call('GET', KEYS[K + i])
  if v then
    local a, b, c = string.match(v, '^(%-?%d+):(%d+):(%d+)$')
    state(i, tonumber(a) or 0, tonumber(b) or 0, tonumber(c) or 0)
  else
    state(i, 0, 0, 0)
  end
end
C[5] = function(i, c)
  local p = Q[i]
  local limit, w = p[2], p[5]
  local win, prev, cur, e = counter_view(S[i], w)
  local window_end = (win + 1) * w
  -- The previous window's share, rounded up: remaining = limit - current - share.
  local share, rest = muldiv(prev, w - e, w)
  if rest > 0 then share = share + 1 end
  local free = max(limit - cur - share, 0)
  -- reset_after: until the newest non-empty window has slid out.
  local reset = 0
  if cur > 0 then reset = window_end + w - now elseif prev > 0 then reset = window_end - now end
  if c > limit then return emit(0, 1, free, reset, -1, 0) end
  if c == 0 or limit - cur - c - share >= 0 then
    if cur + c > 0 then reset = window_end + w - now end
    return emit(1, 0, free - c, reset, 0, 0)
  end
  local retry
  if cur + c <= limit then
    -- Fits in this window once previous × (w − e) ≤ (limit − current − cost) × w.
    retry = w - muldiv(limit - cur - c, w, prev) - e
  else
    -- Only in the next window, where this window's count becomes the previous one.
    retry = window_end - now + w - muldiv(limit - c, w, cur)
  end
  return emit(0, 0, free, reset, retry, 0)
end
M[5] = function(i)
  local w = Q[i][5]
  local win, prev, cur = counter_view(S[i], w)
  cur = min(cur + cost, max(cur, D))
  local expires = 0
  if cur > 0 then expires = (win + 2) * w elseif prev > 0 then expires = (win + 1) * w end
  store(KEYS[K + i], string.format('%d:%d:%d', win, prev, cur), expires)
end
)lua";

// Concurrency: a sorted set of units scored by when they lapse, so that the units of a gateway
// that crashed lapse by themselves; live requests refresh theirs. See concurrency.hpp.
constexpr std::string_view k_concurrency = R"lua(
L[6] = function(i)
  call('ZREMRANGEBYSCORE', KEYS[K + i], '-inf', now)
  state(i, call('ZCARD', KEYS[K + i]))
end
C[6] = function(i, c)
  local limit = Q[i][2]
  local free = limit - min(S[i][1], limit)
  if limit == 0 then return emit(0, 1, 0, 0, -1, 0) end
  if free >= 1 then return emit(1, 0, free - 1, 0, 0, 0) end
  return emit(0, 0, 0, 0, 1000000, 0)
end
M[6] = function(i)
  local key = KEYS[K + i]
  call('ZADD', key, now + ttl, unit)
  local ms = idiv(ttl + 999, 1000)
  if call('PTTL', key) < ms then call('PEXPIRE', key, ms) end
end
)lua";

constexpr std::string_view k_driver = R"lua(
if mode == 'r' then
  local ms = idiv(ttl + 999, 1000)
  unit = ARGV[4]
  for i = 1, #KEYS do
    if call('ZADD', KEYS[i], 'XX', 'CH', now + ttl, unit) == 1 then
      if call('PTTL', KEYS[i]) < ms then call('PEXPIRE', KEYS[i], ms) end
    end
  end
  return 0
end

-- The limit sets, each read once however many requests use it.
local sets, a = {}, 6
for j = 1, tonumber(ARGV[4]) do
  local set = {}
  for i = 1, tonumber(ARGV[a]) do
    set[i] = {tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]),
              tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), ARGV[a + 6] == '1',
              ARGV[a + 7] == '1'}
    a = a + 7
  end
  sets[j] = set
  a = a + 1
end

for _ = 1, tonumber(ARGV[5]) do
  Q, cost, unit = sets[tonumber(ARGV[a])], tonumber(ARGV[a + 1]), ARGV[a + 2]
  a = a + 3
  local n = #Q
  for i = 1, n do
    L[Q[i][1]](i)
  end
  if mode == 's' then
    for i = 1, n do
      C[Q[i][1]](i, 0)
      C[Q[i][1]](i, 1)
    end
  elseif mode == 'f' then
    -- The cost the upstream reported, charged to every limit whatever it holds (a sliding log
    -- or concurrency limit has no debt: never sent, and left alone).
    for i = 1, n do
      local code = Q[i][1]
      C[code](i, cost)
      if code ~= 4 and code ~= 6 then M[code](i) end
    end
  else
    -- All or nothing: charge only when every enforced limit allows; shadow limits that allow
    -- themselves are charged with the rest.
    local first, allowed = o, true
    for i = 1, n do
      if C[Q[i][1]](i, cost) == 0 and not Q[i][7] then allowed = false end
    end
    -- 'p' (peek) only decides: the cost comes later, in an 'f' call.
    if allowed and mode == 'c' then
      for i = 1, n do
        if out[first + (i - 1) * 3 + 1] % 2 == 1 then M[Q[i][1]](i) end
      end
    end
  end
  K = K + n
end
return out
)lua";

constexpr std::string_view k_units[] = {k_token_bucket, k_leaky_bucket,    k_fixed_window,
                                        k_sliding_log,  k_sliding_counter, k_concurrency};
constexpr unsigned k_all_algorithms = (1u << std::size(k_units)) - 1;

struct compiled {
  std::string source;
  std::string sha;
};

std::string build_script(unsigned mask) {
  std::string s(k_prelude);
  for (std::size_t i = 0; i < std::size(k_units); ++i) {
    if ((mask >> i) & 1) {
      s.append(k_units[i]);
    }
  }
  s.append(k_driver);
  return s;
}

// Every combination, built once: 64 scripts of a few kB.
const std::array<compiled, k_all_algorithms + 1>& scripts() {
  static const auto all = [] {
    std::array<compiled, k_all_algorithms + 1> out;
    for (unsigned mask = 0; mask <= k_all_algorithms; ++mask) {
      out[mask].source = build_script(mask);
      out[mask].sha = sha1_hex(out[mask].source);
    }
    return out;
  }();
  return all;
}

std::uint32_t rotl(std::uint32_t x, int n) {
  return (x << n) | (x >> (32 - n));
}

}  // namespace

// SHA-1 (FIPS 180-4), only to name the script for EVALSHA as Redis does.
std::string sha1_hex(std::string_view text) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string data(text);
  const std::uint64_t bits = static_cast<std::uint64_t>(text.size()) * 8;
  data += static_cast<char>(0x80);
  while (data.size() % 64 != 56) {
    data += '\0';
  }
  for (int i = 7; i >= 0; --i) {
    data += static_cast<char>((bits >> (8 * i)) & 0xff);
  }
  for (std::size_t block = 0; block < data.size(); block += 64) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(data.data() + block + 4 * i);
      w[i] = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) |
             (std::uint32_t{p[2]} << 8) | p[3];
    }
    for (int i = 16; i < 80; ++i) {
      w[i] = rotl(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f;
      std::uint32_t k;
      if (i < 20) {
        f = (b & c) | (~b & d);
        k = 0x5A827999;
      } else if (i < 40) {
        f = b ^ c ^ d;
        k = 0x6ED9EBA1;
      } else if (i < 60) {
        f = (b & c) | (b & d) | (c & d);
        k = 0x8F1BBCDC;
      } else {
        f = b ^ c ^ d;
        k = 0xCA62C1D6;
      }
      const std::uint32_t t = rotl(a, 5) + f + e + k + w[i];
      e = d;
      d = c;
      c = rotl(b, 30);
      b = a;
      a = t;
    }
    h[0] += a;
    h[1] += b;
    h[2] += c;
    h[3] += d;
    h[4] += e;
  }
  std::uint8_t out[20];
  for (int i = 0; i < 5; ++i) {
    out[4 * i] = static_cast<std::uint8_t>(h[i] >> 24);
    out[4 * i + 1] = static_cast<std::uint8_t>(h[i] >> 16);
    out[4 * i + 2] = static_cast<std::uint8_t>(h[i] >> 8);
    out[4 * i + 3] = static_cast<std::uint8_t>(h[i]);
  }
  return to_hex(out, sizeof out);
}

namespace {

// The script computes exactly below 2^53; policies beyond this are refused (about 17 years
// in microseconds, or 5.6e14 requests).
constexpr std::uint64_t k_max_script_number = std::uint64_t{1} << 49;

std::uint64_t micros_up(nanos d) {
  return static_cast<std::uint64_t>((d.count() + 999) / 1000);
}

// The bucket's burst as the script gets it (the queue for the leaky bucket): tolerance in
// whole intervals. exhausted_for must read the bucket exactly as add_request sends it.
std::uint64_t bucket_burst(const policy& p) {
  return p.interval.count() > 0
             ? static_cast<std::uint64_t>(p.tolerance.count() / p.interval.count())
             : 0;
}

std::string number(std::uint64_t v) {
  char text[24];
  const auto end = std::to_chars(text, text + sizeof text, v).ptr;
  return std::string(text, end);
}

}  // namespace

script_call::script_call(char mode, std::int64_t now_us, std::uint64_t unit_ttl_us) : mode_(mode) {
  header_.push_back(now_us < 0 ? std::string() : std::to_string(now_us));
  header_.emplace_back(1, mode);
  header_.push_back(number(unit_ttl_us));
}

bool script_call::add(std::span<const std::string> keys, std::span<const policy> limits,
                      std::uint64_t cost, std::string_view unit) {
  if (!add_request(keys.size(), limits, cost, unit)) {
    return false;
  }
  keys_.insert(keys_.end(), keys.begin(), keys.end());
  return true;
}

bool script_call::add(std::vector<std::string>&& keys, std::span<const policy> limits,
                      std::uint64_t cost, std::string_view unit) {
  if (!add_request(keys.size(), limits, cost, unit)) {
    return false;
  }
  if (keys_.empty()) {
    keys_ = std::move(keys);
  } else {
    keys_.insert(keys_.end(), std::make_move_iterator(keys.begin()),
                 std::make_move_iterator(keys.end()));
  }
  return true;
}

bool script_call::add_request(std::size_t keys, std::span<const policy> limits, std::uint64_t cost,
                              std::string_view unit) {
  if (mode_ == 'r') {
    if (requests_ > 0 || !limits.empty()) {
      return false;
    }
    request_args_.emplace_back(unit);
    requests_ = 1;
    return true;
  }
  if (cost >= k_max_script_number || keys != limits.size()) {
    return false;
  }
  // The set's numbers: n, then per limit algorithm, limit, interval, burst, window, delay,
  // shadow.
  std::uint64_t set[1 + 7 * 8];
  std::vector<std::uint64_t> large;
  std::uint64_t* numbers = set;
  if (limits.size() > 8) {
    large.resize(1 + 7 * limits.size());
    numbers = large.data();
  }
  const std::size_t count = 1 + 7 * limits.size();
  numbers[0] = limits.size();
  unsigned algorithms = 0;
  for (std::size_t i = 0; i < limits.size(); ++i) {
    const policy& p = limits[i];
    std::uint64_t interval = 0;
    std::uint64_t burst = 0;
    std::uint64_t window = 0;
    bool fits = p.limit < k_max_script_number;
    switch (p.algo) {
      case algorithm::token_bucket:
      case algorithm::leaky_bucket:
        interval = micros_up(p.interval);
        burst = bucket_burst(p);
        fits = fits && interval > 0 && (burst + 1) < k_max_script_number / interval;
        break;
      case algorithm::fixed_window:
      case algorithm::sliding_window_log:
      case algorithm::sliding_window_counter:
        window = micros_up(p.window);
        fits = fits && window > 0 && window < k_max_script_number;
        break;
      case algorithm::concurrency:
        break;
    }
    if (!fits) {
      return false;
    }
    std::uint64_t* at = numbers + 1 + 7 * i;
    at[0] = static_cast<std::uint64_t>(script_code(p.algo));
    at[1] = p.limit;
    at[2] = interval;
    at[3] = burst;
    at[4] = window;
    at[5] = p.delay ? 1 : 0;
    at[6] = p.shadow ? 1 : 0;
    algorithms |= script_bit(p.algo);
  }
  // The requests of a call mostly share a few routes: each set is sent once.
  std::size_t index = 0;
  std::size_t offset = 0;
  for (std::size_t s = 0; s < set_count_; ++s) {
    const std::size_t size = 1 + 7 * sets_[offset];
    if (size == count && std::equal(numbers, numbers + count, sets_.begin() + offset)) {
      index = s + 1;
      break;
    }
    offset += size;
  }
  if (index == 0) {
    sets_.insert(sets_.end(), numbers, numbers + count);
    for (std::size_t j = 0; j < count; ++j) {
      set_args_.push_back(number(numbers[j]));
    }
    index = ++set_count_;
  }
  request_args_.push_back(number(index));
  request_args_.push_back(number(cost));
  request_args_.emplace_back(unit);
  algorithms_ |= algorithms;
  ++requests_;
  return true;
}

// `numbers` holds the counts the views point into.
std::vector<std::string_view> script_call::argv(std::string& numbers) const {
  numbers = number(keys_.size());
  numbers += ' ';
  numbers += number(set_count_);
  numbers += ' ';
  numbers += number(requests_);
  const std::string_view all(numbers);
  const std::size_t first = all.find(' ');
  const std::size_t second = all.find(' ', first + 1);
  std::vector<std::string_view> out;
  out.reserve(3 + keys_.size() + header_.size() + 2 + set_args_.size() + request_args_.size());
  out.emplace_back("EVALSHA");
  out.emplace_back(limiter_script_sha(algorithms_));
  out.push_back(all.substr(0, first));
  out.insert(out.end(), keys_.begin(), keys_.end());
  out.insert(out.end(), header_.begin(), header_.end());
  if (mode_ != 'r') {
    out.push_back(all.substr(first + 1, second - first - 1));
    out.push_back(all.substr(second + 1));
    out.insert(out.end(), set_args_.begin(), set_args_.end());
  }
  out.insert(out.end(), request_args_.begin(), request_args_.end());
  return out;
}

std::vector<std::string> script_call::arguments() const {
  std::string numbers;
  const std::vector<std::string_view> views = argv(numbers);
  return std::vector<std::string>(views.begin(), views.end());
}

void script_call::append_to(std::string& out) const {
  std::string numbers;
  append_command(out, argv(numbers));
}

std::optional<decision> decode_decision(std::int64_t packed, std::int64_t reset_us,
                                        std::int64_t wait_us, std::uint64_t limit) {
  const auto span = [](std::int64_t us) { return us >= 0 && us <= k_max_reply_span_us; };
  if (packed < 0 || !span(reset_us)) {
    return std::nullopt;
  }
  decision d;
  d.allowed = (packed & 1) != 0;
  d.impossible = (packed & 2) != 0;
  d.limit = limit;
  d.remaining = static_cast<std::uint64_t>(packed >> 2);
  d.reset_after = nanos{reset_us * 1000};
  if (d.remaining > limit || (d.allowed && d.impossible)) {
    return std::nullopt;
  }
  if (d.impossible) {
    if (wait_us != -1) {
      return std::nullopt;
    }
    d.retry_after = k_never;
  } else if (!span(wait_us)) {
    return std::nullopt;
  } else if (d.allowed) {
    d.delay = nanos{wait_us * 1000};
  } else {
    d.retry_after = nanos{wait_us * 1000};
  }
  return d;
}

std::optional<std::vector<decision>> decode_decisions(std::span<const reply> values,
                                                      std::span<const policy> limits,
                                                      std::size_t rows) {
  constexpr std::size_t width = k_script_values_per_decision;
  if (values.size() != limits.size() * rows * width) {
    return std::nullopt;
  }
  std::vector<decision> out;
  out.reserve(limits.size() * rows);
  for (std::size_t i = 0; i < limits.size() * rows; ++i) {
    const reply* v = &values[i * width];
    if (v[0].type != reply::kind::integer || v[1].type != reply::kind::integer ||
        v[2].type != reply::kind::integer) {
      return std::nullopt;
    }
    auto d = decode_decision(v[0].integer, v[1].integer, v[2].integer, limits[i / rows].limit);
    if (!d) {
      return std::nullopt;
    }
    out.push_back(*d);
  }
  return out;
}

nanos exhausted_for(const policy& p, const decision& d) {
  if (!d.allowed || d.impossible || d.remaining > 0) {
    return nanos{0};
  }
  switch (p.algo) {
    case algorithm::token_bucket:
    case algorithm::leaky_bucket: {
      // The script's numbers (see add_request): t µs per unit; room for `burst` units (plus
      // the one in service for the leaky bucket). A request fits once used + t <= capacity,
      // and used (= reset_after) falls by one each microsecond.
      if (p.interval.count() <= 0) {
        return nanos{0};
      }
      const auto t = static_cast<std::int64_t>(micros_up(p.interval));
      auto units = static_cast<std::int64_t>(bucket_burst(p));
      if (p.algo == algorithm::leaky_bucket) {
        ++units;
      }
      const std::int64_t used = d.reset_after.count() / 1000;
      const std::int64_t wait = used + t - units * t;
      return nanos{std::max<std::int64_t>(wait, 0) * 1000};
    }
    case algorithm::fixed_window:
      return d.reset_after;  // the window's end: no unit comes back before it
    case algorithm::sliding_window_log:
    case algorithm::sliding_window_counter:
    case algorithm::concurrency:
      break;
  }
  return nanos{0};
}

std::string_view limiter_script(unsigned algorithms) {
  return scripts()[algorithms & k_all_algorithms].source;
}

const std::string& limiter_script_sha(unsigned algorithms) {
  return scripts()[algorithms & k_all_algorithms].sha;
}

unsigned script_bit(algorithm a) {
  return 1u << (script_code(a) - 1);
}

int script_code(algorithm a) {
  switch (a) {
    case algorithm::token_bucket:
      return 1;
    case algorithm::leaky_bucket:
      return 2;
    case algorithm::fixed_window:
      return 3;
    case algorithm::sliding_window_log:
      return 4;
    case algorithm::sliding_window_counter:
      return 5;
    case algorithm::concurrency:
      break;
  }
  return 6;
}

}  // namespace ratewall::redis
