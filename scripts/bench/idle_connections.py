#!/usr/bin/env python3
"""Memory a gateway keeps per idle kept-alive connection.

Opens N connections to 127.0.0.1:PORT, sends one GET on each and reads its answer, leaves them
open and idle, and prints the growth of the process's resident memory (VmRSS) per connection.

  python3 scripts/bench/idle_connections.py PID PORT [N=2000] [--tls] [--path /]

PID is the gateway's process (its RSS is read from /proc/PID/status). With --tls the connections
are TLS (the certificate is not checked). Needs N open files (ulimit -n).
"""
import argparse
import socket
import ssl
import time


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pid", type=int)
    ap.add_argument("port", type=int)
    ap.add_argument("n", type=int, nargs="?", default=2000)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--path", default="/")
    args = ap.parse_args()
    ctx = None
    if args.tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    request = f"GET {args.path} HTTP/1.1\r\nHost: bench\r\nX-API-Key: idle-bench\r\n\r\n".encode()
    before = rss_kb(args.pid)
    conns = []
    for _ in range(args.n):
        s = socket.create_connection(("127.0.0.1", args.port), timeout=10)
        if ctx is not None:
            s = ctx.wrap_socket(s)
        s.sendall(request)
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(65536)
            if not chunk:
                raise RuntimeError("closed before an answer")
            head += chunk
        conns.append(s)
    time.sleep(0.5)
    after = rss_kb(args.pid)
    kind = "TLS" if args.tls else "plain"
    print(f"{args.n} idle {kind} connections: RSS {before} -> {after} kB, "
          f"{(after - before) * 1024 / args.n:.0f} bytes per connection")
    for s in conns:
        s.close()


if __name__ == "__main__":
    main()
