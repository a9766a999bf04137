-- wrk script for scripts/bench/tls.sh: ../shared/bench/wrk-keys.lua (1000 X-API-Keys, counts
-- 200/429/other, prints the RESULT line) with the headers given by -H added to every request.
-- wrk.format() drops wrk.headers when it is passed a header table, as wrk-keys.lua does, so
-- without this `-H "Connection: close"` would never be sent and every connection stay alive.
-- WRK_KEYS_LUA: path of wrk-keys.lua (wrk runs each thread's script from its own state).
dofile(assert(os.getenv("WRK_KEYS_LUA"), "WRK_KEYS_LUA is not set"))

local format = wrk.format
wrk.format = function(method, path, headers, body)
  local merged = {}
  for name, value in pairs(wrk.headers) do
    merged[name] = value
  end
  for name, value in pairs(headers or {}) do
    merged[name] = value
  end
  return format(method, path, merged, body)
end
