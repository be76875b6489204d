"""The grading program that runs INSIDE the sandbox (sent as source; stdlib only; never imported).

Two processes, so that the candidate's code never runs where results are counted:

* the **grader** (``python -I -c RUNNER``) reads the payload from stdin (a secret nonce, the task's
  prompt, the instrumented test, the candidate's code), makes itself non-dumpable (no ptrace, no
  ``/proc/<pid>/mem`` for same-uid processes), starts the candidate process, and runs the test's
  ``check`` with a proxy: each ``candidate(*args)`` sends the arguments to the candidate process
  and gets back the return value as plain data (None, bool, int, float, str, bytes, complex, and
  lists / tuples / dicts / sets of them). The asserts are evaluated here, with this process's own
  builtins, on values that cannot carry behaviour (no ``__eq__`` overrides). At the end it prints
  ``<nonce> <report json>``.
* the **candidate** (``python -I -c RUNNER candidate``) executes the submitted code with its
  stdout and stdin on /dev/null and answers calls. Whatever it does (``sys.exit``, ``os._exit``,
  patching builtins, redefining ``check``, printing "all tests passed", killing its parent) it can
  only make calls fail: it never sees the nonce, the tests or the grader's stdout.

Messages between the two are length-prefixed JSON over pipes; values use the tagged encoding of
``encode`` / ``decode``.
"""

import json
import os
import select
import subprocess
import sys
import time

MAX_MESSAGE = 32 << 20


class CandidateError(Exception):
    """A call of the candidate failed: it raised, returned an unsupported value, died or timed out."""


# ------------------------------------------------------------------ values as plain data


def encode(v, depth=0):
    if depth > 100:
        raise TypeError("value nested too deeply")
    t = type(v)
    if v is None or t is bool or t is str:
        return v
    if t is int:
        return v if -(1 << 62) < v < (1 << 62) else {"i": format(v, "x")}
    if t is float:
        return {"f": repr(v)}
    if t is list:
        return [encode(x, depth + 1) for x in v]
    if t is tuple:
        return {"t": [encode(x, depth + 1) for x in v]}
    if t is dict:
        return {"d": [[encode(k, depth + 1), encode(x, depth + 1)] for k, x in v.items()]}
    if t is set or t is frozenset:
        return {"s" if t is set else "fs": [encode(x, depth + 1) for x in v]}
    if t is bytes:
        return {"b": v.hex()}
    if t is complex:
        return {"c": [repr(v.real), repr(v.imag)]}
    raise TypeError(f"unsupported value of type {t.__name__}")


def decode(v):
    if v is None or type(v) in (bool, str, int):
        return v
    if type(v) is list:
        return [decode(x) for x in v]
    if type(v) is not dict or len(v) != 1:
        raise TypeError("malformed value")
    ((tag, x),) = v.items()
    if tag == "i":
        return int(x, 16)
    if tag == "f":
        return float(x)
    if tag == "t":
        return tuple(decode(y) for y in x)
    if tag == "d":
        return {decode(k): decode(y) for k, y in x}
    if tag == "s":
        return {decode(y) for y in x}
    if tag == "fs":
        return frozenset(decode(y) for y in x)
    if tag == "b":
        return bytes.fromhex(x)
    if tag == "c":
        return complex(float(x[0]), float(x[1]))
    raise TypeError(f"unknown tag {tag!r}")


def write_msg(fd, msg):
    data = json.dumps(msg).encode()
    data = len(data).to_bytes(4, "big") + data
    while data:
        data = data[os.write(fd, data) :]


def read_exactly(fd, n, deadline):
    buf = b""
    while len(buf) < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError("no answer in time")
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError("the other side closed")
        buf += chunk
    return buf


def read_msg(fd, deadline=None):
    n = int.from_bytes(read_exactly(fd, 4, deadline), "big")
    if n > MAX_MESSAGE:
        raise ValueError("message too large")
    return json.loads(read_exactly(fd, n, deadline))


# ------------------------------------------------------------------ the candidate process


def candidate_main():
    rpc_in, rpc_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    sys.stdin, sys.stdout = open(os.devnull), open(os.devnull, "w")  # noqa: SIM115 - for the process's life
    setup = read_msg(rpc_in)
    namespace = {"__name__": "__candidate__"}
    fatal = None
    try:
        exec(compile(setup["code"], "<solution>", "exec"), namespace)  # noqa: S102 - in the candidate process
        fn = namespace[setup["entry_point"]]
        if not callable(fn):
            raise TypeError(f"{setup['entry_point']} is not a function")
    except BaseException as e:  # noqa: BLE001 - includes SystemExit from the submission
        fatal = f"the solution failed to load: {type(e).__name__}: {e}"[:500]
    while True:
        try:
            msg = read_msg(rpc_in)
        except EOFError:
            return
        if fatal:
            write_msg(rpc_out, {"error": fatal})
            continue
        try:
            reply = {"value": encode(fn(*decode(msg["args"])))}
        except BaseException as e:  # noqa: BLE001
            reply = {"error": f"{type(e).__name__}: {e}"[:300]}
        write_msg(rpc_out, reply)


# ------------------------------------------------------------------ the grader process


def harden():
    """Non-dumpable: same-uid processes (the candidate) cannot ptrace us or read our memory."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4
        return True
    except Exception:  # noqa: BLE001 - no ctypes in the image: the process boundary still holds
        return False


class Candidate:
    def __init__(self, runner, code, entry_point, deadline):
        self.deadline = deadline
        try:
            self.stderr = open("/tmp/candidate.stderr", "w+b")  # noqa: SIM115 - the child's stderr, read at the end
        except OSError:
            self.stderr = subprocess.DEVNULL
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", runner, "candidate"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            cwd=os.getcwd(),
        )
        self.dead = None
        self.calls = 0
        write_msg(self.proc.stdin.fileno(), {"code": code, "entry_point": entry_point})

    def __call__(self, *args, **kwargs):
        if kwargs:
            raise CandidateError("keyword arguments are not supported")
        if self.dead:
            raise CandidateError(self.dead)
        self.calls += 1
        try:
            write_msg(self.proc.stdin.fileno(), {"args": encode(list(args))})
            reply = read_msg(self.proc.stdout.fileno(), self.deadline)
            if "error" in reply:
                raise CandidateError(str(reply["error"]))
            return decode(reply["value"])
        except CandidateError:
            raise
        except TimeoutError:
            self.kill("timeout: the tests ran out of time")
        except (OSError, EOFError, ValueError, KeyError, TypeError) as e:
            self.kill(f"the candidate process failed: {type(e).__name__}: {e}")
        raise CandidateError(self.dead)

    def kill(self, why):
        self.dead = self.dead or why
        try:
            self.proc.kill()
        except OSError:
            pass

    def stderr_tail(self):
        if self.stderr is subprocess.DEVNULL:
            return ""
        self.stderr.seek(0, 2)
        self.stderr.seek(max(0, self.stderr.tell() - 2000))
        return self.stderr.read().decode(errors="replace")


def grader_main():
    payload = json.loads(sys.stdin.buffer.read())
    nonce = payload.pop("nonce")
    report = {"hardened": harden(), "asserts": {}, "completed": False, "error": None}
    deadline = time.monotonic() + float(payload["timeout_s"])
    candidate = Candidate(payload["runner"], payload["code"], payload["entry_point"], deadline)

    def record(index, condition):
        try:
            ok = bool(condition())
        except Exception:  # noqa: BLE001 - a failing call inside the assert fails the assert
            ok = False
        report["asserts"][str(index)] = report["asserts"].get(str(index), True) and ok

    namespace = {"__name__": "__grader__"}
    try:
        exec(compile(payload["prompt"], "<prompt>", "exec"), namespace)  # noqa: S102 - the dataset's helpers
        namespace[payload["entry_point"]] = candidate  # tests may call it by name too
        namespace["__record_assert__"] = record
        exec(compile(payload["test"], "<test>", "exec"), namespace)  # noqa: S102 - the dataset's test
        namespace["check"](candidate)
        report["completed"] = True
    except Exception as e:  # noqa: BLE001
        report["error"] = f"{type(e).__name__}: {e}"[:500]
    candidate.kill("done")
    report.update(
        calls=candidate.calls,
        candidate_error=candidate.dead if candidate.dead != "done" else None,
        stderr=candidate.stderr_tail(),
    )
    sys.stdout.write(nonce + " " + json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    candidate_main() if sys.argv[1:] == ["candidate"] else grader_main()
