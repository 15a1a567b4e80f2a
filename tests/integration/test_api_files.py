"""File transfer through lensboxd, and the attacks a sandbox can plant for it: symlinks to /etc/shadow and to another
sandbox's storage (as the last component and in the middle of a path), a FIFO, a socket, a 10 GB sparse file, a
directory of 100,000 entries. Each gets its exact refusal, the host and the other sandbox are untouched."""
import hashlib
import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def put(d, n, path, data):
    return d.request("PUT", f"/v1/sandboxes/{n}/files/{path}", data)


def get(d, n, path):
    status, _, data = d.raw("GET", f"/v1/sandboxes/{n}/files/{path}")
    return status, data


def code_of(data):
    return json.loads(data)["error"]["code"]


def test_put_creates_parents_owned_by_the_sandbox_user(d):
    n = d.name("own")
    status, b = put(d, n, "a/b/c.txt", b"data")
    assert status == 201 and b == {"path": "a/b/c.txt", "size": 4}
    r = d.ok_run(n, "import os\nfor p in ['a', 'a/b', 'a/b/c.txt']:\n    s = os.stat(p); print(p, s.st_uid, s.st_gid)")
    assert r["stdout"] == "a 1000 1000\na/b 1000 1000\na/b/c.txt 1000 1000\n"
    assert get(d, n, "a/b/c.txt") == (200, b"data")


def test_put_replaces_atomically_and_leaves_no_temporary(d):
    n = d.name("atomic")
    put(d, n, "f.bin", b"1" * 1000)
    put(d, n, "f.bin", b"2" * 10)
    assert get(d, n, "f.bin") == (200, b"2" * 10)
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files")
    assert [f["path"] for f in b["files"]] == ["f.bin"]


def test_binary_and_empty_files_roundtrip(d):
    n = d.name("bin")
    blob = bytes(range(256)) * 4096
    assert put(d, n, "blob", blob)[0] == 201
    assert get(d, n, "blob") == (200, blob)
    assert put(d, n, "empty", b"")[0] == 201
    assert get(d, n, "empty") == (200, b"")
    # percent-encoded names
    assert put(d, n, "with%20space%23.txt", b"s")[0] == 201
    assert [f["path"] for f in d.request("GET", f"/v1/sandboxes/{n}/files")[1]["files"]] == \
        ["blob", "empty", "with space#.txt"]


def test_25_mib_exactly_goes_in_and_out(d, tmp_path):
    n = d.name("max")
    data = os.urandom(1 << 20) * 25
    status, b = put(d, n, "max.bin", data)
    assert status == 201 and b["size"] == 25 << 20
    status, back = get(d, n, "max.bin")
    assert status == 200 and back == data


def test_put_over_a_directory_or_through_a_file(d):
    n = d.name("conflict")
    put(d, n, "dir/x", b"x")
    status, b = put(d, n, "dir", b"y")
    assert status == 409 and b["error"]["code"] == "is_a_directory"
    status, b = put(d, n, "dir/x/y", b"y")
    assert status == 409 and b["error"]["code"] == "conflict"
    status, data = get(d, n, "dir")
    assert status == 422 and code_of(data) == "not_a_regular_file"
    status, data = get(d, n, "nothing.txt")
    assert status == 404 and code_of(data) == "file_not_found"


def test_symlink_to_etc_shadow_is_never_followed(d):
    n = d.name("shadow")
    before = sha("/etc/shadow")
    d.ok_run(n, "ln -s /etc/shadow leak; ln -s /etc etc; mkdir -p sub; ln -s ../../../../etc/shadow sub/up", "bash")
    status, data = get(d, n, "leak")
    assert status == 404 and code_of(data) == "file_not_found" and b"root:" not in data
    status, data = get(d, n, "etc/shadow")
    assert status == 404 and code_of(data) == "file_not_found"
    status, data = get(d, n, "sub/up")
    assert status == 404 and b"root:" not in data
    # writing through a planted directory link is refused, writing onto a planted file link replaces the link
    status, b = put(d, n, "etc/passwd", b"pwned\n")
    assert status == 404 and b["error"]["code"] == "file_not_found"
    status, b = put(d, n, "leak", b"mine\n")
    assert status == 201
    assert sha("/etc/shadow") == before
    assert get(d, n, "leak") == (200, b"mine\n")
    r = d.ok_run(n, "import os\nprint(os.path.islink('leak'), os.path.islink('etc'))")
    assert r["stdout"] == "False True\n"
    listing = {f["path"]: f["type"] for f in d.request("GET", f"/v1/sandboxes/{n}/files?recursive=true")[1]["files"]}
    assert listing["etc"] == "symlink" and "etc/passwd" not in listing


def test_symlink_to_another_sandboxs_storage(d):
    victim, attacker = d.name("victim"), d.name("attacker")
    put(d, victim, "secret.txt", b"victim's secret")
    d.ok_run(victim, "pass")  # running: its storage is mounted on the host (an upload alone no longer starts it)
    # where the victim's storage is mounted on the host, and its files as the host sees them
    mnt = os.path.join(d.run_dir, "mnt", d.runner_key(victim))
    assert os.path.exists(os.path.join(mnt, "secret.txt"))
    d.ok_run(attacker, f"ln -s {mnt} other; ln -s {mnt}/secret.txt s; ln -s /proc/1/root/{mnt} p", "bash")
    for path in ("other/secret.txt", "s", "p/secret.txt"):
        status, data = get(d, attacker, path)
        assert status == 404 and b"victim's secret" not in data, path
    status, b = put(d, attacker, "other/secret.txt", b"overwritten")
    assert status == 404
    assert get(d, victim, "secret.txt") == (200, b"victim's secret")
    # and the attacker's own programs cannot reach it either
    r = d.ok_run(attacker, "cat other/secret.txt s 2>&1; true", "bash")
    assert "victim's secret" not in r["stdout"]


def test_fifo_never_blocks_and_socket_is_refused(d):
    n = d.name("fifo")
    d.ok_run(n, "import os, socket\nos.mkfifo('pipe')\ns = socket.socket(socket.AF_UNIX)\ns.bind('sock')")
    t0 = time.monotonic()
    status, data = get(d, n, "pipe")
    assert status == 422 and code_of(data) == "not_a_regular_file" and b"FIFO" in data
    assert time.monotonic() - t0 < 5
    status, data = get(d, n, "sock")
    assert status == 422 and code_of(data) == "not_a_regular_file" and b"socket" in data
    listing = {f["path"]: f["type"] for f in d.request("GET", f"/v1/sandboxes/{n}/files")[1]["files"]}
    assert listing == {"pipe": "other", "sock": "other"}
    # a FIFO cannot be written to either: the upload replaces it
    assert put(d, n, "pipe", b"now a file")[0] == 201
    assert get(d, n, "pipe") == (200, b"now a file")


def test_ten_gigabyte_sparse_file_is_413_with_its_size(d):
    n = d.name("sparse")
    d.ok_run(n, "open('huge', 'wb').truncate(10 << 30)")
    status, data = get(d, n, "huge")
    assert status == 413 and code_of(data) == "file_too_large"
    assert b"10Gi" in data and b"10737418240" in data
    listing = d.request("GET", f"/v1/sandboxes/{n}/files")[1]["files"]
    assert listing[0]["size"] == 10 << 30


def test_hundred_thousand_entries_list_1000_and_count_the_rest(d):
    n = d.name("many")
    r = d.ok_run(n, "import os\nos.mkdir('many')\nfor i in range(100000): open(f'many/f{i:06d}', 'w').close()\n"
                    "print(len(os.listdir('many')))", sandbox={"disk": "4Gi"}, timeout_seconds=300)
    assert r["stdout"] == "100000\n", r
    t0 = time.monotonic()
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?path=many")
    assert status == 200
    assert len(b["files"]) == 1000 and b["more"] == 99000
    assert b["files"][0]["path"] == "many/f000000" and b["files"][-1]["path"] == "many/f000999"
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?recursive=true")
    assert len(b["files"]) == 1000 and b["more"] == 100001 - 1000  # "many" itself and its 100,000 files
    assert time.monotonic() - t0 < 30
    # health is not held up by any of it
    assert d.request("GET", "/v1/health")[0] == 200


def test_list_validates_its_query(d):
    n = d.name("q")
    put(d, n, "x/y", b"1")
    assert d.request("GET", f"/v1/sandboxes/{n}/files?path=..")[0] == 400
    assert d.request("GET", f"/v1/sandboxes/{n}/files?path=%2Fetc")[0] == 400
    assert d.request("GET", f"/v1/sandboxes/{n}/files?recursive=maybe")[0] == 422
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?path=x/y")
    assert status == 422 and b["error"]["code"] == "not_a_directory"
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?path=nope")
    assert status == 404
    status, b = d.request("GET", f"/v1/sandboxes/{n}/files?path=x")
    assert status == 200 and [f["path"] for f in b["files"]] == ["x/y"]


def test_disk_full_is_413_and_leaves_nothing_partial(d):
    n = d.name("full")
    d.request("PUT", f"/v1/sandboxes/{n}", {"disk": "16Mi"})
    d.ok_run(n, "open('fill', 'wb').write(b'x' * (15 << 20))", "python")
    status, b = put(d, n, "more.bin", os.urandom(8 << 20))
    assert status == 413 and b["error"]["code"] == "file_too_large"
    names = [f["path"] for f in d.request("GET", f"/v1/sandboxes/{n}/files")[1]["files"]]
    assert names == ["fill"]


def test_nothing_leaks(d):
    for sb in d.request("GET", "/v1/sandboxes")[1]["sandboxes"]:
        assert d.request("DELETE", "/v1/sandboxes/" + sb["name"])[0] == 200
    assert d.leaks() == []


# ---- a stopped sandbox's files: reached from the host without starting it ----

def state_of(d, n):
    return d.request("GET", f"/v1/sandboxes/{n}")[1]["state"]


def mounted(d, n):
    with open("/proc/self/mountinfo") as f:
        return any(d.runner_key(n) in line.split(" - ")[0] and d.run_dir in line for line in f)


def test_files_of_a_stopped_sandbox_do_not_start_it(d):
    n = d.name("offline")
    d.ok_run(n, "open('before.txt', 'w').write('from inside')")
    assert d.request("POST", f"/v1/sandboxes/{n}/stop")[0] in (200, 204)
    assert state_of(d, n) == "stopped"
    assert put(d, n, "up/new.txt", b"from outside")[0] == 201
    assert get(d, n, "before.txt") == (200, b"from inside")
    listing = {f["path"] for f in d.request("GET", f"/v1/sandboxes/{n}/files?recursive=true")[1]["files"]}
    assert {"before.txt", "up", "up/new.txt"} <= listing
    # none of it started the sandbox, or left its filesystem mounted anywhere on the host
    assert state_of(d, n) == "stopped" and not mounted(d, n)
    r = d.ok_run(n, "import os\nprint(open('up/new.txt').read(), os.stat('up').st_uid, os.stat('up/new.txt').st_uid)")
    assert r["stdout"] == "from outside 1000 1000\n"


def test_upload_makes_a_new_sandbox_without_starting_it(d):
    n = d.name("offnew")
    assert put(d, n, "data.bin", b"x" * 4096)[0] == 201
    assert state_of(d, n) == "stopped" and not mounted(d, n)
    # its storage root is the sandbox user's, as a start would have made it: it can write beside the upload
    r = d.ok_run(n, "import os\nopen('mine', 'w').write('ok')\nprint(os.stat('.').st_uid, os.path.getsize('data.bin'),"
                    " os.path.exists('lost+found'))")
    assert r["stdout"] == "1000 4096 False\n"


def test_uploads_to_a_stopped_sandbox_race_its_starts(d):
    """Uploads and runs of one sandbox at once, stopped between rounds: the image is never mounted twice (that would
    corrupt it), every acknowledged upload is read back intact, and nothing is left mounted or attached."""
    import threading
    n = d.name("offrace")
    d.ok_run(n, "pass")
    acked, errors = {}, []

    def uploads(k):
        for i in range(6):
            data = os.urandom(1000 + i)
            st, b = put(d, n, f"r{k}/{i}.bin", data)
            if st == 201:
                acked[f"r{k}/{i}.bin"] = hashlib.sha256(data).hexdigest()
            else:
                errors.append((st, b))

    for rnd in range(3):
        assert d.request("POST", f"/v1/sandboxes/{n}/stop")[0] in (200, 204)
        ts = [threading.Thread(target=uploads, args=(rnd * 10 + k,)) for k in range(3)]
        for t in ts:
            t.start()
        r = d.run(n, "import os\nprint(len(os.listdir('.')))")
        for t in ts:
            t.join()
        assert r[0] == 200, r
    assert not errors, errors
    for path, want in acked.items():
        st, data = get(d, n, path)
        assert st == 200 and hashlib.sha256(data).hexdigest() == want, path
    assert d.request("POST", f"/v1/sandboxes/{n}/stop")[0] in (200, 204)
    assert get(d, n, next(iter(acked)))[0] == 200
    key = d.runner_key(n)  # this sandbox's (the module's other sandboxes may still run)
    mine = [x for x in d.leaks() if key in x]
    assert not mine, mine
