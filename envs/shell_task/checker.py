"""The end-of-episode check of ShellTask-v0, run INSIDE the sandbox (``python3 -I -c <this file>``).

It reads its spec (family, expected answer, hashes of the files the agent must not touch) as JSON
on stdin, never from the work directory, and prints one JSON line:
``{"passed": bool, "progress": float in [0, 1], "detail": str}``. Standard library only: it runs
under the sandbox's ``python3``, not the project's.
"""

import hashlib
import json
import os
import subprocess
import sys


def _read(path):
    """Text of a regular file of the work directory (never through a symlink), or None."""
    if os.path.islink(path) or not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def _lines(path):
    text = _read(path)
    return None if text is None else [line.strip() for line in text.splitlines() if line.strip()]


def _untouched(protected):
    """The names of protected files that were changed, replaced by a link, or deleted."""
    changed = []
    for path, digest in sorted(protected.items()):
        if os.path.islink(path) or not os.path.isfile(path):
            changed.append(path)
            continue
        with open(path, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != digest:
                changed.append(path)
    return changed


def _norm(path):
    for prefix in ("/work/", "./"):
        path = path.removeprefix(prefix)
    return path


def check_find_file(spec):
    lines = _lines(spec["answer_file"])
    if lines is None:
        return False, 0.0, f"{spec['answer_file']} is missing"
    passed = [_norm(line) for line in lines] == [spec["expected"]]
    return passed, float(passed), "right file" if passed else "wrong answer"


def check_fix_config(spec):
    res = subprocess.run(
        [sys.executable, "-I", spec["program"]], capture_output=True, text=True, timeout=10, check=False
    )
    errors = [line for line in res.stderr.splitlines() if line.startswith("config error:")]
    progress = 1.0 - min(len(errors), spec["faults"]) / spec["faults"]
    passed = res.returncode == 0 and res.stdout.strip() == spec["expected"]
    return passed, progress, f"exit {res.returncode}: {(res.stdout + res.stderr).strip()[:200]}"


def check_collect(spec):
    lines = _lines(spec["answer_file"])
    if lines is None:
        return False, 0.0, f"{spec['answer_file']} is missing"
    expected = [" ".join(pair) for pair in spec["expected"]]
    got = [" ".join(line.split()) for line in lines]
    hits = len(set(got) & set(expected))
    extras = len(got) - hits
    progress = max(0, hits - extras) / len(expected)
    return got == expected, progress, f"{hits}/{len(expected)} lines right, {extras} wrong"


CHECKS = {"find_file": check_find_file, "fix_config": check_fix_config, "collect": check_collect}


def main():
    spec = json.loads(sys.stdin.read())
    changed = _untouched(spec.get("protected", {}))
    if changed:
        out = {"passed": False, "progress": 0.0, "detail": "changed protected files: " + ", ".join(changed)}
    else:
        try:
            passed, progress, detail = CHECKS[spec["family"]](spec)
        except Exception as e:  # noqa: BLE001 - a broken work directory fails the check, never the env
            passed, progress, detail = False, 0.0, f"check failed: {type(e).__name__}: {e}"
        out = {"passed": bool(passed), "progress": float(progress), "detail": detail}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
