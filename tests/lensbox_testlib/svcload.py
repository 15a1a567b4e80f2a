"""Steady DNS and relay traffic from inside one sandbox's network namespace, timed: what the services' crash and
fair-share tests (and tests/chaos/) measure answers and latency with.

    with svcload.Traffic(world, sb, "dns", name="site.example") as t:   # or "relay" (plain HTTP through the relay)
        ...                                                             # kill something, flood from elsewhere
    attempts = t.results()        # [(start, end, ok)], CLOCK_MONOTONIC seconds (one clock for every namespace)

Run as `python3 svcload.py MODE JSON` inside the namespace (`ip netns exec`), it sends one attempt at a time, every
`interval` seconds, each bounded by `timeout`, until its stdin closes, and prints one line per attempt. Flood modes
(`relay_hold`: hold `conns` idle connections to the relay, reopening those it resets; `dns_flood`: send queries as
fast as the socket takes them, or `rate` a second, never waiting for answers; with `fresh`, each for a new name under
`name`, which no cache holds) print how many attempts they made. Only the sealed world's addresses
(169.254.53.53, which nftables sends to the resolver, and the world's registry address) are ever contacted.
Standard library only.
"""
import json
import os
import random
import select
import socket
import struct
import subprocess
import sys
import threading
import time

RESOLVER = ("169.254.53.53", 53)


def dns_query(name, qid):
    q = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return struct.pack("!HHHHHH", qid, 0x0100, 1, 0, 0, 0) + q + struct.pack("!HH", 1, 1)


def one_dns(name, timeout):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(timeout)
    try:
        qid = random.randrange(65536)
        s.sendto(dns_query(name, qid), RESOLVER)
        while True:
            data = s.recv(4096)
            if len(data) >= 12 and struct.unpack("!H", data[:2])[0] == qid:
                return (struct.unpack("!H", data[2:4])[0] & 0xF) == 0 and struct.unpack("!H", data[6:8])[0] > 0
    except OSError:
        return False
    finally:
        s.close()


def one_relay(addr, host, path, timeout):
    try:
        with socket.create_connection((addr, 80), timeout=timeout) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            return data.startswith(b"HTTP/1.") and data.split(b" ", 2)[1] == b"200"
    except (OSError, IndexError):
        return False


def stdin_closed():
    return bool(select.select([sys.stdin], [], [], 0)[0]) and sys.stdin.read(1) == ""


def main():
    mode, args = sys.argv[1], json.loads(sys.argv[2])
    timeout, interval = args.get("timeout", 0.5), args.get("interval", 0.02)
    print("ready", flush=True)
    if mode in ("dns", "relay"):
        while not stdin_closed():
            t0 = time.monotonic()
            if mode == "dns":
                ok = one_dns(args["name"], timeout)
            else:
                ok = one_relay(args["addr"], args["host"], args.get("path", "/simple/lbdemo/"), timeout)
            print(f"{t0:.6f} {time.monotonic():.6f} {int(ok)}", flush=True)
            time.sleep(max(0.0, interval - (time.monotonic() - t0)))
    elif mode == "relay_hold":
        held, made, stop = [], 0, False
        while not stop:
            while len(held) < args["conns"]:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                s.connect_ex((args["addr"], 443))
                held.append(s)
                made += 1
            r, _, _ = select.select(held + [sys.stdin], [], [], 0.05)
            for s in r:
                if s is sys.stdin:
                    stop = sys.stdin.read(1) == ""
                    continue
                try:
                    s.recv(1)  # reset or closed: the relay refused it or its hello time ran out
                except OSError:
                    pass
                held.remove(s)
                s.close()
        print(f"made {made}", flush=True)
    elif mode == "dns_flood":
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setblocking(False)
        # fresh: each query for a name of its own under args["name"], so that none is answered from lensbox's cache
        # (a flood meant to hold queries in flight does that)
        fresh = args.get("fresh", False)
        sent, q = 0, dns_query(args["name"], 1)
        rate, t0 = args.get("rate", 0), time.monotonic()
        while True:
            if rate and sent > rate * (time.monotonic() - t0):
                time.sleep(0.002)
                if stdin_closed():
                    break
                continue
            for _ in range(50 if rate else 200):
                if fresh:
                    q = dns_query(f"q{sent}.{args['name']}", 1)
                try:
                    s.sendto(q, RESOLVER)
                    sent += 1
                except BlockingIOError:
                    break
                try:
                    while s.recv(4096):
                        pass
                except BlockingIOError:
                    pass
            if stdin_closed():
                break
            time.sleep(args.get("pause", 0.001))
        print(f"made {sent}", flush=True)


class Traffic:
    """One svcload process in sandbox sb's namespace (a networld sandbox: {"ns": ...})."""

    def __init__(self, sb, mode, idle=False, **args):
        # idle: under SCHED_IDLE, as a stand-in for the CPU limit a real sandbox's cgroup puts on a flooder (what the
        # services spend on its behalf, and the kernel's packet work, still count against everyone)
        prefix = ["chrt", "--idle", "0"] if idle else []
        self.p = subprocess.Popen(["ip", "netns", "exec", sb["ns"], *prefix, "/usr/bin/python3",
                                   os.path.abspath(__file__), mode, json.dumps(args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        line = self.p.stdout.readline().strip()
        if line != "ready":
            raise AssertionError(f"svcload {mode} did not start: {line} {self.p.stderr.read()[:2000]}")
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.append(line.strip())

    def stop(self):
        if self.p.poll() is None:
            self.p.stdin.close()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.reader.join(timeout=10)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def results(self):
        """[(start, end, ok)] of the attempts so far."""
        out = []
        for line in list(self.lines):
            w = line.split()
            if len(w) == 3:
                out.append((float(w[0]), float(w[1]), w[2] == "1"))
        return out

    def made(self):
        for line in self.lines:
            if line.startswith("made "):
                return int(line.split()[1])
        return 0


def recovery(results, since):
    """Seconds from `since` to the end of the first successful attempt started after it; None if none was."""
    ends = [end for start, end, ok in results if ok and start >= since]
    return min(ends) - since if ends else None


def percentile(values, p):
    v = sorted(values)
    if not v:
        return float("nan")
    return v[min(len(v) - 1, int(round(p / 100.0 * (len(v) - 1))))]


if __name__ == "__main__":
    main()
