"""The lensboxd client: HTTP/1.1 + JSON over lensboxd's Unix socket, standard library only.

Connections are kept alive: a request takes an idle connection from the client's small pool (or opens one) and gives
it back once its answer is read whole, so one `Client` may be shared by any number of threads (a FastAPI backend's
worker pool) and a busy backend does not pay a connect per request. Every failure, whether lensboxd refused the
request, the socket is unreachable, or this client refused to send something too large, is raised as a subclass of
`SandboxError` (errors.py: one class per error code) carrying an HTTP-like status, the server's snake_case code and
a sentence for a person. The contract is docs/api.md.

Reconnecting (after lensboxd restarted, or closed an idle connection): a request is sent again, once, on a new
connection (the other idle ones are dropped) only when lensboxd surely did not act on it:
  - the kept-alive connection failed while the request was being written (EPIPE, ECONNRESET: the peer was gone and
    lensboxd acts only on a complete request), for any method;
  - or it closed before sending a single byte of the answer, for GET, HEAD and PUT only (lensboxd's PUTs, ensure and
    write_file, give the same result when repeated). A POST (a run, a stop, a pull) or a DELETE is never sent twice:
    the caller gets DaemonUnreachable and decides.
A request on a connection opened for it is never retried.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from .errors import SandboxError, error_for

DEFAULT_SOCKET = "/run/lensbox/lensboxd.sock"

#: Largest file copied in or out (lensboxd's limit).
FILE_MAX = 25 * 1024 * 1024
#: Largest total of files copied in for one run (Lens's promise: 100 MB a run).
RUN_FILES_MAX = 100 * 1024 * 1024
#: Largest source lensboxd runs.
SOURCE_MAX = 1024 * 1024

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")
_SPEC_KEYS = ("image", "network", "cpu", "memory", "disk", "idle_minutes", "keep_hours")
#: Seconds a run's HTTP request may wait beyond its own time limit (starting or creating the sandbox, queueing behind
#: an earlier run of the same sandbox).
RUN_GRACE_SECONDS = 120.0
#: Seconds a pull or an import may take by default: lensboxd answers only when the image is in the store (a few GB
#: over a slow link), as `lensbox image pull` waits.
IMAGE_TIMEOUT_SECONDS = 3600.0
#: Longest import path lensboxd takes.
IMPORT_PATH_MAX = 1024
#: What lensboxd lets into an image reference before parsing it (images/src/ref.c checks the grammar).
_REF_CHARS = re.compile(r"[a-z0-9][A-Za-z0-9._/:@-]{0,254}")


@dataclass(frozen=True)
class Refused:
    """What the sandbox refused during a run, by kind. None: this host cannot count that kind (`health()`'s
    `refusals` says why). `syscalls` names the refused system calls, most frequent first."""

    filesystem: Optional[int]
    syscall: Optional[int]
    network: int
    syscalls: Dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Optional[Mapping[str, Any]]) -> "Refused":
        d = d or {}
        return cls(
            filesystem=_opt_int(d.get("filesystem")),
            syscall=_opt_int(d.get("syscall")),
            network=int(d.get("network") or 0),
            syscalls={str(k): int(v) for k, v in (d.get("syscalls") or {}).items()},
        )


@dataclass(frozen=True)
class RunResult:
    """What one run gave back. `exit_code` is None when the program was killed (see `signal`, `timed_out`,
    `oom_killed`); `message` is a sentence for the model when something went wrong."""

    id: str
    sandbox: str
    language: str
    exit_code: Optional[int]
    signal: int
    timed_out: bool
    oom_killed: bool
    pids_limited: bool
    duration_ms: int
    cpu_ms: int
    peak_memory_bytes: int
    stdout: str
    stdout_bytes: int
    stdout_truncated: bool
    stderr: str
    stderr_bytes: int
    stderr_truncated: bool
    sandbox_created: bool
    sandbox_started: bool
    recreated: Optional[str]
    message: Optional[str]
    network_blocked: int = 0  # attempts the sandbox's network tier refused during this run
    refused: Refused = field(default_factory=lambda: Refused(None, None, 0))
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def ok(self) -> bool:
        """The program exited 0 within its limits."""
        return self.exit_code == 0 and not self.timed_out and not self.oom_killed

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RunResult":
        return cls(
            id=str(d.get("id", "")),
            sandbox=str(d.get("sandbox", "")),
            language=str(d.get("language", "")),
            exit_code=_opt_int(d.get("exit_code")),
            signal=int(d.get("signal") or 0),
            timed_out=bool(d.get("timed_out")),
            oom_killed=bool(d.get("oom_killed")),
            pids_limited=bool(d.get("pids_limited")),
            network_blocked=int(d.get("network_blocked") or 0),
            refused=Refused.from_json(d.get("refused")),
            duration_ms=int(d.get("duration_ms") or 0),
            cpu_ms=int(d.get("cpu_ms") or 0),
            peak_memory_bytes=int(d.get("peak_memory_bytes") or 0),
            stdout=str(d.get("stdout") or ""),
            stdout_bytes=int(d.get("stdout_bytes") or 0),
            stdout_truncated=bool(d.get("stdout_truncated")),
            stderr=str(d.get("stderr") or ""),
            stderr_bytes=int(d.get("stderr_bytes") or 0),
            stderr_truncated=bool(d.get("stderr_truncated")),
            sandbox_created=bool(d.get("sandbox_created")),
            sandbox_started=bool(d.get("sandbox_started")),
            recreated=_opt_str(d.get("recreated")),
            message=_opt_str(d.get("message")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Sandbox:
    """One sandbox as lensboxd describes it. Times are RFC 3339 strings (or None)."""

    name: str
    state: str
    spec: Dict[str, Any]
    image_digest: Optional[str]
    host_uid: Optional[int]
    disk_used_bytes: Optional[int]
    created_at: Optional[str]
    last_used_at: Optional[str]
    stops_at: Optional[str]
    deletes_at: Optional[str]
    runs: int
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Sandbox":
        return cls(
            name=str(d.get("name", "")),
            state=str(d.get("state", "")),
            spec=dict(d.get("spec") or {}),
            image_digest=_opt_str(d.get("image_digest")),
            host_uid=_opt_int(d.get("host_uid")),
            disk_used_bytes=_opt_int(d.get("disk_used_bytes")),
            created_at=_opt_str(d.get("created_at")),
            last_used_at=_opt_str(d.get("last_used_at")),
            stops_at=_opt_str(d.get("stops_at")),
            deletes_at=_opt_str(d.get("deletes_at")),
            runs=int(d.get("runs") or 0),
            raw=dict(d),
        )


@dataclass(frozen=True)
class EnsureResult:
    """What `ensure` did: created it, or found it (and maybe replaced it: `recreated` says why)."""

    created: bool
    recreated: Optional[str]
    sandbox: Sandbox


@dataclass(frozen=True)
class FileEntry:
    path: str
    type: str  # "file" | "directory" | "symlink" | "other"
    size: int
    modified_at: Optional[str]


@dataclass(frozen=True)
class FileList:
    files: List[FileEntry]
    more: int  # entries left out past the server's limit


@dataclass(frozen=True)
class RunRecord:
    """One row of the run ledger."""

    id: str
    sandbox: str
    language: str
    started_at: Optional[str]
    duration_ms: int
    exit_code: Optional[int]
    signal: int
    timed_out: bool
    oom_killed: bool
    pids_limited: bool
    outcome: str
    message: Optional[str]
    network_blocked: int = 0
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "RunRecord":
        return cls(
            id=str(d.get("id", "")),
            sandbox=str(d.get("sandbox", "")),
            language=str(d.get("language", "")),
            started_at=_opt_str(d.get("started_at")),
            duration_ms=int(d.get("duration_ms") or 0),
            exit_code=_opt_int(d.get("exit_code")),
            signal=int(d.get("signal") or 0),
            timed_out=bool(d.get("timed_out")),
            oom_killed=bool(d.get("oom_killed")),
            pids_limited=bool(d.get("pids_limited")),
            network_blocked=int(d.get("network_blocked") or 0),
            outcome=str(d.get("outcome", "")),
            message=_opt_str(d.get("message")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class Image:
    """One image of lensboxd's store. `digest` is the config digest (the store's key: several names may share one
    image); `warning` is a sentence when python3 or bash is missing; `in_use` counts the sandboxes made from it.
    Times are RFC 3339 strings. The fields from `variant` on are None in `images()`'s list and filled by
    `get_image`, `pull_image` and `import_image`."""

    name: Optional[str]
    names: List[str]
    digest: str
    manifest_digest: Optional[str]  # None for a `docker save` archive
    size_bytes: int
    size: str
    has_python3: bool
    has_bash: bool
    warning: Optional[str]
    in_use: int
    pinned: bool
    architecture: str
    os: str
    imported_at: Optional[str]
    last_used: Optional[str]
    variant: Optional[str] = None
    env: Optional[List[str]] = None
    working_dir: Optional[str] = None
    rootfs: Optional[str] = None
    entries: Optional[int] = None
    skipped_special: Optional[int] = None  # device nodes, FIFOs, sockets left out
    stripped: Optional[int] = None  # setuid/setgid bits removed
    raw: Dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Image":
        env = d.get("env")
        return cls(
            name=_opt_str(d.get("name")),
            names=[str(n) for n in d.get("names") or []],
            digest=str(d.get("digest", "")),
            manifest_digest=_opt_str(d.get("manifest_digest")),
            size_bytes=int(d.get("size_bytes") or 0),
            size=str(d.get("size") or ""),
            has_python3=bool(d.get("has_python3")),
            has_bash=bool(d.get("has_bash")),
            warning=_opt_str(d.get("warning")),
            in_use=int(d.get("in_use") or 0),
            pinned=bool(d.get("pinned")),
            architecture=str(d.get("architecture") or ""),
            os=str(d.get("os") or ""),
            imported_at=_opt_str(d.get("imported_at")),
            last_used=_opt_str(d.get("last_used")),
            variant=_opt_str(d.get("variant")),
            env=None if env is None else [str(e) for e in env],
            working_dir=_opt_str(d.get("working_dir")),
            rootfs=_opt_str(d.get("rootfs")),
            entries=_opt_int(d.get("entries")),
            skipped_special=_opt_int(d.get("skipped_special")),
            stripped=_opt_int(d.get("stripped")),
            raw=dict(d),
        )


@dataclass(frozen=True)
class ImageResult:
    """What a pull or an import gave: the image as it is now in the store, and how long lensboxd took."""

    image: Image
    duration_ms: int


def _opt_int(v: Any) -> Optional[int]:
    return None if v is None or isinstance(v, bool) else int(v)


def _opt_str(v: Any) -> Optional[str]:
    return None if v is None else str(v)


def check_name(name: str) -> str:
    """The sandbox name, or SandboxError(400, invalid_name) when lensboxd would refuse it."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise error_for(
            400, "invalid_name", f"{name!r} is not a sandbox name: use 1-63 of a-z 0-9 . _ - starting with a letter or digit"
        )
    return name


def check_path(path: str) -> str:
    """A path inside /sandbox, relative, without `..`, `.` or empty components; SandboxError(400, invalid_path)."""
    if not isinstance(path, str) or not path or "\0" in path or path.startswith("/"):
        raise error_for(400, "invalid_path", f"{path!r} is not a relative path inside the sandbox")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise error_for(400, "invalid_path", f"{path!r} must not contain empty, '.' or '..' components")
    return path


def check_image_ref(ref: str) -> str:
    """The image reference, or SandboxError(422, invalid_value) when lensboxd would refuse it before parsing it: a
    name like python:3.12-slim or registry:5000/ns/name@sha256:..., a config digest sha256:<hex> or a prefix of at
    least 12 hex digits; at most 255 characters. Its grammar (tags, digests) is lensboxd's to check."""
    if not isinstance(ref, str) or not _REF_CHARS.fullmatch(ref) or ".." in ref:
        shown = ref[:300] if isinstance(ref, str) else ref
        raise error_for(
            422,
            "invalid_value",
            f"{shown!r} is not an image reference: a name like python:3.12-slim or registry:5000/ns/name@sha256:..., "
            "or an image digest sha256:...",
        )
    return ref


def _quote_path(path: str) -> str:
    return "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout: float) -> None:
        super().__init__("lensbox", timeout=timeout)
        self._socket_path = socket_path

    def connect(self) -> None:
        # A Unix socket whose listen queue is full refuses at once with EAGAIN instead of waiting like TCP would:
        # retry with a short back-off until the timeout, so a burst of clients queues instead of failing.
        deadline = time.monotonic() + (self.timeout if isinstance(self.timeout, (int, float)) else 30.0)
        delay = 0.005
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(self.timeout)
            try:
                s.connect(self._socket_path)
            except BlockingIOError:
                s.close()
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.2)
                continue
            except BaseException:
                s.close()
                raise
            self.sock = s
            return


Body = Union[bytes, Dict[str, Any], None]

#: Idle connections one client keeps (more threads than this open and close their own).
_POOL_MAX = 8
#: Methods sent again when a kept-alive connection closed before any byte of the answer (see the module's rule).
_RETRY_AFTER_SEND = frozenset({"GET", "HEAD", "PUT"})


class Client:
    """A client of lensboxd on `socket_path` (default: $LENSBOX_SOCKET, else /run/lensbox/lensboxd.sock, as the
    `lensbox` command). `timeout` bounds every request but runs, which wait for their own time limit plus
    RUN_GRACE_SECONDS. Thread-safe; keeps up to 8 idle connections (`close()` or `with Client(...)` drops them)."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 30.0) -> None:
        self.socket_path = socket_path or os.environ.get("LENSBOX_SOCKET") or DEFAULT_SOCKET
        self.timeout = timeout
        self._lock = threading.Lock()
        self._idle: List[_UnixHTTPConnection] = []
        #: requests sent again on a new connection (see the module's rule); for tests and metrics
        self.connects_retried = 0

    # ---- transport ----

    def _take(self, timeout: float, fresh: bool) -> Tuple[_UnixHTTPConnection, bool]:
        """An idle kept-alive connection (reused: True) or, when there is none or fresh, a new one; its timeout set
        for this request."""
        with self._lock:
            conn = self._idle.pop() if self._idle and not fresh else None
        if conn is not None:
            conn.timeout = timeout
            if conn.sock is not None:
                conn.sock.settimeout(timeout)
            return conn, True
        return _UnixHTTPConnection(self.socket_path, timeout), False

    def _give_back(self, conn: _UnixHTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < _POOL_MAX:
                self._idle.append(conn)
                return
        conn.close()

    def _stale(self) -> bool:
        """A kept-alive connection was found dead (lensboxd restarted, or closed it idle): the other idle ones are
        likely dead too. Drops them; the request goes once more on a new connection."""
        self.connects_retried += 1
        self.close()
        return True

    def close(self) -> None:
        """Closes the idle connections. The client stays usable: the next request opens a new one."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _send(
        self,
        method: str,
        path: str,
        body: Body = None,
        *,
        timeout: Optional[float] = None,
        raw: bool = False,
        max_bytes: Optional[int] = None,
    ) -> Tuple[int, bytes]:
        """Sends one request; returns (status, body bytes). Raises SandboxError on a status >= 400 or when lensboxd
        cannot be reached. With raw, a 2xx body is read with the max_bytes bound (413 file_too_large past it)."""
        data, headers = _encode_body(method, body)
        t = self.timeout if timeout is None else timeout
        fresh = False
        while True:
            conn, reused = self._take(t, fresh)
            keep = False
            try:
                try:
                    conn.request(method, path, body=data, headers=headers)
                except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
                    if reused:  # the request did not reach lensboxd whole: it cannot have acted on it
                        fresh = self._stale()
                        continue
                    raise
                try:
                    resp = conn.getresponse()
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    if reused and method in _RETRY_AFTER_SEND:
                        fresh = self._stale()
                        continue
                    raise
                status = resp.status
                if raw and status < 400:
                    payload = _read_bounded(resp, max_bytes)
                else:
                    payload = resp.read(1 << 26)  # JSON answers are far below 64 MiB
                # reusable only when the answer was read whole and lensboxd keeps the connection open
                keep = resp.isclosed() and not resp.will_close
            except (OSError, http.client.HTTPException) as e:
                raise error_for(
                    503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path}: {e}"
                ) from None
            finally:
                if keep:
                    self._give_back(conn)
                else:
                    conn.close()
            if status >= 400:
                raise _error_from(status, payload)
            return status, payload

    def _request(
        self, method: str, path: str, body: Body = None, *, timeout: Optional[float] = None
    ) -> Tuple[int, Dict[str, Any]]:
        """Sends one request and parses its JSON object answer."""
        status, payload = self._send(method, path, body, timeout=timeout)
        return status, _json_object(method, path, payload)

    # ---- sandboxes ----

    def health(self) -> Dict[str, Any]:
        """GET /v1/health: version, whether sandboxes can run here (`can_run`, `why_not`), host facts, counts."""
        return self._request("GET", "/v1/health")[1]

    def ensure(self, name: str, **spec: Any) -> EnsureResult:
        """Makes sure the sandbox exists with this spec (image, network, cpu, memory, disk, idle_minutes,
        keep_hours; missing ones take the daemon's defaults). A different image or network replaces it with a fresh
        one: `recreated` says why."""
        body = _spec_body(spec)
        status, d = self._request("PUT", f"/v1/sandboxes/{check_name(name)}", body)
        sb = d.get("sandbox", d)
        return EnsureResult(
            created=bool(d.get("created", status == 201)), recreated=_opt_str(d.get("recreated")), sandbox=Sandbox.from_json(sb)
        )

    def get(self, name: str) -> Sandbox:
        """GET /v1/sandboxes/{name}; SandboxError 404 sandbox_not_found when there is none."""
        return Sandbox.from_json(self._request("GET", f"/v1/sandboxes/{check_name(name)}")[1])

    def list(self) -> List[Sandbox]:
        """Every sandbox, by name."""
        d = self._request("GET", "/v1/sandboxes")[1]
        return [Sandbox.from_json(x) for x in d.get("sandboxes", [])]

    def stop(self, name: str) -> bool:
        """Stops it now, keeping its files. True when it was running."""
        d = self._request("POST", f"/v1/sandboxes/{check_name(name)}/stop")[1]
        return bool(d.get("stopped", True))

    def delete(self, name: str, *, missing_ok: bool = True) -> bool:
        """Stops it and deletes it with its files. True when it existed; with missing_ok=False a missing sandbox
        raises SandboxError 404."""
        try:
            self._request("DELETE", f"/v1/sandboxes/{check_name(name)}")
        except SandboxError as e:
            if missing_ok and e.status == 404 and e.code == "sandbox_not_found":
                return False
            raise
        return True

    # ---- runs ----

    def run(
        self,
        name: str,
        language: str,
        source: str,
        *,
        timeout: int = 60,
        files: Optional[Mapping[str, bytes]] = None,
        output_limit: int = 10000,
        spec: Optional[Mapping[str, Any]] = None,
    ) -> RunResult:
        """Runs `source` ("python" or "bash") in the sandbox, creating or starting it as needed.

        `files` ({relative path: bytes}) are copied in first, each at most 25 MiB and 100 MiB in all: this is
        checked before anything is sent. With files, the sandbox is ensured first (with `spec`: image, network,
        ...), so a change of image or network cannot wipe them afterwards. A program that fails is a
        result, not an exception: look at exit_code, timed_out, oom_killed and message."""
        _check_run(name, language, source, timeout)
        uploads = _check_files(files or {})
        spec_body = _spec_body(dict(spec or {}))

        ensured: Optional[EnsureResult] = None
        if uploads:
            # ensure first (with the spec, or the daemon's defaults): a change of image or network then replaces
            # the sandbox before the files go in, and the result can say the sandbox was created for this run
            ensured = self.ensure(name, **spec_body)
        for path, data in uploads:
            self.write_file(name, path, data)

        body: Dict[str, Any] = {
            "language": language,
            "source": source,
            "timeout_seconds": timeout,
            "output_limit": output_limit,
        }
        if spec_body:
            body["sandbox"] = spec_body
        d = self._request("POST", f"/v1/sandboxes/{name}/runs", body, timeout=timeout + RUN_GRACE_SECONDS)[1]
        if ensured is not None:
            # what happened to the sandbox before the uploads belongs to this run's story too
            if ensured.created:
                d["sandbox_created"] = True
            if ensured.recreated and not d.get("recreated"):
                d["recreated"] = ensured.recreated
        return RunResult.from_json(d)

    def runs(self, name: Optional[str] = None, limit: int = 100) -> List[RunRecord]:
        """The ledger, newest first: one sandbox's runs, or everyone's when name is None."""
        q: Dict[str, Union[str, int]] = {"limit": limit}
        if name is not None:
            q["sandbox"] = check_name(name)
        d = self._request("GET", "/v1/runs?" + urllib.parse.urlencode(q))[1]
        return [RunRecord.from_json(x) for x in d.get("runs", [])]

    def get_run(self, run_id: str) -> RunRecord:
        """One ledger row by its id (SandboxError 404 run_not_found)."""
        if not isinstance(run_id, str) or not re.fullmatch(r"[0-9a-z]{26}", run_id):
            raise error_for(404, "run_not_found", f"{run_id!r} is not a lensbox run id")
        return RunRecord.from_json(self._request("GET", f"/v1/runs/{run_id}")[1])

    # ---- files ----

    def files(self, name: str, path: str = "", *, recursive: bool = True) -> FileList:
        """What the sandbox holds under `path` (the top by default), recursively unless recursive=False, at most 1000
        entries (`more` counts the rest). SandboxError 404 sandbox_not_found before its first run."""
        q: Dict[str, str] = {"recursive": "true" if recursive else "false"}
        if path:
            q["path"] = check_path(path)
        d = self._request("GET", f"/v1/sandboxes/{check_name(name)}/files?" + urllib.parse.urlencode(q))[1]
        return _files_from(d)

    def read_file(self, name: str, path: str, *, max_bytes: int = FILE_MAX) -> bytes:
        """The bytes of one regular file of the sandbox, at most max_bytes (SandboxError 413 file_too_large past
        it, without reading the rest)."""
        url = f"/v1/sandboxes/{check_name(name)}/files/{_quote_path(check_path(path))}"
        return self._send("GET", url, raw=True, max_bytes=max_bytes)[1]

    def write_file(self, name: str, path: str, data: bytes) -> Dict[str, Any]:
        """Writes data to /sandbox/{path} atomically (parents created). At most 25 MiB."""
        data = bytes(data)
        if len(data) > FILE_MAX:
            raise error_for(413, "file_too_large", f"{path} is {len(data)} bytes; one file may be at most 25 MiB")
        url = f"/v1/sandboxes/{check_name(name)}/files/{_quote_path(check_path(path))}"
        return self._request("PUT", url, data)[1]

    # ---- images ----

    def images(self) -> List[Image]:
        """Every image of lensboxd's store (GET /v1/images), each with `in_use`, the sandboxes made from it."""
        d = self._request("GET", "/v1/images")[1]
        return [Image.from_json(x) for x in d.get("images", [])]

    def get_image(self, ref: str) -> Image:
        """One image by name (python:3.12-slim), config digest (sha256:...) or a unique prefix of at least 12 hex
        digits of it, with its env, working_dir and rootfs; SandboxError 404 image_not_found."""
        return Image.from_json(self._request("GET", _image_path(ref))[1].get("image") or {})

    def pull_image(
        self,
        ref: str,
        *,
        pin: bool = False,
        timeout: float = IMAGE_TIMEOUT_SECONDS,
        progress: Optional[ProgressCallback] = None,
    ) -> ImageResult:
        """Pulls ref from its registry into lensboxd's store (POST /v1/images/pull), with the daemon's
        insecure_registries, CA file and credentials; pin: never garbage-collect it. lensboxd answers when the image
        is in the store, so this waits up to `timeout` seconds (an hour by default), not the client's own timeout.
        SandboxError 404 image_not_found (the registry has none for this platform), 502 registry_error (unreachable,
        credentials refused, a blob that does not match its digest), 422 invalid_value (a bare digest: a pull needs a
        name).

        progress (optional) is called with a PullProgress for each step lensboxd streams (Accept:
        application/x-ndjson): "resolving", each layer's "downloading" bytes, "unpacking" each layer, and "done" with
        the image's size at the end. An exception raised by the callback (KeyboardInterrupt among them) closes the
        connection, and lensboxd cancels the pull, leaving nothing half-written in its store."""
        body = _pull_body(ref, pin)
        if progress is not None:
            return self._image_stream("/v1/images/pull", body, timeout, progress)
        return self._image_result("/v1/images/pull", body, timeout)

    def import_image(
        self,
        path: Union[str, "os.PathLike[str]"],
        name: Optional[str] = None,
        *,
        pin: bool = False,
        timeout: float = IMAGE_TIMEOUT_SECONDS,
        progress: Optional[ProgressCallback] = None,
    ) -> ImageResult:
        """Imports an OCI layout (a directory or its tar) or a `docker save` archive that is on lensboxd's host
        (POST /v1/images/import), named `name` when given. lensboxd reads the path itself, as root, so only a root
        caller may ask (SandboxError 403 forbidden otherwise); the path is made absolute here with
        os.path.realpath, as `lensbox image import` does. Waits up to `timeout` seconds. SandboxError 404
        path_not_found, 422 invalid_path (not a regular file or a directory), 422 invalid_image (an archive that
        fails verification or the bounds: the message names the blob or entry). progress: as for pull_image
        ("resolving", "extracting" an archive, "unpacking" each layer, "done")."""
        body = _import_body(path, name, pin)
        if progress is not None:
            return self._image_stream("/v1/images/import", body, timeout, progress)
        return self._image_result("/v1/images/import", body, timeout)

    def delete_image(self, ref: str, *, missing_ok: bool = True) -> bool:
        """Removes a name (the image goes with its last name) or, by digest, the image with all its names. True when
        it was there; with missing_ok=False a missing one raises SandboxError 404 image_not_found. SandboxError 409
        image_in_use while a sandbox uses it (the message names the sandbox): nothing changes."""
        try:
            self._request("DELETE", _image_path(ref))
        except SandboxError as e:
            if missing_ok and e.status == 404 and e.code == "image_not_found":
                return False
            raise
        return True

    def _image_result(self, path: str, body: Dict[str, Any], timeout: float) -> ImageResult:
        d = self._request("POST", path, body, timeout=_check_timeout(timeout))[1]
        return _image_result_of(d)

    def _image_stream(self, path: str, body: Dict[str, Any], timeout: float, progress: ProgressCallback) -> ImageResult:
        """A pull or an import with progress: on a connection of its own (closed at the end, or when the callback
        raises, which makes lensboxd cancel), the ndjson lines handed to the callback, the last one the result."""
        data, headers = _encode_body("POST", body)
        headers = dict(headers, Accept=NDJSON)
        conn = _UnixHTTPConnection(self.socket_path, _check_timeout(timeout))
        try:
            try:
                conn.request("POST", path, body=data, headers=headers)
                resp = conn.getresponse()
                if resp.status >= 400:
                    raise _error_from(resp.status, resp.read(1 << 26))
                if NDJSON not in (resp.getheader("Content-Type") or ""):  # a lensboxd that does not stream
                    result = _image_result_of(_json_object("POST", path, resp.read(1 << 26)))
                    _report_done(progress, result)
                    return result
                while True:
                    line = resp.readline(1 << 26)
                    if not line:
                        raise error_for(503, "daemon_unreachable", "lensboxd ended the stream before its result")
                    final = _stream_line(line, progress)
                    if final is not None:
                        return final
            except (OSError, http.client.HTTPException) as e:
                raise error_for(
                    503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path}: {e}"
                ) from None
        finally:
            conn.close()

    # ---- metrics ----

    def metrics(self) -> str:
        """GET /metrics, Prometheus text."""
        return self._send("GET", "/metrics", raw=True, max_bytes=16 << 20)[1].decode("utf-8", "replace")


@dataclass(frozen=True)
class PullProgress:
    """One report of a pull or an import in progress. phase: "resolving", "downloading", "extracting",
    "unpacking" (as lensboxd streams them, docs/api.md) or "done" (the image is in the store); layer: the blob's
    digest (sha256:...), None for the whole image; done_bytes and total_bytes: bytes so far and expected (total None
    when unknown)."""

    phase: str
    layer: Optional[str]
    done_bytes: int
    total_bytes: Optional[int]


ProgressCallback = Callable[[PullProgress], None]


def _pull_body(ref: str, pin: bool) -> Dict[str, Any]:
    check_image_ref(ref)
    if ref.startswith("sha256:"):
        raise error_for(422, "invalid_value", "A pull needs a name (registry/name:tag or @sha256:...), not a bare digest.")
    body: Dict[str, Any] = {"ref": ref}
    if pin:
        body["pin"] = True
    return body


NDJSON = "application/x-ndjson"


def _image_result_of(d: Dict[str, Any]) -> ImageResult:
    return ImageResult(image=Image.from_json(d.get("image") or {}), duration_ms=int(d.get("duration_ms") or 0))


def _stream_line(line: bytes, progress: ProgressCallback) -> Optional[ImageResult]:
    """One ndjson line of a streamed pull or import: a progress step goes to the callback (None returned); the
    last line is the result (returned, after a "done" step) or the error (raised with the status lensboxd gives)."""
    try:
        d = json.loads(line)
    except ValueError:
        raise error_for(502, "bad_response", f"lensboxd sent a line that is not JSON: {line[:80]!r}") from None
    if not isinstance(d, dict):
        raise error_for(502, "bad_response", "lensboxd sent a line that is not a JSON object")
    if "phase" in d:
        total = d.get("total")
        progress(PullProgress(phase=str(d["phase"]), layer=_opt_str(d.get("layer")), done_bytes=int(d.get("done") or 0),
                              total_bytes=int(total) if isinstance(total, int) else None))
        return None
    if isinstance(d.get("error"), dict):
        e = d["error"]
        st = d.get("status")
        status = st if isinstance(st, int) and not isinstance(st, bool) else 500
        raise error_for(status, str(e.get("code") or "internal"), str(e.get("message") or ""))
    result = _image_result_of(d)
    _report_done(progress, result)
    return result


def _report_done(progress: Optional[ProgressCallback], result: ImageResult) -> None:
    if progress is not None:
        size = result.image.size_bytes
        progress(PullProgress(phase="done", layer=None, done_bytes=size, total_bytes=size))


def _import_body(path: Union[str, "os.PathLike[str]"], name: Optional[str], pin: bool) -> Dict[str, Any]:
    raw_path = os.fspath(path)
    if not isinstance(raw_path, str) or not raw_path or "\0" in raw_path:
        raise error_for(422, "invalid_path", f"{raw_path!r} is not a path of an image on lensboxd's host")
    full = os.path.realpath(raw_path)
    if len(full.encode("utf-8", "surrogateescape")) > IMPORT_PATH_MAX:
        raise error_for(422, "invalid_path", f"the path of an import may be at most {IMPORT_PATH_MAX} bytes")
    body: Dict[str, Any] = {"path": full}
    if name is not None:
        check_image_ref(name)
        if name.startswith("sha256:") or "@" in name:
            raise error_for(422, "invalid_value", f"{name!r}: an import's name must be an image name like python:3.12-slim.")
        body["name"] = name
    if pin:
        body["pin"] = True
    return body


def _check_timeout(timeout: Any) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise error_for(422, "invalid_value", f"timeout must be a positive number of seconds, not {timeout!r}")
    return float(timeout)


def _check_run(name: str, language: str, source: str, timeout: int) -> None:
    check_name(name)
    if language not in ("python", "bash"):
        raise error_for(422, "invalid_value", f"language must be python or bash, not {language!r}")
    if not isinstance(source, str):
        raise error_for(422, "invalid_value", "source must be a string")
    if len(source.encode("utf-8", "surrogatepass")) > SOURCE_MAX:
        raise error_for(413, "source_too_large", f"the source is larger than {SOURCE_MAX // 1024} KiB")
    if isinstance(timeout, bool) or not isinstance(timeout, int) or not 1 <= timeout <= 600:
        raise error_for(422, "out_of_range", f"timeout must be 1-600 seconds, not {timeout!r}")


def _files_from(d: Mapping[str, Any]) -> FileList:
    entries = [
        FileEntry(
            path=str(e.get("path", "")),
            type=str(e.get("type", "")),
            size=int(e.get("size") or 0),
            modified_at=_opt_str(e.get("modified_at")),
        )
        for e in d.get("files", [])
    ]
    return FileList(files=entries, more=int(d.get("more") or 0))


def _spec_body(spec: Mapping[str, Any]) -> Dict[str, Any]:
    unknown = sorted(set(spec) - set(_SPEC_KEYS))
    if unknown:
        raise error_for(400, "unknown_field", f"unknown sandbox setting {unknown[0]!r}; known: {', '.join(_SPEC_KEYS)}")
    return {k: v for k, v in spec.items() if v is not None}


def _check_files(files: Mapping[str, bytes]) -> List[Tuple[str, bytes]]:
    out: List[Tuple[str, bytes]] = []
    total = 0
    for path, data in files.items():
        check_path(path)
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise error_for(422, "invalid_value", f"{path}: file contents must be bytes")
        b = bytes(data)
        if len(b) > FILE_MAX:
            raise error_for(413, "file_too_large", f"{path} is {len(b)} bytes; one file may be at most 25 MiB")
        total += len(b)
        if total > RUN_FILES_MAX:
            raise error_for(413, "files_too_large", "the files of one run may be at most 100 MiB together")
        out.append((path, b))
    return out


def _read_bounded(resp: http.client.HTTPResponse, max_bytes: Optional[int]) -> bytes:
    if max_bytes is None:
        return resp.read()
    length = resp.getheader("Content-Length")
    if length is not None and length.isdigit() and int(length) > max_bytes:
        raise error_for(
            413, "file_too_large", f"The file is {int(length)} bytes; at most {max_bytes} bytes can be copied out."
        )
    data = resp.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise error_for(413, "file_too_large", f"The file is larger than the {max_bytes} bytes that can be copied out.")
    return data


def _json_object(method: str, path: str, payload: bytes) -> Dict[str, Any]:
    if not payload:
        return {}
    try:
        obj = json.loads(payload)
    except ValueError:
        obj = None
    if not isinstance(obj, dict):
        raise error_for(502, "bad_response", f"lensboxd answered {method} {path} with something that is not a JSON object")
    return obj


def _encode_body(method: str, body: Body) -> Tuple[Optional[bytes], Dict[str, str]]:
    """The request's bytes and headers (Accept, and Content-Type and Content-Length when it has a body)."""
    headers = {"Accept": "application/json"}
    data: Optional[bytes] = None
    if isinstance(body, dict):
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers["Content-Type"] = "application/json"
    elif body is not None:
        data = bytes(body)
        headers["Content-Type"] = "application/octet-stream"
    if data is not None or method in ("POST", "PUT"):
        headers["Content-Length"] = str(len(data or b""))
    return data, headers


def _error_from(status: int, payload: bytes) -> SandboxError:
    try:
        e = json.loads(payload)["error"]
        return error_for(status, str(e["code"]), str(e["message"]))
    except (ValueError, KeyError, TypeError):
        text = payload[:200].decode("utf-8", "replace").strip() or http.client.responses.get(status, "error")
        return error_for(status, "http_error", f"lensboxd answered {status}: {text}")


def _image_path(ref: str) -> str:
    # check_image_ref leaves only characters a path carries as they are (`/` separates the reference's own
    # components; lensboxd reads the rest of the path, slashes included, as the reference)
    return "/v1/images/" + check_image_ref(ref)
