"""``preempt-planner serve``: the planning service over HTTP (see ``docs/api.md``)."""

from __future__ import annotations

import argparse
import math
from typing import Any

from models import InputError, range_problems
from models.load import MAX_DOCUMENT_BYTES
from planner.commands._common import err_console, error, warn_settings


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve", help="run the planning HTTP service (POST /v1/plan, /v1/verify)",
        description="Serve POST /v1/plan, POST /v1/verify, GET /healthz and GET /metrics "
                    "(Prometheus). See docs/api.md.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (default 8080; 0 = any free)")
    p.add_argument("--time-limit", type=float, default=1.0, metavar="S",
                   help="default solver time limit per plan, seconds (default 1.0)")
    p.add_argument("--max-time-limit", type=float, default=60.0, metavar="S",
                   help="largest time_limit_s a request may ask for (default 60)")
    p.add_argument("--max-body-mb", type=float, default=16.0, metavar="MB",
                   help="largest request body, MiB (default 16); larger ones get 413")
    p.add_argument("--planner", default="cpsat", help="default planner (default cpsat)")
    p.add_argument("--workers", type=int, default=None,
                   help="cores per plan: CP-SAT workers, and a second lane on big clusters "
                        "(default 2)")
    p.add_argument("--processes", action=argparse.BooleanOptionalAction, default=True,
                   help="solve each plan in a pool of worker processes, one per concurrent "
                        "solve (default); --no-processes solves on the request's thread")
    p.add_argument("--max-concurrent", type=int, default=None,
                   help="plans solved at once; more wait (default: number of CPUs)")
    p.set_defaults(func=run)


MIN_BODY_MB = 0.001  # about 1 KiB: below it no snapshot fits, every request would be 413
MAX_BODY_MB = MAX_DOCUMENT_BYTES / (1024 * 1024)  # 1 GiB: the largest document read at all


def _serve_problems(args: argparse.Namespace) -> list[str]:
    """The options that are each in range but meaningless (range_problems says when
    one is not a positive number)."""
    out = []
    if not args.host.strip():
        out.append("--host: empty; give the address to listen on: 127.0.0.1 (the default) "
                   "for this machine only, 0.0.0.0 (or ::) for every interface")
    limit, most = args.time_limit, args.max_time_limit
    if math.isfinite(limit) and math.isfinite(most) and 0 < most < limit:
        out.append(f"--time-limit: {limit:g} s is more than --max-time-limit {most:g} s, the "
                   "largest a request may ask for; the default limit may not exceed it")
    mb = args.max_body_mb
    if math.isfinite(mb) and 0 < mb < MIN_BODY_MB:
        out.append(f"--max-body-mb: must be at least {MIN_BODY_MB:g} (MiB, about 1 KiB: a "
                   f"smaller limit refuses every request), got {mb:g}")
    elif math.isfinite(mb) and mb > MAX_BODY_MB:
        out.append(f"--max-body-mb: must be at most {MAX_BODY_MB:g} (MiB: 1 GiB, the largest "
                   f"document the planner reads), got {mb:g}")
    return out


def run(args: argparse.Namespace) -> int:
    from planner import PLANNERS
    from planner.service import make_server, run_until_interrupted

    if args.planner not in PLANNERS:
        error(f"unknown planner {args.planner!r} (choose from {', '.join(PLANNERS)})")
        return 2
    bad = range_problems([("--time-limit", args.time_limit),
                          ("--max-time-limit", args.max_time_limit),
                          ("--max-body-mb", args.max_body_mb)],
                         [("--workers", args.workers), ("--max-concurrent", args.max_concurrent)])
    if not 0 <= args.port <= 65535:
        bad.append(f"--port: must be a port number from 0 to 65535, got {args.port}")
    bad += _serve_problems(args)
    if bad:
        raise InputError(bad)
    workers = warn_settings(False, args.workers)
    try:
        server = make_server(args.host, args.port, time_limit_s=args.time_limit,
                             max_time_limit_s=args.max_time_limit,
                             max_body_bytes=int(args.max_body_mb * 1024 * 1024),
                             planner=args.planner, workers=workers,
                             max_concurrent=args.max_concurrent, quiet=args.quiet,
                             processes=args.processes)
    except OSError as exc:  # the address: in use, not ours, not resolvable
        error(f"--host/--port: cannot listen on {args.host}:{args.port}: "
              f"{exc.strerror or exc}")
        return 2
    except RuntimeError as exc:  # the worker processes could not start
        error(str(exc))
        return 3
    # (always, also with --quiet: where the service is, which a caller waits for)
    err_console.print(f"preempt-planner serving on {server.url} "
                      "(POST /v1/plan, POST /v1/verify, GET /healthz, GET /metrics)",
                      markup=False)
    run_until_interrupted(server)
    return 0
