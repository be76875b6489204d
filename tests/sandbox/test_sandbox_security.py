"""The security contract: hostile programs on the docker and bwrap backends.

Each program must end within its limit + 2 s with the right status, leave the host unchanged
(``host_guard``: canary processes under the sandbox uids survive, no process escapes, the host
disk is not filled), and the next call on the same (one-worker) pool must succeed and find a
clean worker. Never run these on the ``process`` backend.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

import pytest
from sandbox_helpers import HOSTILE, run

from sandbox import ExecStatus, make_sandbox
from sandbox.checks import passed, test_harness

pytestmark = pytest.mark.usefixtures("host_guard")
LIMIT = (
    HOSTILE.timeout_s + 8.0
)  # every hostile call must be over by then (an unkilled one never ends; 2 s of slack is too tight under load)
ROOT = Path(__file__).resolve().parents[2]


def hostile(sb, **kw):
    t0 = time.monotonic()
    res = run(sb.exec(**kw))
    took = time.monotonic() - t0
    assert took <= LIMIT + (kw.get("timeout_s") or 0), f"took {took:.1f} s: {res}"
    assert res.status != ExecStatus.INFRA_ERROR, res
    return res


def assert_clean_and_usable(sb):
    """The next call on the same worker succeeds and sees no trace of the previous one."""
    fresh = make_sandbox(backend=sb.backend_name, limits=HOSTILE, pool_size=1)
    probe = (
        "import os, json\n"
        "procs = [p for p in os.listdir('/proc') if p.isdigit()]\n"
        "print(json.dumps({'procs': len(procs), 'work': os.listdir('/work'), 'tmp': os.listdir('/tmp'),"
        " 'shm': os.listdir('/dev/shm'), 'ipc': open('/proc/sysvipc/shm').read().count(chr(10))}))"
    )
    res = run(fresh.exec(code=probe))
    assert res.status == ExecStatus.OK, res
    state = json.loads(res.stdout)
    assert state == {"procs": 2, "work": [], "tmp": [], "shm": [], "ipc": 1}, state  # executor + probe
    run(fresh.close())


# ---------------------------------------------------------------- resources


FORK_BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"


def test_fork_bomb(hostile_sb):
    res = hostile(hostile_sb, code=FORK_BOMB)
    assert res.status == ExecStatus.TIMEOUT
    assert_clean_and_usable(hostile_sb)


def test_shell_fork_bomb(hostile_sb):
    res = hostile(hostile_sb, argv=["sh", "-c", "f(){ f|f& };f; sleep 60"])
    # the shell itself may die of "Cannot fork" when the process table is full: both are contained
    assert res.status in (ExecStatus.TIMEOUT, ExecStatus.NONZERO_EXIT), res
    assert_clean_and_usable(hostile_sb)


def test_memory_bomb(hostile_sb):
    res = hostile(hostile_sb, code="x = []\nwhile True:\n    x.append(bytearray(8 << 20))")
    assert res.status == ExecStatus.MEMORY_EXCEEDED, res
    assert_clean_and_usable(hostile_sb)


def test_memory_bomb_over_many_processes(hostile_sb):
    code = (
        "import os, time\n"
        "for _ in range(12):\n"
        "    if os.fork() == 0:\n"
        "        x = bytearray(200 << 20)\n"  # under RLIMIT_AS each, not together
        "        x[::4096] = b'1' * len(x[::4096])\n"
        "        time.sleep(60)\n"
        "time.sleep(60)\n"
    )
    res = hostile(hostile_sb, code=code)
    assert res.status in (ExecStatus.TIMEOUT, ExecStatus.MEMORY_EXCEEDED, ExecStatus.KILLED), res
    assert_clean_and_usable(hostile_sb)


def test_cpu_infinite_loop(hostile_sb):
    res = hostile(hostile_sb, code="while True: pass")
    assert res.status == ExecStatus.TIMEOUT and res.exit_code == -9
    assert_clean_and_usable(hostile_sb)


def test_sleep_forever(hostile_sb):
    res = hostile(hostile_sb, code="import time; time.sleep(10**6)")
    assert res.status == ExecStatus.TIMEOUT
    assert_clean_and_usable(hostile_sb)


def test_one_gigabyte_stdout_flood(hostile_sb):
    code = "import sys\nchunk = b'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.buffer.write(chunk)"
    res = hostile(hostile_sb, code=code)
    assert res.status == ExecStatus.OUTPUT_TRUNCATED and res.truncated
    assert len(res.stdout) <= HOSTILE.max_output_bytes + 100
    assert_clean_and_usable(hostile_sb)


def test_disk_fill(hostile_sb):
    code = "f = open('big', 'wb')\nwhile True:\n    f.write(b'x' * (1 << 20))"
    res = hostile(hostile_sb, code=code)
    assert res.status == ExecStatus.NONZERO_EXIT and ("No space" in res.stderr or "too large" in res.stderr), res
    res = hostile(hostile_sb, code="open('/tmp/big', 'wb').write(b'x' * (200 << 20))")
    assert res.status in (ExecStatus.NONZERO_EXIT, ExecStatus.MEMORY_EXCEEDED), res
    assert_clean_and_usable(hostile_sb)


def test_inode_fill(hostile_sb):
    code = "i = 0\nwhile True:\n    open(f'f{i}', 'w').close(); i += 1"
    res = hostile(hostile_sb, code=code)
    assert res.status in (ExecStatus.NONZERO_EXIT, ExecStatus.TIMEOUT), res
    kept = int(run(hostile_sb.exec(code="import os; print(len(os.listdir('.')))")).stdout)
    assert kept <= HOSTILE.max_files  # what fits the inode budget is kept, the rest never existed
    assert_clean_and_usable(hostile_sb)


def test_hostile_directory_trees(hostile_sb):
    code = (
        "import os\n"
        "os.makedirs('a', exist_ok=True); os.chdir('a')\n"
        "for i in range(1500):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "os.chdir('/work'); os.makedirs('locked/inner'); open('locked/inner/f', 'w').close()\n"
        "os.chmod('locked/inner', 0); os.chmod('locked', 0)\n"
    )
    res = hostile(hostile_sb, code=code)
    assert res.status in (ExecStatus.OK, ExecStatus.NONZERO_EXIT), res
    assert_clean_and_usable(hostile_sb)


# ---------------------------------------------------------------- network (loopback targets only)


def test_no_network(hostile_sb):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted, done = [], threading.Event()

    def accept():
        while not done.is_set():
            try:
                accepted.append(listener.accept())
            except OSError:
                pass

    t = threading.Thread(target=accept)
    t.start()
    code = f"""
import json, socket
out = {{}}
for host in ("127.0.0.1", "localhost"):
    try:
        socket.create_connection((host, {port}), timeout=1).close(); out[host] = "connected"
    except OSError as e:
        out[host] = type(e).__name__
try:
    socket.getaddrinfo("example.com", 80); out["dns"] = "resolved"
except OSError as e:
    out["dns"] = type(e).__name__
out["ifaces"] = [name for _, name in socket.if_nameindex()]
out["routes"] = open("/proc/net/route").read().count(chr(10)) - 1
print(json.dumps(out))
"""
    res = hostile(hostile_sb, code=code)
    done.set()
    t.join()
    listener.close()
    out = json.loads(res.stdout)
    assert out["127.0.0.1"] != "connected" and out["localhost"] != "connected", out
    assert out["dns"] != "resolved" and out["ifaces"] == ["lo"] and out["routes"] == 0, out
    assert not accepted, "the sandbox reached a listener on the host's loopback"
    assert_clean_and_usable(hostile_sb)


# ---------------------------------------------------------------- filesystem


def test_host_files_are_invisible(hostile_sb):
    home = os.path.expanduser("~")
    host_home = set(os.listdir(home))
    code = f"""
import json, os
out = {{}}
for path in ({str(ROOT / "pyproject.toml")!r}, {__file__!r}, "/etc/shadow"):
    try:
        out[path] = open(path).read()[:50]
    except OSError as e:
        out[path] = type(e).__name__
try:
    out["home"] = os.listdir({home!r})
except OSError as e:
    out["home"] = []
print(json.dumps(out))
"""
    out = json.loads(hostile(hostile_sb, code=code).stdout)
    assert out[str(ROOT / "pyproject.toml")] in ("FileNotFoundError", "PermissionError")
    assert out[__file__] in ("FileNotFoundError", "PermissionError")
    assert out["/etc/shadow"] in ("FileNotFoundError", "PermissionError")
    assert not (set(out["home"]) & host_home - {".", ".."}) or not host_home, out["home"]
    assert_clean_and_usable(hostile_sb)


def test_writes_outside_the_work_directory_fail(hostile_sb):
    marker = f"agent_rl_escape_{os.getpid()}"
    targets = [
        f"/{marker}",
        f"/etc/{marker}",
        f"/usr/{marker}",
        f"/root/{marker}",
        f"/var/{marker}",
        f"/home/{marker}",
        f"/dev/{marker}",
        f"/proc/{marker}",
    ]
    code = f"""
import json
out = {{}}
for path in {targets!r}:
    try:
        open(path, "w").write("x"); out[path] = "written"
    except OSError as e:
        out[path] = type(e).__name__
open("/tmp/{marker}", "w").write("private tmp")
print(json.dumps(out))
"""
    out = json.loads(hostile(hostile_sb, code=code).stdout)
    assert "written" not in out.values(), out
    for path in targets + [f"/tmp/{marker}"]:
        assert not os.path.exists(path), f"{path} appeared on the host"
    assert_clean_and_usable(hostile_sb)


def test_symlink_and_hardlink_escapes(hostile_sb):
    code = """
import os
os.symlink("/etc/passwd", "link"); os.symlink("/", "rootdir"); os.symlink("../../../etc", "up")
try:
    os.link("/etc/passwd", "hard"); print("hardlinked")
except OSError as e:
    print("hardlink", type(e).__name__)
"""
    res = hostile(hostile_sb, code=code)
    assert res.status == ExecStatus.OK and "hardlinked" not in res.stdout, res
    for path in ("link", "rootdir/etc/passwd", "up/passwd"):
        with pytest.raises((ValueError, FileNotFoundError, NotADirectoryError)):
            run(hostile_sb.read_file(path))
    with pytest.raises((ValueError, NotADirectoryError)):
        run(hostile_sb.write_file("up/evil", "x"))
    with pytest.raises(ValueError):
        run(hostile_sb.write_file("../evil", "x"))
    assert_clean_and_usable(hostile_sb)


def test_proc_shows_no_host_process(hostile_sb):
    code = """
import os
pids = [p for p in os.listdir('/proc') if p.isdigit()]
cmds = []
for p in pids:
    try:
        cmds.append(open(f'/proc/{p}/cmdline', 'rb').read().decode(errors='replace'))
    except OSError:
        cmds.append('?')
print(len(pids), any(('py' + 'test') in c or ('docker' + 'd') in c for c in cmds))
"""
    assert hostile(hostile_sb, code=code).stdout.split() == ["2", "False"]
    assert_clean_and_usable(hostile_sb)


# ---------------------------------------------------------------- processes


def test_kill_minus_one(hostile_sb):
    res = hostile(hostile_sb, argv=["sh", "-c", "kill -9 -1; echo survived"])
    assert res.status == ExecStatus.OK  # kill(-1) spares the caller; it kills nothing outside
    child_kills_all = "import os, signal, time\nif os.fork() == 0:\n    os.kill(-1, signal.SIGKILL)\ntime.sleep(5)"
    res = hostile(hostile_sb, code=child_kills_all)
    assert res.status == ExecStatus.KILLED and res.exit_code == -9, res
    assert_clean_and_usable(hostile_sb)


def test_background_and_setsid_processes_do_not_survive(hostile_sb):
    code = """
import os, subprocess
subprocess.Popen(["setsid", "sh", "-c", "while true; do date >> /tmp/bg.log; sleep 0.05; done"])
subprocess.Popen("nohup sh -c 'sleep 1000' >/dev/null 2>&1 &", shell=True)
if os.fork() == 0:          # a classic double-fork daemon
    os.setsid()
    if os.fork() == 0:
        import time
        while True:
            open("/work/daemon.log", "a").write("alive\\n"); time.sleep(0.05)
    os._exit(0)
print("spawned")
"""
    res = hostile(hostile_sb, code=code)
    assert res.status == ExecStatus.OK, res  # OK, not TIMEOUT: the call did not wait for the daemon it spawned
    time.sleep(0.3)
    assert_clean_and_usable(hostile_sb)


def test_zombies_do_not_accumulate(hostile_sb):
    code = "import os\nfor _ in range(40):\n    if os.fork() == 0:\n        os._exit(0)\nprint('orphaned')"
    for _ in range(3):
        assert hostile(hostile_sb, code=code).status == ExecStatus.OK
    assert_clean_and_usable(hostile_sb)


# ---------------------------------------------------------------- privileges and secrets


def test_no_privilege_escalation(hostile_sb):
    code = r"""
import json, os, stat, subprocess
out = {}
status = open("/proc/self/status").read()
for key in ("NoNewPrivs", "CapEff", "CapPrm", "CapBnd"):
    out[key] = status.split(key + ":")[1].split()[0]
out["uid"] = os.getuid()
for name, fn in [("setuid", lambda: os.setuid(0)),
                 ("mknod", lambda: os.mknod("/work/null", stat.S_IFCHR | 0o666, os.makedev(1, 3)))]:
    try:
        fn(); out[name] = "succeeded"
    except OSError as e:
        out[name] = type(e).__name__
for name, argv in [("mount", ["mount", "-t", "tmpfs", "none", "/work"]),
                   ("su", ["su", "-c", "id -u", "root"]),
                   ("unshare_read_shadow", ["unshare", "-r", "cat", "/etc/shadow"])]:
    try:
        p = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL, timeout=5)
        out[name] = p.returncode
    except (OSError, subprocess.TimeoutExpired) as e:
        out[name] = type(e).__name__
print(json.dumps(out))
"""
    out = json.loads(hostile(hostile_sb, code=code).stdout)
    assert out["NoNewPrivs"] == "1" and out["uid"] != 0, out
    assert int(out["CapEff"], 16) == int(out["CapPrm"], 16) == int(out["CapBnd"], 16) == 0, out
    assert out["setuid"] != "succeeded" and out["mknod"] != "succeeded", out
    assert out["mount"] != 0 and out["su"] != 0 and out["unshare_read_shadow"] != 0, out
    assert_clean_and_usable(hostile_sb)


def test_secret_variables_are_invisible(hostile_sb, monkeypatch):
    secrets = {"HF_TOKEN": "hf_s3cr3t", "WANDB_API_KEY": "wandb_s3cr3t", "MY_SERVICE_KEY": "svc_s3cr3t"}
    for k, v in secrets.items():
        monkeypatch.setenv(k, v)
    code = """
import os, glob
seen = [" ".join(f"{k}={v}" for k, v in os.environ.items())]
for path in glob.glob("/proc/*/environ"):
    try:
        seen.append(open(path, "rb").read().decode(errors="replace"))
    except OSError:
        pass
print("\\n".join(seen))
"""
    res = hostile(hostile_sb, code=code, env={"ALLOWED": "1"})
    assert "ALLOWED=1" in res.stdout
    for k, v in secrets.items():
        assert k not in res.stdout and v not in res.stdout
    assert_clean_and_usable(hostile_sb)


def test_no_docker_socket_inside(hostile_sb):
    code = """
import os, stat
found = []
for top in ("/", "/run", "/var/run", "/tmp", "/work", "/dev"):
    for root, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(root, d) not in ("/proc", "/sys", "/usr")]
        for f in files:
            p = os.path.join(root, f)
            try:
                if stat.S_ISSOCK(os.lstat(p).st_mode) or "docker.sock" in f:
                    found.append(p)
            except OSError:
                pass
print(found, os.environ.get("DOCKER_HOST"))
"""
    assert hostile(hostile_sb, code=code).stdout.strip() == "[] None"
    assert_clean_and_usable(hostile_sb)


@pytest.mark.parametrize("exit_call", ["import sys; sys.exit(0)", "import os; os._exit(0)", "raise SystemExit"])
def test_early_exit_is_not_a_pass(hostile_sb, exit_call):
    tests = "assert add(2, 2) == 5, 'wrong'"
    h = test_harness(f"def add(a, b):\n    return a + b\n{exit_call}", tests)
    res = hostile(hostile_sb, code=h.code, stdin=h.stdin)
    assert not passed(res, h), res
    good = test_harness("def add(a, b):\n    return a + b", "assert add(2, 2) == 4")
    assert passed(run(hostile_sb.exec(code=good.code, stdin=good.stdin)), good)


# ---------------------------------------------------------------- freshness


def test_nothing_leaks_between_calls(hostile_sb):
    """Memory, files, /tmp, shared memory and IPC of one sandbox never reach an unrelated one."""
    code = """
import builtins, ctypes, os
builtins.LEAK = 1
open('/tmp/leak', 'w').write('x'); open('/dev/shm/leak', 'w').write('x'); open('/work/leak', 'w').write('x')
libc = ctypes.CDLL(None)
print(libc.shmget(0x1234, 4096, 0o1666))   # IPC_CREAT | 0666: a SysV segment outlives its process
"""
    res = hostile(hostile_sb, code=code)
    assert res.status == ExecStatus.OK and int(res.stdout) >= 0, res
    other = make_sandbox(backend=hostile_sb.backend_name, limits=HOSTILE, pool_size=1)
    res = run(
        other.exec(
            code="import builtins, ctypes, os\n"
            "print(hasattr(builtins, 'LEAK'), os.path.exists('/tmp/leak'), "
            "os.path.exists('/dev/shm/leak'), os.path.exists('/work/leak'), "
            "ctypes.CDLL(None).shmget(0x1234, 4096, 0o666))"
        )
    )
    assert res.stdout.split() == ["False", "False", "False", "False", "-1"], res
    assert run(hostile_sb.read_file("leak")) == "x"  # ... while the sandbox that wrote it keeps its file
    run(other.close())
    assert_clean_and_usable(hostile_sb)
