"""One upstream JVM simulator per env instance: started on first use, reused across episodes.

TextWorld-Express and ScienceWorld each start their own JVM (through py4j) when their Python
object is built. ``JvmSimulator`` holds one such object for one env instance: it is built at the
first reset (in the rollout engine's env thread, not on its event loop), kept for every later
episode of that instance (a reset loads a new game into the same JVM), and shut down at
``close()``. A dead JVM or a broken py4j connection raises ``InfraError`` (the engine ends the
episode as ``infra_error``, unscored); the simulator is dropped and the next reset starts a new one.

The JVM's maximum heap (``max_heap_mb``, ``-Xmx``): neither upstream takes Java options, but both
start their JVM through py4j's ``launch_gateway``, which does (``javaopts``). ``route_java_options``
puts a wrapper in place of the name ``launch_gateway`` in the upstream's module that appends the
options of the JVM this thread is starting (a thread-local, set by ``JvmSimulator`` around the
upstream's constructor); other callers of that module get none. That the options reached the
command line is checked after each start. A ``java.lang.OutOfMemoryError`` is an ``InfraError``
too (the JVM is dropped: a heap too small for a task, e.g. ScienceWorld's gold-path search).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import threading
from collections.abc import Callable
from typing import Any

from agent_rl.core.errors import InfraError

_STARTING = threading.local()  # .options: the Java options of the JVM this thread is starting


def route_java_options(module: Any) -> None:
    """Route ``module.launch_gateway`` (the upstream's import of py4j's) through a wrapper that adds
    the Java options of the JVM this thread is starting; done once per module."""
    original = module.launch_gateway
    if getattr(original, "adds_java_options", False):
        return

    def launch_gateway(*args: Any, **kwargs: Any) -> Any:
        options = getattr(_STARTING, "options", None)
        if options:
            if len(args) > 3:  # py4j's signature: (port, jarpath, classpath, javaopts, ...)
                raise TypeError("launch_gateway: javaopts given by position; pass it by name")
            kwargs["javaopts"] = [*kwargs.get("javaopts", ()), *options]
        return original(*args, **kwargs)

    launch_gateway.adds_java_options = True  # type: ignore[attr-defined]
    module.launch_gateway = launch_gateway


class JvmSimulator:
    def __init__(self, factory: Callable[[], Any], name: str, max_heap_mb: int | None = None):
        if max_heap_mb is not None and max_heap_mb < 16:
            raise ValueError(f"jvm_max_heap_mb must be at least 16 (MB) or None (the JVM's default), got {max_heap_mb}")
        self._factory = factory  # builds the upstream object (which launches its JVM through route_java_options)
        self.name = name
        self.max_heap_mb = max_heap_mb
        self.sim: Any = None
        self.starts = 0  # JVMs started by this instance (1 unless one died)

    @property
    def java_options(self) -> list[str]:
        return [] if self.max_heap_mb is None else [f"-Xmx{self.max_heap_mb}m"]

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

            _STARTING.options = self.java_options
            try:
                self.sim = self._factory()
            except (OSError, Py4JError) as e:
                raise InfraError(f"cannot start the {self.name} JVM: {e!r}") from e
            finally:
                _STARTING.options = None
            self.starts += 1
            args = getattr(self.process(), "args", None)
            if isinstance(args, list) and not set(self.java_options) <= set(args):
                self.discard()
                raise RuntimeError(
                    f"the {self.name} JVM started without {self.java_options}: its factory must call route_java_options"
                )
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
        except Py4JJavaError as e:
            if self.alive() and "java.lang.OutOfMemoryError" not in str(e):
                raise
            heap = "its default maximum heap" if self.max_heap_mb is None else f"-Xmx{self.max_heap_mb}m"
            died = "died" if not self.alive() else f"ran out of memory ({heap}; the env's jvm_max_heap_mb sets it)"
            self.discard()
            raise InfraError(f"the {self.name} JVM {died}") from None
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
