"""Where simulations run: local worker processes (the default) or tasks on a Ray
cluster (``--ray ADDRESS``). Both take simulations one at a time and hand results
back as they finish, so the caller can cache and report each one at once.

- :class:`LocalBackend`: a ``ProcessPoolExecutor``. A worker process that dies
  (killed, out of memory) breaks the pool; the pool is then started again and the
  simulations that had not finished are submitted again (each at most
  ``RETRIES`` times).
- :class:`RayBackend`: each simulation is a Ray task of one CPU. The input files
  (cluster, trace, policy, tier map) are put into Ray's object store once and
  written to a temporary folder on the node that runs the task, so the nodes need
  the package installed (the same version) but not the files. A task whose worker
  process or node dies is retried by Ray (``max_retries``); an error raised by the
  simulation itself is not retried and is reported.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path
from typing import Any

from models import InputError

__all__ = ["RETRIES", "LocalBackend", "RayBackend", "make_backend", "run_all",
           "simulate_metrics"]

RETRIES = 3
RAY_EXTRA = "pip install 'preempt-planner[ray]'"


def simulate_metrics(spec: Any) -> dict[str, Any]:
    """One simulation (in a worker): its metrics, with the wall time of the run."""
    from planner.sim.metrics import compute_metrics
    from planner.sim.runner import prepare

    t0 = time.perf_counter()
    m = compute_metrics(prepare(spec).run())
    m["task_wall_s"] = time.perf_counter() - t0
    return m


class _Backend:
    slots = 1
    where = ""

    def __init__(self) -> None:
        self._running: dict[Any, Any] = {}

    @property
    def pending(self) -> int:
        """Simulations submitted whose result has not been handed back."""
        return len(self._running)


class LocalBackend(_Backend):
    """Simulations in ``jobs`` local worker processes."""

    def __init__(self, jobs: int):
        super().__init__()
        self.slots = max(1, jobs)
        self.where = f"in {self.slots} process(es)"
        self._pool = ProcessPoolExecutor(max_workers=self.slots)
        self._running: dict[Future[Any], tuple[Any, Callable[[Any], Any], Any, int]]

    def submit(self, tid: Any, fn: Callable[[Any], Any], spec: Any, tries: int = 0) -> None:
        self._running[self._pool.submit(fn, spec)] = (tid, fn, spec, tries)

    def results(self) -> list[tuple[Any, bool, Any]]:
        """Wait until at least one simulation ends: ``(id, ok, metrics or exception)``."""
        if not self._running:
            return []
        done, _ = wait(list(self._running), return_when=FIRST_COMPLETED)
        out: list[tuple[Any, bool, Any]] = []
        broken: list[tuple[Any, Callable[[Any], Any], Any, int, BaseException | None]] = []
        for f in done:
            tid, fn, spec, tries = self._running.pop(f)
            try:
                out.append((tid, True, f.result()))
            except BrokenProcessPool as exc:
                broken.append((tid, fn, spec, tries, exc))
            except Exception as exc:  # noqa: BLE001 (the simulation's own error: reported)
                out.append((tid, False, exc))
        if broken:  # a worker died: the pool is gone, with every simulation in it
            for f, (tid, fn, spec, tries) in self._running.items():
                err = f.exception() if f.done() and not f.cancelled() else None
                if f.done() and not f.cancelled() and err is None:
                    out.append((tid, True, f.result()))
                elif err is not None and not isinstance(err, BrokenProcessPool):
                    out.append((tid, False, err))
                else:
                    broken.append((tid, fn, spec, tries, err))
            self._running = {}
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = ProcessPoolExecutor(max_workers=self.slots)
            for tid, fn, spec, tries, err in broken:  # ... submitted again to a new pool
                if tries + 1 > RETRIES:
                    out.append((tid, False, err or BrokenProcessPool("worker died")))
                else:
                    self.submit(tid, fn, spec, tries + 1)
        return out

    def close(self, cancel: bool = False) -> None:
        self._pool.shutdown(wait=not cancel, cancel_futures=cancel)


def _spec_files(spec: Any) -> list[tuple[str, Path]]:
    """(field, path) of the files a RunSpec reads."""
    from planner.sim.traces import resolve_trace_path

    files = [("cluster", Path(spec.cluster)), ("trace", resolve_trace_path(spec.trace))]
    if spec.policy:
        files.append(("policy", Path(spec.policy)))
    if spec.tier_rule and spec.tier_rule.startswith("map:"):
        files.append(("tier_rule", Path(spec.tier_rule[4:])))
    return files


def _localize(spec: Any, names: list[tuple[str, str, str]], blobs: Iterable[bytes]) -> Any:
    """The spec with its files written to this node's temporary folder (once per
    content) and their paths replaced."""
    base = Path(tempfile.gettempdir()) / "preempt-planner-ray"
    changes = {}
    for (fld, name, digest), data in zip(names, blobs, strict=True):
        path = base / digest / name
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            os.replace(tmp, path)
        changes[fld] = f"map:{path}" if fld == "tier_rule" else str(path)
    return replace(spec, **changes)


def _ray_call(fn: Callable[[Any], Any], spec: Any, names: list[tuple[str, str, str]],
              *blobs: bytes) -> Any:
    """The body of a Ray task (Ray hands the files' bytes in as ``blobs``)."""
    return fn(_localize(spec, names, blobs))


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """A ``host:port`` where nothing answers is bad input at once (Ray itself would try
    to connect for minutes)."""
    import socket

    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        if address != "auto" and not address.startswith("ray://"):
            raise InputError([(f"--ray {address}: expected HOST:PORT (the head node's GCS "
                               "port, 6379 by default) or auto")])
        return
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise InputError([(f"--ray {address}: no Ray head node answers there "
                           f"({exc.strerror or exc}); start one with 'ray start --head "
                           f"--port {port}'")]) from None


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise InputError([f"--ray: Ray is not installed ({RAY_EXTRA})"]) from None
    return ray


def _ray_messages_to_stderr(quiet: bool) -> None:
    """Ray's driver prints the cluster's error messages ("A worker died or was
    killed ...") on standard output, which holds the command's result (``-o json``):
    they go to standard error instead, and nowhere with --quiet. (A private hook of
    Ray's; without it, the messages stay where Ray puts them.)"""
    try:
        import ray._private.worker as ray_worker

        original = ray_worker.print_to_stdstream
    except (ImportError, AttributeError):
        return
    if getattr(original, "_preempt_planner", False):
        return

    def to_stderr(data: dict[str, Any], ignore_prefix: bool) -> None:
        if not quiet:
            original({**data, "is_err": True}, ignore_prefix)

    to_stderr._preempt_planner = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = to_stderr


class RayBackend(_Backend):
    """Simulations as Ray tasks on the cluster at ``address`` (``auto``: the local one)."""

    def __init__(self, address: str, quiet: bool = False):
        super().__init__()
        ray = _import_ray()
        self._ray = ray
        _check_reachable(address)
        try:
            ray.init(address=address, logging_level="ERROR", log_to_driver=False,
                     configure_logging=False)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise InputError([f"--ray {address}: cannot connect to a Ray cluster: {exc}"]) \
                from None
        _ray_messages_to_stderr(quiet)
        cpus = ray.cluster_resources().get("CPU", 1)
        self.slots = max(1, int(cpus))
        nodes = sum(1 for n in ray.nodes() if n.get("Alive"))
        self.where = f"on Ray cluster {address} ({nodes} node(s), {self.slots} CPU(s))"
        self._remote = ray.remote(num_cpus=1, max_retries=RETRIES,
                                  retry_exceptions=False)(_ray_call)
        self._blobs: dict[str, tuple[str, Any]] = {}  # path -> (digest, object ref)

    def _blob(self, path: Path) -> tuple[str, Any]:
        key = str(path.resolve())
        if key not in self._blobs:
            try:
                data = path.read_bytes()
            except OSError as exc:
                raise InputError([f"cannot read {path}: {exc.strerror or exc}"]) from None
            self._blobs[key] = (hashlib.sha256(data).hexdigest()[:16], self._ray.put(data))
        return self._blobs[key]

    def submit(self, tid: Any, fn: Callable[[Any], Any], spec: Any) -> None:
        names, refs = [], []
        for fld, path in _spec_files(spec):
            digest, ref = self._blob(path)
            names.append((fld, path.name, digest))
            refs.append(ref)
        self._running[self._remote.remote(fn, spec, names, *refs)] = tid  # ref -> id

    def results(self) -> list[tuple[Any, bool, Any]]:
        """Wait until at least one task ends: ``(id, ok, metrics or exception)``."""
        if not self._running:
            return []
        ready, _ = self._ray.wait(list(self._running), num_returns=1)
        more, _ = self._ray.wait([r for r in self._running if r not in ready],
                                 num_returns=len(self._running) - len(ready), timeout=0)
        out: list[tuple[Any, bool, Any]] = []
        for ref in [*ready, *more]:
            tid = self._running.pop(ref)
            try:
                out.append((tid, True, self._ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 (the task's error, or retries used up)
                out.append((tid, False, exc))
        return out

    def close(self, cancel: bool = False) -> None:
        """Disconnect; the cluster ends the tasks of a driver that leaves (``cancel``
        needs nothing more: ``ray.cancel`` on tasks whose result is on its way can make
        Ray's core worker abort the process, "Tried to complete task that was not
        pending")."""
        self._ray.shutdown()


def make_backend(ray_address: str | None, jobs: int,
                 quiet: bool = False) -> LocalBackend | RayBackend:
    """Ray tasks when an address is given (``quiet``: no Ray messages), else ``jobs``
    local processes."""
    return RayBackend(ray_address, quiet) if ray_address else LocalBackend(jobs)


def run_all(backend: LocalBackend | RayBackend, fn: Callable[[Any], Any],
            specs: list[Any]) -> Iterator[tuple[int, Any]]:
    """Run ``fn(spec)`` for every spec; yields ``(index, result)`` as each finishes
    (an error in one run is raised)."""
    for k, spec in enumerate(specs):
        backend.submit(k, fn, spec)
    while backend.pending:
        for k, ok, value in backend.results():
            if not ok:
                raise value
            yield k, value
