"""Host uids reserved ahead (supervisor/core/reserved.c, store/src/uids.c): a new sandbox that finds no spare is
started under a uid lensboxd reserved in the store's `reserved_uids` table, and its row is committed during the
start, holding that uid, with the next uid reserved in the same commit. Proven here: the pool holds two uids, a new
sandbox gets one of them and the pool is whole again afterwards; a crash between such a start and its commit (made
here as its aftermath: a sandbox left running by a SIGKILLed lensboxd whose row is then replaced by a reservation of
its uid) leaves nothing once lensboxd starts again — no process, mount, loop device, cgroup or storage of that uid,
and the uid released; a clean stop leaves no reservation behind; and reservations yield to sandboxes when the uid
range is full."""
import os
import sqlite3
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


def reserved(d):
    """The uids the store holds for new sandboxes (read-only, beside the running daemon: WAL allows it)."""
    db = sqlite3.connect(f"file:{os.path.join(d.state, 'state.db')}?mode=ro", uri=True)
    try:
        return sorted(r[0] for r in db.execute("SELECT host_uid FROM reserved_uids"))
    finally:
        db.close()


def test_a_new_sandbox_takes_a_reserved_uid_and_the_pool_refills():
    d = Daemon(settings={"spare_sandboxes": "0"})
    try:
        before = reserved(d)
        assert len(before) == 2, before
        name = d.name("a")
        r = d.ok_run(name, "import os; print(os.getuid())")
        assert r["stdout"] == "1000\n", r
        st, row = d.request("GET", f"/v1/sandboxes/{name}")
        assert st == 200 and row["state"] == "running", (st, row)
        assert row["host_uid"] in before, (row["host_uid"], before)
        after = reserved(d)
        assert len(after) == 2 and row["host_uid"] not in after, (after, row["host_uid"])
        # the sandbox is an ordinary one from then on: stopped, started again, its files kept
        d.ok_run(name, "open('kept.txt', 'w').write('kept')")
        st, _ = d.request("POST", f"/v1/sandboxes/{name}/stop")
        assert st in (200, 204), st
        assert d.ok_run(name, "print(open('kept.txt').read())")["stdout"] == "kept\n"
    finally:
        d.cleanup()


def test_a_start_whose_row_was_never_committed_leaves_nothing_after_a_restart():
    d = Daemon(settings={"spare_sandboxes": "0"})
    try:
        name = d.name("lost")
        d.ok_run(name, "open('x', 'w').write('x')")
        key = d.runner_key(name)
        uid = int(key[1:])
        d.kill9()
        assert d.leaks(settle=0, made_ahead=False), "a SIGKILLed daemon leaves its running sandbox"
        # what lensboxd dying between the start and its commit leaves: the sandbox's kernel objects and storage
        # under a uid that reserved_uids holds and no row does
        db = sqlite3.connect(os.path.join(d.state, "state.db"))
        try:
            with db:
                db.execute("DELETE FROM sandboxes WHERE name = ?", (name,))
                db.execute("INSERT INTO reserved_uids (host_uid, reserved_at_ms) VALUES (?, 0)", (uid,))
        finally:
            db.close()
        assert os.path.exists(os.path.join(d.state, "sandboxes", key))
        d.start()
        assert "released the reserved uids of an earlier instance" in d.read_log()
        assert d.leaks(settle=1.0) == []
        assert not os.path.exists(os.path.join(d.state, "sandboxes", key))
        assert d.request("GET", f"/v1/sandboxes/{name}")[0] == 404
        # the released uid may be reserved again later, never held twice
        assert len(reserved(d)) == 2
        d.stop()
        assert reserved(d) == []
        assert d.leaks() == []
    finally:
        d.cleanup()


def test_reservations_yield_to_sandboxes_when_the_range_is_full():
    # two uids in all, both reserved at start: sandboxes made without a start (PUT) still get them, then 429
    d = Daemon(settings={"spare_sandboxes": "0", "uid_range_count": "2"})
    try:
        assert len(reserved(d)) == 2
        for x in "ab":
            st, body = d.request("PUT", f"/v1/sandboxes/{d.name(x)}", {})
            assert st in (200, 201), (x, st, body)
        st, body = d.request("PUT", f"/v1/sandboxes/{d.name('c')}", {})
        assert st == 429 and body["error"]["code"] == "capacity", (st, body)
        assert reserved(d) == []
        # a run in each: started under the uids they hold
        for x in "ab":
            assert d.ok_run(d.name(x), "print(1)")["stdout"] == "1\n"
        # one deleted: its uid serves a new sandbox started by its first run
        assert d.request("DELETE", f"/v1/sandboxes/{d.name('a')}")[0] in (200, 204)
        assert d.ok_run(d.name("c"), "print(2)")["stdout"] == "2\n"
    finally:
        d.cleanup()
