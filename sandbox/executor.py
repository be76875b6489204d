"""The runner: starts one program, enforces its limits, captures its output. Stdlib only.

Two uses:

* imported by the ``process`` backend, which calls :func:`run_child` in a thread;
* shipped *as source* into docker containers and bubblewrap sandboxes (``python3 -I -S -c
  <this file> <config json>``), where :func:`serve` runs as PID 1: a resident executor that reads
  length-prefixed JSON requests on stdin and answers on stdout. Each ``exec`` request forks a
  fresh program in a clean work directory (restored from the caller's copy), and afterwards kills
  every other process in the namespace (``kill(-1)`` from PID 1), reaps them and wipes the
  writable directories, so nothing of one call is visible to the next.

As PID 1 of its PID namespace the executor cannot be killed from inside (the kernel drops
signals to a namespace init that has no handler), and it makes itself non-dumpable so the
program, although it runs under the same unprivileged uid, cannot ptrace it or read its memory.
"""

import base64
import errno
import json
import os
import resource
import select
import selectors
import signal
import stat
import struct
import subprocess
import sys
import time

PROTOCOL_VERSION = 1
_LEN = struct.Struct(">I")


# ---------------------------------------------------------------- wire format


def _default(obj):
    if isinstance(obj, (bytes, bytearray)):
        return {"$b": base64.b64encode(obj).decode("ascii")}
    raise TypeError(f"cannot encode {type(obj).__name__}")


def _hook(d):
    if len(d) == 1 and "$b" in d:
        return base64.b64decode(d["$b"])
    return d


def _body(msg):
    return json.dumps(msg, default=_default, separators=(",", ":")).encode()


def encode(msg):
    """One frame: 4-byte big-endian length + JSON (bytes become ``{"$b": base64}``)."""
    body = _body(msg)
    return _LEN.pack(len(body)) + body


def decode(body):
    return json.loads(body, object_hook=_hook)


# ---------------------------------------------------------------- one program


class _Capture:
    """Keeps the first and last ``limit // 2`` bytes of a stream and counts the rest."""

    def __init__(self, limit):
        self.half = max(1, limit // 2)
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, data):
        self.total += len(data)
        room = self.half - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            if len(self.tail) > 4 * self.half:
                del self.tail[: -self.half]

    def report(self):
        return {"head": bytes(self.head), "tail": bytes(self.tail[-self.half :]), "total": self.total}


def _oom_count(path):
    if not path:
        return 0
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def _spawn_error_report(exc, t0):
    code = 127 if exc.errno in (errno.ENOENT, errno.ENOTDIR) else 126
    msg = f"cannot run program: {exc.strerror}: {exc.filename or ''}\n".encode("utf-8", "backslashreplace")
    empty = {"head": b"", "tail": b"", "total": 0}
    return {
        "exit_code": code,
        "timed_out": False,
        "oom_killed": False,
        "flooded": False,
        "stdout": empty,
        "stderr": {"head": msg, "tail": b"", "total": len(msg)},
        "wall_s": time.monotonic() - t0,
        "cpu_s": 0.0,
        "notes": [],
    }


def _kill(pid, kill_all):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if kill_all:  # only as PID 1 of a private PID namespace: every process but ourselves
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass


def _limit_self(rlimits):
    """Apply ``rlimits`` to this process (once per pool: they never change). False if we cannot."""
    try:
        for name, value in rlimits.items():
            lim = getattr(resource, "RLIMIT_" + name.upper())
            if resource.getrlimit(lim) != (value, value):
                resource.setrlimit(lim, (value, value))
    except (ValueError, OSError):
        return False
    return True


def run_child(req, kill_all=False, on_spawn=None):
    """Run ``req["argv"]`` to completion under the request's limits; returns the facts.

    ``req``: argv, env, cwd, stdin (bytes or None), timeout_s, rlimits ({"as": bytes, ...}),
    max_output, flood_bytes, optional uid/gid (drop to them; needs root), optional oom_file.
    ``kill_all`` kills every process but the caller when the program ends (PID-1 mode only).
    ``on_spawn(pid)`` is called once the program runs (the ``process`` backend's helper reports it).
    """
    t0 = time.monotonic()
    if kill_all and os.getpid() != 1:
        raise RuntimeError("kill_all is only allowed as PID 1 of a private PID namespace")
    rlimits = dict(req.get("rlimits") or {})
    as_limit = rlimits.get("as")
    oom_file = req.get("oom_file")
    oom_before = _oom_count(oom_file)
    cpu = rlimits.pop("cpu", None)
    # A resident executor limits ITSELF (limits are fixed per pool, the child inherits them) and
    # sets the per-call CPU limit after the spawn: a Python preexec_fn costs ~2 ms per call.
    preexec = None
    if kill_all and _limit_self(rlimits):
        rlimits = {}
    if rlimits:

        def preexec():  # in the child, after setsid and the uid drop, before exec
            for name, value in rlimits.items():
                resource.setrlimit(getattr(resource, "RLIMIT_" + name.upper()), (value, value))

    drop = {}
    if req.get("uid") is not None:
        drop = {"user": req["uid"], "group": req["gid"], "extra_groups": []}
    stdin_data = req.get("stdin")
    try:
        proc = subprocess.Popen(
            req["argv"],
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=req["cwd"],
            env=req["env"],
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            umask=0o022,
            **drop,
        )
    except (FileNotFoundError, PermissionError, NotADirectoryError) as exc:
        return _spawn_error_report(exc, t0)
    except OSError as exc:
        if exc.errno == errno.ENOEXEC:
            return _spawn_error_report(exc, t0)
        raise
    if on_spawn is not None:
        on_spawn(proc.pid)
    try:
        if cpu is not None:  # refused under guard_executor(): the wall-clock timeout bounds it then
            resource.prlimit(proc.pid, resource.RLIMIT_CPU, (cpu, cpu))
    except OSError:
        pass
    try:
        with open(f"/proc/{proc.pid}/oom_score_adj", "w") as f:
            f.write("1000")  # the OOM killer takes the program, never the executor
    except OSError:
        pass

    out, err = _Capture(req["max_output"]), _Capture(req["max_output"])
    streams = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}
    sel = selectors.DefaultSelector()
    for fd in streams:
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
    pending, stdin_fd = b"", None
    if stdin_data is not None:
        pending = memoryview(bytes(stdin_data))
        os.set_blocking(proc.stdin.fileno(), False)
        if pending:
            stdin_fd = proc.stdin.fileno()
            sel.register(stdin_fd, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    try:
        pidfd = os.pidfd_open(proc.pid)
        sel.register(pidfd, selectors.EVENT_READ)
    except (AttributeError, OSError):
        pidfd = None

    deadline = t0 + req["timeout_s"]
    timed_out = flooded = False
    status = rusage = None
    while status is None:
        now = time.monotonic()
        if now >= deadline:
            timed_out = True
            _kill(proc.pid, kill_all)
            break
        wait = deadline - now if pidfd is not None else min(0.005, deadline - now)
        for key, _ in sel.select(wait):
            fd = key.fd
            if fd in streams:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    continue
                if not data:
                    sel.unregister(fd)
                    continue
                streams[fd].add(data)
                if streams[fd].total > req["flood_bytes"] and not flooded:
                    flooded = True
                    _kill(proc.pid, kill_all)
            elif fd == stdin_fd:
                try:
                    n = os.write(fd, pending[: 1 << 16])
                    pending = pending[n:]
                except BlockingIOError:
                    continue
                except OSError:  # the program closed its stdin
                    pending = b""
                if not pending:
                    sel.unregister(fd)
                    proc.stdin.close()
                    stdin_fd = None
        pid, st, ru = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            status, rusage = st, ru
    if status is None:  # killed on timeout: collect it
        _, status, rusage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    # The program is gone; anything it left behind (background jobs holding the pipes) goes too.
    _kill(proc.pid, kill_all)
    drain_until = time.monotonic() + 1.0
    while sel.get_map() and time.monotonic() < drain_until:
        for key, _ in sel.select(0.05):
            if key.fd in streams:
                try:
                    data = os.read(key.fd, 1 << 16)
                except BlockingIOError:
                    continue
                if data and streams[key.fd].total <= req["flood_bytes"]:
                    streams[key.fd].add(data)
                elif not data:
                    sel.unregister(key.fd)
            else:
                sel.unregister(key.fd)
    sel.close()
    for f in (proc.stdout, proc.stderr, proc.stdin):
        if f is not None and not f.closed:
            f.close()
    if pidfd is not None:
        os.close(pidfd)
    code = proc.returncode
    oom = code == -signal.SIGKILL and not timed_out and not flooded and _oom_count(oom_file) > oom_before
    # RLIMIT_AS refusals leave no kernel record, and "MemoryError" on stderr is text anyone can print.
    # So a failed program hit its allocation limit only when it says so AND the kernel's peak RSS of
    # it (and its reaped children) reached half that limit (a bomb reaches 85-98%); a single request
    # beyond the limit, refused at once, is its plain failure (nonzero_exit).
    said = b"MemoryError" in (err.head + err.tail)[-2048:]
    limit_hit = bool(code and as_limit and said and rusage.ru_maxrss * 1024 >= as_limit // 2)
    return {
        "exit_code": code,
        "timed_out": timed_out,
        "oom_killed": oom,
        "flooded": flooded,
        "memory_limit_hit": limit_hit,
        "stdout": out.report(),
        "stderr": err.report(),
        "wall_s": wall,
        "cpu_s": rusage.ru_utime + rusage.ru_stime,
        "maxrss_kb": rusage.ru_maxrss,
        "notes": [],
    }


# ---------------------------------------------------------------- the work directory


def restore_tree(root, entries, uid=None, gid=None):
    """Recreate the caller's copy of the work directory under ``root`` (parents first).

    Never writes through a symlink: an entry below a symlink entry is refused."""
    links = {e["path"] for e in entries if e["kind"] == "l"}
    for e in sorted(entries, key=lambda e: e["path"]):
        parts = e["path"].split("/")
        if any("/".join(parts[:i]) in links for i in range(1, len(parts))) or ".." in parts or not e["path"]:
            raise ValueError(f"refusing to restore {e['path']!r} (below a symlink or outside the directory)")
        full = os.path.join(root, e["path"])
        os.makedirs(os.path.dirname(full), exist_ok=True)
        if e["kind"] == "d":
            os.makedirs(full, exist_ok=True)
            os.chmod(full, (e["mode"] & 0o777) | 0o700)
        elif e["kind"] == "l":
            os.symlink(bytes(e["data"]), os.fsencode(full))  # a target is bytes, UTF-8 or not
        else:
            fd = os.open(full, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(e["data"])
            os.chmod(full, e["mode"] & 0o777)
        if uid is not None:
            os.lchown(full, uid, gid)


def scan_tree(root, max_entries=100_000):
    """``relpath -> (kind, mode, size, mtime_ns)`` without following symlinks."""
    found, stack = {}, [""]
    while stack and len(found) < max_entries:
        rel = stack.pop()
        try:
            it = list(os.scandir(os.path.join(root, rel) if rel else root))
        except OSError:
            continue
        for d in it:
            path = f"{rel}/{d.name}" if rel else d.name
            st = d.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                found[path] = ("d", st.st_mode & 0o777, 0, 0)
                stack.append(path)
            elif stat.S_ISLNK(st.st_mode):
                found[path] = ("l", 0, st.st_size, st.st_mtime_ns)
            elif stat.S_ISREG(st.st_mode):
                found[path] = ("f", st.st_mode & 0o777, st.st_size, st.st_mtime_ns)
    return found


def collect_changes(root, before, max_bytes, max_entries=4096):
    """What changed under ``root`` since ``before`` (a :func:`scan_tree`); ``None`` if too big."""
    after = scan_tree(root, max_entries + 1)
    if len(after) > max_entries:
        return None, None
    deleted = [p for p in before if p not in after or after[p][0] != before[p][0]]
    changed, size = [], 0
    for path, meta in sorted(after.items()):
        if before.get(path) == meta:
            continue
        kind, mode = meta[0], meta[1]
        full = os.path.join(root, path)
        if kind == "l":
            data = os.readlink(os.fsencode(full))  # bytes: a target need not be UTF-8
        elif kind == "f":
            size += meta[2]
            if size > max_bytes:
                return None, None
            fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
            with os.fdopen(fd, "rb") as f:
                data = f.read(max_bytes + 1)
        else:
            data = b""
        changed.append({"path": path, "kind": kind, "mode": mode, "data": data})
    return changed, deleted


def wipe_tree(root):
    """Remove everything under ``root`` (not ``root`` itself), whatever the modes or the depth."""
    stack, dirs = [root], []
    while stack:
        d = stack.pop()
        if d != root:
            os.chmod(d, 0o700)
            dirs.append(d)
        for e in list(os.scandir(d)):
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                os.unlink(e.path)
    for d in reversed(dirs):  # children were pushed after their parents
        os.rmdir(d)


# ---------------------------------------------------------------- resident mode (PID 1)


def _reap_all(timeout_s=2.0):
    """Reap every child; True when no process but ourselves is left in the namespace."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            while True:
                pid, _ = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
        except ChildProcessError:
            pass
        others = [p for p in os.listdir("/proc") if p.isdigit() and p != "1"]
        if not others:
            return True
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        time.sleep(0.002)
    return False


def _sysv_ipc_used():
    for name in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{name}") as f:
                if len(f.readlines()) > 1:
                    return True
        except OSError:
            pass
    return False


def _read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(0, n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _write_frame(body):
    for data in (memoryview(_LEN.pack(len(body))), memoryview(body)):  # no copy of a large result
        while data:
            n = os.write(1, data)
            data = data[n:]


def _send(msg):
    _write_frame(_body(msg))


def _send_result(result):
    """Send a call's result; if encoding the changed files fails (we carry the program's RLIMIT_AS,
    which the program may even have lowered), send it without them, as for changes over ``persist_bytes``."""
    try:
        body = _body(result)
    except BaseException:  # noqa: BLE001 - MemoryError, or limits the program changed
        note = "work directory changes too large to send back (executor memory); dropped"
        body = _body(dict(result, changed=[], deleted=[], notes=[*result.get("notes", []), note]))
    _write_frame(body)


def _no_dump():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:  # noqa: BLE001 - best effort; the container / namespace still isolates
        pass


# Syscalls by which a program could change ANOTHER process of its uid (the executor: the same uid)
# that the kernel's PID-1 protection does not cover. ``prlimit`` is the dangerous one: a hard
# RLIMIT_CPU of 0 on PID 1 makes the kernel SIGKILL the executor (a forced signal), and a lowered
# RLIMIT_NOFILE breaks it. Each entry: (syscall, [(argument index, value that is allowed), ...]);
# a call with any listed argument different from its allowed value fails with EPERM. Only the
# caller itself (pid 0) is allowed; ``add_key`` / ``keyctl`` / ``request_key`` fail always (keys
# outlive a call; docker's default profile refuses them too).
_GUARDED = [
    ("prlimit64", [(0, 0)], 2),  # (pid, resource, new_limit, old): reading another's is fine
    ("setpriority", [(0, 0), (1, 0)]),  # (which=PRIO_PROCESS, who=0) only
    ("ioprio_set", [(0, 1), (1, 0)]),  # (which=IOPRIO_WHO_PROCESS, who=0) only
    ("sched_setaffinity", [(0, 0)]),
    ("sched_setscheduler", [(0, 0)]),
    ("sched_setparam", [(0, 0)]),
    ("sched_setattr", [(0, 0)]),
    ("add_key", None),
    ("keyctl", None),
    ("request_key", None),
]


def guard_executor():
    """Install a seccomp filter (libseccomp, through ctypes; inherited by every program) that makes
    the syscalls of :data:`_GUARDED` fail with EPERM when aimed at another process. Returns whether
    it is in place (False without libseccomp: then only :func:`fingerprint` catches such changes)."""
    try:
        import ctypes
        import ctypes.util

        lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or "libseccomp.so.2")
    except (ImportError, OSError):
        return False

    class Cmp(ctypes.Structure):  # struct scmp_arg_cmp
        _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("a", ctypes.c_uint64), ("b", ctypes.c_uint64)]

    ne, allow, eperm = 1, 0x7FFF0000, 0x00050000 | errno.EPERM  # SCMP_CMP_NE, SCMP_ACT_ALLOW, SCMP_ACT_ERRNO
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(Cmp),
    ]
    lib.seccomp_load.argtypes = lib.seccomp_release.argtypes = [ctypes.c_void_p]
    ctx = lib.seccomp_init(allow)
    if not ctx:
        return False
    try:
        for entry in _GUARDED:
            nr = lib.seccomp_syscall_resolve_name(entry[0].encode())
            if nr < 0:
                continue  # not on this architecture
            if entry[1] is None:
                rules = [[]]
            else:  # one rule per argument that must keep its allowed value (rules of a syscall OR)
                extra = [Cmp(entry[2], ne, 0, 0)] if len(entry) > 2 else []  # prlimit: only when setting
                rules = [[Cmp(i, ne, v, 0), *extra] for i, v in entry[1]]
            for cmps in rules:
                arr = (Cmp * max(1, len(cmps)))(*cmps)
                if lib.seccomp_rule_add_array(ctx, eperm, nr, len(cmps), arr) != 0:
                    return False
        return lib.seccomp_load(ctx) == 0
    finally:
        lib.seccomp_release(ctx)


def _default_signals():
    """No signal handler at all: the kernel then drops every signal sent to a namespace's init from
    inside the namespace. (CPython installs one for SIGINT: ``kill(1, SIGINT)`` from the program
    used to raise KeyboardInterrupt here and end the worker.) Ignored signals stay ignored."""
    for sig in signal.valid_signals():
        try:
            if signal.getsignal(sig) not in (signal.SIG_DFL, signal.SIG_IGN, None):
                signal.signal(sig, signal.SIG_DFL)
        except (OSError, ValueError):
            pass


# ---------------------------------------------------------------- what a call may not change
#
# The program runs under the executor's own uid, so it may change some of the executor's settings
# (prlimit, setpriority, sched_setaffinity, ioprio_set need only the same uid) and the settings of
# its namespaces that are writable from inside (some /proc/sys files, keys). The next program would
# inherit or read them: a channel between calls, or a worker the next call finds broken (a lowered
# RLIMIT_NOFILE). The executor takes a fingerprint before the first program and compares it after
# every call; a difference taints the worker (it is replaced), and an executor failure in a call
# that changed it is that program's failure, not the sandbox's.

#: /proc/sys files that change by themselves: never compared (ns_last_pid: the last pid handed out).
_VOLATILE_SYSCTLS = ("/proc/sys/kernel/ns_last_pid",)
#: Keyrings the kernel makes for a uid on first use; empty unless a program links keys into them.
_STANDARD_KEYRINGS = ("_uid.", "_uid_ses.", ".user_reg")
_IOPRIO_GET = {"x86_64": 252, "aarch64": 31}


def writable_sysctls():
    """The /proc/sys files this process may write: settings of its own namespaces."""
    found = []
    for root, _dirs, files in os.walk("/proc/sys"):
        for name in files:
            path = os.path.join(root, name)
            if path not in _VOLATILE_SYSCTLS and os.access(path, os.W_OK):
                found.append(path)
    return sorted(found)


def _keys():
    """Keys a program of this uid could find in the next call, besides the standard keyrings."""
    try:
        with open("/proc/keys") as f:
            lines = f.read().splitlines()
    except FileNotFoundError:
        return ()
    found = []
    for line in lines:  # id flags usage timeout perm uid gid type description
        fields = line.split(None, 8)
        if len(fields) == 9 and not (fields[7] == "keyring" and fields[8].startswith(_STANDARD_KEYRINGS)):
            found.append(f"{fields[7]} {fields[8]}")
    return sorted(found)


def _ioprio():
    nr = _IOPRIO_GET.get(os.uname().machine)
    if nr is None:
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).syscall(nr, 1, 0)  # IOPRIO_WHO_PROCESS, ourselves


def fingerprint(sysctls):
    """What a program could change that outlives it in this worker (see above)."""

    def read(path):
        with open(path, "rb") as f:
            return f.read()

    rlimits = sorted(n for n in dir(resource) if n.startswith("RLIMIT_"))
    return {
        "rlimits": [(n, resource.getrlimit(getattr(resource, n))) for n in rlimits],
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
        "sched": os.sched_getscheduler(0),
        "affinity": sorted(os.sched_getaffinity(0)),
        "ioprio": _ioprio(),
        "uts": [read("/proc/sys/kernel/hostname"), read("/proc/sys/kernel/domainname")],
        "mounts": read("/proc/self/mountinfo"),
        "sysctls": [(p, read(p)) for p in sysctls],
        "keys": _keys(),
    }


def changed_since(baseline, sysctls):
    """Names of what differs from ``baseline``; ``["unreadable"]`` when we cannot even look
    (the program lowered our RLIMIT_NOFILE, for instance)."""
    try:
        now = fingerprint(sysctls)
    except BaseException:  # noqa: BLE001 - whatever stops us from looking is a change
        return ["unreadable"]
    return [k for k in baseline if baseline[k] != now[k]]


def _program_broke_executor(exc, what, t0):
    """The report of a call whose program changed the executor's settings so that the executor
    failed (``exc``): the program's failure (status ``killed``), never the sandbox's."""
    note = (
        f"the program changed the sandbox's own settings ({', '.join(what)}) and the executor "
        f"failed ({type(exc).__name__}); the program was killed and the worker is replaced"
    )
    empty = {"head": b"", "tail": b"", "total": 0}
    return {
        "op": "result",
        "exit_code": -signal.SIGKILL,
        "timed_out": False,
        "oom_killed": False,
        "flooded": False,
        "stdout": empty,
        "stderr": empty,
        "wall_s": time.monotonic() - t0,
        "cpu_s": 0.0,
        "maxrss_kb": 0,
        "notes": [note],
        "changed": [],
        "deleted": [],
    }


def execute(req, workdir, kill_all, oom_file=None, on_spawn=None):
    """One call: restore the files, run the program, collect the changes. Returns the result."""
    try:
        restore_tree(workdir, req.get("files") or [])
    except (OSError, ValueError) as exc:
        return {"op": "result", "error": f"cannot restore the work directory: {exc!r}"}
    before = scan_tree(workdir)
    req = dict(req, cwd=workdir, oom_file=oom_file)
    report = run_child(req, kill_all=kill_all, on_spawn=on_spawn)
    report["op"] = "result"
    try:  # the program shaped the directory: whatever fails here is its failure, not ours
        changed, deleted = collect_changes(
            workdir, before, req.get("persist_bytes", 16 << 20), req.get("persist_files", 4096)
        )
    except Exception as exc:  # noqa: BLE001
        changed = None
        report["notes"].append(f"cannot read the work directory back: {type(exc).__name__} {exc!r}")
    if changed is None:
        report["notes"].append("work directory changes too large to keep (size or file count); dropped")
        changed, deleted = [], []
    report["changed"], report["deleted"] = changed, deleted
    return report


def _cleanup(cfg):
    """After a call: no process, no file, no IPC object of it may remain. Returns tainted."""
    try:
        clean = _reap_all()
        for d in cfg.get("wipe", []):
            try:
                wipe_tree(d)
            except FileNotFoundError:
                pass
            except Exception:  # noqa: BLE001 - whatever the program left: recycle this worker
                clean = False
        return not clean or _sysv_ipc_used()
    except BaseException:  # noqa: BLE001 - e.g. limits the program lowered: recycle this worker
        return True


def _serve_exec(req, cfg, state):
    """One ``exec`` request as PID 1: every exception ends as the call's result (see ``fingerprint``)."""
    t0 = time.monotonic()
    if state.get("baseline") is None:  # the pool's fixed limits first: the fingerprint includes them
        _limit_self({k: v for k, v in (req.get("rlimits") or {}).items() if k != "cpu"})
        state["sysctls"] = writable_sysctls()
        state["baseline"] = fingerprint(state["sysctls"])
    try:
        result = execute(req, cfg["workdir"], kill_all=True, oom_file=cfg.get("oom_file"))
    except BaseException as exc:  # noqa: BLE001 - never let a call end the executor
        what = changed_since(state["baseline"], state["sysctls"])
        if what:
            try:
                os.kill(-1, signal.SIGKILL)  # the program and all it started; _cleanup reaps them
            except OSError:
                pass
            result = _program_broke_executor(exc, what, t0)
        else:
            result = {"op": "result", "error": f"executor failed: {type(exc).__name__}: {exc!r}"}
    _send_result(result)
    tainted = _cleanup(cfg) or "error" in result
    changed = changed_since(state["baseline"], state["sysctls"])
    _send({"op": "ready", "tainted": tainted or bool(changed), "changed": changed})


def serve(cfg):
    """The resident loop: ``hello``, then ``ping`` / ``exec`` requests until EOF or the TTL."""
    if os.getpid() != 1:
        raise SystemExit("executor: serve() must run as PID 1 of its own PID namespace")
    _default_signals()
    _no_dump()
    guarded = guard_executor()
    os.umask(0o022)
    cfg.setdefault("oom_file", next((p for p in cfg.get("oom_files", []) if os.path.exists(p)), None))
    born = time.monotonic()
    ttl, idle_ttl = cfg.get("ttl_s", 3600), cfg.get("idle_ttl_s", 900)
    state = {}
    _send(
        {
            "op": "hello",
            "version": PROTOCOL_VERSION,
            "uid": os.getuid(),
            "python": sys.version.split()[0],
            "guarded": guarded,
        }
    )
    while True:
        now = time.monotonic()
        remaining = min(ttl - (now - born), idle_ttl)
        if remaining <= 0:
            return
        ready, _, _ = select.select([0], [], [], remaining)
        if not ready:
            return  # TTL or idle TTL: the container / sandbox ends even if nobody tells it to
        head = _read_exact(4)
        if head is None:
            return  # the controller went away
        body = _read_exact(_LEN.unpack(head)[0])
        if body is None:
            return
        req = decode(body)
        op = req.get("op")
        if op == "ping":
            changed = changed_since(state["baseline"], state["sysctls"]) if state.get("baseline") else []
            _send({"op": "pong", "tainted": _sysv_ipc_used() or bool(changed)})
        elif op == "exec":
            _serve_exec(req, cfg, state)
        elif op == "exit":
            return
        else:
            _send({"op": "error", "error": f"unknown op {op!r}"})


def once(workdir):
    """One request on stdin, its result on stdout (the ``process`` backend's helper under root).

    It first sends ``{"op": "started", "pid": ...}`` once the program runs: the program runs under
    the helper's uid and may kill it, and the caller then kills the program's process group."""
    head = _read_exact(4)
    req = decode(_read_exact(_LEN.unpack(head)[0]))
    try:
        result = execute(req, workdir, kill_all=False, on_spawn=lambda pid: _send({"op": "started", "pid": pid}))
    except BaseException as exc:  # noqa: BLE001 - reported; the caller decides
        result = {"op": "result", "error": f"executor failed: {type(exc).__name__}: {exc!r}"}
    _send_result(result)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--once"]:
        once(sys.argv[2])
    else:
        serve(json.loads(sys.argv[1]) if len(sys.argv) > 1 else {})
