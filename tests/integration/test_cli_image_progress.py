"""`lensbox image pull|import` progress: plain lines on stderr when it is not a terminal, bars redrawn in place under
a pseudo-terminal (the pty module), and Ctrl-C typed at that terminal mid-pull: exit 130, lensboxd cancels and its
store keeps no temporary tree, partial blob, image or name. The registry is test_image_pull's slow front on
127.0.0.1: nothing leaves the loopback interface."""

import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.join(HERE, ".."), HERE]

from lensbox_testlib import oci  # noqa: E402
from lensbox_testlib.lensboxd import BUILD_DIR, Daemon  # noqa: E402
from test_api_image_progress import slow_layout, store_leftovers, wait_cancelled  # noqa: E402
from test_api_images import store_dir, tiny_layout  # noqa: E402
from test_image_pull import Front  # noqa: E402

LENSBOX = os.path.join(BUILD_DIR, "clients", "cli", "lensbox")


@pytest.fixture(scope="module", autouse=True)
def _built():
    if os.geteuid() != 0:
        pytest.fail("run as root")
    assert os.access(LENSBOX, os.X_OK), f"{LENSBOX} is not built"


def on_pty(d, *args):
    """Starts lensbox with a pseudo-terminal as stdin, stdout and stderr (its controlling terminal)."""
    pid, fd = pty.fork()
    if pid == 0:
        os.environ["LENSBOX_SOCKET"] = d.socket
        os.environ["TERM"] = "xterm"
        os.execv(LENSBOX, [LENSBOX, *args])
    return pid, fd


def read_pty(fd, until=None, seconds=60):
    out = b""
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        if until and until(out):
            return out
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                return out
            if not chunk:
                return out
            out += chunk
    return out


def test_plain_lines_without_a_terminal_and_bars_on_one(tmp_path):
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 1 << 20)
    hex12 = digests["layers"][0][7:19]
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path), settings={"insecure_registries": front.host}) as d:
            env = dict(os.environ, LENSBOX_SOCKET=d.socket)
            p = subprocess.run([LENSBOX, "image", "pull", f"{front.host}/lbtest/plain:1"], capture_output=True,
                               text=True, env=env, timeout=600)
            assert p.returncode == 0, p.stderr
            assert p.stdout.startswith(f"pulled {front.host}/lbtest/plain:1: {digests['config'][7:19]} ("), p.stdout
            lines = p.stderr.splitlines()
            assert "\x1b" not in p.stderr and "\r" not in p.stderr, p.stderr
            assert lines[0] == "resolving image", lines
            # the layer's download: one line when it starts, one when it ends (never a line per chunk)
            down = [ln for ln in lines if ln.startswith(f"downloading {hex12} ")]
            assert len(down) == 2 and re.fullmatch(rf"downloading {hex12} \S+ \S+ / 1\.0 MiB", down[1]), lines
            assert down[1].split()[2:4] == ["1.0", "MiB"], down
            assert [ln for ln in lines if ln.startswith(f"unpacking {hex12} ")][-1].endswith("1.0 MiB / 1.0 MiB")

            # import too, and --json keeps its one JSON object on stdout and nothing on stderr
            tiny = tmp_path / "tiny"
            tiny_layout(tiny, "cli-progress")
            p = subprocess.run([LENSBOX, "image", "import", str(tiny), "--name", "lbtest/t:1"], capture_output=True,
                               text=True, env=env, timeout=600)
            assert p.returncode == 0 and p.stdout.startswith("imported docker.io/lbtest/t:1: "), p
            assert any(ln.startswith("unpacking ") for ln in p.stderr.splitlines()), p.stderr
            p = subprocess.run([LENSBOX, "--json", "image", "import", str(tiny)], capture_output=True, text=True,
                               env=env, timeout=600)
            assert p.returncode == 0 and p.stderr == "" and '"image"' in p.stdout and "phase" not in p.stdout, p

    finally:
        front.shutdown()

    # another image (nothing of it in the store yet) pulled under a pseudo-terminal: bars redrawn in place
    lay2 = tmp_path / "lay2"
    digests = slow_layout(lay2, 1 << 20)
    hex12 = digests["layers"][0][7:19]
    front = Front(str(lay2), "127.0.0.1", auth=False, slow=True)
    try:
        with Daemon(images_dir=store_dir(tmp_path / "second"), settings={"insecure_registries": front.host}) as d:
            pid, fd = on_pty(d, "image", "pull", f"{front.host}/lbtest/tty:1")
            out = read_pty(fd).decode("utf-8", "replace")
            _, status = os.waitpid(pid, 0)
            os.close(fd)
            assert os.waitstatus_to_exitcode(status) == 0, out
            assert "\x1b[" in out and re.search(r"\x1b\[\d+A", out), "rows are redrawn with cursor-up"
            assert re.search(rf"{hex12}\s+downloading\s+\[#+\.*\]", out), out
            assert re.search(rf"{hex12}\s+unpacking\s+\[#{{30}}\] 1\.0 MiB / 1\.0 MiB", out), out
            assert f"pulled {front.host}/lbtest/tty:1" in out
    finally:
        front.shutdown()


def test_ctrl_c_on_the_terminal_cancels_the_pull(tmp_path):
    lay = tmp_path / "lay"
    digests = slow_layout(lay, 4 << 20)  # ~5 s at the front's pace
    hex12 = digests["layers"][0][7:19]
    front = Front(str(lay), "127.0.0.1", auth=False, slow=True)
    images_dir = store_dir(tmp_path)
    try:
        with Daemon(images_dir=images_dir, settings={"insecure_registries": front.host}) as d:
            ref = f"{front.host}/lbtest/ctrlc:1"
            pid, fd = on_pty(d, "image", "pull", ref)
            out = read_pty(fd, until=lambda o: re.search(rf"{hex12}\s+downloading\s+\[#*\.+\] [1-9]".encode(), o))
            assert b"downloading" in out, out
            t0 = time.monotonic()
            os.write(fd, b"\x03")  # Ctrl-C: the terminal sends SIGINT to the foreground process group
            out += read_pty(fd, seconds=20)
            _, status = os.waitpid(pid, 0)
            os.close(fd)
            assert os.waitstatus_to_exitcode(status) == 130, out
            assert b"cancelled" in out, out
            line, took = wait_cancelled(d, ref, t0)
            assert line and "cancelled" in line, d.read_log()[-2000:]
            assert took < 3.0, f"lensboxd went on {took:.2f} s after Ctrl-C"
            assert store_leftovers(images_dir) == [], store_leftovers(images_dir)
            assert d.request("GET", "/v1/images")[1]["images"] == []
            assert not os.path.exists(oci.blob_path(os.path.join(images_dir, "layout"), digests["layers"][0]))
    finally:
        front.shutdown()
