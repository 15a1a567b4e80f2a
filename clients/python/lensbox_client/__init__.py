"""lensbox_client — talk to lensboxd (the lensbox sandbox supervisor) over its Unix socket.

    from lensbox_client import Client, SandboxError

    box = Client("/run/lensbox/lensboxd.sock")
    result = box.run("lens-chat-42", "python", "print(6*7)", timeout=60, files={"data.csv": b"a,b\\n1,2\\n"})
    print(result.exit_code, result.stdout)

The asyncio twin is `lensbox_client.aio.AsyncClient`. Every error is a `SandboxError`; each error code has its own
subclass (`SandboxNotFound`, `Capacity`, ... in `lensbox_client.errors`), exported here too.

Standard library only; see docs/api.md for the API and docs/lens.md for how Lens uses it.
"""

from .client import (
    DEFAULT_SOCKET,
    FILE_MAX,
    IMAGE_TIMEOUT_SECONDS,
    RUN_FILES_MAX,
    SOURCE_MAX,
    Client,
    EnsureResult,
    FileEntry,
    FileList,
    Image,
    ImageResult,
    RunRecord,
    Refused,
    RunResult,
    PullProgress,
    Sandbox,
    check_image_ref,
    check_name,
    check_path,
)
from .errors import *  # noqa: F401,F403  one class per error code
from .errors import ERRORS, SandboxError, error_for

__all__ = [
    "DEFAULT_SOCKET",
    "FILE_MAX",
    "IMAGE_TIMEOUT_SECONDS",
    "RUN_FILES_MAX",
    "SOURCE_MAX",
    "Client",
    "EnsureResult",
    "FileEntry",
    "FileList",
    "Image",
    "ImageResult",
    "RunRecord",
    "Refused",
    "RunResult",
    "PullProgress",
    "Sandbox",
    "SandboxError",
    "ERRORS",
    "error_for",
    "check_image_ref",
    "check_name",
    "check_path",
]
__all__ += [cls.__name__ for cls in ERRORS.values()]
__version__ = "0.1.0"
