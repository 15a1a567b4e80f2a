"""A small fake of lensboxd's API on a Unix socket, for testing the clients (Python and the `lensbox` CLI) without a
kernel sandbox.

It keeps a plausible in-memory model (sandboxes with specs, states and files; a run ledger; an image store whose
pulls come from `fake.registry`, a set of references) and follows docs/api.md:
the same routes, bodies, status codes and error envelope. It is also strict about what clients send: every request
is recorded (`fake.requests`), and a request the real daemon would refuse as malformed (bad JSON, unknown or
mistyped fields, bad names or paths, missing Content-Length) is answered 400 AND recorded in `fake.violations`, which
a test asserts empty. Runs do not execute anything: `fake.run_handler(name, body)` decides the result (by default
an echo of the source's first line, exit 0).

    with FakeLensboxd(tmp_path / "s.sock") as fake:
        ...
        assert fake.violations == []
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import re
import socketserver
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Dict, List, Optional, Tuple

NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
SPEC_TYPES: Dict[str, Tuple[type, ...]] = {
    "image": (str,),
    "network": (str,),
    "cpu": (str, int, float),
    "memory": (str, int),
    "disk": (str, int),
    "idle_minutes": (int,),
    "keep_hours": (int,),
}
RUN_TYPES: Dict[str, Tuple[type, ...]] = {
    "language": (str,),
    "source": (str,),
    "timeout_seconds": (int,),
    "output_limit": (int,),
    "sandbox": (dict,),
}
DEFAULT_SPEC = {
    "image": "python:3.12-slim",
    "network": "off",
    "cpu": "1",
    "memory": "512Mi",
    "disk": "1Gi",
    "idle_minutes": 15,
    "keep_hours": 24,
}
FILE_MAX = 25 * 1024 * 1024
PULL_TYPES: Dict[str, Tuple[type, ...]] = {"ref": (str,), "pin": (bool,)}
IMPORT_TYPES: Dict[str, Tuple[type, ...]] = {"path": (str,), "name": (str,), "pin": (bool,)}
REF = re.compile(r"[a-z0-9][A-Za-z0-9._/:@-]{0,254}")


def canonical(ref: str) -> str:
    """Docker's spelling of a name: python:3.12-slim -> docker.io/library/python:3.12-slim (tag latest if none)."""
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        registry, path = first, rest
    else:
        registry, path = "docker.io", ref
        if "/" not in path:
            path = "library/" + path
    last = path.rsplit("/", 1)[-1]
    if "@" not in last and ":" not in last:
        path += ":latest"
    return f"{registry}/{path}"


def iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int((t % 1) * 1000)


@dataclass
class Recorded:
    method: str
    path: str
    headers: Dict[str, str]
    body: bytes


@dataclass
class FakeSandbox:
    name: str
    spec: Dict[str, Any]
    state: str = "stopped"
    created_at: float = field(default_factory=time.time)
    last_used_at: float = field(default_factory=time.time)
    runs: int = 0
    uid: int = 0
    files: Dict[str, bytes] = field(default_factory=dict)

    def to_json(self) -> Dict[str, Any]:
        idle = self.spec["idle_minutes"] * 60
        keep = self.spec["keep_hours"] * 3600
        return {
            "name": self.name,
            "state": self.state,
            "spec": dict(self.spec),
            "image_digest": "sha256:" + "ab" * 32,
            "host_uid": self.uid,
            "disk_used_bytes": sum(len(b) for b in self.files.values()),
            "created_at": iso(self.created_at),
            "last_used_at": iso(self.last_used_at),
            "stops_at": iso(self.last_used_at + idle) if self.state == "running" else None,
            "deletes_at": iso(self.last_used_at + keep),
            "runs": self.runs,
        }


@dataclass
class FakeImage:
    digest: str
    names: List[str]
    manifest_digest: Optional[str] = None
    size_bytes: int = 121091761
    has_python3: bool = True
    has_bash: bool = True
    pinned: bool = False
    imported_at: float = field(default_factory=time.time)

    def to_json(self, in_use: int, full: bool) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "name": self.names[0] if self.names else None,
            "names": list(self.names),
            "digest": self.digest,
            "manifest_digest": self.manifest_digest,
            "size_bytes": self.size_bytes,
            "size": "%.1fMi" % (self.size_bytes / (1 << 20)),
            "has_python3": self.has_python3,
            "has_bash": self.has_bash,
            "warning": None if self.has_bash else "this image has no bash: run_bash will fail",
            "in_use": in_use,
            "pinned": self.pinned,
            "architecture": "amd64",
            "os": "linux",
            "imported_at": iso(self.imported_at),
            "last_used": iso(self.imported_at),
        }
        if full:
            out.update({"variant": None, "env": ["PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"],
                        "working_dir": "/sandbox", "rootfs": f"/var/lib/lensbox/images/images/{self.digest[7:]}/rootfs",
                        "entries": 6434, "skipped_special": 0, "stripped": 0})
        return out


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def default_run(name: str, body: Dict[str, Any]) -> Dict[str, Any]:
    first = body["source"].splitlines()[0] if body["source"] else ""
    return {"exit_code": 0, "stdout": first + "\n", "stderr": ""}


class FakeLensboxd:
    def __init__(self, socket_path: str) -> None:
        self.socket_path = str(socket_path)
        self.requests: List[Recorded] = []
        self.violations: List[str] = []
        self.sandboxes: Dict[str, FakeSandbox] = {}
        self.ledger: List[Dict[str, Any]] = []
        self.images: Dict[str, FakeImage] = {}  # by config digest
        #: canonical references a pull finds (any other is 404 image_not_found)
        self.registry: set = set()
        self.run_handler: Callable[[str, Dict[str, Any]], Dict[str, Any]] = default_run
        #: (status, raw body bytes, content type) answered to the next request instead of the model
        self.next_raw: Optional[Tuple[int, bytes, str]] = None
        self.lock = threading.Lock()
        #: connections accepted so far (the client's keep-alive is tested against it)
        self.connections = 0
        self._next_uid = 200000
        self._server: Optional[socketserver.ThreadingUnixStreamServer] = None
        self._thread: Optional[threading.Thread] = None

    # ---- lifecycle ----

    def __enter__(self) -> "FakeLensboxd":
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt: str, *args: Any) -> None:  # AF_UNIX has no client address to print
                pass

            def setup(self) -> None:
                super().setup()
                with fake.lock:
                    fake.connections += 1

            def _serve(self) -> None:
                fake._handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_PATCH = _serve

        class Server(socketserver.ThreadingUnixStreamServer):
            daemon_threads = True
            request_queue_size = 64

            def handle_error(self, request: Any, client_address: Any) -> None:
                # a bug in the fake must fail the test, not scroll past; a client hanging up early is fine
                import sys
                import traceback

                if not isinstance(sys.exc_info()[1], ConnectionError):
                    fake.violations.append("fake server error: " + traceback.format_exc())

        self._server = Server(self.socket_path, Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    # ---- helpers for tests ----

    def add(self, name: str, **spec: Any) -> FakeSandbox:
        sb = FakeSandbox(name=name, spec={**DEFAULT_SPEC, **spec}, uid=self._uid())
        self.sandboxes[name] = sb
        return sb

    def add_image(self, *names: str, digest: Optional[str] = None, **attrs: Any) -> FakeImage:
        """An image in the store under these names (digest: derived from the first name when not given)."""
        full = [canonical(n) for n in names]
        digest = digest or "sha256:" + hashlib.sha256((full[0] if full else "").encode()).hexdigest()
        img = self.images.get(digest)
        if img is None:
            img = self.images[digest] = FakeImage(digest=digest, names=[], **attrs)
        for n in full:
            self._name_image(n, img)
        return img

    def paths(self) -> List[str]:
        return [f"{r.method} {r.path}" for r in self.requests]

    def _uid(self) -> int:
        self._next_uid += 1
        return self._next_uid

    # ---- HTTP ----

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        length = h.headers.get("Content-Length")
        body = b""
        if length is not None:
            if not length.isdigit():
                self._send(h, 400, {"error": {"code": "invalid_request", "message": "bad Content-Length"}})
                return
            body = h.rfile.read(int(length))
        elif h.headers.get("Transfer-Encoding"):
            self.violations.append(f"{h.command} {h.path}: chunked body (send Content-Length)")
        if h.command in ("PUT", "POST") and length is None:
            self.violations.append(f"{h.command} {h.path}: no Content-Length")
        rec = Recorded(h.command, h.path, {k.lower(): v for k, v in h.headers.items()}, body)
        with self.lock:
            self.requests.append(rec)
            raw = self.next_raw
            self.next_raw = None
        if raw is not None:
            status, payload, ctype = raw
            self._send_raw(h, status, payload, ctype)
            return
        try:
            with self.lock:
                status, out = self._route(rec)
        except ApiError as e:
            if e.status == 400:
                self.violations.append(f"{rec.method} {rec.path}: {e.code}: {e.message}")
            self._send(h, e.status, {"error": {"code": e.code, "message": e.message}})
            return
        if isinstance(out, (bytes, str)):
            ctype = "text/plain; version=0.0.4" if isinstance(out, str) else "application/octet-stream"
            self._send_raw(h, status, out.encode() if isinstance(out, str) else out, ctype)
        else:
            self._send(h, status, out)

    def _send(self, h: BaseHTTPRequestHandler, status: int, obj: Any) -> None:
        self._send_raw(h, status, json.dumps(obj).encode(), "application/json")

    @staticmethod
    def _send_raw(h: BaseHTTPRequestHandler, status: int, payload: bytes, ctype: str) -> None:
        h.send_response(status)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    # ---- the model ----

    def _json(self, rec: Recorded, types: Dict[str, Tuple[type, ...]]) -> Dict[str, Any]:
        if rec.body and not rec.headers.get("content-type", "").startswith("application/json"):
            raise ApiError(400, "invalid_json", "a JSON body needs Content-Type: application/json")
        try:
            obj = json.loads(rec.body or b"{}")
        except ValueError:
            raise ApiError(400, "invalid_json", "the body is not JSON") from None
        if not isinstance(obj, dict):
            raise ApiError(400, "invalid_json", "the body must be a JSON object")
        for k, v in obj.items():
            if k not in types:
                raise ApiError(400, "unknown_field", f"unknown field `{k}`")
            if (isinstance(v, bool) and bool not in types[k]) or not isinstance(v, types[k]):
                raise ApiError(400, "wrong_type", f"`{k}` has the wrong type")
        return obj

    def _sandbox(self, name: str) -> FakeSandbox:
        sb = self.sandboxes.get(name)
        if sb is None:
            raise ApiError(404, "sandbox_not_found", f"There is no sandbox named {name}.")
        return sb

    def _ensure(self, name: str, spec: Dict[str, Any]) -> Tuple[FakeSandbox, bool, Optional[str]]:
        for k, v in spec.items():
            if k not in SPEC_TYPES:
                raise ApiError(400, "unknown_field", f"unknown field `{k}` in the sandbox spec")
            if isinstance(v, bool) or not isinstance(v, SPEC_TYPES[k]):
                raise ApiError(400, "wrong_type", f"`{k}` has the wrong type")
        if "network" in spec and spec["network"] not in ("off", "packages", "web"):
            raise ApiError(422, "invalid_value", "`network` must be `off`, `packages` or `web`.")
        if "idle_minutes" in spec and not 1 <= spec["idle_minutes"] <= 1440:
            raise ApiError(422, "out_of_range", "`idle_minutes` must be 1 to 1440.")
        sb = self.sandboxes.get(name)
        if sb is None:
            return self.add(name, **spec), True, None
        recreated = None
        for k in ("image", "network"):
            if k in spec and spec[k] != sb.spec[k]:
                recreated = f"the {k} changed from {sb.spec[k]} to {spec[k]}"
        if recreated:
            sb = FakeSandbox(name=name, spec={**sb.spec, **spec}, uid=sb.uid)
            self.sandboxes[name] = sb
        else:
            sb.spec.update({k: spec[k] for k in ("idle_minutes", "keep_hours") if k in spec})
        return sb, False, recreated

    @staticmethod
    def _check_path(p: str) -> str:
        if not p or p.startswith("/") or "\0" in p or any(c in ("", ".", "..") for c in p.split("/")):
            raise ApiError(400, "invalid_path", f"`{p}` is not a relative path inside the sandbox.")
        return p

    def _route(self, rec: Recorded) -> Tuple[int, Any]:
        url = urllib.parse.urlsplit(rec.path)
        q = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        parts = url.path.split("/")
        m = rec.method
        if url.path == "/v1/health" and m == "GET":
            return 200, {
                "version": "0.1.0-fake",
                "can_run": True,
                "why_not": None,
                "host": {"kernel": "6.18.0", "landlock_abi": 7, "cgroup": "v1", "seccomp": True, "nftables": True,
                         "user_namespaces": True},
                "default_image": {"name": "python:3.12-slim", "available": True, "digest": "sha256:" + "a" * 64,
                                  "why_not": None},
                "network": {"tiers_available": True, "why_not": None, "ip_forward": False,
                            "blocking_forward_chain": None, "blocking_input_chain": None,
                            "dns_upstream": "192.0.2.53:53", "flow_offload": False, "flow_offload_why_not": "fake",
                            "ipv6": False, "ipv6_why_not": "fake", "attached": 0,
                            "services": {"isolated": True, "alive": True, "supervised": True, "landlock_abi": 7,
                                         "restarts": 0}},
                "sandboxes": {
                    "running": sum(s.state == "running" for s in self.sandboxes.values()),
                    "stopped": sum(s.state == "stopped" for s in self.sandboxes.values()),
                },
                "runs_in_flight": 0,
                "uptime_seconds": 12,
            }
        if url.path == "/metrics" and m == "GET":
            return 200, "lensbox_sandboxes{state=\"running\"} 0\nlensbox_runs_total 0\n"
        if url.path == "/v1/runs" and m == "GET":
            limit = int(q.get("limit", ["100"])[0])
            rows = [r for r in self.ledger if "sandbox" not in q or r["sandbox"] == q["sandbox"][0]]
            return 200, {"runs": list(reversed(rows))[:limit]}
        if url.path == "/v1/images" and m == "GET":
            return 200, {"images": [img.to_json(self._in_use(img), False) for img in self.images.values()]}
        if url.path.startswith("/v1/images/"):
            return self._route_image(rec, m, url.path[len("/v1/images/"):])
        if url.path == "/v1/sandboxes" and m == "GET":
            return 200, {"sandboxes": [self.sandboxes[n].to_json() for n in sorted(self.sandboxes)]}
        if len(parts) < 4 or parts[:3] != ["", "v1", "sandboxes"]:
            raise ApiError(404, "not_found", f"No such endpoint: {m} {url.path}")
        name = urllib.parse.unquote(parts[3])
        if not NAME.fullmatch(name):
            raise ApiError(400, "invalid_name", f"`{name}` is not a valid sandbox name.")
        rest = parts[4:]
        if not rest:
            if m == "PUT":
                spec = self._json(rec, SPEC_TYPES)
                sb, created, recreated = self._ensure(name, spec)
                return (201 if created else 200), {"created": created, "recreated": recreated, "sandbox": sb.to_json()}
            if m == "GET":
                return 200, self._sandbox(name).to_json()
            if m == "DELETE":
                self._sandbox(name)
                del self.sandboxes[name]
                return 200, {"deleted": True}
        elif rest == ["stop"] and m == "POST":
            sb = self._sandbox(name)
            was = sb.state == "running"
            sb.state = "stopped"
            return 200, {"stopped": was}
        elif rest == ["runs"] and m == "POST":
            body = self._json(rec, RUN_TYPES)
            for k in ("language", "source"):
                if k not in body:
                    raise ApiError(400, "missing_field", f"`{k}` is required")
            if body["language"] not in ("python", "bash"):
                raise ApiError(422, "invalid_value", "`language` must be `python` or `bash`.")
            sb, created, recreated = self._ensure(name, body.get("sandbox", {}))
            started = sb.state != "running"
            sb.state = "running"
            sb.runs += 1
            sb.last_used_at = time.time()
            out = {
                "id": "01fake%020d" % len(self.ledger),
                "sandbox": name,
                "language": body["language"],
                "exit_code": 0,
                "signal": 0,
                "timed_out": False,
                "oom_killed": False,
                "pids_limited": False,
                "network_blocked": 0,
                "refused": {"filesystem": None, "syscall": 0, "network": 0, "syscalls": {}},
                "duration_ms": 12,
                "cpu_ms": 8,
                "peak_memory_bytes": 9 << 20,
                "stdout": "",
                "stdout_truncated": False,
                "stderr": "",
                "stderr_truncated": False,
                "sandbox_created": created,
                "sandbox_started": started,
                "recreated": recreated,
                "message": None,
            }
            out.update(self.run_handler(name, body))
            out.setdefault("stdout_bytes", len(out["stdout"].encode()))
            out["stdout_bytes"] = max(out["stdout_bytes"], len(out["stdout"].encode()))
            out["stderr_bytes"] = max(out.get("stderr_bytes", 0), len(out["stderr"].encode()))
            outcome = "timed_out" if out["timed_out"] else "oom" if out["oom_killed"] else (
                "killed" if out["exit_code"] is None else "failed" if out["exit_code"] else "ok")
            self.ledger.append({
                "id": out["id"], "sandbox": name, "language": body["language"], "started_at": iso(time.time()),
                "duration_ms": out["duration_ms"], "exit_code": out["exit_code"], "signal": out["signal"],
                "timed_out": out["timed_out"], "oom_killed": out["oom_killed"], "pids_limited": out["pids_limited"],
                "network_blocked": out["network_blocked"], "cpu_ms": out["cpu_ms"], "peak_memory_bytes": out["peak_memory_bytes"],
                "stdout_bytes": out["stdout_bytes"], "stderr_bytes": out["stderr_bytes"], "outcome": outcome,
                "message": out["message"],
            })
            return 200, out
        elif rest == ["files"] and m == "GET":
            sb = self._sandbox(name)
            base = q.get("path", [""])[0]
            if base:
                self._check_path(base)
            recursive = q.get("recursive", ["false"])[0]
            if recursive not in ("true", "false"):
                raise ApiError(400, "invalid_value", "`recursive` is true or false")
            entries: Dict[str, Dict[str, Any]] = {}
            prefix = base + "/" if base else ""
            for p, data in sorted(sb.files.items()):
                if not p.startswith(prefix):
                    continue
                rel = p[len(prefix):].split("/")
                for i in range(1, len(rel)):  # the directories on the way
                    d = prefix + "/".join(rel[:i])
                    if recursive == "true" or i == 1:
                        entries.setdefault(d, {"path": d, "type": "directory", "size": 4096,
                                               "modified_at": iso(sb.created_at)})
                if recursive == "true" or len(rel) == 1:
                    entries[p] = {"path": p, "type": "file", "size": len(data), "modified_at": iso(sb.last_used_at)}
            if base and not entries and not any(p.startswith(prefix) for p in sb.files):
                raise ApiError(404, "file_not_found", f"There is no directory {base} in the sandbox.")
            return 200, {"files": [entries[k] for k in sorted(entries)], "more": 0}
        elif rest and rest[0] == "files" and len(rest) > 1:
            path = self._check_path(urllib.parse.unquote("/".join(rest[1:])))
            if m == "PUT":
                if len(rec.body) > FILE_MAX:
                    raise ApiError(413, "file_too_large", "A file may be at most 25 MiB.")
                sb = self.sandboxes.get(name) or self._ensure(name, {})[0]
                sb.files[path] = rec.body
                return 201, {"path": path, "size": len(rec.body)}
            if m == "GET":
                sb = self._sandbox(name)
                if path not in sb.files:
                    raise ApiError(404, "file_not_found", f"There is no file {path} in the sandbox.")
                return 200, sb.files[path]
        raise ApiError(405 if rest else 404, "method_not_allowed", f"{m} is not allowed on {url.path}")

    # ---- images ----

    def _name_image(self, name: str, img: FakeImage) -> None:
        for other in list(self.images.values()):  # a name belongs to one image; one left nameless goes
            if name in other.names and other is not img:
                other.names.remove(name)
                if not other.names:
                    del self.images[other.digest]
        if name not in img.names:
            img.names.append(name)

    def _in_use(self, img: FakeImage) -> int:
        return sum(canonical(sb.spec["image"]) in img.names for sb in self.sandboxes.values())

    @staticmethod
    def _check_ref(ref: str) -> str:
        if not REF.fullmatch(ref) or ".." in ref:
            raise ApiError(422, "invalid_value", f"`{ref}` is not an image reference.")
        return ref

    def _find_image(self, ref: str) -> Tuple[FakeImage, bool]:
        """(the image, whether ref named it by digest); 404 image_not_found."""
        hexpart = ref[7:] if ref.startswith("sha256:") else ref
        if re.fullmatch(r"[0-9a-f]{12,64}", hexpart):
            found = [img for d, img in self.images.items() if d[7:].startswith(hexpart)]
            if len(found) == 1:
                return found[0], True
        for img in self.images.values():
            if canonical(ref) in img.names:
                return img, False
        raise ApiError(404, "image_not_found", f"There is no image {ref} here.")

    def _route_image(self, rec: Recorded, m: str, rest: str) -> Tuple[int, Any]:
        if m == "POST" and rest == "pull":
            body = self._json(rec, PULL_TYPES)
            if "ref" not in body:
                raise ApiError(400, "missing_field", "A pull needs `ref`, the image reference to pull.")
            ref = self._check_ref(body["ref"])
            if ref.startswith("sha256:"):
                raise ApiError(422, "invalid_value", "A pull needs a name, not a bare digest.")
            if canonical(ref) not in self.registry:
                raise ApiError(404, "image_not_found", f"Pulling {ref} failed: the registry has no such image.")
            img = self.add_image(ref, digest="sha256:" + hashlib.sha256(b"pulled " + ref.encode()).hexdigest(),
                                 manifest_digest="sha256:" + "cd" * 32)
            img.pinned = img.pinned or body.get("pin", False)
            return 200, {"duration_ms": 7, "image": img.to_json(self._in_use(img), True)}
        if m == "POST" and rest == "import":
            body = self._json(rec, IMPORT_TYPES)
            if "path" not in body:
                raise ApiError(400, "missing_field", "An import needs `path`.")
            path = body["path"]
            if (not path.startswith("/") or len(path.encode()) > 1024
                    or any(c in (".", "..") for c in path.split("/"))):
                raise ApiError(422, "invalid_path", "`path` must be an absolute path of at most 1024 bytes with no "
                                                    "`.` or `..` segment.")
            name = body.get("name")
            if name is not None and (not REF.fullmatch(name) or name.startswith("sha256:") or "@" in name):
                raise ApiError(422, "invalid_value", "`name` must be an image name like python:3.12-slim.")
            try:
                st = os.stat(path)
            except OSError:
                raise ApiError(404, "path_not_found", f"There is no file {path} on the daemon's host.") from None
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise ApiError(422, "invalid_path", f"{path} is neither a regular file nor a directory.")
            digest = "sha256:" + hashlib.sha256(b"imported " + path.encode()).hexdigest()
            img = self.add_image(*([name] if name else []), digest=digest, manifest_digest="sha256:" + "ef" * 32)
            img.pinned = img.pinned or body.get("pin", False)
            return 200, {"duration_ms": 3, "image": img.to_json(self._in_use(img), True)}
        if m not in ("GET", "DELETE"):
            raise ApiError(405, "method_not_allowed", f"{m} is not allowed on /v1/images/{rest}")
        ref = urllib.parse.unquote(rest)
        if "\0" in ref:
            raise ApiError(400, "invalid_path", "The image reference holds a NUL byte.")
        img, by_digest = self._find_image(self._check_ref(ref))
        if m == "GET":
            return 200, {"image": img.to_json(self._in_use(img), True)}
        if rec.body:
            raise ApiError(400, "unexpected_body", "Removing an image takes no request body.")
        users = [n for n, sb in sorted(self.sandboxes.items())
                 if canonical(sb.spec["image"]) in (img.names if by_digest else [canonical(ref)])]
        if users:
            raise ApiError(409, "image_in_use", f"The image {ref} is in use: sandbox {users[0]}. Delete those "
                                                "sandboxes (or change their image) first.")
        if by_digest:
            del self.images[img.digest]
        else:
            img.names.remove(canonical(ref))
            if not img.names:
                del self.images[img.digest]
        return 200, {"removed": ref}
