"""Restart reconciliation under fire: lensboxd is killed with SIGKILL in the middle of runs in three sandboxes, 20
times. After every restart no mount, loop device, cgroup or process of its sandboxes is left, every sandbox is
stopped, and no file that was acknowledged (an upload answered 201, a run answered 200) is lost or changed."""
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import Daemon  # noqa: E402

ROUNDS = 20


def test_sigkill_mid_run_twenty_times_leaks_nothing_and_loses_no_file():
    d = Daemon()
    try:
        names = [d.name(f"k{i}") for i in range(3)]
        expected = {n: {} for n in names}  # path -> bytes acknowledged by the daemon
        for rnd in range(ROUNDS):
            for n in names:
                data = f"round {rnd} of {n}\n".encode() * (rnd + 1)
                status, _ = d.request("PUT", f"/v1/sandboxes/{n}/files/up/{rnd}.txt", data)
                assert status == 201
                expected[n][f"up/{rnd}.txt"] = data
            r = d.ok_run(names[rnd % 3], f"open('ran-{rnd}.txt', 'w').write('run {rnd}')")
            assert r["exit_code"] == 0
            expected[names[rnd % 3]][f"ran-{rnd}.txt"] = f"run {rnd}".encode()

            # runs in flight in every sandbox, each with a child process of its own, then SIGKILL
            src = "import subprocess, time\nsubprocess.Popen(['sleep', '300'])\nopen('partial.txt', 'w').write('x')\ntime.sleep(30)"
            dropped = []

            def run_until_killed(n):
                try:
                    status, body = d.run(n, src, timeout=60)
                except OSError as e:  # the connection drops with the daemon: expected
                    dropped.append(e)
                    return
                # or the API process, seeing the core end first, says so before it ends too
                if status == 503 and body["error"]["code"] == "core_unavailable":
                    dropped.append(status)
            threads = [threading.Thread(target=run_until_killed, args=(n,)) for n in names]
            for t in threads:
                t.start()
            deadline = time.monotonic() + 20
            while d.request("GET", "/v1/health")[1]["runs_in_flight"] < 3 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(random.uniform(0.0, 0.4))
            d.kill9()
            for t in threads:
                t.join()
            assert len(dropped) == 3, "every client should have seen its connection drop (or 503 core_unavailable)"
            assert d.leaks(settle=0, made_ahead=False), f"round {rnd}: nothing was running when the daemon was killed"

            d.start()
            leaks = d.leaks()
            assert leaks == [], f"round {rnd}: {leaks}"
            listing = d.request("GET", "/v1/sandboxes")[1]["sandboxes"]
            assert sorted(s["name"] for s in listing) == sorted(names)
            assert all(s["state"] == "stopped" for s in listing), listing
            if rnd % 5 == 4 or rnd == ROUNDS - 1:
                for n in names:
                    files = d.request("GET", f"/v1/sandboxes/{n}/files?recursive=true")[1]
                    have = {f["path"] for f in files["files"] if f["type"] == "file"}
                    assert set(expected[n]) <= have, (rnd, n, set(expected[n]) - have)
                    for path, data in expected[n].items():
                        status, _, got = d.raw("GET", f"/v1/sandboxes/{n}/files/{path}")
                        assert (status, got) == (200, data), (rnd, n, path)
        log = d.read_log()
        assert log.count("reconciled with the kernel") == ROUNDS + 1
    finally:
        d.cleanup()
    assert d.leaks() == []
