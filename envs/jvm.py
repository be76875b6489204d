"""One upstream JVM simulator per env instance: started on first use, reused across episodes.

TextWorld-Express and ScienceWorld each start their own JVM (through py4j) when their Python
object is built. ``JvmSimulator`` holds one such object for one env instance: it is built at the
first reset (in the rollout engine's env thread, not on its event loop), kept for every later
episode of that instance (a reset loads a new game into the same JVM), and shut down at
``close()``. A dead JVM or a broken py4j connection raises ``InfraError`` (the engine ends the
episode as ``infra_error``, unscored); the simulator is dropped and the next reset starts a new one.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from agent_rl.core.errors import InfraError


class JvmSimulator:
    def __init__(self, factory: Callable[[], Any], name: str):
        self._factory = factory  # builds the upstream object (which launches its JVM)
        self.name = name
        self.sim: Any = None
        self.starts = 0  # JVMs started by this instance (1 unless one died)

    def get(self, start: bool = True) -> Any:
        """The live simulator, started (again) when there is none or its JVM has died; with
        ``start=False`` (inside an episode, whose game a new JVM would not have) ``InfraError``."""
        if self.sim is not None and not self.alive():
            self.discard()
            if not start:
                raise InfraError(f"the {self.name} JVM died")
        if self.sim is None:
            if not start:
                raise InfraError(f"no {self.name} JVM: call reset() first")
            if shutil.which("java") is None:
                raise InfraError(
                    f"{self.name} needs a Java runtime: no 'java' on PATH (Debian: apt-get install default-jre-headless)"
                )
            from py4j.protocol import Py4JError

            try:
                self.sim = self._factory()
            except (OSError, Py4JError) as e:
                raise InfraError(f"cannot start the {self.name} JVM: {e!r}") from e
            self.starts += 1
        return self.sim

    def process(self) -> Any:
        """The JVM's ``subprocess.Popen`` (None when not started)."""
        return None if self.sim is None else self.sim._gateway.java_process

    def alive(self) -> bool:
        proc = self.process()
        return proc is not None and proc.poll() is None

    def call(self, fn: Callable[[Any], Any], start: bool = True) -> Any:
        """``fn(simulator)``; a failure of the JVM or of the connection to it raises ``InfraError``.
        A Java exception raised by a live simulator (``Py4JJavaError``) propagates unchanged.
        ``start``: whether a dead JVM may be replaced first (at a reset; never inside an episode)."""
        from py4j.protocol import Py4JError, Py4JJavaError

        sim = self.get(start)
        try:
            return fn(sim)
        except Py4JJavaError:
            if self.alive():
                raise
            self.discard()
            raise InfraError(f"the {self.name} JVM died") from None
        except Py4JError as e:
            self.discard()
            raise InfraError(f"the {self.name} JVM failed: {type(e).__name__}: {e}") from e

    def discard(self) -> None:
        """Shut the simulator down (kill its JVM if it does not exit); safe when there is none."""
        sim, self.sim = self.sim, None
        if sim is None:
            return
        proc = sim._gateway.java_process
        quiet = logging.getLogger("py4j")
        level = quiet.level
        quiet.setLevel(logging.CRITICAL)  # py4j logs a traceback for every refused connection
        try:
            if proc.poll() is None:
                sim.close()  # the upstream's: shut the gateway down, tell the JVM to exit
            else:  # a dead JVM: close our side (connections, the callback server's thread) only
                sim._gateway.close(keep_callback_server=False, close_callback_server_connections=True)
        except Exception:  # noqa: BLE001 - a broken connection: kill below
            pass
        finally:
            quiet.setLevel(level)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout, proc.stderr):  # the upstream leaves them open
                if pipe is not None:
                    pipe.close()
            for name in ("_obj_tree_tempdir", "_obj_tree_tempfile"):  # and its temporary files
                tmp = getattr(sim, name, None)
                if tmp is not None:
                    tmp.cleanup() if hasattr(tmp, "cleanup") else tmp.close()
            sim.close = lambda: None  # the upstream __del__ calls close() again
