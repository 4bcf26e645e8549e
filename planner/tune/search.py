"""The search of ``preempt-planner tune``: trials (policies of the space) run on every
cell (trace window x load x seed), the Pareto front of their objectives, and one
trade-off chosen from it.

- **Cells.** A trial's value of an objective is its mean over the cells. Cells run
  window by window (the stages): after each window but the last, a trial that
  another trial dominates on the windows run so far (a feasible one, on the means
  of the same cells) is pruned, and its later windows are not simulated.
- **References.** The policy without the space's changes (``default``) and the
  ``naive`` planner run on every cell too: constraints such as
  ``t1_p95<=1.1*naive`` compare a trial with them on the same cells, and the
  chosen policy is reported against both.
- **Search.** A grid runs every point of the space; otherwise Optuna's
  multi-objective sampler (TPE or NSGA-II) proposes ``--trials`` trials. Trials go
  in generations of ``batch``; within a generation, windows are barriers and the
  sampler is told the results in trial order, so the same settings propose the same
  trials whatever order the simulations end in (a rerun is all cache hits, and an
  interrupted search resumes from the cache).
- **Choice.** On the front (trials meeting every constraint; all completed trials
  when none does), each objective is scaled to [0, 1] between its best and worst
  value on the front and the weighted sum is minimised (ties: the earlier trial).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from models import InputError, Policy
from planner.tune.backends import simulate_metrics
from planner.tune.cache import SimCache, code_version, file_digest, run_key
from planner.tune.space import GRID_LIMIT, Constraint, Objective, Space

__all__ = ["Cell", "Settings", "Trial", "Tuner", "Window", "dominates", "pareto_front"]

TUNE_EXTRA = "pip install 'preempt-planner[tune]'"


@dataclass(frozen=True)
class Window:
    start: float | None
    days: float | None
    label: str


@dataclass(frozen=True)
class Cell:
    window: int  # index into Settings.windows (the stage)
    load: float
    seed: int


@dataclass
class Settings:
    """What every simulation of a search shares."""

    cluster: str
    trace: str
    windows: list[Window]
    loads: list[float]
    seeds: list[int]
    planner: str = "cpsat"
    policy: str | None = None
    sets: list[tuple[str, Any]] = field(default_factory=list)  # every run, references too
    trace_format: str = "auto"
    tier_rule: str | None = None
    carry_over: bool = False
    tick_s: float = 60.0
    time_limit_s: float = 1.0
    workers: int = 1
    deterministic: bool = False
    time_limits: bool = True

    def cells(self, stage: int | None = None) -> list[Cell]:
        stages = range(len(self.windows)) if stage is None else [stage]
        return [Cell(w, load, seed) for w in stages for load in self.loads for seed in self.seeds]


@dataclass
class Trial:
    name: str  # "#3", or "default" / "naive" for the references
    number: int  # 0 for the references
    params: dict[str, Any]
    sets: list[tuple[str, Any]]
    planner: str
    policy: dict[str, Any] = field(default_factory=dict)  # the effective policy, JSON
    results: dict[Cell, dict[str, Any]] = field(default_factory=dict)
    state: str = "running"  # running, complete, pruned, failed
    pruned_after: str | None = None  # the window label after which it was pruned
    error: str | None = None
    optuna: Any = None

    @property
    def reference(self) -> bool:
        return self.number == 0


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def dominates(a: list[float], b: list[float]) -> bool:
    """``a`` is at least as good as ``b`` on every objective and better on one
    (all minimised; values within 1e-9 relative count as equal)."""
    better = False
    for x, y in zip(a, b, strict=True):
        if _close(x, y):
            continue
        if x > y:
            return False
        better = True
    return better


def pareto_front(points: list[list[float]]) -> list[int]:
    """Indices of the points no other point dominates."""
    return [i for i, p in enumerate(points)
            if not any(dominates(q, p) for j, q in enumerate(points) if j != i)]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class Tuner:
    """Runs a search; :meth:`run` returns its record (JSON-ready)."""

    def __init__(self, settings: Settings, space: Space, objectives: list[Objective],
                 constraints: list[Constraint], backend: Any, cache: SimCache, *,
                 trials: int = 50, search: str = "auto", sampler: str = "tpe",
                 sampler_seed: int = 0, batch: int | None = None, prune: bool = True,
                 progress: Callable[[dict[str, Any]], None] | None = None):
        self.s, self.space = settings, space
        self.objectives, self.constraints = objectives, constraints
        self.backend, self.cache = backend, cache
        self.n_trials, self.sampler_name, self.sampler_seed = trials, sampler, sampler_seed
        self.batch = max(1, batch or max(2, backend.slots))
        self.prune = prune and len(settings.windows) > 1
        self.progress = progress
        self.mode = self._mode(search)
        self.base = self._base_policy()
        self.trials: list[Trial] = []
        self.refs: dict[str, Trial] = {}
        self.ran: list[dict[str, Any]] = []
        self.cached = 0
        self.failed = 0
        self._walls: list[float] = []
        self._t0 = time.monotonic()
        self._static = self._static_key()
        self._check_space()

    # ---------------------------------------------------------------- set-up
    def _mode(self, search: str) -> str:
        size = self.space.grid_size()
        if search == "grid":
            if size is None:
                raise InputError([("--search grid: the space has a continuous range (give it a "
                                   "step, or use --search optuna)")])
            if size > GRID_LIMIT:  # (listing it would take longer than any search)
                raise InputError([(f"--search grid: the space has {size:,} points, more than "
                                   f"a grid's {GRID_LIMIT:,} (larger steps, fewer choices, or "
                                   "--search optuna)")])
            return "grid"
        if search == "auto" and size is not None and size <= min(self.n_trials, GRID_LIMIT):
            return "grid"
        try:
            import optuna  # noqa: F401
        except ImportError:
            why = ("a continuous range" if size is None else
                   f"{size:,} points, more than --trials {self.n_trials}")
            raise InputError([(f"--space: this space ({why}) is searched with Optuna, which is "
                               f"not installed ({TUNE_EXTRA}); or make it a grid of at most "
                               "--trials points")]) from None
        return "optuna"

    def _base_policy(self) -> Policy:
        from models import load_policy
        from planner.sim.cluster import load_cluster
        from planner.sim.runner import set_policy

        pol = load_policy(self.s.policy) if self.s.policy else None
        base = load_cluster(self.s.cluster, pol).policy
        return set_policy(base, self.s.sets) if self.s.sets else base

    def _policy(self, sets: list[tuple[str, Any]]) -> dict[str, Any]:
        from planner.sim.runner import set_policy

        return set_policy(self.base, sets).model_dump(mode="json")

    def _check_space(self) -> None:
        """Every parameter at its ends (or each choice) gives a valid policy."""
        errors: list[str] = []
        for p in self.space.params:
            values = list(p.choices) if p.kind == "choice" else (
                [int(p.low), int(p.high)] if p.kind == "int" else [p.low, p.high])
            for v in values:
                try:
                    self._policy([*self.space.fixed, (p.key, v)])
                except InputError as exc:
                    errors += [f"params.{p.key} = {v!r}: {e}" for e in exc.errors]
                    break
        if errors:
            raise InputError(errors, "--space")

    def _static_key(self) -> dict[str, Any]:
        from planner.sim.traces import resolve_trace_path

        s = self.s
        rule = s.tier_rule
        if rule and rule.startswith("map:"):
            rule = f"map:{file_digest(rule[4:])}"
        return {"code": code_version(), "cluster": file_digest(s.cluster),
                "trace": file_digest(resolve_trace_path(s.trace)),
                "trace_format": s.trace_format, "tier_rule": rule, "carry_over": s.carry_over,
                "tick_s": s.tick_s, "time_limit_s": s.time_limit_s, "workers": s.workers,
                "deterministic": s.deterministic, "time_limits": s.time_limits}

    def _new_trial(self, params: dict[str, Any], optuna_trial: Any = None) -> Trial:
        sets = [*self.space.fixed, *params.items()]
        t = Trial(f"#{len(self.trials) + 1}", len(self.trials) + 1, dict(params), sets,
                  self.s.planner, optuna=optuna_trial)
        try:
            t.policy = self._policy(sets)
        except InputError as exc:  # (a value inside the ranges that the policy refuses)
            t.state, t.error = "failed", "; ".join(exc.errors)
        self.trials.append(t)
        return t

    def _reference(self, name: str) -> Trial:
        planner = "naive" if name == "naive" else self.s.planner
        t = Trial(name, 0, {}, [], planner, policy=self._policy([]))
        self.refs[name] = t
        return t

    def check_inputs(self) -> None:
        """Load the trace and cluster of every window once, at the first load and seed
        (InputError: a bad file, an empty window), before anything is submitted."""
        from planner.sim.runner import prepare

        ref = Trial("default", 0, {}, [], self.s.planner)
        for w in range(len(self.s.windows)):
            try:
                prepare(self.spec(ref, Cell(w, self.s.loads[0], self.s.seeds[0])))
            except InputError as exc:
                label = self.s.windows[w].label
                raise InputError(exc.errors if len(self.s.windows) == 1 else
                                 [f"window {label}: {e}" for e in exc.errors],
                                 exc.source) from None

    # ---------------------------------------------------------------- runs
    def spec(self, t: Trial, cell: Cell) -> Any:
        from planner.sim.runner import RunSpec

        s, w = self.s, self.s.windows[cell.window]
        return RunSpec(cluster=s.cluster, trace=s.trace, policy=s.policy,
                       trace_format=s.trace_format, carry_over=s.carry_over,
                       time_scale=1.0 / cell.load, tier_rule=s.tier_rule,
                       policy_sets=[*s.sets, *t.sets],
                       config={"planner": t.planner, "tick_s": s.tick_s, "days": w.days,
                               "start": w.start, "seed": cell.seed,
                               "time_limit_s": s.time_limit_s, "workers": s.workers,
                               "deterministic": s.deterministic, "label": t.name,
                               "time_limits": s.time_limits})

    def key(self, t: Trial, cell: Cell) -> str:
        w = self.s.windows[cell.window]
        return run_key({**self._static, "planner": t.planner, "policy": t.policy,
                        "start": w.start, "days": w.days, "load": cell.load, "seed": cell.seed})

    def _submit(self, t: Trial, cell: Cell) -> None:
        key = self.key(t, cell)
        hit = self.cache.get(key)
        if hit is not None:
            self.cached += 1
            self._record(t, cell, hit["metrics"])
            return
        self.backend.submit((t.name, cell, key), simulate_metrics, self.spec(t, cell))

    def _record(self, t: Trial, cell: Cell, m: dict[str, Any]) -> None:
        t.results[cell] = m
        if t.state == "running" and not t.reference and len(t.results) == len(self.s.cells()):
            t.state = "complete"
            self._report()

    def _drain(self) -> None:
        """Wait for every submitted simulation, caching each result as it comes."""
        by_name = {t.name: t for t in [*self.trials, *self.refs.values()]}
        while self.backend.pending:
            for (name, cell, key), ok, value in self.backend.results():
                t = by_name[name]
                w = self.s.windows[cell.window]
                if not ok:
                    self.failed += 1
                    t.state, t.error = "failed", f"{type(value).__name__}: {value}"
                    if t.reference:
                        raise RuntimeError(f"the {name} reference run failed on window "
                                           f"{w.label}, load {cell.load:g}, seed {cell.seed}: "
                                           f"{t.error}")
                    continue
                self._walls.append(float(value.get("task_wall_s", 0.0)))
                self.cache.put(key, {"run": {"trial": name, "planner": t.planner,
                                             "policy_sets": [[k, v] for k, v in t.sets],
                                             "window": w.label, "start": w.start,
                                             "days": w.days, "load": cell.load,
                                             "seed": cell.seed, "code": self._static["code"]},
                                     "metrics": value})
                self.ran.append({"trial": name, "window": w.label, "load": cell.load,
                                 "seed": cell.seed})
                self._record(t, cell, value)
            self._report(quiet_unless_due=True)

    def _run_generation(self, trials: list[Trial]) -> None:
        active = [t for t in trials if t.state == "running"]
        for stage in range(len(self.s.windows)):
            for t in active:
                for cell in self.s.cells(stage):
                    self._submit(t, cell)
            self._drain()
            active = [t for t in active if t.state in ("running", "complete")]
            if self.prune and stage < len(self.s.windows) - 1:
                for t in [t for t in active if not t.reference]:
                    if self._dominated_so_far(t, stage):
                        t.state, t.pruned_after = "pruned", self.s.windows[stage].label
                        self._report()
                active = [t for t in active if t.state != "pruned"]

    # ---------------------------------------------------------------- judging
    def values(self, t: Trial, cells: list[Cell] | None = None) -> list[float]:
        cells = self.s.cells() if cells is None else cells
        return [_mean([o.value(t.results[c]) for c in cells]) for o in self.objectives]

    def metric_means(self, t: Trial, names: list[str],
                     cells: list[Cell] | None = None) -> dict[str, float]:
        from planner.tune.space import metric

        cells = self.s.cells() if cells is None else cells
        return {n: _mean([metric(n)[2](t.results[c]) for c in cells]) for n in names}

    def violations(self, t: Trial, cells: list[Cell] | None = None) -> list[float]:
        if not self.constraints:
            return []
        names = sorted({c.name for c in self.constraints})
        refs = {r: self.metric_means(self.refs[r], names, cells) for r in self.refs}
        mine = self.metric_means(t, names, cells)
        return [c.violation(mine[c.name], refs) for c in self.constraints]

    def feasible(self, t: Trial, cells: list[Cell] | None = None) -> bool:
        return all(v <= 0 for v in self.violations(t, cells))

    def _dominated_so_far(self, t: Trial, stage: int) -> bool:
        cells = [c for c in self.s.cells() if c.window <= stage]
        mine = self.values(t, cells)
        for u in self.trials:
            if u is t or u.state == "failed" or any(c not in u.results for c in cells):
                continue
            if dominates(self.values(u, cells), mine) and self.feasible(u, cells):
                return True
        return False

    def front(self) -> tuple[list[Trial], bool]:
        """(the front's trials in trial order, whether they meet the constraints)."""
        done, seen = [], set()
        for t in self.trials:  # (a policy Optuna proposed again counts once)
            key = json.dumps(t.params, sort_keys=True)
            if t.state == "complete" and key not in seen:
                seen.add(key)
                done.append(t)
        ok = [t for t in done if self.feasible(t)]
        pool = ok or done
        idx = pareto_front([self.values(t) for t in pool])
        return [pool[i] for i in idx], bool(ok)

    def choose(self, front: list[Trial]) -> Trial | None:
        if not front:
            return None
        vals = [self.values(t) for t in front]
        weights = [o.weight for o in self.objectives]
        if not any(weights):
            weights = [1.0] * len(weights)
        lo = [min(v[i] for v in vals) for i in range(len(weights))]
        hi = [max(v[i] for v in vals) for i in range(len(weights))]

        def score(v: list[float]) -> float:
            return sum(w * ((x - a) / (b - a) if b > a else 0.0)
                       for w, x, a, b in zip(weights, v, lo, hi, strict=True))

        return min(zip(front, vals, strict=True), key=lambda tv: (score(tv[1]), tv[0].number))[0]

    # ---------------------------------------------------------------- progress
    def _report(self, quiet_unless_due: bool = False) -> None:
        if self.progress is None:
            return
        now = time.monotonic()
        if quiet_unless_due and now - getattr(self, "_last_report", 0.0) < 10.0:
            return
        self._last_report = now
        done = [t for t in self.trials if t.state in ("complete", "pruned", "failed")]
        ready = all(len(r.results) == len(self.s.cells()) for r in self.refs.values())
        front, _ = self.front() if ready and any(t.state == "complete"
                                                  for t in self.trials) else ([], True)
        best = self.choose(front)
        total = self.grid_total if self.mode == "grid" else self.n_trials
        left_cells = sum(len(self.s.cells()) - len(t.results) for t in
                         [*self.trials, *self.refs.values()] if t.state == "running")
        left_cells += max(0, total - len(self.trials)) * len(self.s.cells())
        mean_wall = _mean(self._walls)
        self.progress({
            "trials_done": len(done), "trials": total,
            "pruned": sum(t.state == "pruned" for t in self.trials),
            "failed": sum(t.state == "failed" for t in self.trials),
            "simulations_run": len(self.ran), "simulations_cached": self.cached,
            "front": len(front), "best": None if best is None else {
                "trial": best.name, "params": best.params,
                "values": dict(zip([o.name for o in self.objectives], self.values(best),
                                   strict=True))},
            "elapsed_s": now - self._t0,
            "left_s": (left_cells * mean_wall / self.backend.slots) if self._walls else None,
        })

    # ---------------------------------------------------------------- the search
    def run(self) -> dict[str, Any]:
        refs = [self._reference("default"), self._reference("naive")]
        if self.mode == "grid":
            points = self.space.grid()
            self.grid_total = len(points)
            first = True
            for k in range(0, len(points), self.batch):
                gen = [self._new_trial(p) for p in points[k:k + self.batch]]
                self._run_generation((refs if first else []) + gen)
                first = False
            if not points:
                self._run_generation(refs)
        else:
            self.grid_total = self.n_trials
            self._optuna(refs)
        return self.record()

    def _optuna(self, refs: list[Trial]) -> None:
        import optuna
        from optuna.trial import TrialState

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

        def constraints_of(ft: Any) -> list[float]:
            return list(ft.user_attrs.get("constraints", [0.0] * len(self.constraints)))

        # Optuna 5 takes constraints from the trial (set_constraint); before, from a function
        modern = hasattr(optuna.trial.Trial, "set_constraint")
        cf = constraints_of if self.constraints and not modern else None
        if self.sampler_name == "nsga2":
            sampler: Any = optuna.samplers.NSGAIISampler(
                population_size=max(4, self.batch), seed=self.sampler_seed, constraints_func=cf)
        else:
            sampler = optuna.samplers.TPESampler(seed=self.sampler_seed, constraints_func=cf)
        study = optuna.create_study(directions=["minimize"] * len(self.objectives),
                                    sampler=sampler)
        dists = {p.key: p.distribution() for p in self.space.params}
        first = True
        while len(self.trials) < self.n_trials:
            gen = []
            for _ in range(min(self.batch, self.n_trials - len(self.trials))):
                ot = study.ask(dists)
                gen.append(self._new_trial({p.key: p.decode(ot.params[p.key])
                                            for p in self.space.params}, ot))
            self._run_generation((refs if first else []) + gen)
            first = False
            for t in gen:  # (told in trial order: the same results propose the same trials)
                if t.state == "complete":
                    for k, v in enumerate(self.violations(t)):
                        if modern:
                            t.optuna.set_constraint(f"c{k}", v)
                    if self.constraints and not modern:
                        t.optuna.set_user_attr("constraints", self.violations(t))
                    study.tell(t.optuna, self.values(t))
                elif t.state == "pruned":
                    study.tell(t.optuna, state=TrialState.PRUNED)
                else:
                    study.tell(t.optuna, state=TrialState.FAIL)

    # ---------------------------------------------------------------- the record
    def _cells_json(self, t: Trial) -> list[dict[str, Any]]:
        out = []
        for c in self.s.cells():
            if c not in t.results:
                continue
            m = t.results[c]
            out.append({"window": self.s.windows[c.window].label, "load": c.load, "seed": c.seed,
                        **{o.name: o.value(m) for o in self.objectives},
                        **{n: v for n, v in self.metric_means(t, self._extra_metrics(),
                                                              [c]).items()}})
        return out

    def _extra_metrics(self) -> list[str]:
        names = [o.name for o in self.objectives]
        return [c.name for c in self.constraints if c.name not in names]

    def trial_json(self, t: Trial, front: set[str]) -> dict[str, Any]:
        d: dict[str, Any] = {"trial": t.name, "number": t.number, "params": t.params,
                             "planner": t.planner, "state": t.state}
        if t.state == "complete" or t.reference:
            d["values"] = dict(zip([o.name for o in self.objectives], self.values(t),
                                   strict=True))
            if self._extra_metrics():  # (constrained metrics that are no objective)
                d["constrained"] = self.metric_means(t, self._extra_metrics())
            if self.constraints and not t.reference:
                d["violations"] = {c.text: v for c, v in zip(self.constraints,
                                                              self.violations(t), strict=True)}
                d["feasible"] = self.feasible(t)
            d["on_front"] = t.name in front
        if t.pruned_after:
            d["pruned_after"] = t.pruned_after
        if t.error:
            d["error"] = t.error
        d["cells"] = self._cells_json(t)
        return d

    def record(self) -> dict[str, Any]:
        front, feasible = self.front()
        chosen = self.choose(front)
        names = {t.name for t in front}
        s = self.s
        return {
            "settings": {
                "cluster": s.cluster, "trace": s.trace, "planner": s.planner,
                "policy": s.policy, "set": [[k, v] for k, v in s.sets],
                "windows": [{"label": w.label, "start": w.start, "days": w.days}
                            for w in s.windows],
                "loads": s.loads, "seeds": s.seeds, "tick_s": s.tick_s,
                "time_limit_s": s.time_limit_s, "workers": s.workers,
                "carry_over": s.carry_over, "tier_rule": s.tier_rule,
                "search": self.mode, "sampler": self.sampler_name if self.mode == "optuna"
                else None, "sampler_seed": self.sampler_seed, "trials": self.n_trials,
                "batch": self.batch, "prune": self.prune, "where": self.backend.where,
                "code_version": self._static["code"],
            },
            "space": {"params": [{"key": p.key, "values": p.describe()}
                                 for p in self.space.params],
                      "fixed": [[k, v] for k, v in self.space.fixed]},
            "objectives": [{"name": o.name, "title": o.title, "weight": o.weight}
                           for o in self.objectives],
            "constraints": [c.text for c in self.constraints],
            "references": {n: self.trial_json(t, set()) for n, t in self.refs.items()},
            "trials": [self.trial_json(t, names) for t in self.trials],
            "front": [t.name for t in front],
            "front_feasible": feasible,
            "chosen": None if chosen is None else {
                "trial": chosen.name, "params": chosen.params, "policy": chosen.policy,
                "values": dict(zip([o.name for o in self.objectives], self.values(chosen),
                                   strict=True))},
            "simulations": {"run": len(self.ran), "cached": self.cached, "failed": self.failed,
                            "runs": self.ran},
            "wall_s": time.monotonic() - self._t0,
            "trials_per_minute": (60.0 * sum(t.state != "failed" for t in self.trials)
                                  / max(1e-9, time.monotonic() - self._t0)),
        }


def window_list(texts: str | None, start: str | None, days: float | None) -> list[Window]:
    """``--windows START[:DAYS],...`` (each ``--days`` long unless it says), else the one
    window of ``--start`` and ``--days``."""
    from planner.sim.runner import parse_time

    if not texts:
        label = start or "all"
        return [Window(parse_time(start), days, str(label))]
    out, errors = [], []
    for part in (p.strip() for p in texts.split(",")):
        if not part:
            continue
        head, sep, tail = part.rpartition(":")
        try:  # START:DAYS when what follows the last ':' is a number and the rest a time
            d: float | None = float(tail) if sep else None
            if not (d is not None and math.isfinite(d) and d > 0):
                raise ValueError(tail)
            when = head
            parse_time(when)
        except (ValueError, InputError):
            d, when = days, part
        try:
            out.append(Window(parse_time(when), d, when))
        except InputError as exc:
            errors += [f"--windows {part!r}: {e}" for e in exc.errors]
    if not out and not errors:
        errors.append("--windows: name at least one start")
    if errors:
        raise InputError(errors)
    return out
