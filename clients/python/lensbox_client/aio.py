"""lensbox_client.aio — the asyncio client of lensboxd, for async backends (FastAPI, aiohttp), standard library only.

    from lensbox_client.aio import AsyncClient

    async with AsyncClient("/run/lensbox/lensboxd.sock") as box:
        result = await box.run("lens-chat-42", "python", "print(6*7)")

`AsyncClient` has the methods of `Client`, as coroutines, with the same arguments, results and exceptions (one
class per error code, all `SandboxError`). It speaks HTTP/1.1 itself over `asyncio.open_unix_connection` and keeps
connections alive: a request takes an idle connection (or opens one) and gives it back when its answer is read whole.
It reconnects by `Client`'s rule (client.py's docstring): a request is sent again, once, on a new connection only
when lensboxd surely did not act on it — the kept-alive connection failed while the request was written (any
method), or closed before one byte of the answer (GET, HEAD and PUT only).

One AsyncClient belongs to one event loop. Answers are bounded: a status line and each header at most 8 KiB, at most
100 headers, a JSON body at most 64 MiB, a file at most `max_bytes`.
"""

from __future__ import annotations

import asyncio
import os
import re
import urllib.parse
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from .client import (
    DEFAULT_SOCKET,
    FILE_MAX,
    IMAGE_TIMEOUT_SECONDS,
    RUN_GRACE_SECONDS,
    Body,
    EnsureResult,
    FileList,
    Image,
    ImageResult,
    ProgressCallback,
    RunRecord,
    RunResult,
    Sandbox,
    _check_files,
    _check_run,
    _check_timeout,
    _encode_body,
    _error_from,
    _files_from,
    NDJSON,
    _image_path,
    _image_result_of,
    _import_body,
    _json_object,
    _opt_str,
    _pull_body,
    _quote_path,
    _report_done,
    _spec_body,
    _stream_line,
    check_name,
    check_path,
)
from .errors import SandboxError, error_for

_POOL_MAX = 8
_RETRY_AFTER_SEND = frozenset({"GET", "HEAD", "PUT"})
_LINE_MAX = 8192
_HEADERS_MAX = 100
_JSON_MAX = 1 << 26


class _Conn:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def alive(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class _NotSent(Exception):
    """The request could not be written whole: lensboxd cannot have acted on it."""


class _NoAnswer(Exception):
    """The connection closed before one byte of the answer."""


class _Response:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes, keep: bool) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        self.keep = keep


async def _read_line(reader: asyncio.StreamReader) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise error_for(502, "bad_response", "lensboxd sent a header line longer than 8 KiB") from None
    except asyncio.IncompleteReadError as e:
        if not e.partial:
            raise EOFError from None
        raise ConnectionResetError("lensboxd closed the connection in the middle of an answer") from None
    return line


async def _read_chunked(reader: asyncio.StreamReader, limit: int) -> bytes:
    out = bytearray()
    while True:
        size_line = (await _read_line(reader)).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise error_for(502, "bad_response", "lensboxd sent a malformed chunk size") from None
        if size == 0:
            while (await _read_line(reader)).strip():  # trailers, then the blank line
                pass
            return bytes(out)
        if len(out) + size > limit:
            raise _TooLarge(len(out) + size)
        out += await reader.readexactly(size)
        await reader.readexactly(2)


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


async def _exchange(conn: _Conn, head: bytes, data: Optional[bytes], limit: int) -> _Response:
    try:
        conn.writer.write(head + (data or b""))
        await conn.writer.drain()
    except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError):
        raise _NotSent from None
    try:
        status_line = await _read_line(conn.reader)
    except EOFError:
        raise _NoAnswer from None
    except (ConnectionResetError, BrokenPipeError) as e:
        if conn.reader.at_eof():
            raise _NoAnswer from None
        raise e
    status, headers, keep = await _read_head(conn, status_line)
    return await _read_body(conn, status, headers, keep, limit)


async def _read_head(conn: _Conn, status_line: bytes) -> Tuple[int, Dict[str, str], bool]:
    """The status and headers of an answer whose status line was read; whether the connection stays open."""
    parts = status_line.decode("latin-1").split(None, 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        raise error_for(502, "bad_response", f"lensboxd sent a malformed status line {status_line[:80]!r}")
    status = int(parts[1])
    headers: Dict[str, str] = {}
    for _ in range(_HEADERS_MAX + 1):
        line = await _read_line(conn.reader)
        if not line.strip():
            break
        k, _sep, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    else:
        raise error_for(502, "bad_response", f"lensboxd sent more than {_HEADERS_MAX} headers")
    return status, headers, parts[0] == "HTTP/1.1" and headers.get("connection", "").lower() != "close"


async def _read_body(conn: _Conn, status: int, headers: Dict[str, str], keep: bool, limit: int) -> _Response:
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = await _read_chunked(conn.reader, limit)
    elif "content-length" in headers:
        length = headers["content-length"]
        if not length.isdigit():
            raise error_for(502, "bad_response", "lensboxd sent a malformed Content-Length")
        if int(length) > limit:
            raise _TooLarge(int(length))
        body = await conn.reader.readexactly(int(length))
    else:  # the body ends with the connection
        body = await conn.reader.read(limit + 1)
        if len(body) > limit:
            raise _TooLarge(len(body))
        keep = False
    return _Response(status, headers, body, keep)


class AsyncClient:
    """An asyncio client of lensboxd on `socket_path` (default: $LENSBOX_SOCKET, else /run/lensbox/lensboxd.sock).
    `timeout` bounds every request but runs (their own limit plus RUN_GRACE_SECONDS) and image pulls and imports."""

    def __init__(self, socket_path: Optional[str] = None, timeout: float = 30.0) -> None:
        self.socket_path = socket_path or os.environ.get("LENSBOX_SOCKET") or DEFAULT_SOCKET
        self.timeout = timeout
        self._idle: List[_Conn] = []
        #: connections opened, and requests sent again on a new one (see the module's rule); for tests and metrics
        self.connections_opened = 0
        self.connects_retried = 0

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    async def close(self) -> None:
        """Closes the idle connections; the client stays usable."""
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        for c in idle:
            try:
                await c.writer.wait_closed()
            except OSError:
                pass

    # ---- transport ----

    async def _connect(self) -> _Conn:
        reader, writer = await asyncio.open_unix_connection(self.socket_path, limit=_LINE_MAX)
        self.connections_opened += 1
        return _Conn(reader, writer)

    async def _take(self, fresh: bool) -> Tuple[_Conn, bool]:
        while self._idle and not fresh:
            conn = self._idle.pop()
            if conn.alive():
                return conn, True
            conn.close()  # lensboxd closed it while idle: nothing was sent on it
        return await self._connect(), False

    def _give_back(self, conn: _Conn) -> None:
        if len(self._idle) < _POOL_MAX and conn.alive():
            self._idle.append(conn)
        else:
            conn.close()

    def _stale(self) -> bool:
        self.connects_retried += 1
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()
        return True

    async def _send(
        self,
        method: str,
        path: str,
        body: Body = None,
        *,
        timeout: Optional[float] = None,
        raw: bool = False,
        max_bytes: Optional[int] = None,
    ) -> Tuple[int, bytes]:
        data, headers = _encode_body(method, body)
        head = f"{method} {path} HTTP/1.1\r\nHost: lensbox\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        limit = max_bytes if raw and max_bytes is not None else _JSON_MAX
        t = self.timeout if timeout is None else timeout
        try:
            resp = await asyncio.wait_for(self._send_retrying(method, head.encode("latin-1"), data, limit), t)
        except _TooLarge as e:
            raise error_for(
                413, "file_too_large", f"The file is {e.size} bytes; at most {limit} bytes can be copied out."
            ) from None
        except asyncio.TimeoutError:
            raise error_for(503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path} within {t} s") from None
        except (OSError, EOFError, asyncio.IncompleteReadError, _NotSent, _NoAnswer) as e:
            raise error_for(
                503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path}: {e or type(e).__name__}"
            ) from None
        if resp.status >= 400:
            raise _error_from(resp.status, resp.body)
        return resp.status, resp.body

    async def _send_retrying(self, method: str, head: bytes, data: Optional[bytes], limit: int) -> _Response:
        fresh = False
        while True:
            conn, reused = await self._take(fresh)
            keep = False
            try:
                try:
                    resp = await _exchange(conn, head, data, limit)
                except _NotSent:
                    if reused:
                        fresh = self._stale()
                        continue
                    raise
                except _NoAnswer:
                    if reused and method in _RETRY_AFTER_SEND:
                        fresh = self._stale()
                        continue
                    raise
                keep = resp.keep
                return resp
            finally:
                if keep:
                    self._give_back(conn)
                else:
                    conn.close()

    async def _image_stream(
        self, path: str, body: Dict[str, Any], timeout: float, progress: ProgressCallback
    ) -> ImageResult:
        """As Client._image_stream: a connection of its own, closed at the end or when the callback raises or the
        task is cancelled (lensboxd then cancels the pull)."""
        data, headers = _encode_body("POST", body)
        headers = dict(headers, Accept=NDJSON)
        head = f"POST {path} HTTP/1.1\r\nHost: lensbox\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        t = _check_timeout(timeout)
        conn: Optional[_Conn] = None
        try:
            conn = await self._connect()
            return await asyncio.wait_for(self._stream_exchange(conn, path, head.encode("latin-1") + (data or b""), progress), t)
        except asyncio.TimeoutError:
            raise error_for(503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path} within {t} s") from None
        except (OSError, EOFError, asyncio.IncompleteReadError) as e:
            raise error_for(
                503, "daemon_unreachable", f"lensboxd did not answer on {self.socket_path}: {e or type(e).__name__}"
            ) from None
        finally:
            if conn is not None:
                conn.close()

    async def _stream_exchange(self, conn: _Conn, path: str, request: bytes, progress: ProgressCallback) -> ImageResult:
        conn.writer.write(request)
        await conn.writer.drain()
        status, headers, keep = await _read_head(conn, await _read_line(conn.reader))
        if status >= 400 or NDJSON not in headers.get("content-type", "") or "chunked" not in headers.get(
                "transfer-encoding", ""):
            resp = await _read_body(conn, status, headers, keep, _JSON_MAX)
            if status >= 400:
                raise _error_from(status, resp.body)
            result = _image_result_of(_json_object("POST", path, resp.body))
            _report_done(progress, result)
            return result
        pending = bytearray()
        while True:
            size_line = (await _read_line(conn.reader)).split(b";", 1)[0].strip()
            try:
                size = int(size_line, 16)
            except ValueError:
                raise error_for(502, "bad_response", "lensboxd sent a malformed chunk size") from None
            if size == 0 or len(pending) + size > _JSON_MAX:
                raise error_for(503, "daemon_unreachable", "lensboxd ended the stream before its result")
            pending += await conn.reader.readexactly(size)
            await conn.reader.readexactly(2)
            while b"\n" in pending:
                line, _sep, rest = bytes(pending).partition(b"\n")
                pending = bytearray(rest)
                final = _stream_line(line, progress)
                if final is not None:
                    return final

    async def _request(
        self, method: str, path: str, body: Body = None, *, timeout: Optional[float] = None
    ) -> Tuple[int, Dict[str, Any]]:
        status, payload = await self._send(method, path, body, timeout=timeout)
        return status, _json_object(method, path, payload)

    # ---- sandboxes ----

    async def health(self) -> Dict[str, Any]:
        """GET /v1/health."""
        return (await self._request("GET", "/v1/health"))[1]

    async def ensure(self, name: str, **spec: Any) -> EnsureResult:
        """As Client.ensure."""
        status, d = await self._request("PUT", f"/v1/sandboxes/{check_name(name)}", _spec_body(spec))
        sb = d.get("sandbox", d)
        return EnsureResult(
            created=bool(d.get("created", status == 201)), recreated=_opt_str(d.get("recreated")), sandbox=Sandbox.from_json(sb)
        )

    async def get(self, name: str) -> Sandbox:
        return Sandbox.from_json((await self._request("GET", f"/v1/sandboxes/{check_name(name)}"))[1])

    async def list(self) -> List[Sandbox]:
        d = (await self._request("GET", "/v1/sandboxes"))[1]
        return [Sandbox.from_json(x) for x in d.get("sandboxes", [])]

    async def stop(self, name: str) -> bool:
        d = (await self._request("POST", f"/v1/sandboxes/{check_name(name)}/stop"))[1]
        return bool(d.get("stopped", True))

    async def delete(self, name: str, *, missing_ok: bool = True) -> bool:
        try:
            await self._request("DELETE", f"/v1/sandboxes/{check_name(name)}")
        except SandboxError as e:
            if missing_ok and e.status == 404 and e.code == "sandbox_not_found":
                return False
            raise
        return True

    # ---- runs ----

    async def run(
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
        """As Client.run."""
        _check_run(name, language, source, timeout)
        uploads = _check_files(files or {})
        spec_body = _spec_body(dict(spec or {}))
        ensured: Optional[EnsureResult] = None
        if uploads:
            ensured = await self.ensure(name, **spec_body)
        for path, data in uploads:
            await self.write_file(name, path, data)
        body: Dict[str, Any] = {"language": language, "source": source, "timeout_seconds": timeout, "output_limit": output_limit}
        if spec_body:
            body["sandbox"] = spec_body
        d = (await self._request("POST", f"/v1/sandboxes/{name}/runs", body, timeout=timeout + RUN_GRACE_SECONDS))[1]
        if ensured is not None:
            if ensured.created:
                d["sandbox_created"] = True
            if ensured.recreated and not d.get("recreated"):
                d["recreated"] = ensured.recreated
        return RunResult.from_json(d)

    async def runs(self, name: Optional[str] = None, limit: int = 100) -> List[RunRecord]:
        q: Dict[str, Union[str, int]] = {"limit": limit}
        if name is not None:
            q["sandbox"] = check_name(name)
        d = (await self._request("GET", "/v1/runs?" + urllib.parse.urlencode(q)))[1]
        return [RunRecord.from_json(x) for x in d.get("runs", [])]

    async def get_run(self, run_id: str) -> RunRecord:
        if not isinstance(run_id, str) or not re.fullmatch(r"[0-9a-z]{26}", run_id):
            raise error_for(404, "run_not_found", f"{run_id!r} is not a lensbox run id")
        return RunRecord.from_json((await self._request("GET", f"/v1/runs/{run_id}"))[1])

    # ---- files ----

    async def files(self, name: str, path: str = "", *, recursive: bool = True) -> FileList:
        q: Dict[str, str] = {"recursive": "true" if recursive else "false"}
        if path:
            q["path"] = check_path(path)
        d = (await self._request("GET", f"/v1/sandboxes/{check_name(name)}/files?" + urllib.parse.urlencode(q)))[1]
        return _files_from(d)

    async def read_file(self, name: str, path: str, *, max_bytes: int = FILE_MAX) -> bytes:
        url = f"/v1/sandboxes/{check_name(name)}/files/{_quote_path(check_path(path))}"
        return (await self._send("GET", url, raw=True, max_bytes=max_bytes))[1]

    async def write_file(self, name: str, path: str, data: bytes) -> Dict[str, Any]:
        data = bytes(data)
        if len(data) > FILE_MAX:
            raise error_for(413, "file_too_large", f"{path} is {len(data)} bytes; one file may be at most 25 MiB")
        url = f"/v1/sandboxes/{check_name(name)}/files/{_quote_path(check_path(path))}"
        return (await self._request("PUT", url, data))[1]

    # ---- images ----

    async def images(self) -> List[Image]:
        d = (await self._request("GET", "/v1/images"))[1]
        return [Image.from_json(x) for x in d.get("images", [])]

    async def get_image(self, ref: str) -> Image:
        return Image.from_json((await self._request("GET", _image_path(ref)))[1].get("image") or {})

    async def pull_image(
        self,
        ref: str,
        *,
        pin: bool = False,
        timeout: float = IMAGE_TIMEOUT_SECONDS,
        progress: Optional[ProgressCallback] = None,
    ) -> ImageResult:
        """As Client.pull_image: progress (optional) gets each step lensboxd streams."""
        if progress is not None:
            return await self._image_stream("/v1/images/pull", _pull_body(ref, pin), timeout, progress)
        return await self._image_result("/v1/images/pull", _pull_body(ref, pin), timeout)

    async def import_image(
        self,
        path: Union[str, "os.PathLike[str]"],
        name: Optional[str] = None,
        *,
        pin: bool = False,
        timeout: float = IMAGE_TIMEOUT_SECONDS,
        progress: Optional[ProgressCallback] = None,
    ) -> ImageResult:
        """As Client.import_image: progress (optional) gets each step lensboxd streams."""
        if progress is not None:
            return await self._image_stream("/v1/images/import", _import_body(path, name, pin), timeout, progress)
        return await self._image_result("/v1/images/import", _import_body(path, name, pin), timeout)

    async def delete_image(self, ref: str, *, missing_ok: bool = True) -> bool:
        try:
            await self._request("DELETE", _image_path(ref))
        except SandboxError as e:
            if missing_ok and e.status == 404 and e.code == "image_not_found":
                return False
            raise
        return True

    async def _image_result(self, path: str, body: Dict[str, Any], timeout: float) -> ImageResult:
        d = (await self._request("POST", path, body, timeout=_check_timeout(timeout)))[1]
        return ImageResult(image=Image.from_json(d.get("image") or {}), duration_ms=int(d.get("duration_ms") or 0))

    # ---- metrics ----

    async def metrics(self) -> str:
        return (await self._send("GET", "/metrics", raw=True, max_bytes=16 << 20))[1].decode("utf-8", "replace")
