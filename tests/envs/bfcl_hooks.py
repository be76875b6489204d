"""Imported by the BFCL API worker of a test (``envs.bfcl.worker.PRELOAD``): ``mean`` gets two
arguments that no API has, to make the worker misbehave in ways no bounded argument can.

* ``mean(numbers=["forever"])`` computes forever (a call past any limit);
* ``mean(numbers=["die"])`` kills its own process (a worker that dies for its own reasons, as the
  kernel's OOM killer would end it in the middle of a call).
"""

from __future__ import annotations

import os
import signal

from envs.bfcl.apis import ApiSession

_call = ApiSession.call


def call(self, name, kwargs, args=None):
    if name == "mean" and kwargs.get("numbers") == ["forever"]:
        n = 0
        while True:
            n += 1
    if name == "mean" and kwargs.get("numbers") == ["die"]:
        os.kill(os.getpid(), signal.SIGKILL)
    return _call(self, name, kwargs, args)


ApiSession.call = call
