"""docs/lens.md's sketch of Lens's sandbox module runs as written: its Python block is executed with stand-ins for
Lens's own helpers (settings, uploads, activity) against a fake lensboxd, and each Lens tool does what the page
says."""

import os
import re
import sys
import types

import pytest

SRC = os.environ.get("LENSBOX_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path[:0] = [os.path.join(SRC, "clients", "python"), os.path.join(SRC, "tests")]

from lensbox_testlib.fake_lensboxd import FakeLensboxd  # noqa: E402


def sketch():
    with open(os.path.join(SRC, "docs", "lens.md"), encoding="utf-8") as f:
        text = f.read()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 1, "docs/lens.md has one Python sketch"
    return blocks[0]


@pytest.fixture
def lens(tmp_path):
    with FakeLensboxd(str(tmp_path / "lensboxd.sock")) as fake:
        recorded = []
        held = []
        attachments = {7: {"filename": "sales.csv", "data": b"a,b\n1,2\n"}}
        ns = {
            "settings": lambda cfg: {"image": "python:3.12-slim", "network": "off", "cpu": 1, "memory": "512Mi",
                                     "idle_minutes": 15, "keep_hours": 24, "seconds": 60},
            "uploads": types.SimpleNamespace(
                of_chat=lambda db, chat, ids: [attachments[i] for i in ids],
                read_bytes=lambda db, up: up["data"],
                hold=lambda db, user, filename, data: held.append((filename, data)) or {"id": len(held)},
            ),
            "activity": types.SimpleNamespace(record=lambda db, kind, **kw: recorded.append((kind, kw))),
        }
        exec(compile(sketch(), "docs/lens.md", "exec"), ns)
        cfg = {"sandbox.socket": fake.socket_path}
        yield types.SimpleNamespace(ns=ns, cfg=cfg, fake=fake, recorded=recorded, held=held)
        assert fake.violations == []


def test_run_python_with_an_attachment(lens):
    lens.fake.run_handler = lambda name, body: {"exit_code": 0, "stdout": "3\n"}
    out = lens.ns["run"](None, lens.cfg, 42, "user:1", "python", "print(1+2)", [7])
    assert out["exit_code"] == 0 and out["stdout"] == "3\n" and out["fresh_sandbox"] is None
    assert lens.fake.sandboxes["lens-chat-42"].files == {"sales.csv": b"a,b\n1,2\n"}
    assert lens.recorded[0][0] == "sandbox.run" and lens.recorded[0][1]["language"] == "python"
    assert [r.path for r in lens.fake.requests][-1] == "/v1/sandboxes/lens-chat-42/runs"


def test_sandbox_files_before_and_after_the_first_run(lens):
    assert lens.ns["listing"](None, lens.cfg, 43, "user:1") == {"files": [], "more": 0}
    lens.ns["run"](None, lens.cfg, 43, "user:1", "bash", "echo", [7])
    out = lens.ns["listing"](None, lens.cfg, 43, "user:1")
    assert out == {"files": [{"path": "sales.csv", "type": "file", "size": 8}], "more": 0}


def test_import_sandbox_file_and_its_limit(lens):
    lens.fake.add("lens-chat-44").files["plot.png"] = b"\x89PNG"
    assert lens.ns["hold"](None, lens.cfg, 44, {"id": 1}, "plot.png") == {"id": 1}
    assert lens.held == [("plot.png", b"\x89PNG")]
    lens.fake.sandboxes["lens-chat-44"].files["huge.bin"] = b"\0" * (25 * 1024 * 1024 + 1)
    with pytest.raises(lens.ns["SandboxError"]) as e:
        lens.ns["hold"](None, lens.cfg, 44, {"id": 1}, "huge.bin")
    assert "at most 26214400 bytes can be copied out" in str(e.value)


def test_deleting_a_conversation(lens):
    lens.fake.add("lens-chat-45")
    lens.ns["forget"](None, lens.cfg, 45)
    assert "lens-chat-45" not in lens.fake.sandboxes
    lens.ns["forget"](None, lens.cfg, 45)  # already gone: no error
