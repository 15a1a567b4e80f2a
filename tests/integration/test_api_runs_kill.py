"""No process outlives its run, through lensboxd (issue 16, item 4): children a program detaches from it — a new
session (setsid), nohup, a double fork, disown, with stdout and stderr closed or sent to /dev/null so they hold none of
the run's pipes — are dead when the run's result arrives: after a normal exit (python and bash), after the time limit
after an OOM kill of the main program, and when the client hung up before the result (which stops the run). The next run finds only init and
itself.

"Dead" is read from /proc on the host the moment the response is in: no process of the sandbox's host uid but its
init (pid 1 in its namespace), zombies and processes already inside exit (PF_EXITING, past the point of running any
code of theirs) left aside. Each program first proves its children were running when it ended, so a test whose
children never started cannot pass."""
import glob
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from lensbox_testlib.lensboxd import BUILD_DIR, Daemon, wait_for  # noqa: E402

PF_EXITING = 0x4
PROBE = os.path.join(BUILD_DIR, "tests", "probe", "lensbox-probe")


@pytest.fixture(scope="module")
def d():
    with Daemon() as daemon:
        yield daemon


def survivors(host_uid):
    """Processes of host_uid other than the sandbox's init that are neither zombies nor exiting: [(pid, comm)]."""
    found = []
    for st in glob.glob("/proc/[0-9]*/status"):
        pid = st.split("/")[2]
        try:
            with open(st) as f:
                fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except (OSError, ValueError):
            continue  # gone while we looked
        if int(fields["Uid"].split()[0]) != host_uid:
            continue
        if fields["NSpid"].split()[-1] == "1":  # the sandbox's init
            continue
        state = stat.rsplit(")", 1)[1].split()
        if state[0] in ("Z", "X") or int(state[6]) & PF_EXITING:
            continue
        found.append((int(pid), fields["Name"]))
    return found


def host_uid(d, name):
    status, body = d.request("GET", f"/v1/sandboxes/{name}")
    assert status == 200, body
    return body["host_uid"]


def assert_none_left(d, name, result):
    left = survivors(host_uid(d, name))  # first thing after the response: before anything else can kill them
    assert left == [], f"processes of the run outlived it: {left}; result: {result}"


# Python: a new session with no stdio (subprocess, start_new_session), a double fork into a new session with every
# descriptor closed, nohup through the shell. Each writes its pid to /sandbox/up/ once running; the program waits for
# all three and checks each is alive as it ends.
PY_DETACH = r"""
import os, subprocess, sys, time
os.makedirs('/sandbox/up', exist_ok=True)
for f in os.listdir('/sandbox/up'):
    os.unlink('/sandbox/up/' + f)
MARK = "import os, time; open('/sandbox/up/%d' % os.getpid(), 'w').close(); time.sleep(1000)"
subprocess.Popen([sys.executable, '-c', MARK], start_new_session=True, stdin=subprocess.DEVNULL,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 1024)
        os.execv(sys.executable, [sys.executable, '-c', MARK])
    os._exit(0)
os.wait()
os.system("nohup %s -c \"%s\" >/dev/null 2>&1 </dev/null &" % (sys.executable, MARK))
deadline = time.monotonic() + 30
while len(os.listdir('/sandbox/up')) < 3 and time.monotonic() < deadline:
    time.sleep(0.01)
pids = [int(p) for p in os.listdir('/sandbox/up')]
alive = []
for p in pids:
    try:
        os.kill(p, 0)
        alive.append(p)
    except ProcessLookupError:
        pass
print(len(alive), 'alive')
"""


def test_python_detached_children_are_dead_when_the_result_arrives(d):
    n = d.name("py")
    r = d.ok_run(n, PY_DETACH)
    assert r["stdout"] == "3 alive\n", r
    assert r["exit_code"] == 0 and not r["timed_out"]
    assert_none_left(d, n, r)
    # and the next run finds only init and itself
    r2 = d.ok_run(n, "import os\nprint(os.getpid(), *sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
    me, *pids = [int(x) for x in r2["stdout"].split()]
    assert pids == sorted([1, me]), r2["stdout"]


# bash: setsid, nohup, a double fork through two subshells, and disown; none holds the run's pipes.
SH_DETACH = r"""
setsid sleep 401 >/dev/null 2>&1 </dev/null &
nohup sleep 402 >/dev/null 2>&1 </dev/null &
( ( sleep 403 >/dev/null 2>&1 </dev/null & ) & )
sleep 404 >/dev/null 2>&1 </dev/null & disown
n=0
for i in $(seq 300); do
  n=0
  for c in /proc/[0-9]*/cmdline; do
    case "$(tr '\0' ' ' < "$c" 2>/dev/null)" in "sleep 40"*) n=$((n+1));; esac
  done
  [ "$n" -ge 4 ] && break
  sleep 0.01
done
echo "$n alive"
"""


def test_bash_detached_children_are_dead_when_the_result_arrives(d):
    n = d.name("sh")
    r = d.ok_run(n, SH_DETACH, "bash")
    assert r["stdout"] == "4 alive\n", r
    assert r["exit_code"] == 0
    assert_none_left(d, n, r)


def test_a_detached_fork_chain_is_dead_when_the_result_arrives(d):
    # Its processes fork and exit at once, so any pid read from the cgroup is soon stale: the kill must go on until
    # the leaf is empty (on v1 through pidfds, then by freezing the leaf if forks outpace that; on v2 cgroup.kill is
    # one atomic step). The probe reports once the chain is 100 generations along.
    n = d.name("chain")
    with open(PROBE, "rb") as f:
        status, _, _ = d.raw("PUT", f"/v1/sandboxes/{n}/files/lensbox-probe", f.read())
    assert status == 201
    r = d.ok_run(n, "chmod +x lensbox-probe && ./lensbox-probe forkchain 60", "bash")
    assert json.loads(r["stdout"])["ok"] is True, r
    assert_none_left(d, n, r)


def test_detached_children_are_dead_after_the_time_limit(d):
    n = d.name("to")
    src = PY_DETACH + "sys.stdout.flush()\ntime.sleep(1000)\n"
    r = d.ok_run(n, src, timeout_seconds=2)
    assert r["timed_out"] is True and r["signal"] == 9, r
    assert r["stdout"] == "3 alive\n", r
    assert_none_left(d, n, r)


def test_detached_children_are_dead_after_an_oom_kill(d):
    n = d.name("oom")
    src = (PY_DETACH + "sys.stdout.flush()\n"
           "b = bytearray(400 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')\n")
    r = d.ok_run(n, src, sandbox={"memory": "128Mi"})
    assert r["oom_killed"] is True and r["exit_code"] is None and r["signal"] == 9, r
    assert r["stdout"] == "3 alive\n", r
    assert_none_left(d, n, r)
    assert d.ok_run(n, "print('again')")["stdout"] == "again\n"


def test_detached_children_are_dead_when_the_client_went_away(d):
    # The client hangs up while the run is in progress: lensboxd stops the run at once (there is no one to answer),
    # killing the program and what it left before the run enters the ledger, which says why.
    import socket
    n = d.name("gone")
    d.ok_run(n, "print('started')")  # the sandbox exists: its uid is known before the run
    uid = host_uid(d, n)
    src = PY_DETACH + "open('/sandbox/main-done', 'w').write(str(len(alive)))\ntime.sleep(50)\n"
    body = json.dumps({"language": "python", "source": src}).encode()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(d.socket)
    s.sendall(b"POST /v1/sandboxes/%s/runs HTTP/1.1\r\nHost: lensbox\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % (n.encode(), len(body)) + body)
    assert wait_for(lambda: d.raw("GET", f"/v1/sandboxes/{n}/files/main-done")[0] == 200, 60), "the run never began"
    s.close()
    assert wait_for(lambda: len(d.request("GET", f"/v1/runs?sandbox={n}")[1]["runs"]) == 2, 10), \
        "the run was not stopped within 10 s of the hang-up (the program sleeps 50 s)"
    left = survivors(uid)
    run = d.request("GET", f"/v1/runs?sandbox={n}&limit=1")[1]["runs"][0]
    assert left == [], f"processes of the run outlived it: {left}; run: {run}"
    assert d.raw("GET", f"/v1/sandboxes/{n}/files/main-done")[2] == b"3", "not all children ran when it ended"
    assert run["exit_code"] is None and run["signal"] == 9 and run["duration_ms"] < 20000, run
    assert run["message"] == "stopped: the client went away before the run ended", run
    assert "client_gone=1" in d.read_log()
    assert d.ok_run(n, "print('again')")["stdout"] == "again\n"


def init_pid(host_uid):
    """The host pid of the sandbox's live init: its process of host_uid that is pid 1 in its own namespace (a killed
    init stays a zombie until lensboxd reaps it, at the sandbox's stop)."""
    for st in glob.glob("/proc/[0-9]*/status"):
        try:
            with open(st) as f:
                fields = dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)
        except (OSError, ValueError):
            continue
        if (int(fields["Uid"].split()[0]) == host_uid and fields["NSpid"].split()[-1] == "1"
                and fields["State"][0] not in "ZX"):
            return int(st.split("/")[2])
    return None


def test_a_sandbox_whose_init_was_killed_starts_again_with_its_files(d):
    """An init killed from outside (the host's root, here) left the sandbox unable to run anything ("Opening the
    sandbox's root failed", 500, at every run). The next run notices, stops the sandbox and starts it again; its files
    are still there, and the log says why."""
    name = d.name("init-killed")
    d.ok_run(name, "open('/sandbox/keep.txt', 'w').write('kept')")
    uid = host_uid(d, name)
    pid = init_pid(uid)
    assert pid, "no init found for the sandbox"
    os.kill(pid, 9)
    assert wait_for(lambda: init_pid(uid) is None, 10)
    out = d.ok_run(name, "print(open('/sandbox/keep.txt').read())")
    assert out["stdout"] == "kept\n", out
    assert init_pid(uid) not in (None, pid)
    assert "the sandbox's init is gone" in d.read_log()
