"""Planning service: the planner and the verifier over HTTP, standard library only.

Endpoints (see ``docs/api.md`` and ``docs/openapi.yaml``)::

    POST /v1/plan     snapshot JSON -> plan JSON
                      options (query or header): time_limit_s / X-Time-Limit-S,
                      bound_s / X-Bound-S, deterministic / X-Deterministic, planner / X-Planner,
                      cluster / X-Cluster
    POST /v1/verify   {"snapshot": ..., "plan": ...} -> {"valid": bool, "violations": [...]}
    GET  /healthz     {"status": "ok"}
    GET  /metrics     Prometheus text format (the server's own registry)

Errors are JSON ``{"error": "...", "messages": [...]}``: 400 for malformed JSON,
an invalid snapshot or plan, or a bad option; 411 without Content-Length; 413
when the body exceeds the limit (checked before reading it); 404 for an unknown
path; 405 (with ``Allow``) for a wrong method.

Requests run on their own threads (``ThreadingHTTPServer``). The planner and the
verifier are pure functions of the request, so the only shared mutable state is
the metrics registry (thread safe) and a semaphore bounding concurrent solves.
With ``processes=True`` (``preempt-planner serve`` by default) each plan is
parsed and solved in a pool of worker processes, one per concurrent solve:
concurrent plans then run in parallel instead of sharing one interpreter lock,
and a plan may use a second lane (planner/solver/lanes.py), which needs a process
without other threads.
"""

from __future__ import annotations

import ctypes
import json
import logging
import math
import multiprocessing as mp
import os
import re
import signal
import sys
import threading
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram
from prometheus_client.exposition import generate_latest

from models import InputError, load_plan, load_snapshot
from models.load import load_snapshot_text
from planner.interrupts import sigterm_interrupts

__all__ = ["PlannerServer", "ServiceMetrics", "make_server", "run_until_interrupted", "serve"]

log = logging.getLogger("preempt_planner.service")

ROUTES: dict[str, tuple[str, ...]] = {
    "/v1/plan": ("POST",),
    "/v1/verify": ("POST",),
    "/healthz": ("GET", "HEAD"),
    "/metrics": ("GET", "HEAD"),
}
WARM_TIMEOUT_S = 120.0  # for the first pool's workers to start (imports take about 1 s)
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


class ServiceMetrics:
    """The server's Prometheus metrics, in a registry of its own (not the global one,
    so that several servers, e.g. in tests, do not collide)."""

    def __init__(self, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        self.requests = Counter(
            "preempt_planner_http_requests", "HTTP requests by endpoint and status code",
            ["endpoint", "method", "status"], registry=self.registry)
        self.request_seconds = Histogram(
            "preempt_planner_http_request_seconds", "HTTP request latency by endpoint",
            ["endpoint"], registry=self.registry)
        self.plan_seconds = Histogram(
            "preempt_planner_plan_seconds", "Wall time of plan requests: parse, validate, plan",
            ["planner"], registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0))
        self.plans = Counter(
            "preempt_planner_plans", "Plans returned, by plan status",
            ["status"], registry=self.registry)
        self.evictions = Counter(
            "preempt_planner_evictions_planned", "Evictions in the plans returned",
            registry=self.registry)
        self.placements = Counter(
            "preempt_planner_placements_planned", "Placements in the plans returned",
            registry=self.registry)
        self.verifications = Counter(
            "preempt_planner_verifications", "Plans verified, by outcome",
            ["valid"], registry=self.registry)


class _HTTPError(Exception):
    def __init__(self, status: int, error: str, messages: list[str] | None = None,
                 headers: dict[str, str] | None = None):
        super().__init__(error)
        self.status = status
        self.error = error
        self.messages = messages or []
        self.headers = headers or {}


class PlannerServer(ThreadingHTTPServer):
    """A ThreadingHTTPServer carrying the service options and metrics."""

    request_queue_size = 128  # listen backlog: bursts of concurrent clients are not reset
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], *, time_limit_s: float = 1.0,
                 max_time_limit_s: float = 60.0, max_body_bytes: int = 16 * 1024 * 1024,
                 planner: str = "cpsat", workers: int = 2, max_concurrent: int | None = None,
                 metrics: ServiceMetrics | None = None, quiet: bool = False,
                 processes: bool = False):
        self.time_limit_s = time_limit_s
        self.max_time_limit_s = max(max_time_limit_s, time_limit_s)
        self.max_body_bytes = max_body_bytes
        self.default_planner = planner
        self.workers = workers
        self.metrics = metrics or ServiceMetrics()
        self.quiet = quiet
        slots = max_concurrent or os.cpu_count() or 2
        self.solves = threading.BoundedSemaphore(slots)
        self.slots = slots
        self._pool_lock = threading.Lock()
        self.pool: ProcessPoolExecutor | None = None
        super().__init__(address, _Handler)  # (bound first: no workers start for a busy port)
        if planner == "cpsat" and not processes:  # (the workers warm up: _warm)
            from planner import warm_up

            warm_up()
        if processes:
            try:
                self.pool = self._new_pool(wait=True)
            except BaseException:
                super().server_close()
                raise

    def _new_pool(self, wait: bool = False) -> ProcessPoolExecutor:
        """Worker processes started by a fork server (itself a fresh interpreter;
        spawned where there is none, as on Windows), so that none is forked from this
        process's request threads; started with their imports (about 1 s) now, not
        on the first requests. ``wait``: until they are (the server's first pool), or
        RuntimeError if they cannot start (every request would get 503)."""
        method = "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"
        pool = ProcessPoolExecutor(max_workers=self.slots, mp_context=mp.get_context(method),
                                   initializer=_end_with, initargs=(os.getpid(),))
        warm = [pool.submit(_warm) for _ in range(self.slots)]
        if wait:
            end = time.monotonic() + WARM_TIMEOUT_S
            try:
                for f in warm:
                    f.result(timeout=max(0.0, end - time.monotonic()))
            except (BrokenProcessPool, TimeoutError) as exc:
                # (waiting for a broken pool's cleanup is quick, and leaks no semaphore)
                pool.shutdown(wait=isinstance(exc, BrokenProcessPool), cancel_futures=True)
                why = (f"did not start within {WARM_TIMEOUT_S:g} s"
                       if isinstance(exc, TimeoutError) else "died while starting")
                raise RuntimeError(
                    f"processes=True: the worker processes {why}. They import the main "
                    "module: a script that creates the server must do so under "
                    '`if __name__ == "__main__":` (see the traceback above, if any); '
                    "or pass processes=False") from None
        return pool

    def renew_pool(self, broken: ProcessPoolExecutor) -> None:
        """A worker died (killed, out of memory): the pool is unusable; a new one
        replaces it (once, however many requests saw it break)."""
        with self._pool_lock:
            if self.pool is broken:
                broken.shutdown(wait=False, cancel_futures=True)
                self.pool = self._new_pool()

    def server_close(self) -> None:
        super().server_close()
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}"


def make_server(host: str = "127.0.0.1", port: int = 8080, **opts: Any) -> PlannerServer:
    """A bound, not yet serving, server (``port=0`` picks a free port: see ``.url``).
    Options: time_limit_s, max_time_limit_s, max_body_bytes, planner, workers,
    max_concurrent, metrics, quiet, processes (solve in worker processes; then it
    returns once they have started, or raises RuntimeError if they cannot, as in a
    script that creates the server without the ``__main__`` guard). OSError if the
    address cannot be bound. Run it with ``serve_forever()``; ``server_close()`` also
    stops the workers."""
    return PlannerServer((host, port), **opts)


def serve(host: str = "127.0.0.1", port: int = 8080, **opts: Any) -> None:
    """Serve until interrupted (Ctrl-C)."""
    run_until_interrupted(make_server(host, port, **opts))


def run_until_interrupted(server: PlannerServer) -> None:
    """Serve requests until Ctrl-C or SIGTERM (how Kubernetes and systemd stop a
    service), then close the socket and stop the worker processes."""
    with sigterm_interrupts():
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()


# seconds a connection may leave the server waiting for the next bytes of a request
# (its line, headers or body) before it is closed: a slow or idle client does not
# hold a thread for ever (408 where a body stops arriving)
READ_TIMEOUT_S = 60.0


class _Handler(BaseHTTPRequestHandler):
    server: PlannerServer
    protocol_version = "HTTP/1.1"
    server_version = "preempt-planner"
    timeout = READ_TIMEOUT_S  # (StreamRequestHandler: the socket's timeout)

    # ------------------------------------------------------------- dispatch
    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_HEAD(self) -> None:
        self._dispatch("HEAD")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def do_PATCH(self) -> None:
        self._dispatch("PATCH")

    def do_OPTIONS(self) -> None:
        self._dispatch("OPTIONS")

    def _dispatch(self, method: str) -> None:
        t0 = time.perf_counter()
        self._body_read = False
        # a body this request's answer does not read would be taken for the next
        # request on a kept-alive connection: such a connection closes after the
        # answer, unless the body is read whole (_raw_body)
        self._keep = self.close_connection
        if self._has_body():
            self.close_connection = True
        self._metric: tuple[str, str, float] | None = ("other", method, t0)
        status = 500
        try:
            try:
                url = urlsplit(self.path)
            except ValueError:
                raise _HTTPError(400, "bad request target",
                                 [f"cannot parse the request target {self.path!r}"]) from None
            path = url.path.rstrip("/") or "/"
            self._metric = (path if path in ROUTES else "other", method, t0)
            allowed = ROUTES.get(path)
            if allowed is None:
                raise _HTTPError(404, "not found", [(f"no endpoint {path}; endpoints: "
                                                    f"{', '.join(ROUTES)}")])
            if method not in allowed:
                raise _HTTPError(405, "method not allowed",
                                 [f"{path} accepts {', '.join(allowed)}, not {method}"],
                                 {"Allow": ", ".join(allowed)})
            query = parse_qs(url.query, keep_blank_values=True)
            if path == "/v1/plan":
                status = self._plan(query)
            elif path == "/v1/verify":
                status = self._verify()
            elif path == "/healthz":
                status = self._send_json(200, {"status": "ok"}, head=method == "HEAD")
            else:
                body = generate_latest(self.server.metrics.registry)
                status = self._send(200, body, CONTENT_TYPE_LATEST, head=method == "HEAD")
        except _HTTPError as exc:
            if not self._body_read and self._has_body() or exc.status in (408, 411):
                self.close_connection = True  # an unread body would poison keep-alive
            status = self._send_json(exc.status, {"error": exc.error, "messages": exc.messages},
                                     headers=exc.headers, head=method == "HEAD")
        except Exception as exc:  # a bug: answer 500, keep serving
            # one line in the log; the traceback at --log-level DEBUG
            log.error("internal error on %s %s: %s: %s (the traceback at --log-level DEBUG)",
                      method, self.path, type(exc).__name__, exc)
            log.debug("traceback of the internal error", exc_info=True)
            self.close_connection = True
            status = self._send_json(500, {"error": "internal error",
                                           "messages": [f"{type(exc).__name__}: {exc}"]})
        finally:
            self._count(status)  # (when nothing was sent)

    def _count(self, status: int) -> None:
        """Count the request, once, before its answer goes out: a client that reads
        /metrics after its answer must find it counted."""
        if self._metric is None:
            return
        endpoint, method, t0 = self._metric
        self._metric = None
        m = self.server.metrics
        m.requests.labels(endpoint, method, str(status)).inc()
        m.request_seconds.labels(endpoint).observe(time.perf_counter() - t0)

    # ------------------------------------------------------------- requests
    _body_read = False
    _metric: tuple[str, str, float] | None = None  # (endpoint, method, start) to count

    def _encoded(self) -> bool:
        """Does the request send its body in a Transfer-Encoding (chunked, ...)?"""
        return self.headers.get("Transfer-Encoding", "").strip().lower() not in ("", "identity")

    def _has_body(self) -> bool:
        """Does the request say it carries a body (a Transfer-Encoding, or a
        Content-Length that is not 0)?"""
        return self._encoded() or any(
            v.strip() != "0" for v in self.headers.get_all("Content-Length") or [])

    def _raw_body(self) -> bytes:
        """The request body's bytes; 411/413/400/408 before or instead of reading it."""
        if self._encoded():
            raise _HTTPError(411, "length required",
                             ["chunked bodies are not accepted; send Content-Length"])
        given = self.headers.get_all("Content-Length") or []
        if not given:
            raise _HTTPError(411, "length required", ["the request needs a Content-Length"])
        if len(given) > 1:
            raise _HTTPError(400, "bad Content-Length",
                             [(f"{len(given)} Content-Length headers ({', '.join(given)}); "
                               "send one")])
        raw = given[0].strip()
        if not (raw.isascii() and raw.isdigit()):  # (int() would take '+5', '1_0')
            raise _HTTPError(400, "bad Content-Length", [f"Content-Length {raw!r}"])
        length = int(raw)
        limit = self.server.max_body_bytes
        if length > limit:
            raise _HTTPError(413, "request body too large",
                             [f"Content-Length {length} exceeds the limit of {limit} bytes"])
        try:
            data = self.rfile.read(length)
        except TimeoutError:
            raise _HTTPError(408, "request timeout",
                             [f"the body did not arrive within {READ_TIMEOUT_S:g} s"]) from None
        self._body_read = True
        if len(data) != length:
            raise _HTTPError(400, "incomplete body",
                             [f"got {len(data)} of {length} bytes"])
        self.close_connection = self._keep  # (read whole: the connection may stay open)
        return data

    def _body(self) -> Any:
        """The JSON request body; 411/413/400 before or instead of reading it."""
        doc, problem = _parse_json(self._raw_body())
        if problem:
            raise _HTTPError(400, "malformed JSON", problem)
        return doc

    def _option(self, query: dict[str, list[str]], name: str, header: str) -> str | None:
        if name in query:
            return query[name][-1]
        return self.headers.get(header)

    def _plan_options(self, query: dict[str, list[str]]) -> dict[str, Any]:
        from planner import PLANNERS

        srv = self.server
        errors = []
        opts: dict[str, Any] = {"time_limit_s": srv.time_limit_s, "deterministic": False,
                                "planner": srv.default_planner, "workers": srv.workers}
        raw = self._option(query, "time_limit_s", "X-Time-Limit-S")
        if raw is not None:
            try:
                t = float(raw)
                if not math.isfinite(t) or t <= 0:
                    raise ValueError
                opts["time_limit_s"] = min(t, srv.max_time_limit_s)
            except ValueError:
                errors.append(f"time_limit_s: {raw!r} is not a positive number of seconds")
        raw = self._option(query, "bound_s", "X-Bound-S")
        if raw is not None:
            try:
                b = float(raw)
                if not math.isfinite(b) or b < 0:
                    raise ValueError
                if b > 0:
                    opts["bound_s"] = min(b, srv.max_time_limit_s)
            except ValueError:
                errors.append(f"bound_s: {raw!r} is not 0 or a positive number of seconds")
        raw = self._option(query, "deterministic", "X-Deterministic")
        if raw is not None:
            v = raw.strip().lower()
            if v in _TRUE:
                opts["deterministic"] = True
            elif v in _FALSE:
                opts["deterministic"] = False
            else:
                errors.append(f"deterministic: {raw!r} is not true or false")
        raw = self._option(query, "planner", "X-Planner")
        if raw is not None:
            if raw in PLANNERS:
                opts["planner"] = raw
            else:
                errors.append(f"planner: unknown planner {raw!r} "
                              f"(choose from {', '.join(PLANNERS)})")
        raw = self._option(query, "cluster", "X-Cluster")
        if raw is not None:
            if CLUSTER_KEY.fullmatch(raw):
                opts["cluster"] = raw
            else:
                errors.append(f"cluster: {raw!r} is not a cluster key (1-128 of the "
                              "characters A-Z a-z 0-9 . _ -)")
        unknown = sorted(set(query) - {"time_limit_s", "bound_s", "deterministic", "planner",
                                       "cluster"})
        if unknown:
            errors.append(f"unknown query parameter(s): {', '.join(unknown)}")
        if errors:
            raise _HTTPError(400, "bad options", errors)
        return opts

    def _plan(self, query: dict[str, list[str]]) -> int:
        opts = self._plan_options(query)
        m = self.server.metrics
        pool = self.server.pool
        raw = self._raw_body()
        with self.server.solves:
            t0 = time.perf_counter()
            if pool is None:  # parsed and solved on this request's thread
                kind, out = _plan_job(raw, opts)
            else:  # in a worker process
                try:
                    kind, out = pool.submit(_plan_job, raw, opts).result()
                except BrokenProcessPool as exc:
                    self.server.renew_pool(pool)
                    raise _HTTPError(503, "worker process died", [
                        f"{exc}; the workers were restarted: send the request again"]) from None
            if kind == "plan":
                m.plan_seconds.labels(opts["planner"]).observe(time.perf_counter() - t0)
        if kind != "plan":
            raise _HTTPError(400, kind, out)
        body, status, evictions, placements = out
        m.plans.labels(status).inc()
        m.evictions.inc(evictions)
        m.placements.inc(placements)
        return self._send(200, body, "application/json")

    def _verify(self) -> int:
        from planner.checks.verify import verify

        doc = self._body()
        if not isinstance(doc, dict) or "snapshot" not in doc or "plan" not in doc:
            raise _HTTPError(400, "bad request",
                             ['the body must be an object {"snapshot": ..., "plan": ...}'])
        extra = sorted(set(doc) - {"snapshot", "plan"})
        if extra:
            raise _HTTPError(400, "bad request", [f"unknown field(s): {', '.join(extra)}"])
        messages = []
        snap = plan = None
        try:
            if not isinstance(doc["snapshot"], dict):  # (a string would be a file's path)
                raise InputError([NOT_AN_OBJECT])
            snap = load_snapshot(doc["snapshot"])
        except InputError as exc:
            messages += [f"snapshot: {e}" if not e.startswith("snapshot") else e
                         for e in exc.errors]
        if not isinstance(doc["plan"], dict):
            messages.append("plan: must be an object")
        else:
            try:
                plan = load_plan(doc["plan"])
            except InputError as exc:
                messages += exc.errors
        if messages or snap is None or plan is None:
            raise _HTTPError(400, "invalid snapshot or plan", messages)
        violations = verify(snap, plan)
        self.server.metrics.verifications.labels(str(not violations).lower()).inc()
        return self._send_json(200, {
            "valid": not violations,
            "violations": [{"rule": v.rule, "job": v.job, "message": v.message}
                           for v in violations],
        })

    # ------------------------------------------------------------- responses
    def _send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None,
                   head: bool = False) -> int:
        body = json.dumps(obj).encode()
        return self._send(status, body, "application/json", headers, head)

    def _send(self, status: int, body: bytes, ctype: str,
              headers: dict[str, str] | None = None, head: bool = False) -> int:
        self._count(status)
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if not head:
            self.wfile.write(body)
        return status

    def log_message(self, format: str, *args: Any) -> None:
        if not self.server.quiet:
            log.info("%s - %s", self.address_string(), format % args)


PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent ends


def _end_with(server_pid: int) -> None:
    """In a new worker process: end with the server, even one killed by SIGKILL.

    A fork-server worker receives the server's end of the pipe by which the fork
    server knows that the server lives; while any worker kept it open, a server
    killed without cleaning up left the fork server and its idle workers waiting
    for ever. The worker closes it (it starts no processes by the fork server: the
    second lane forks), so the fork server ends with the server, and on Linux the
    worker asks to be killed when its parent, the fork server, ends."""
    if not sys.platform.startswith("linux") or os.getppid() == server_pid:
        return  # (spawned by the server itself: a thread of it, which may end first)
    from multiprocessing import forkserver

    fd = getattr(forkserver._forkserver, "_forkserver_alive_fd", None)
    if fd is not None:
        forkserver._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
        try:
            os.close(fd)
        except OSError:  # (not open: nothing to close)
            pass
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # (no prctl: a worker may then outlive a SIGKILL)
        return
    try:
        os.kill(server_pid, 0)  # (the server already gone, before prctl took effect)
    except ProcessLookupError:
        os._exit(0)


def _warm() -> None:
    """In a new worker process: import the planner and OR-Tools, and measure the
    machine's speed (planner.warm_up), so that no request's time limit pays for them."""
    from planner import warm_up

    warm_up()


def _parse_json(data: bytes) -> tuple[Any, list[str]]:
    """A request body as JSON, or the reasons it is not (not UTF-8, nested too deep:
    the same limits as the CLI's, models.load)."""
    from models.load import MAX_DEPTH, TOO_MANY_DIGITS, check_json_depth, decode_text

    try:  # (json.loads would take UTF-16 and UTF-32 bytes too)
        text = decode_text(data, "body")
        doc = json.loads(text)
    except InputError as exc:
        return None, exc.errors
    except RecursionError:
        return None, [f"the document is nested more than {MAX_DEPTH} levels deep"]
    except json.JSONDecodeError as exc:
        return None, [f"line {exc.lineno} column {exc.colno}: {exc.msg}"]
    except ValueError:  # (Python's limit on the digits of an integer)
        return None, [TOO_MANY_DIGITS]
    try:
        check_json_depth(doc, text, "body")
    except InputError as exc:
        return None, exc.errors
    return doc, []


NOT_AN_OBJECT = "snapshot: must be a JSON object (the snapshot document itself)"


def _plan_job(data: bytes, opts: dict[str, Any]) -> tuple[str, Any]:
    """Parse, validate and plan one request body (in a worker process, or on the
    request's thread without ``processes``). Returns
    ("plan", (JSON bytes, plan status, evictions, placements)), or the 400 error
    ("malformed JSON" or "invalid snapshot") with its messages."""
    from planner import plan as run_plan

    opts = dict(opts)
    key = opts.pop("cluster", None)
    if key is not None:  # read from its text where it can be (the records that did not
        # change taken over without parsing them), else parsed below
        try:
            result = _loop(key).plan_text(data, **opts)
        except InputError as exc:
            return "invalid snapshot", exc.errors
        if result is not None:
            return _answer(result)
    else:  # read and validated from the text where it can be (half the time of parsing
        # it and validating the document), else parsed below
        try:
            snap = load_snapshot_text(data)
        except InputError as exc:
            return "invalid snapshot", exc.errors
        if snap is not None:
            return _answer(run_plan(snap, **opts))
    doc, problem = _parse_json(data)
    if problem:
        return "malformed JSON", problem
    if not isinstance(doc, dict):  # (the loaders read a string as a file's path)
        return "invalid snapshot", [NOT_AN_OBJECT]
    try:
        if key is None:
            result = run_plan(load_snapshot(doc), **opts)
        else:  # read and planned taking over what this key's last tick did not change
            result = _loop(key).plan(doc, **opts)
    except InputError as exc:
        return "invalid snapshot", exc.errors
    return _answer(result)


def _answer(result: Any) -> tuple[str, Any]:
    """_plan_job's answer for a plan."""
    return "plan", (result.model_dump_json().encode(), result.status, len(result.evictions),
                    len(result.placements))


CLUSTER_KEY = re.compile(r"[A-Za-z0-9._-]{1,128}")
LOOPS = 4  # clusters' loops kept per process, the least recently used dropped first
_loops: OrderedDict[str, Any] = OrderedDict()
_loops_lock = threading.Lock()


def _loop(key: str) -> Any:
    """This process's planner.Loop for a client's key (a new one for a key it has
    not seen, or dropped: the plan is the same either way, only slower to make)."""
    from planner import Loop

    with _loops_lock:
        s = _loops.pop(key, None) or Loop()
        _loops[key] = s
        while len(_loops) > LOOPS:
            _loops.popitem(last=False)
        return s


# ------------------------------------------------------------------ OpenAPI
def _allow_comments(node: Any) -> Any:
    """The loader drops keys that start with ``_`` (comments, e.g. ``_k8s``): say so
    wherever the generated schema forbids unknown properties."""
    if isinstance(node, dict):
        out = {k: _allow_comments(v) for k, v in node.items()}
        if out.get("additionalProperties") is False and "properties" in out:
            out["patternProperties"] = {"^_": {}}
        return out
    if isinstance(node, list):
        return [_allow_comments(v) for v in node]
    return node


def openapi_document() -> dict[str, Any]:
    """The OpenAPI 3.1 description of the service (``docs/openapi.yaml`` is this,
    written as YAML; a test keeps them equal). Snapshot and Plan schemas are the
    JSON Schemas that the pydantic models generate."""
    from models import Plan, Snapshot
    from planner import PLANNERS

    ref = "#/components/schemas/{model}"
    schemas: dict[str, Any] = {}
    for model in (Snapshot, Plan):
        sch = model.model_json_schema(ref_template=ref)
        for name, d in sch.pop("$defs", {}).items():
            if name in schemas and schemas[name] != d:  # pragma: no cover - model change
                raise RuntimeError(f"two different schemas named {name}")
            schemas[name] = d
        schemas[model.__name__] = sch
    schemas = _allow_comments(schemas)

    def err(desc: str) -> dict[str, Any]:
        return {"description": desc, "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Error"}}}}

    schemas.update({
        "Error": {"type": "object", "required": ["error", "messages"], "properties": {
            "error": {"type": "string", "description": "what went wrong, in a few words"},
            "messages": {"type": "array", "items": {"type": "string"},
                         "description": "one line per problem, naming the field path"}}},
        "VerifyRequest": {"type": "object", "required": ["snapshot", "plan"],
                          "additionalProperties": False, "properties": {
                              "snapshot": {"$ref": "#/components/schemas/Snapshot"},
                              "plan": {"$ref": "#/components/schemas/Plan"}}},
        "Violation": {"type": "object", "required": ["rule", "job", "message"], "properties": {
            "rule": {"type": "string", "description": "R1..R13 or a plan bookkeeping code"},
            "job": {"type": ["string", "null"]},
            "message": {"type": "string"}}},
        "VerifyResult": {"type": "object", "required": ["valid", "violations"], "properties": {
            "valid": {"type": "boolean"},
            "violations": {"type": "array",
                           "items": {"$ref": "#/components/schemas/Violation"}}}},
        "Health": {"type": "object", "required": ["status"],
                   "properties": {"status": {"const": "ok"}}},
    })
    common = {
        "400": err("malformed JSON, an invalid snapshot or plan, or a bad option"),
        "405": err("wrong method (the Allow header lists the right ones)"),
        "411": err("no Content-Length (chunked bodies are not accepted)"),
        "413": err("body larger than the server's limit (--max-body-mb)"),
        "500": err("a bug in the service"),
    }

    def opt(name: str, where: str, schema: dict[str, Any], desc: str) -> dict[str, Any]:
        return {"name": name, "in": where, "required": False, "schema": schema,
                "description": desc}

    plan_params = [
        opt("time_limit_s", "query", {"type": "number", "exclusiveMinimum": 0},
            "solver time limit in seconds (default: the server's --time-limit; capped by "
            "--max-time-limit)"),
        opt("bound_s", "query", {"type": "number", "minimum": 0},
            "seconds more, after the plan, proving a bound on the best plan of the tick "
            "(solver.gap, solver.bound; 0: none, the default; capped by --max-time-limit)"),
        opt("deterministic", "query", {"type": "boolean"},
            "one worker, fixed seed and deterministic time: same input, same plan (R14)"),
        opt("planner", "query", {"type": "string", "enum": list(PLANNERS)},
            "planner engine (default: the server's --planner)"),
        opt("cluster", "query", {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"},
            "a key the client chooses for the cluster whose ticks it sends: what the last "
            "tick with this key read and derived, and this one did not change, is taken "
            "over; the plan is the one made without it, except where the last tick's "
            "plan was not carried out and still holds: the search then goes on from it"),
        opt("X-Time-Limit-S", "header", {"type": "number", "exclusiveMinimum": 0},
            "same as time_limit_s (the query wins)"),
        opt("X-Bound-S", "header", {"type": "number", "minimum": 0}, "same as bound_s"),
        opt("X-Deterministic", "header", {"type": "boolean"}, "same as deterministic"),
        opt("X-Planner", "header", {"type": "string", "enum": list(PLANNERS)},
            "same as planner"),
        opt("X-Cluster", "header", {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,128}$"},
            "same as cluster"),
    ]
    return {
        "openapi": "3.1.0",
        "info": {"title": "preempt-planner planning service", "version": "1.0.0",
                 "description": "Preemption planning for shared GPU clusters over HTTP: the "
                                "data contract format v1 in, a plan out. See docs/api.md."},
        "servers": [{"url": "http://127.0.0.1:8080"}],
        "paths": {
            "/v1/plan": {"post": {
                "operationId": "plan", "summary": "Plan one scheduling tick",
                "parameters": plan_params,
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Snapshot"}}}},
                "responses": {"200": {"description": "the plan (never breaks R1-R13)",
                                      "content": {"application/json": {"schema": {
                                          "$ref": "#/components/schemas/Plan"}}}},
                              **common,
                              "503": err("a worker process died while planning (solving "
                                         "in processes); the workers were restarted: send "
                                         "the request again")}}},
            "/v1/verify": {"post": {
                "operationId": "verify", "summary": "Check a plan against its snapshot",
                "requestBody": {"required": True, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/VerifyRequest"}}}},
                "responses": {"200": {"description": "the rules the plan breaks, if any",
                                      "content": {"application/json": {"schema": {
                                          "$ref": "#/components/schemas/VerifyResult"}}}},
                              **common}}},
            "/healthz": {"get": {
                "operationId": "healthz", "summary": "Liveness",
                "responses": {"200": {"description": "the server answers",
                                      "content": {"application/json": {"schema": {
                                          "$ref": "#/components/schemas/Health"}}}},
                              "405": common["405"]}}},
            "/metrics": {"get": {
                "operationId": "metrics", "summary": "Prometheus metrics",
                "responses": {"200": {"description": "Prometheus text exposition format",
                                      "content": {"text/plain": {"schema": {
                                          "type": "string"}}}},
                              "405": common["405"]}}},
        },
        "components": {"schemas": schemas},
    }
