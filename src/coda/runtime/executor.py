"""Where parallel jobs run: worker processes on this machine (`local`) or Ray actors (`ray`).

An executor maps a module-level function over jobs in worker processes that were first set up by an
initializer (load a policy, make envs) and keep that state for the whole map; results come back to the
driver in the order of the jobs, so whatever the driver writes (the memory, files) is written by one
process in one order, as with the local pool. Functions and jobs cross process boundaries by pickling.

`ray`: workers are actors, `runtime.workers` of them, each holding one CPU; `runtime.ray_address` names
a running cluster (`auto`, `ray://host:port`), or none starts a local Ray on loopback without a dashboard.
Files a worker needs (a policy checkpoint) are shipped by content through the object store
(`RayExecutor.ship`): a cluster's nodes need not share a filesystem with the driver.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from coda.errors import CodaError


class ExecutorError(CodaError):
    """An executor could not start or lost a worker."""


class Shipped:
    """A file's bytes (or their object-store reference), to be written once per worker process and used by
    path there (`local_path`); `digest` (sha256 of the bytes) names the copy."""

    def __init__(self, name: str, data: Any, digest: str) -> None:
        self.name, self.data, self.digest = name, data, digest

    def local_path(self) -> Path:
        key = f"{self.digest}/{self.name}"
        path = _SHIPPED.get(key)
        if path is None:
            data = self.data
            if not isinstance(data, bytes):  # a Ray object reference
                import ray

                data = ray.get(data)
            folder = Path(tempfile.mkdtemp(prefix="coda-shipped-"))
            path = folder / self.name
            path.write_bytes(data)
            _SHIPPED[key] = path
        return path


_SHIPPED: dict[str, Path] = {}  # digest/name -> this process's copy


def local_file(f: str | Path | Shipped) -> Path:
    """The path of `f` in this process: itself, or a shipped file's copy."""
    return f.local_path() if isinstance(f, Shipped) else Path(f)


class LocalExecutor:
    """Worker processes on this machine (forkserver), or this process itself with one worker."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))

    def ship(self, path: str | Path) -> str | Path:
        return path  # the workers share this machine's filesystem

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, init: Callable[..., None] | None = None,
            initargs: tuple = (), close: Callable[[], None] | None = None) -> Iterator[Any]:
        """`fn(job)` for each job, in order, in workers set up by `init(*initargs)`; with one worker (or one
        job) in this process, `close()` called at the end."""
        if not jobs:
            return
        if self.workers <= 1 or len(jobs) <= 1:
            if init is not None:
                init(*initargs)
            try:
                for job in jobs:
                    yield fn(job)
            finally:
                if close is not None:
                    close()
            return
        ctx = mp.get_context("forkserver" if os.name == "posix" else "spawn")
        with ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=init, initargs=initargs) as pool:
            yield from pool.map(fn, jobs, chunksize=1)

    def close(self) -> None:
        """Nothing held between maps."""


class RayExecutor:
    """Ray actors, `workers` of them per map, each set up once by the map's initializer."""

    name = "ray"

    def __init__(self, workers: int, address: str | None = None) -> None:
        try:
            import ray
        except ImportError as e:
            raise ExecutorError("runtime.executor = 'ray' needs Ray: pip install 'coda[ray]'") from e
        self.workers = max(1, int(workers))
        self._started = False
        if not ray.is_initialized():
            try:
                if address:
                    ray.init(address=address, log_to_driver=False)
                else:
                    ray.init(num_cpus=self.workers, include_dashboard=False, log_to_driver=False,
                             _node_ip_address="127.0.0.1")
            except Exception as e:  # noqa: BLE001 - Ray raises many kinds; one line names the address
                raise ExecutorError(f"runtime.ray_address = {address or 'local'}: Ray did not start: "
                                    f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
            self._started = True

    def ship(self, path: str | Path) -> Shipped:
        import ray

        p = Path(path)
        data = p.read_bytes()
        return Shipped(p.name, ray.put(data), hashlib.sha256(data).hexdigest())

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, init: Callable[..., None] | None = None,
            initargs: tuple = (), close: Callable[[], None] | None = None) -> Iterator[Any]:
        """`fn(job)` for each job, in order, on actors set up by `init(*initargs)` (`close` is not needed:
        the actors are killed at the end); an actor that dies is restarted (set up again) and its job
        retried once (the jobs are pure functions of their inputs), then the map fails."""
        if not jobs:
            return
        import ray
        from ray.exceptions import RayActorError

        worker_cls = ray.remote(num_cpus=1, max_restarts=1, max_task_retries=1)(_RayWorker)
        actors = [worker_cls.remote(init, initargs) for _ in range(min(self.workers, len(jobs)))]
        try:
            pending: dict[Any, tuple[int, Any]] = {}  # object ref -> (job index, actor)
            results: dict[int, Any] = {}
            free = list(actors)
            nxt = done = 0
            while done < len(jobs):
                while free and nxt < len(jobs):
                    actor = free.pop()
                    pending[actor.run.remote(fn, jobs[nxt])] = (nxt, actor)
                    nxt += 1
                ready, _ = ray.wait(list(pending), num_returns=1)
                i, actor = pending.pop(ready[0])
                try:
                    results[i] = ray.get(ready[0])
                except RayActorError as e:
                    raise ExecutorError(f"a Ray worker died running job {i} of {len(jobs)}: "
                                        f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from e
                free.append(actor)
                while done in results:
                    yield results.pop(done)
                    done += 1
        finally:
            for a in actors:
                ray.kill(a)

    def close(self) -> None:
        import ray

        if self._started and ray.is_initialized():
            ray.shutdown()


class _RayWorker:
    """One actor: set up by the map's initializer, then runs jobs."""

    def __init__(self, init: Callable[..., None] | None, initargs: tuple) -> None:
        if init is not None:
            init(*initargs)

    def run(self, fn: Callable[[Any], Any], job: Any) -> Any:
        return fn(job)


def make_executor(runtime: Any) -> LocalExecutor | RayExecutor:
    """The executor of a `RuntimeConfig`."""
    if runtime.executor == "ray":
        return RayExecutor(runtime.workers, runtime.ray_address)
    return LocalExecutor(runtime.workers)


__all__ = ["ExecutorError", "LocalExecutor", "RayExecutor", "Shipped", "local_file", "make_executor"]
