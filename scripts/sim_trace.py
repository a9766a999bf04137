#!/usr/bin/env python3
"""Writes a large generated trace for `ratewall simulate`, to measure its replay speed.

    python3 scripts/sim_trace.py FORMAT LINES > FILE     FORMAT: csv, access-log or nginx

The same traffic as tests/bench/simulate_bench.cpp: 4 routes, 2,000 client addresses, API keys
on one request in 5, users behind a trusted proxy on one in 7, one request every 50 us.
Replay it with config/examples/simulate-bench.yaml.
"""
import sys

PATHS = ["/api/search?q=shoes", "/api/upload", "/api/orders/42", "/index.html"]


def request_of(i):
    client = (i * 7919) % 2000
    ip = "198.51.%d.%d" % (client // 250, client % 250 + 1)
    key = "key-%d" % (client % 200) if i % 5 == 0 else ""
    user = "u-%d" % (client % 50) if i % 7 == 0 else ""
    if user:
        ip = "10.0.0.1"
    return ip, PATHS[i % 4], "POST" if i % 10 == 3 else "GET", key, user, client


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("csv", "access-log", "nginx"):
        sys.exit(__doc__)
    fmt, count = sys.argv[1], int(sys.argv[2])
    out = sys.stdout
    lines = []
    if fmt == "csv":
        lines.append("time_s,method,path,api_key,user,ip\n")
    for i in range(count):
        ip, path, method, key, user, client = request_of(i)
        if fmt == "csv":
            lines.append("%d.%06d,%s,%s,%s,%s,%s\n" % (i // 20000, (i % 20000) * 50, method, path,
                                                      key, user, ip))
        elif fmt == "nginx":
            s = i // 20000
            lines.append('%s - %s [10/Oct/2024:%02d:%02d:%02d +0200] "%s %s HTTP/1.1" 200 512 '
                         '"-" "Mozilla/5.0 (X11; Linux x86_64)"\n'
                         % (ip, user or "-", 13 + s // 3600, s // 60 % 60, s % 60, method, path))
        else:
            ms = i // 20
            lines.append('{"time":"2024-10-10T13:%02d:%02d.%03dZ","request_id":"%016x",'
                         '"method":"%s","path":"%s","host":"api.example.com","route":null,'
                         '"subject":"%016x","plan":null,"key":null,"client":null,'
                         '"user_agent":"curl/8.1","decision":"allowed","limit":null,"status":200,'
                         '"upstream":"10.0.0.5:8000","upstream_ms":1.250,"duration_ms":1.500,'
                         '"bytes_in":0,"bytes_out":512}\n'
                         % (ms // 60000 % 60, ms // 1000 % 60, ms % 1000, i, method,
                            path.split("?")[0], client * 2654435761 % (1 << 64)))
        if len(lines) >= 65536:
            out.write("".join(lines))
            lines.clear()
    out.write("".join(lines))


if __name__ == "__main__":
    main()
