"""The default sandbox image, built without a registry when none is reachable.

``build_image()`` reuses an existing image; otherwise it builds from :data:`DOCKERFILE` when a
registry answers, and else from a local root filesystem: ``debootstrap --variant=minbase
--include=python3 bookworm`` (``python3-minimal`` lacks most of the standard library, json
included), trimmed, then ``tar | docker import``. Both give Debian bookworm with python3.
Stdlib only and the docker CLI, so CI can run it before the virtualenv exists.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Callable

DEFAULT_IMAGE = "agent-rl-sandbox:bookworm-1"
SUITE = "bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PROBE_IMAGE = "debian:bookworm-slim"
DOCKERFILE = f"""\
FROM {PROBE_IMAGE}
RUN apt-get update \\
 && apt-get install -y --no-install-recommends python3 \\
 && rm -rf /var/lib/apt/lists/* /usr/share/doc /usr/share/man
WORKDIR /work
LABEL agent_rl.image="1"
"""
#: Removed from the debootstrap tree: caches and docs the sandbox never needs.
TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "var/log",
)


class ImageBuildError(RuntimeError):
    """The image could not be built; the message says what to install or check."""


def _docker(*args: str, check: bool = True, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    if shutil.which("docker") is None:
        raise ImageBuildError("the docker CLI is not installed (apt-get install -y docker.io)")
    out = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, **kw)
    if check and out.returncode != 0:
        raise ImageBuildError(f"docker {' '.join(args[:2])} failed: {out.stderr.strip()[-800:]}")
    return out


def image_exists(name: str = DEFAULT_IMAGE) -> bool:
    try:
        return _docker("image", "inspect", name, check=False, timeout=30).returncode == 0
    except (ImageBuildError, OSError, subprocess.TimeoutExpired):
        return False


def _apt_mirror() -> str:
    """The Debian mirror apt already uses here (deb822 or one-line sources), else the default."""
    for path in ("/etc/apt/sources.list.d/debian.sources", "/etc/apt/sources.list"):
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if parts[:1] == ["URIs:"] and "security" not in parts[1]:
                        return parts[1]
                    if parts[:1] == ["deb"] and len(parts) > 2 and "security" not in parts[1]:
                        return parts[1] if not parts[1].startswith("[") else parts[2]
        except OSError:
            continue
    return DEFAULT_MIRROR


def registry_reachable() -> bool:
    """Can the daemon pull the Dockerfile's base image? (Fails in ~0.1 s without network.)"""
    try:
        return _docker("pull", "-q", PROBE_IMAGE, check=False, timeout=300).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def build_from_dockerfile(name: str, say: Callable[[str], None]) -> None:
    with tempfile.TemporaryDirectory(prefix="agent_rl_image_") as ctx:
        with open(os.path.join(ctx, "Dockerfile"), "w") as f:
            f.write(DOCKERFILE)
        say(f"building {name} from a Dockerfile ({PROBE_IMAGE} + python3)")
        _docker("build", "-q", "-t", name, ctx, timeout=1800)


def build_from_rootfs(name: str, say: Callable[[str], None], mirror: str | None = None) -> None:
    if shutil.which("debootstrap") is None:
        raise ImageBuildError("no registry is reachable and debootstrap is missing (apt-get install -y debootstrap)")
    if os.geteuid() != 0:
        raise ImageBuildError("building the image from a root filesystem needs root (debootstrap)")
    mirror = mirror or _apt_mirror()
    with tempfile.TemporaryDirectory(prefix="agent_rl_rootfs_", dir=os.environ.get("AGENT_RL_BUILD_DIR")) as tmp:
        rootfs = os.path.join(tmp, "rootfs")
        say(f"debootstrap --variant=minbase --include=python3 {SUITE} (mirror {mirror}); takes ~1 min")
        t0 = time.monotonic()
        out = subprocess.run(
            ["debootstrap", "--variant=minbase", "--include=python3", SUITE, rootfs, mirror],
            capture_output=True,
            text=True,
            timeout=1800,
            stdin=subprocess.DEVNULL,
        )
        if out.returncode != 0:
            raise ImageBuildError(f"debootstrap failed: {(out.stderr or out.stdout).strip()[-1500:]}")
        for rel in TRIM:
            path = os.path.join(rootfs, rel)
            if os.path.isdir(path):
                shutil.rmtree(path)
                os.makedirs(path)
        say(f"root filesystem ready in {time.monotonic() - t0:.0f} s; importing it into docker as {name}")
        tar = subprocess.Popen(["tar", "-C", rootfs, "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        try:
            _docker(
                "import",
                "--change",
                "WORKDIR /work",
                "--change",
                'LABEL agent_rl.image="1"',
                "--change",
                "ENV PATH=/usr/local/bin:/usr/bin:/bin",
                "-",
                name,
                stdin=tar.stdout,
                timeout=1800,
            )
        finally:
            tar.stdout.close()
            tar.wait()


def build_image(
    name: str | None = None, force: bool = False, method: str = "auto", say: Callable[[str], None] = print
) -> str:
    """Make sure image ``name`` exists (built as above); returns its name. ``method``: auto |
    dockerfile | rootfs."""
    name = name or DEFAULT_IMAGE
    if method not in ("auto", "dockerfile", "rootfs"):
        raise ValueError(f"unknown image build method {method!r}; known: auto, dockerfile, rootfs")
    if not force and image_exists(name):
        say(f"image {name} already exists; reusing it (pass force=True / --force to rebuild)")
        return name
    if method == "dockerfile" or (method == "auto" and registry_reachable()):
        build_from_dockerfile(name, say)
    else:
        if method == "auto":
            say("no registry reachable: building from a local Debian root filesystem")
        build_from_rootfs(name, say)
    check = _docker(
        "run",
        "--rm",
        "--network",
        "none",
        name,
        "python3",
        "-c",
        "import json, sys; print(json.dumps(sys.version_info[:2]))",
        check=False,
        timeout=120,
    )
    if check.returncode != 0:
        raise ImageBuildError(f"the new image {name} cannot run python3: {check.stderr.strip()[-500:]}")
    say(f"image {name} ready (python {'.'.join(check.stdout.strip()[1:-1].split(', '))})")
    return name
