"""Build sanity: the binaries CI built exist and carry the hardening the build promises (PIE, full RELRO, stack
protector, _FORTIFY_SOURCE), read from the ELF files themselves with readelf."""
import os
import pathlib
import subprocess

import pytest

BUILD = pathlib.Path(os.environ.get("LENSBOX_BUILD_DIR", "build"))
BINARIES = ["runner/lensbox-runner", "supervisor/lensboxd", "clients/cli/lensbox"]


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(params=BINARIES)
def binary(request):
    path = BUILD / request.param
    assert path.is_file(), f"{path} was not built"
    return path


def test_is_position_independent(binary):
    header = readelf("-h", str(binary))
    assert "DYN (Position-Independent Executable file)" in header or "Type:                              DYN" in header


def test_has_full_relro(binary):
    segments = readelf("-l", str(binary))
    dynamic = readelf("-d", str(binary))
    assert "GNU_RELRO" in segments
    assert "BIND_NOW" in dynamic or "NOW" in dynamic.split("FLAGS_1", 1)[-1]


def test_stack_is_not_executable(binary):
    segments = readelf("-l", str(binary))
    stack = [line for line in segments.splitlines() if "GNU_STACK" in line]
    assert stack and "RWE" not in stack[0]


def is_static(binary):
    """The musl build of lensbox-runner (runner/CMakeLists.txt) is a static PIE: no interpreter, no libraries."""
    return "INTERP" not in readelf("-l", str(binary)) and "(NEEDED)" not in readelf("-d", str(binary))


def test_stack_protector(binary):
    # A static executable has no dynamic symbols: its own symbol table names the function the canaries call.
    symbols = readelf("-s" if is_static(binary) else "--dyn-syms", str(binary))
    assert "__stack_chk_fail" in symbols


def test_fortify(binary):
    if is_static(binary):
        # musl has no _FORTIFY_SOURCE: the static musl tool trades libc's checked copies for ~0.9 ms less start-up
        # per run (runner/README.md). It must be that tool and nothing else.
        assert binary.name == "lensbox-runner" and (BUILD / "runner-musl").is_dir(), f"{binary} is static"
        return
    symbols = readelf("--dyn-syms", str(binary))
    assert any(name in symbols for name in ("__snprintf_chk", "__memcpy_chk", "__read_chk", "__vsnprintf_chk",
                                            "__fprintf_chk", "__printf_chk", "__strcpy_chk"))


def test_musl_tool_loads_nothing():
    """When the build made the musl tool, the file tests and users run is that static PIE (no dynamic loader, no
    library to load at start-up), not a leftover glibc build."""
    if not (BUILD / "runner-musl").is_dir():
        pytest.skip("this build links lensbox-runner against glibc (no musl-gcc or scripts/build-musl-deps)")
    tool = BUILD / "runner" / "lensbox-runner"
    assert is_static(tool)
    assert "DYN" in readelf("-h", str(tool))
    with open(tool, "rb") as f:
        assert f.read() == (BUILD / "runner-musl" / "runner" / "lensbox-runner").read_bytes()
