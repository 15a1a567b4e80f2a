"""One exception class per error code of lensboxd's API (docs/api.md, "Errors") and of this client, all subclasses
of `SandboxError`, so a caller may catch the base class or exactly the case it handles:

    try:
        box.get("lens-chat-7")
    except SandboxNotFound:
        ...

Every instance still carries `status`, `code` and `message`; `error_for(status, code, message)` builds the class that
matches `code` (the base class for a code this client does not know, which a newer lensboxd may send).
"""

from __future__ import annotations

from typing import Dict, Type


class SandboxError(Exception):
    """Any failure talking to lensboxd.

    status: the HTTP status (400, 403, 404, 409, 413, 422, 429, 502, 503, 500), or 503 when the daemon could not be
      reached.
    code: lensboxd's snake_case error code (`sandbox_not_found`, `file_too_large`, `image_in_use`,
      `registry_error`, ...), or one of this client's:
      `daemon_unreachable`, `bad_response`, `http_error`, `invalid_name`, `invalid_path`, `file_too_large`,
      `files_too_large`, `source_too_large`, `invalid_value`.
    message: a sentence a person understands.
    """

    code_name = ""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.message} ({self.code}, {self.status})"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


# 400: a malformed request
class InvalidJson(SandboxError):
    code_name = "invalid_json"


class UnknownField(SandboxError):
    code_name = "unknown_field"


class DuplicateField(SandboxError):
    code_name = "duplicate_field"


class WrongType(SandboxError):
    code_name = "wrong_type"


class MissingField(SandboxError):
    code_name = "missing_field"


class UnexpectedBody(SandboxError):
    code_name = "unexpected_body"


class InvalidName(SandboxError):
    code_name = "invalid_name"


class InvalidPath(SandboxError):
    """400 for a path inside a sandbox, 422 for an import path that is no file or directory."""

    code_name = "invalid_path"


class InvalidQuery(SandboxError):
    code_name = "invalid_query"


class BadMessage(SandboxError):
    """lensboxd's core refused what its API process sent: a bug in lensboxd, or a compromised API process."""

    code_name = "bad_message"


# 403
class Forbidden(SandboxError):
    code_name = "forbidden"


# 404
class SandboxNotFound(SandboxError):
    code_name = "sandbox_not_found"


class FileNotFound(SandboxError):
    code_name = "file_not_found"


class RunNotFound(SandboxError):
    code_name = "run_not_found"


class ImageNotFound(SandboxError):
    code_name = "image_not_found"


class PathNotFound(SandboxError):
    code_name = "path_not_found"


class NotFound(SandboxError):
    code_name = "not_found"


# 405
class MethodNotAllowed(SandboxError):
    code_name = "method_not_allowed"


# 409
class IsADirectory(SandboxError):
    code_name = "is_a_directory"


class Conflict(SandboxError):
    code_name = "conflict"


class ImageInUse(SandboxError):
    code_name = "image_in_use"


# 413
class BodyTooLarge(SandboxError):
    code_name = "body_too_large"


class SourceTooLarge(SandboxError):
    code_name = "source_too_large"


class FileTooLarge(SandboxError):
    code_name = "file_too_large"


class DiskFull(SandboxError):
    code_name = "disk_full"


# 422
class OutOfRange(SandboxError):
    code_name = "out_of_range"


class InvalidValue(SandboxError):
    code_name = "invalid_value"


class NotARegularFile(SandboxError):
    code_name = "not_a_regular_file"


class NotADirectory(SandboxError):
    code_name = "not_a_directory"


class InvalidImage(SandboxError):
    code_name = "invalid_image"


# 429
class Capacity(SandboxError):
    code_name = "capacity"


# 503
class HostUnavailable(SandboxError):
    code_name = "host_unavailable"


class ImageUnavailable(SandboxError):
    code_name = "image_unavailable"


class Busy(SandboxError):
    code_name = "busy"


class CoreUnavailable(SandboxError):
    """lensboxd's core is restarting or stopped; a request that was sent may or may not have been done."""

    code_name = "core_unavailable"


# 502
class RegistryError(SandboxError):
    code_name = "registry_error"


class PullFailed(SandboxError):
    code_name = "pull_failed"


class CoreError(SandboxError):
    code_name = "core_error"


# 500
class Internal(SandboxError):
    code_name = "internal"


# this client's own
class DaemonUnreachable(SandboxError):
    """lensboxd could not be reached, or the connection broke during a request that could not be retried."""

    code_name = "daemon_unreachable"


class BadResponse(SandboxError):
    code_name = "bad_response"


class HttpError(SandboxError):
    """An error answer without lensboxd's JSON error body (a proxy, or a daemon too old)."""

    code_name = "http_error"


class FilesTooLarge(SandboxError):
    code_name = "files_too_large"


ERRORS: Dict[str, Type[SandboxError]] = {
    c.code_name: c for c in SandboxError.__subclasses__()  # every class above, by its code
}


def error_for(status: int, code: str, message: str) -> SandboxError:
    """The exception for this code: its own class, or SandboxError itself for a code not listed here."""
    return ERRORS.get(code, SandboxError)(status, code, message)
