#include "ratewall/redis/scripts.hpp"

#include <array>
#include <cstdint>
#include <cstring>

#include "ratewall/core/hash.hpp"

namespace ratewall::redis {

namespace {

// Helpers. Lua numbers in Redis are doubles: every integer below 2^53 is exact, and the
// store keeps its numbers below 2^49 (redis_store checks the policies), so times, counts and
// products stay exact where these helpers are used.
constexpr std::string_view k_prelude = R"lua(
local floor, max, min = math.floor, math.max, math.min
local TWO52 = 4503599627370496

-- floor(a / b), exact for integers below 2^52 and b > 0
local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then q = q - 1 elseif (q + 1) * b <= a then q = q + 1 end
  return q
end

-- floor(a * b / c) and the remainder, exact while the quotient and 3c stay below 2^53
local function muldiv(a, b, c)
  local q0 = 0
  if b >= c then
    local k = idiv(b, c)
    q0 = a * k
    b = b - k * c
  end
  local p = a * b
  if p < TWO52 then
    local q = idiv(p, c)
    return q0 + q, p - q * c
  end
  -- Long multiplication over the bits of a, keeping the remainder below c.
  local bits = {}
  while a > 0 do
    local h = floor(a / 2)
    bits[#bits + 1] = a - 2 * h
    a = h
  end
  local q, r = 0, 0
  for i = #bits, 1, -1 do
    q = q * 2
    r = r * 2
    if bits[i] == 1 then r = r + b end
    while r >= c do
      r = r - c
      q = q + 1
    end
  end
  return q0 + q, r
end

local function impossible(limit, remaining, reset)
  return {0, 1, remaining, max(reset, 0), -1, 0}
end

-- Milliseconds until `expires`, rounded up (never early); false, and the key dropped, when
-- the state has lapsed already: it equals no state.
local function keep_until(key, expires, now)
  if expires <= now then
    redis.call('DEL', key)
    return false
  end
  return idiv(expires - now + 999, 1000)
end

local function store(key, value, expires, now)
  local ms = keep_until(key, expires, now)
  if ms then redis.call('SET', key, value, 'PX', ms) end
end

local A = {}
)lua";

// Token bucket (GCRA): the state is the theoretical arrival time. See gcra.hpp.
constexpr std::string_view k_token_bucket = R"lua(
A[1] = {
  load = function(key)
    return {key = key, tat = tonumber(redis.call('GET', key)) or 0}
  end,
  check = function(s, p, now, cost)
    local t, tau = p.interval, p.burst * p.interval
    local base = max(s.tat, now)
    local free = max(tau - (base - now), 0)
    if cost > p.limit then return impossible(p.limit, idiv(free, t), base - now) end
    local used = base + t * cost - now
    if used <= tau then return {1, 0, idiv(tau - used, t), used, 0, 0} end
    return {0, 0, idiv(free, t), base - now, used - tau, 0}
  end,
  commit = function(s, p, now, cost)
    s.tat = max(s.tat, now) + p.interval * cost
    store(s.key, string.format('%d', s.tat), s.tat, now)
  end,
}
)lua";

// Leaky bucket, nginx limit_req: one in service and `burst` queued. See leaky_bucket.hpp.
constexpr std::string_view k_leaky_bucket = R"lua(
A[2] = {
  load = A[1].load,
  check = function(s, p, now, cost)
    local t = p.interval
    local capacity = (p.burst + 1) * t
    local served = max(s.tat, now)
    local free = max(capacity - (served - now), 0)
    if cost > p.limit then return impossible(p.limit, idiv(free, t), served - now) end
    local used = served + t * cost - now
    if used <= capacity then
      local delay = 0
      if p.delay and cost > 0 then delay = used - t end
      return {1, 0, idiv(capacity - used, t), used, 0, delay}
    end
    return {0, 0, idiv(free, t), served - now, used - capacity, 0}
  end,
  commit = A[1].commit,
}
)lua";

// Fixed window aligned to the Unix epoch: "window:count". See fixed_window.hpp.
constexpr std::string_view k_fixed_window = R"lua(
A[3] = {
  load = function(key)
    local s = {key = key, window = 0, count = 0}
    local v = redis.call('GET', key)
    if v then
      local w, c = string.match(v, '^(%-?%d+):(%d+)$')
      s.window, s.count = tonumber(w) or 0, tonumber(c) or 0
    end
    return s
  end,
  check = function(s, p, now, cost)
    local w = p.window
    local index = max(idiv(now, w), s.window)
    local count = 0
    if index == s.window then count = s.count end
    local until_end = (index + 1) * w - now
    local free = p.limit - min(count, p.limit)
    if cost > p.limit then
      local reset = 0
      if count > 0 then reset = until_end end
      return impossible(p.limit, free, reset)
    end
    if cost <= free then
      local reset = 0
      if count + cost > 0 then reset = until_end end
      return {1, 0, free - cost, reset, 0, 0}
    end
    return {0, 0, free, until_end, until_end, 0}
  end,
  commit = function(s, p, now, cost)
    local w = p.window
    local index = max(idiv(now, w), s.window)
    if index ~= s.window then
      s.window = index
      s.count = 0
    end
    s.count = s.count + cost
    local expires = 0
    if s.count > 0 then expires = (s.window + 1) * w end
    store(s.key, string.format('%d:%d', s.window, s.count), expires, now)
  end,
}
)lua";

// Sliding window log: a list with one timestamp per admitted unit, oldest first.
// See sliding_window_log.hpp.
constexpr std::string_view k_sliding_log = R"lua(
A[4] = {
  load = function(key, p, now)
    -- Stamps that have left the window are at the head: drop them (equal to no stamp).
    while true do
      local head = redis.call('LRANGE', key, 0, 127)
      local k = 0
      for i = 1, #head do
        if tonumber(head[i]) + p.window <= now then k = i else break end
      end
      if k == 0 then break end
      redis.call('LTRIM', key, k, -1)
      if k < #head then break end
    end
    local live = redis.call('LLEN', key)
    local newest = 0
    if live > 0 then newest = tonumber(redis.call('LINDEX', key, -1)) end
    return {key = key, live = live, newest = newest}
  end,
  check = function(s, p, now, cost)
    local w = p.window
    local until_empty = 0
    if s.live > 0 then until_empty = s.newest + w - now end
    local free = p.limit - min(s.live, p.limit)
    if cost > p.limit then return impossible(p.limit, free, until_empty) end
    if cost <= free then
      local reset = until_empty
      if cost > 0 then reset = max(until_empty, w) end
      return {1, 0, free - cost, reset, 0, 0}
    end
    -- Fits once the oldest (live + cost - limit) units have left the window.
    local oldest = tonumber(redis.call('LINDEX', s.key, s.live + cost - p.limit - 1))
    return {0, 0, free, until_empty, oldest + w - now, 0}
  end,
  commit = function(s, p, now, cost)
    if cost == 0 then return end
    local stamp = now
    if s.live > 0 then stamp = max(now, s.newest) end
    local batch, text = {}, string.format('%d', stamp)
    for i = 1, min(cost, 1000) do batch[i] = text end
    local left = cost
    while left > 0 do
      local n = min(left, 1000)
      redis.call('RPUSH', s.key, unpack(batch, 1, n))
      left = left - n
    end
    s.live, s.newest = s.live + cost, stamp
    local ms = keep_until(s.key, stamp + p.window, now)
    if ms then redis.call('PEXPIRE', s.key, ms) end
  end,
}
)lua";

// Sliding window counter: "window:previous:current"; the estimate
// previous × (window − elapsed) / window + current, exact. See sliding_window_counter.hpp.
constexpr std::string_view k_sliding_counter = R"lua(
local function counter_view(s, p, now)
  local w = p.window
  local index = idiv(now, w)
  local v = {window = s.window, previous = s.previous, current = s.current}
  if index == s.window + 1 then
    v = {window = index, previous = s.current, current = 0}
  elseif index > s.window + 1 then
    v = {window = index, previous = 0, current = 0}
  end
  v.elapsed = min(max(now - v.window * w, 0), w - 1)
  return v
end

A[5] = {
  load = function(key)
    local s = {key = key, window = 0, previous = 0, current = 0}
    local v = redis.call('GET', key)
    if v then
      local a, b, c = string.match(v, '^(%-?%d+):(%d+):(%d+)$')
      s.window, s.previous, s.current = tonumber(a) or 0, tonumber(b) or 0, tonumber(c) or 0
    end
    return s
  end,
  check = function(s, p, now, cost)
    local v = counter_view(s, p, now)
    local w = p.window
    local window_end = (v.window + 1) * w
    -- The previous window's share, rounded up: remaining = limit - current - share.
    local share, rest = muldiv(v.previous, w - v.elapsed, w)
    if rest > 0 then share = share + 1 end
    local free = max(p.limit - v.current - share, 0)
    local function reset_after(current)
      if current > 0 then return window_end + w - now end
      if v.previous > 0 then return window_end - now end
      return 0
    end
    if cost > p.limit then
      local d = impossible(p.limit, free, 0)
      d[4] = reset_after(v.current)
      return d
    end
    if cost == 0 or p.limit - v.current - cost - share >= 0 then
      return {1, 0, free - cost, reset_after(v.current + cost), 0, 0}
    end
    local retry
    if v.current + cost <= p.limit then
      -- Fits in this window once previous × (w − e) ≤ (limit − current − cost) × w.
      local keep = muldiv(p.limit - v.current - cost, w, v.previous)
      retry = w - keep - v.elapsed
    else
      -- Only in the next window, where this window's count becomes the previous one.
      local keep = muldiv(p.limit - cost, w, v.current)
      retry = window_end - now + w - keep
    end
    return {0, 0, free, reset_after(v.current), retry, 0}
  end,
  commit = function(s, p, now, cost)
    local v = counter_view(s, p, now)
    s.window, s.previous, s.current = v.window, v.previous, v.current + cost
    local w = p.window
    local expires = 0
    if s.current > 0 then
      expires = (s.window + 2) * w
    elseif s.previous > 0 then
      expires = (s.window + 1) * w
    end
    store(s.key, string.format('%d:%d:%d', s.window, s.previous, s.current), expires, now)
  end,
}
)lua";

// Concurrency: a sorted set of slots scored by when they expire, so that the slots of a
// gateway that crashed lapse by themselves; live requests refresh theirs. See concurrency.hpp.
constexpr std::string_view k_concurrency = R"lua(
A[6] = {
  load = function(key, p, now)
    redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
    return {key = key, in_flight = redis.call('ZCARD', key)}
  end,
  check = function(s, p, now, cost)
    local free = p.limit - min(s.in_flight, p.limit)
    if p.limit == 0 then return impossible(0, 0, 0) end
    if free >= 1 then return {1, 0, free - 1, 0, 0, 0} end
    return {0, 0, 0, 0, 1000000, 0}
  end,
  commit = function(s, p, now, cost, slot, ttl)
    redis.call('ZADD', s.key, now + ttl, slot)
    local ms = idiv(ttl + 999, 1000)
    if redis.call('PTTL', s.key) < ms then redis.call('PEXPIRE', s.key, ms) end
  end,
}
)lua";

constexpr std::string_view k_driver = R"lua(
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
else
  now = tonumber(ARGV[1])
end
local mode, cost, slot, ttl, n = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  tonumber(ARGV[6])

if mode == 'r' then
  local ms = idiv(ttl + 999, 1000)
  for i = 1, #KEYS do
    if redis.call('ZADD', KEYS[i], 'XX', 'CH', now + ttl, slot) == 1 then
      if redis.call('PTTL', KEYS[i]) < ms then redis.call('PEXPIRE', KEYS[i], ms) end
    end
  end
  return 0
end

local limits, states = {}, {}
for i = 1, n do
  local b = 6 + (i - 1) * 7
  local p = {
    algo = tonumber(ARGV[b + 1]), limit = tonumber(ARGV[b + 2]),
    interval = tonumber(ARGV[b + 3]), burst = tonumber(ARGV[b + 4]),
    window = tonumber(ARGV[b + 5]), delay = ARGV[b + 6] == '1', shadow = ARGV[b + 7] == '1',
  }
  limits[i] = p
  states[i] = A[p.algo].load(KEYS[i], p, now)
end

local out = {}
local function put(d)
  for j = 1, 6 do out[#out + 1] = d[j] end
end

if mode == 's' then
  for i = 1, n do
    put(A[limits[i].algo].check(states[i], limits[i], now, 0))
    put(A[limits[i].algo].check(states[i], limits[i], now, 1))
  end
  return out
end

-- All or nothing: charge only when every enforced limit allows.
local decisions, allowed = {}, true
for i = 1, n do
  local d = A[limits[i].algo].check(states[i], limits[i], now, cost)
  decisions[i] = d
  if d[1] == 0 and not limits[i].shadow then allowed = false end
end
if allowed then
  for i = 1, n do
    if decisions[i][1] == 1 then
      A[limits[i].algo].commit(states[i], limits[i], now, cost, slot, ttl)
    end
  end
end
for i = 1, n do put(decisions[i]) end
return out
)lua";

std::string build_script() {
  std::string s = "-- ratewall limiter v1\n";
  for (std::string_view part : {k_prelude, k_token_bucket, k_leaky_bucket, k_fixed_window,
                                k_sliding_log, k_sliding_counter, k_concurrency, k_driver}) {
    s.append(part);
  }
  return s;
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

std::string_view limiter_script() {
  static const std::string script = build_script();
  return script;
}

const std::string& limiter_script_sha() {
  static const std::string sha = sha1_hex(limiter_script());
  return sha;
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
