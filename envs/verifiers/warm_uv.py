"""Warm verifiers' uv cache: sync the harness's chat program (a PEP 723 script) once, at build time.

Run by ``envs/verifiers/program.py``'s venv build with the verifiers venv's python, as a script (it
imports nothing of this project), so that an episode's ``uv sync --script`` finds every package in
the cache and fetches nothing.
"""

import asyncio
import os

from verifiers.v1.harnesses.utils.launch import CHAT_PROGRAM_SOURCE
from verifiers.v1.runtimes.subprocess import SubprocessConfig, SubprocessRuntime


async def main() -> None:
    os.environ["UV_COMPILE_BYTECODE"] = "1"  # its episodes may never write bytecode (PYTHONDONTWRITEBYTECODE)
    runtime = SubprocessRuntime(SubprocessConfig(), name="agent-rl-warm-uv")
    await runtime.start()
    try:
        argv = await runtime.prepare_uv_script(CHAT_PROGRAM_SOURCE, {})
    finally:
        await runtime.stop()
    print("uv script ready:", argv[0])


if __name__ == "__main__":
    asyncio.run(main())
