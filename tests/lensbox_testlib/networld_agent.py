"""Processes that live inside the sealed network test world (see networld.py): servers and the in-sandbox probe.

Run as `python3 networld_agent.py ROLE JSON_ARGS` inside a namespace of the world (ip netns exec). Standard library
only. Servers print "ready" on stdout once listening. The probe prints one JSON line with what happened, including
the errno name of a refusal, so tests assert the exact refusal.
"""
import errno
import http.server
import json
import os
import socket
import socketserver
import ssl
import struct
import sys
import threading
import time


# ---------------------------------------------------------------- servers

_BULK_SIZE = 64 << 20


def _bulk_file(path):
    if not os.path.exists(path):
        with open(path, "wb") as f:
            f.truncate(_BULK_SIZE)
    return path


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    site = "?"
    files = {}
    bulk = None  # a sparse file in the world's temporary directory

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        host = self.headers.get("Host") or ""
        host = host[1:host.index("]")] if host.startswith("[") and "]" in host else host.split(":")[0]
        sni = getattr(self.connection, "lb_sni", None) if isinstance(self.connection, ssl.SSLSocket) else None
        if self.path.startswith("/bulk/"):
            n = int(self.path.split("/")[2])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            self.wfile.flush()
            # from a sparse file with sendfile where the socket allows it: the server is not the bottleneck
            with open(_bulk_file(self.bulk), "rb") as f:
                sent = 0
                while sent < n:
                    k = min(n - sent, _BULK_SIZE)
                    f.seek(0)
                    self.connection.sendfile(f, 0, k)
                    sent += k
            return
        if self.path in self.files:
            body = self.files[self.path]
            ctype = "application/octet-stream" if self.path.endswith(".whl") else "text/html"
        else:
            # client: the address the request came from (after any translation on the way)
            body = json.dumps({"site": self.site, "host": host, "sni": sni, "path": self.path,
                               "client": self.client_address[0]}).encode()
            ctype = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def server_bind(self):  # HTTPServer's would look up the address's name (getfqdn): no DNS at start
        if self.address_family == socket.AF_INET6:  # beside an IPv4 server on the same port ("::" and "0.0.0.0")
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class _Server6(_Server):
    address_family = socket.AF_INET6


def _family(addr):
    return socket.AF_INET6 if ":" in addr else socket.AF_INET


def serve_http(args):
    """args: listen [[addr, port, tls]], site, certs {sni_name: [cert, key]}, default_cert, files {path: file}."""
    handler = type("H", (_Handler,), {"site": args["site"], "bulk": args.get("bulk"),
                                      "files": {p: open(f, "rb").read() for p, f in args.get("files", {}).items()}})
    servers = []
    for addr, port, tls in args["listen"]:
        srv = (_Server6 if ":" in addr else _Server)((addr, port), handler)
        if tls:
            contexts = {}
            for name, (cert, key) in args["certs"].items():
                c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                c.load_cert_chain(cert, key)
                contexts[name] = c
            default = contexts[args["default_cert"]]

            def pick(sslobj, name, _ctx, contexts=contexts):
                sslobj.lb_sni = name
                if name in contexts:
                    sslobj.context = contexts[name]
                return None

            default.sni_callback = pick
            srv.socket = default.wrap_socket(srv.socket, server_side=True)
        servers.append(srv)
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()


def serve_dns(args):
    """args: listen [addr, port], listen6 [addr, port] (optional, the same server over IPv6), names {name: ipv4},
    names6 {name: ipv6}, slow {name: seconds} (answered that late, from a timer, so others are not held up; any name under one too). A and
    AAAA records; NOERROR without answers for a known name's other types; NXDOMAIN for the rest."""
    socks = []
    for key in ("listen", "listen6"):
        if args.get(key):
            addr, port = args[key]
            sock = socket.socket(_family(addr), socket.SOCK_DGRAM)
            sock.bind((addr, port))
            socks.append(sock)
    names = {k.lower(): v for k, v in args["names"].items()}
    names6 = {k.lower(): v for k, v in args.get("names6", {}).items()}
    slow = {k.lower(): v for k, v in args.get("slow", {}).items()}
    for sock in socks[1:]:
        threading.Thread(target=_dns_loop, args=(sock, names, names6, slow), daemon=True).start()
    print("ready", flush=True)
    _dns_loop(socks[0], names, names6, slow)


def _dns_loop(s, names, names6, slow):
    while True:
        data, peer = s.recvfrom(4096)
        if len(data) < 12:
            continue
        qid, flags, qd = struct.unpack("!HHH", data[:6])
        off, labels = 12, []
        while off < len(data) and data[off]:
            ln = data[off]
            labels.append(data[off + 1:off + 1 + ln].decode("ascii", "replace"))
            off += 1 + ln
        off += 1
        qtype = struct.unpack("!H", data[off:off + 2])[0]
        question = data[12:off + 4]
        name = ".".join(labels).lower()
        parent = name.split(".", 1)[-1]
        if name not in names and name not in names6 and parent in slow:
            name = parent  # any name under a slow one is answered as it is, as late: a flood no cache holds
        ip, ip6 = names.get(name), names6.get(name)
        if ip is None and ip6 is None:
            s.sendto(struct.pack("!HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question, peer)
            continue
        answers = b""
        if qtype == 1 and ip is not None:
            answers = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + socket.inet_aton(ip)
        elif qtype == 28 and ip6 is not None:
            answers = struct.pack("!HHHIH", 0xC00C, 28, 1, 60, 16) + socket.inet_pton(socket.AF_INET6, ip6)
        reply = struct.pack("!HHHHHH", qid, 0x8180, 1, 1 if answers else 0, 0, 0) + question + answers
        if name in slow:
            threading.Timer(slow[name], s.sendto, (reply, peer)).start()
        else:
            s.sendto(reply, peer)


def serve_udp_echo(args):
    s = socket.socket(_family(args["listen"][0]), socket.SOCK_DGRAM)
    s.bind((args["listen"][0], args["listen"][1]))
    log = args.get("log")
    print("ready", flush=True)
    while True:
        data, peer = s.recvfrom(4096)
        if log:
            with open(log, "a") as f:
                f.write(f"{peer[0]} {data!r}\n")
        s.sendto(data, peer)


# ---------------------------------------------------------------- the probe (runs inside a sandbox)

def _errname(e):
    if isinstance(e, socket.timeout):
        return "TIMEOUT"
    if isinstance(e, socket.gaierror):
        return {socket.EAI_NONAME: "EAI_NONAME", socket.EAI_AGAIN: "EAI_AGAIN",
                socket.EAI_NODATA: "EAI_NODATA"}.get(e.errno, f"EAI_{e.errno}")
    if isinstance(e, ssl.SSLError):
        return "SSL:" + (e.reason or str(e))
    if isinstance(e, OSError) and e.errno:
        return errno.errorcode.get(e.errno, str(e.errno))
    return type(e).__name__


def _checksum(data):
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


_ICMP6_UNREACH = {0: "ENETUNREACH", 1: "EACCES", 3: "EHOSTUNREACH", 4: "ECONNREFUSED"}  # as the kernel maps them


def _ip6_header(src, dst, nxt, payload_len):
    return struct.pack("!IHBB16s16s", 6 << 28, payload_len, nxt, 64, socket.inet_pton(socket.AF_INET6, src),
                       socket.inet_pton(socket.AF_INET6, dst))


def _tcp6_syn(src, dst, sport, dport):
    tcp = struct.pack("!HHIIBBHHH", sport, dport, 1, 0, 5 << 4, 0x02, 64240, 0, 0)
    pseudo = (socket.inet_pton(socket.AF_INET6, src) + socket.inet_pton(socket.AF_INET6, dst) +
              struct.pack("!IxxxB", len(tcp), 6))
    return tcp[:16] + struct.pack("!H", _checksum(pseudo + tcp)) + tcp[18:]


def probe(args):
    """args: op, and per op:
      http: host (connect to, name or IP; an IPv6 literal connects over IPv6), family (4 or 6: which address of a
            name; 4 unless told), port, tls, sni, host_header, ca, path, source (bind address), timeout
      udp: addr (IPv4 or IPv6), port, payload, timeout, source
      dns: server, port, name, qtype (1 = A unless told, 28 = AAAA), timeout   (a raw query; rcode and addresses)
      resolve: name, family (4 unless told; 6; 0 = both)   (getaddrinfo through the namespace's resolv.conf)
      ping6: addr, timeout               (an ICMPv6 echo over a raw socket; a destination-unreachable answer is
                                          reported as the errno the kernel gives it)
      spoof_syn / spoof_syn6: addr, port, source   (a hand-made TCP SYN with a forged source address)
      frame_syn6: dst_mac, source, addr, port, ifname   (the same as a whole Ethernet frame, sent on the link as is:
                                                         for destinations the sandbox's own kernel would not route)
    """
    op = args["op"]
    t0 = time.monotonic()
    out = {"op": op}
    try:
        if op == "http":
            addr = args["host"]
            fam = socket.AF_INET6 if args.get("family") == 6 or ":" in addr else socket.AF_INET
            if ":" not in addr:
                try:
                    socket.inet_aton(addr)
                except OSError:
                    addr = socket.getaddrinfo(addr, args["port"], fam, socket.SOCK_STREAM)[0][4][0]
            out["addr"] = addr
            s = socket.socket(fam, socket.SOCK_STREAM)
            s.settimeout(args.get("timeout", 5))
            if args.get("source"):
                s.setsockopt(socket.SOL_IP, 15, 1)  # IP_FREEBIND
                s.bind((args["source"], 0))
            s.connect((addr, args["port"]))
            if args.get("tls"):
                c = ssl.create_default_context(cafile=args["ca"])
                if args.get("sni") is None:
                    c.check_hostname = False
                s = c.wrap_socket(s, server_hostname=args.get("sni"))
            default_host = f"[{args['host']}]" if ":" in args["host"] else args["host"]
            req = (f"GET {args.get('path', '/')} HTTP/1.1\r\nHost: {args.get('host_header', default_host)}\r\n"
                   "Connection: close\r\n\r\n").encode()
            s.sendall(req)
            data = b""
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
            s.close()
            head, _, body = data.partition(b"\r\n\r\n")
            out["status"] = int(head.split(b" ")[1]) if head else 0
            out["body"] = body[:2000].decode("utf-8", "replace")
            out["ok"] = True
        elif op == "hold":
            # a relayed TLS connection left idle: prints "held" once established, then waits for the peer to close
            s = socket.create_connection((args["host"], args["port"]), timeout=30)
            c = ssl.create_default_context(cafile=args["ca"])
            s = c.wrap_socket(s, server_hostname=args["sni"])
            print(json.dumps({"op": "hold", "held": True}), flush=True)
            s.settimeout(30)
            out["eof"] = s.recv(1) == b""
            out["ok"] = True
        elif op == "http_raw":
            # hand-written bytes in parts (a smuggling attempt), then everything the other side sends until it closes
            s = socket.create_connection((args["host"], args["port"]), timeout=args.get("timeout", 5))
            for part in args["parts"]:
                s.sendall(part.encode())
                time.sleep(args.get("pause", 0.2))
            data = b""
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                data += chunk
            out["responses"] = data.count(b"HTTP/1.1 200") + data.count(b"HTTP/1.0 200")
            out["body"] = data.decode("utf-8", "replace")[-2000:]
            out["ok"] = True
        elif op == "flood_tcp":
            # n connections that never speak; then how many the other side has reset or closed
            socks = []
            alive = dead = 0
            for _ in range(args["n"]):
                try:
                    socks.append(socket.create_connection((args["addr"], args["port"]), timeout=5))
                except ConnectionResetError:  # reset so fast that connect() itself saw it
                    dead += 1
            time.sleep(args.get("wait", 0.5))
            for s in socks:
                s.setblocking(False)  # a socket with a timeout would wait in recv
                try:
                    if s.recv(1) == b"":
                        dead += 1  # closed
                    else:
                        alive += 1
                except BlockingIOError:
                    alive += 1
                except OSError:
                    dead += 1
            out["alive"], out["dead"] = alive, dead
            out["ok"] = True
        elif op == "v6":
            s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
            s.settimeout(2)
            s.connect((args["addr"], args["port"]))
            out["ok"] = True
        elif op == "udp":
            s = socket.socket(socket.AF_INET6 if ":" in args["addr"] else socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(args.get("timeout", 2))
            if args.get("source"):
                s.setsockopt(socket.SOL_IP, 15, 1)
                s.bind((args["source"], 0))
            s.connect((args["addr"], args["port"]))
            s.send(args.get("payload", "ping").encode())
            out["reply"] = s.recv(4096).decode("utf-8", "replace")
            out["ok"] = True
        elif op == "spoof_udp":
            # a hand-made IPv4/UDP datagram with a forged source address (what a hostile sandbox root could send)
            payload = args.get("payload", "spoofed").encode()
            src, dst = socket.inet_aton(args["source"]), socket.inet_aton(args["addr"])
            udp = struct.pack("!HHHH", 40000, args["port"], 8 + len(payload), 0) + payload
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0x1234, 0, 64, 17, 0, src, dst)
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            s.sendto(ip + udp, (args["addr"], 0))
            out["sent"] = len(ip + udp)
            out["ok"] = True
        elif op == "spoof_syn":
            # a hand-made TCP SYN with a forged source address
            src, dst = socket.inet_aton(args["source"]), socket.inet_aton(args["addr"])
            tcp = struct.pack("!HHIIBBHHH", 40001, args["port"], 1, 0, 5 << 4, 0x02, 64240, 0, 0)
            pseudo = src + dst + struct.pack("!BBH", 0, 6, len(tcp))
            csum = _checksum(pseudo + tcp)
            tcp = tcp[:16] + struct.pack("!H", csum) + tcp[18:]
            ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), 0x1235, 0, 64, 6, 0, src, dst)
            s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
            s.sendto(ip + tcp, (args["addr"], 0))
            out["sent"] = len(ip + tcp)
            out["ok"] = True
        elif op == "dns":
            s = socket.socket(socket.AF_INET6 if ":" in args["server"] else socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(args.get("timeout", 2))
            s.connect((args["server"], args.get("port", 53)))
            qname = b"".join(bytes([len(p)]) + p.encode() for p in args["name"].split(".")) + b"\0"
            qtype = args.get("qtype", 1)
            s.send(struct.pack("!HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0) + qname + struct.pack("!HH", qtype, 1))
            data = s.recv(4096)
            _, flags, _, an, _, _ = struct.unpack("!HHHHHH", data[:12])
            out["rcode"] = flags & 0xF
            addrs, off = [], 12 + len(qname) + 4
            for _ in range(an):
                off += 2  # pointer
                rtype, _, _, rdlen = struct.unpack("!HHIH", data[off:off + 10])
                off += 10
                if rtype == 1 and rdlen == 4:
                    addrs.append(socket.inet_ntoa(data[off:off + 4]))
                elif rtype == 28 and rdlen == 16:
                    addrs.append(socket.inet_ntop(socket.AF_INET6, data[off:off + 16]))
                off += rdlen
            out["addrs"] = addrs
            out["ok"] = True
        elif op == "resolve":
            fam = {4: socket.AF_INET, 6: socket.AF_INET6, 0: socket.AF_UNSPEC}[args.get("family", 4)]
            infos = socket.getaddrinfo(args["name"], 443, fam, socket.SOCK_STREAM)
            out["addrs"] = sorted({i[4][0] for i in infos})
            out["ok"] = True
        elif op == "ping6":
            s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
            s.settimeout(args.get("timeout", 2))
            s.connect((args["addr"], 0))
            ident = os.getpid() & 0xFFFF
            s.send(struct.pack("!BBHHH", 128, 0, 0, ident, 1) + b"lensbox")  # the kernel fills the checksum in
            deadline = time.monotonic() + args.get("timeout", 2)
            while True:
                s.settimeout(max(deadline - time.monotonic(), 0.01))
                data = s.recv(2048)
                if data[0] == 129 and struct.unpack("!H", data[4:6])[0] == ident:
                    out["ok"] = True
                    break
                if data[0] == 1:  # destination unreachable, quoting our echo
                    raise OSError(getattr(errno, _ICMP6_UNREACH.get(data[1], "EHOSTUNREACH")), f"code {data[1]}")
        elif op == "spoof_syn6":
            tcp = _tcp6_syn(args["source"], args["addr"], 40001, args["port"])
            s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_RAW)  # IPPROTO_RAW: header included
            pkt = _ip6_header(args["source"], args["addr"], 6, len(tcp)) + tcp
            s.sendto(pkt, (args["addr"], 0))
            out["sent"] = len(pkt)
            out["ok"] = True
        elif op == "frame_syn6":
            ifname = args.get("ifname", "eth0")
            src_mac = open(f"/sys/class/net/{ifname}/address").read().strip()
            tcp = _tcp6_syn(args["source"], args["addr"], 40002, args["port"])
            frame = (bytes.fromhex(args["dst_mac"].replace(":", "")) + bytes.fromhex(src_mac.replace(":", "")) +
                     struct.pack("!H", 0x86DD) + _ip6_header(args["source"], args["addr"], 6, len(tcp)) + tcp)
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
            s.bind((ifname, 0))
            out["sent"] = s.send(frame)
            out["ok"] = True
        else:
            raise ValueError(op)
    except Exception as e:  # the refusal is the result
        out["ok"] = False
        out["error"] = _errname(e)
        out["detail"] = str(e)[:200]
    out["elapsed"] = time.monotonic() - t0
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    role, raw = sys.argv[1], sys.argv[2]
    {"http": serve_http, "dns": serve_dns, "udp_echo": serve_udp_echo, "probe": probe}[role](json.loads(raw))
