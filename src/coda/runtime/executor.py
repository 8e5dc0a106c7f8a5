"""Where parallel jobs run: worker processes on this machine (`local`) or Ray actors (`ray`).

An executor maps a module-level function over jobs in worker processes that were first set up by an
initializer (load a policy, make envs) and keep that state for the whole map; results come back to the
driver in the order of the jobs, so whatever the driver writes (the memory, files) is written by one
process in one order, as with the local pool. Functions and jobs cross process boundaries by pickling.

`executor.map_queue(fn, items, quota=...)` hands work items out one at a time from a shared queue to whichever
worker asks next (a counter in shared memory, or a counter actor on Ray): each job runs `fn(taken)` over the
items it takes, up to `quota` of them, so workers that finish early take more and none idles while another
works through a fixed share. Items a dead job took and never returned are run again.

`executor.pool(init, initargs, close)` gives a pool (`LocalPool`, `RayPool`): workers set up once and kept for every `map`
until the pool is closed (a backend's envs, a loaded policy), so many small maps (a round's validity
checks, demos, verification episodes) pay for the set-up once. `executor.map(...)` is a pool used once.

`ray`: workers are actors, `runtime.workers` of them, each holding one CPU; `runtime.ray_address` names
a running cluster (`auto`, `ray://host:port`), or none starts a local Ray on loopback without a dashboard.
Files a worker needs (a policy checkpoint) are shipped by content through the object store
(`RayExecutor.ship`): a cluster's nodes need not share a filesystem with the driver.
"""

from __future__ import annotations

import contextlib
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


def _mp_context() -> Any:
    """The start method of worker processes: forkserver where there is one (no copy of the driver's threads)."""
    return mp.get_context("forkserver" if os.name == "posix" else "spawn")


class LocalExecutor:
    """Worker processes on this machine (forkserver), or this process itself with one worker."""

    name = "local"

    def __init__(self, workers: int) -> None:
        self.workers = max(1, int(workers))

    def ship(self, path: str | Path) -> str | Path:
        return path  # the workers share this machine's filesystem

    def pool(self, init: Callable[..., None] | None = None, initargs: tuple = (),
             close: Callable[[], None] | None = None) -> "LocalPool":
        """Workers set up by `init(*initargs)` on first use and kept until `close()` (a `LocalPool`)."""
        return LocalPool(self.workers, init, initargs, close)

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, init: Callable[..., None] | None = None,
            initargs: tuple = (), close: Callable[[], None] | None = None) -> Iterator[Any]:
        """`fn(job)` for each job, in order, in workers set up by `init(*initargs)`; with one worker (or one
        job) in this process, `close()` called at the end."""
        if not jobs:
            return
        pool = LocalPool(1 if len(jobs) <= 1 else self.workers, init, initargs, close)
        try:
            yield from pool.map(fn, jobs)
        finally:
            pool.close()

    def map_queue(self, fn: Callable[[Iterator[tuple[int, Any]]], list[tuple[int, Any]]], items: Sequence[Any], *,
                  quota: int, init: Callable[..., None] | None = None, initargs: tuple = (),
                  close: Callable[[], None] | None = None) -> Iterator[tuple[int, Any]]:
        """(index, result) for every item, in the order jobs finish: workers set up by `init(*initargs)` run
        jobs `fn(taken)`, `taken` yielding (index, item) pairs taken from one shared queue, up to `quota` per
        job; `fn` returns its (index, result) pairs."""
        workers = 1 if len(items) <= 1 else self.workers
        yield from _map_queue(lambda n: _LocalCounter(n, shared=workers > 1),
                              lambda wrapped_init, wrapped_args, k: LocalPool(min(workers, k), wrapped_init,
                                                                              wrapped_args, close),
                              workers, fn, items, quota, init, initargs)

    def close(self) -> None:
        """Nothing held between maps."""


class LocalPool:
    """`workers` forkserver processes set up once by `init(*initargs)`, or (one worker) this process itself,
    set up on the first map and `close()`d with the pool."""

    def __init__(self, workers: int, init: Callable[..., None] | None, initargs: tuple,
                 close: Callable[[], None] | None) -> None:
        self.workers = max(1, int(workers))
        self._init, self._initargs, self._close = init, initargs, close
        self._pool: ProcessPoolExecutor | None = None
        self._ready = False  # in-process: set up

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[Any]:
        """`fn(job)` for each job, results in job order."""
        if not jobs:
            return
        if self.workers <= 1:
            if not self._ready:
                self._ready = True
                if self._init is not None:
                    self._init(*self._initargs)
            for job in jobs:
                yield fn(job)
            return
        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.workers, mp_context=_mp_context(), initializer=self._init,
                                             initargs=self._initargs)
        yield from self._pool.map(fn, jobs, chunksize=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._ready:
            self._ready = False
            if self._close is not None:
                self._close()

    def __enter__(self) -> "LocalPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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

    def pool(self, init: Callable[..., None] | None = None, initargs: tuple = (),
             close: Callable[[], None] | None = None) -> "RayPool":
        """Actors set up by `init(*initargs)` on first use and kept until `close()`. They reserve no CPU
        and are spread over the nodes: a kept pool idles while the run's other maps (rollouts) use the
        CPUs, and reserving one per actor for its whole life would leave those maps none to start on."""
        return RayPool(self.workers, init, initargs, num_cpus=0, spread=True)

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any], *, init: Callable[..., None] | None = None,
            initargs: tuple = (), close: Callable[[], None] | None = None) -> Iterator[Any]:
        """`fn(job)` for each job, in order, on actors set up by `init(*initargs)` (`close` is not needed:
        the actors are killed at the end); an actor that dies is restarted (set up again) and its job
        retried once (the jobs are pure functions of their inputs), then the map fails."""
        if not jobs:
            return
        pool = RayPool(min(self.workers, len(jobs)), init, initargs)
        try:
            yield from pool.map(fn, jobs)
        finally:
            pool.close()

    def map_queue(self, fn: Callable[[Iterator[tuple[int, Any]]], list[tuple[int, Any]]], items: Sequence[Any], *,
                  quota: int, init: Callable[..., None] | None = None, initargs: tuple = (),
                  close: Callable[[], None] | None = None) -> Iterator[tuple[int, Any]]:
        """As `LocalExecutor.map_queue`, on actors; the queue is a counter actor. A job whose actor dies is
        retried once on the restarted actor (taking fresh items); the items the dead run took are run again."""
        yield from _map_queue(_RayCounter.start, lambda wrapped_init, wrapped_args, k: RayPool(
            min(self.workers, k), wrapped_init, wrapped_args), self.workers, fn, items, quota, init, initargs)

    def close(self) -> None:
        import ray

        if self._started and ray.is_initialized():
            ray.shutdown()


class RayPool:
    """`workers` Ray actors (`num_cpus` each) set up once by `init(*initargs)`, killed by `close()`. An actor
    that dies is restarted (set up again) and its job retried once, then the map fails."""

    def __init__(self, workers: int, init: Callable[..., None] | None, initargs: tuple, *, num_cpus: float = 1,
                 spread: bool = False) -> None:
        self.workers = max(1, int(workers))
        self._init, self._initargs = init, initargs
        self._options: dict[str, Any] = {"num_cpus": num_cpus, "max_restarts": 1, "max_task_retries": 1}
        if spread:
            self._options["scheduling_strategy"] = "SPREAD"
        self._actors: list[Any] = []

    def map(self, fn: Callable[[Any], Any], jobs: Sequence[Any]) -> Iterator[Any]:
        """`fn(job)` for each job, results in job order, as the actors finish them."""
        if not jobs:
            return
        import ray
        from ray.exceptions import RayActorError

        if not self._actors:
            worker_cls = ray.remote(**self._options)(_RayWorker)
            self._actors = [worker_cls.remote(self._init, self._initargs) for _ in range(self.workers)]
        pending: dict[Any, tuple[int, Any]] = {}  # object ref -> (job index, actor)
        results: dict[int, Any] = {}
        free = list(self._actors)
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

    def close(self) -> None:
        import ray

        for a in self._actors:
            ray.kill(a)
        self._actors = []

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _RayWorker:
    """One actor: set up by the map's initializer, then runs jobs."""

    def __init__(self, init: Callable[..., None] | None, initargs: tuple) -> None:
        if init is not None:
            init(*initargs)

    def run(self, fn: Callable[[Any], Any], job: Any) -> Any:
        return fn(job)


# ---- the shared queue -------------------------------------------------------------------------------

class _LocalCounter:
    """0, 1, ..., n-1, each handed out once, across the processes it was passed to at their start."""

    def __init__(self, n: int, shared: bool = True) -> None:
        self.n, self.value = n, _mp_context().Value("q", 0) if shared else _Plain()

    def take(self) -> int | None:
        with self.value.get_lock():
            i = self.value.value
            if i >= self.n:
                return None
            self.value.value = i + 1
            return i


class _Plain:
    """An int with a no-op lock: the counter of one process."""

    value = 0

    def get_lock(self) -> "contextlib.nullcontext[None]":
        return contextlib.nullcontext()


class _RayCounter:
    """The same counter held by a Ray actor (one remote call per item taken)."""

    class _Actor:
        def __init__(self, n: int) -> None:
            self.counter = _LocalCounter(n, shared=False)  # one process: the actor's

        def take(self) -> int | None:
            return self.counter.take()

    def __init__(self, actor: Any) -> None:
        self.actor = actor

    @classmethod
    def start(cls, n: int) -> "_RayCounter":
        import ray

        return cls(ray.remote(num_cpus=0)(cls._Actor).remote(n))

    def take(self) -> int | None:
        import ray

        return ray.get(self.actor.take.remote())


_QUEUE: dict[str, Any] = {}  # this worker's queue: the counter and the items


def _queue_init(counter: Any, items: Sequence[Any], init: Callable[..., None] | None, initargs: tuple) -> None:
    _QUEUE["counter"], _QUEUE["items"] = counter, items
    if init is not None:
        init(*initargs)


def _taken(quota: int) -> Iterator[tuple[int, Any]]:
    counter, items = _QUEUE["counter"], _QUEUE["items"]
    for _ in range(quota):
        i = counter.take()
        if i is None:
            return
        yield i, items[i]


def _queue_job(args: tuple[Callable[[Iterator[tuple[int, Any]]], list[tuple[int, Any]]], int]) -> list[tuple[int, Any]]:
    fn, quota = args
    return fn(_taken(quota))


def _map_queue(counter: Callable[[int], Any], make_pool: Callable[[Callable[..., None], tuple, int], Any],
               workers: int, fn: Callable[[Iterator[tuple[int, Any]]], list[tuple[int, Any]]],
               items: Sequence[Any], quota: int, init: Callable[..., None] | None,
               initargs: tuple) -> Iterator[tuple[int, Any]]:
    """One shared queue over `items`, jobs enough to drain it, then one more pass over any item a dead job
    took and never returned (a job is retried by its executor, but the items it had taken are gone)."""
    todo = list(range(len(items)))
    quota = max(1, int(quota))
    for _ in range(2):
        if not todo:
            return
        sub = [items[i] for i in todo]
        # Jobs enough that, whether each takes its full quota or one finds the queue empty, every item is
        # taken; at least one per worker so all of them work.
        jobs = max(min(workers, len(sub)), -(-len(sub) // quota))
        pool = make_pool(_queue_init, (counter(len(sub)), sub, init, initargs), jobs)
        seen: set[int] = set()
        try:
            for pairs in pool.map(_queue_job, [(fn, quota)] * jobs):
                for j, result in pairs:
                    seen.add(j)
                    yield todo[j], result
        finally:
            pool.close()
            _QUEUE.clear()
        todo = [todo[j] for j in range(len(sub)) if j not in seen]
    if todo:
        raise ExecutorError(f"{len(todo)} work items were taken by workers that died, twice over")


def make_executor(runtime: Any) -> LocalExecutor | RayExecutor:
    """The executor of a `RuntimeConfig`."""
    if runtime.executor == "ray":
        return RayExecutor(runtime.workers, runtime.ray_address)
    return LocalExecutor(runtime.workers)


__all__ = ["ExecutorError", "LocalExecutor", "LocalPool", "RayExecutor", "RayPool", "Shipped", "local_file", "make_executor"]
