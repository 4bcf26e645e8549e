"""What ``preempt-planner tune`` searches and how it judges: the space (policy
parameters with ranges or choices), the objectives and the constraints.

A space file (JSON or YAML)::

    params:                                   # dotted policy keys, as simulate --set
      thrash.min_evictions: [1, 2, 3, 4, 6]   # choices (any JSON values)
      thrash.max_fraction: {low: 0.0, high: 0.12}                # a float range
      tiers.2.preempt_after_s: {low: 0, high: 1800, step: 300}   # an integer range
      grace.min_s: {low: 30, high: 120, log: true}
      thrash: {choices: [null, {min_evictions: 2}]}
    fixed:                                    # the same for every trial (not the references)
      thrash.max_gpu_fraction: null

A space is a grid when every parameter has finitely many values (choices, integer
ranges, float ranges with a ``step``).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import product
from pathlib import Path
from typing import Any

from models import InputError, read_document

__all__ = ["METRICS", "Constraint", "Objective", "Param", "Space", "load_space", "metric",
           "parse_constraints", "parse_objectives"]

GRID_LIMIT = 100_000  # points listed at most (a bigger space is searched, never listed)
MAX_BOUND = 10**15  # |low|, |high| and step of a range: beyond every policy value (and exact)
MAX_VALUES = 10**15  # values of a stepped range (finer, a float cannot tell them apart)


@dataclass(frozen=True)
class Param:
    """One policy parameter: ``choices`` (JSON values), or an int or float range."""

    key: str
    kind: str  # "choice", "int" or "float"
    choices: tuple[Any, ...] = ()
    low: float = 0.0
    high: float = 0.0
    step: float | None = None
    log: bool = False

    def count(self) -> int | None:
        """How many values, None for a continuous range (counted, not listed)."""
        if self.kind == "choice":
            return len(self.choices)
        if self.kind == "int":
            return (int(self.high) - int(self.low)) // int(self.step or 1) + 1
        return None if self.step is None else _steps(self.low, self.high, self.step) + 1

    def values(self) -> list[Any] | None:
        """Every value, in order, or None for a continuous range."""
        if self.kind == "choice":
            return list(self.choices)
        if self.kind == "int":
            return list(range(int(self.low), int(self.high) + 1, int(self.step or 1)))
        if self.step is None:
            return None
        n = _steps(self.low, self.high, self.step)
        return [round(self.low + k * self.step, 12) for k in range(n + 1)]

    def distribution(self) -> Any:
        """The Optuna distribution (choices are JSON texts: Optuna takes only scalars)."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.kind == "choice":
            return CategoricalDistribution([json.dumps(c) for c in self.choices])
        if self.kind == "int":
            return IntDistribution(int(self.low), int(self.high), step=int(self.step or 1),
                                   log=self.log)
        return FloatDistribution(self.low, self.high, step=self.step, log=self.log)

    def decode(self, value: Any) -> Any:
        """A value as Optuna returns it -> the policy value."""
        return json.loads(value) if self.kind == "choice" else value

    def describe(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(json.dumps(c) for c in self.choices)
        text = f"{self.low:g} to {self.high:g}"
        if self.step:
            text += f" step {self.step:g}"
        return text + (" (log)" if self.log else "")


@dataclass
class Space:
    params: list[Param]
    fixed: list[tuple[str, Any]] = field(default_factory=list)

    def grid_size(self) -> int | None:
        """Points of the grid, None when a parameter is continuous."""
        n = 1
        for p in self.params:
            c = p.count()
            if c is None:
                return None
            n *= c
        return n

    def grid(self) -> list[dict[str, Any]]:
        """Every point, in the order of the file (the last parameter varies fastest);
        for a grid_size of at most GRID_LIMIT (the search's choice)."""
        axes = [p.values() or [] for p in self.params]
        return [dict(zip([p.key for p in self.params], combo, strict=True))
                for combo in product(*axes)]


def _steps(low: float, high: float, step: float) -> int:
    """Steps from low to high of a float range (its values: one more); for a range
    _param accepted, at most MAX_VALUES."""
    return math.floor((high - low) / step + 1e-9)


def _number(value: Any) -> bool:
    """A finite number of magnitude at most MAX_BOUND (compared without turning a
    400-digit integer into a float, which overflows)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and (
        -MAX_BOUND <= value <= MAX_BOUND)


def _param(key: str, spec: Any, where: str) -> tuple[Param | None, list[str]]:
    at = f"params.{key}"
    if isinstance(spec, list):
        spec = {"choices": spec}
    if not isinstance(spec, dict):
        return None, [f"{at}: expected a list of choices or {{low, high[, step][, log]}}"]
    if "choices" in spec:
        extra = sorted(set(spec) - {"choices"})
        choices = spec["choices"]
        if extra:
            return None, [f"{at}: choices take no {', '.join(extra)}"]
        if not isinstance(choices, list) or not choices:
            return None, [f"{at}.choices: expected a non-empty list"]
        texts = [json.dumps(c, sort_keys=True) for c in choices]
        if len(set(texts)) != len(texts):
            return None, [f"{at}.choices: a value is listed twice"]
        return Param(key, "choice", tuple(choices)), []
    unknown = sorted(set(spec) - {"low", "high", "step", "log"})
    if unknown:
        return None, [(f"{at}: unknown field(s) {', '.join(unknown)} (known: choices, or low, "
                       "high, step, log)")]
    low, high, step, log = spec.get("low"), spec.get("high"), spec.get("step"), spec.get("log",
                                                                                        False)
    errors = [(f"{at}.{name}: expected a number from -10^15 to 10^15 (no policy value is "
               "larger)") for name, v in (("low", low), ("high", high)) if not _number(v)]
    if step is not None and not (_number(step) and step > 0):
        errors.append(f"{at}.step: expected a positive number up to 10^15")
    if not isinstance(log, bool):
        errors.append(f"{at}.log: expected true or false")
    if errors:
        return None, errors
    assert low is not None and high is not None
    if low > high:
        return None, [f"{at}: low {low:g} is more than high {high:g}"]
    if log and (low <= 0 or step is not None):
        return None, [f"{at}.log: needs low > 0 and no step"]
    whole = all(isinstance(v, int) for v in (low, high) if v is not None) and (
        step is None or isinstance(step, int))
    if not whole and step is not None and (high - low) / step > MAX_VALUES:
        return None, [(f"{at}.step: {step:g} makes more than 10^15 values from {low:g} to "
                       f"{high:g} (a float cannot tell such steps apart); give a larger step, "
                       "or none for a continuous range")]
    kind = "int" if whole else "float"
    return Param(key, kind, (), float(low), float(high),
                 None if step is None else float(step), bool(log)), []


def load_space(source: str | Path | dict[str, Any]) -> Space:
    """A space file (or its parsed document); InputError naming the file and field."""
    where = None if isinstance(source, dict) else str(source)
    doc = source if isinstance(source, dict) else read_document(source)
    if not isinstance(doc, dict):
        raise InputError(["space: expected an object with 'params' (and 'fixed')"], where)
    errors = [f"{k}: unknown field (known: params, fixed)" for k in sorted(doc)
              if k not in ("params", "fixed") and not str(k).startswith("_")]
    params_doc = doc.get("params")
    if not isinstance(params_doc, dict) or not params_doc:
        errors.append("params: expected a non-empty mapping of policy keys to ranges or choices")
        params_doc = {}
    params = []
    for key, spec in params_doc.items():
        p, bad = _param(str(key), spec, where or "")
        errors += bad
        if p:
            params.append(p)
    fixed_doc = doc.get("fixed") or {}
    if not isinstance(fixed_doc, dict):
        errors.append("fixed: expected a mapping of policy keys to values")
        fixed_doc = {}
    clash = sorted(set(map(str, fixed_doc)) & set(map(str, params_doc)))
    errors += [f"fixed.{k}: also a parameter" for k in clash]
    if errors:
        raise InputError(errors, where)
    return Space(params, [(str(k), v) for k, v in fixed_doc.items()])


# ------------------------------------------------------------------ objectives

def _delay(tier: str, stat: str) -> Callable[[dict[str, Any]], float]:
    def get(m: dict[str, Any]) -> float:
        return float((m["queue_delay_s"].get(tier) or {}).get(stat) or 0.0)
    return get


# name -> (title, unit, how it is read from a run's metrics); tN_STAT for any tier
METRICS: dict[str, tuple[str, str, Callable[[dict[str, Any]], float]]] = {
    "wasted": ("wasted GPU-h", "GPU-h", lambda m: float(m["wasted_gpu_h"]["total"])),
    "thrash": ("thrash-alert windows", "windows", lambda m: float(m["thrash_windows"])),
    "evictions": ("evictions per completed job", "",
                  lambda m: float(m["evictions_per_completed_job"] or 0.0)),
}
_TIER_STAT = re.compile(r"^t(\d+)_(p50|p95|p99|max)$")
_STAT_TITLE = {"p50": "p50", "p95": "p95", "p99": "p99", "max": "longest"}


def metric(name: str) -> tuple[str, str, Callable[[dict[str, Any]], float]]:
    """(title, unit, getter) of an objective name; KeyError when it names nothing."""
    if name in METRICS:
        return METRICS[name]
    m = _TIER_STAT.match(name)
    if not m:
        raise KeyError(name)
    return (f"tier-{m.group(1)} {_STAT_TITLE[m.group(2)]} wait", "s",
            _delay(m.group(1), m.group(2)))


def _known() -> str:
    return ", ".join([*METRICS, "tN_p50", "tN_p95", "tN_p99", "tN_max"])


@dataclass(frozen=True)
class Objective:
    """A metric to minimise; ``weight`` counts in the choice of one trade-off."""

    name: str
    weight: float = 1.0

    @property
    def title(self) -> str:
        return metric(self.name)[0]

    def value(self, m: dict[str, Any]) -> float:
        return metric(self.name)[2](m)


def parse_objectives(text: str) -> list[Objective]:
    """``wasted,thrash=2,t2_p95`` (NAME[=WEIGHT], comma-separated; InputError)."""
    out: list[Objective] = []
    errors: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, sep, w = part.partition("=")
        name = name.strip()
        try:
            metric(name)
        except KeyError:
            errors.append(f"--objective {name!r}: unknown (known: {_known()})")
            continue
        try:
            weight = float(w) if sep else 1.0
        except ValueError:
            weight = -1.0
        if not (math.isfinite(weight) and weight >= 0):
            errors.append(f"--objective {part!r}: the weight must be a number >= 0")
            continue
        if any(o.name == name for o in out):
            errors.append(f"--objective {name!r}: given twice")
            continue
        out.append(Objective(name, weight))
    if not out and not errors:
        errors.append("--objective: name at least one objective")
    if errors:
        raise InputError(errors)
    return out


_CONSTRAINT = re.compile(r"^\s*(\w+)\s*(<=|<)\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*(?:\*|x)?\s*)?"
                         r"(naive|default)?\s*$")


@dataclass(frozen=True)
class Constraint:
    """``NAME <= FACTOR x REF`` (REF naive or default: that run's value on the same
    windows, loads and seeds) or ``NAME <= NUMBER``."""

    name: str
    bound: float
    ref: str | None = None
    text: str = ""

    def limit(self, refs: dict[str, dict[str, float]]) -> float:
        return self.bound * refs[self.ref][self.name] if self.ref else self.bound

    def violation(self, value: float, refs: dict[str, dict[str, float]]) -> float:
        """How far over the limit (<= 0: met); a relative slack of 1e-9 absorbs rounding."""
        lim = self.limit(refs)
        return value - lim - 1e-9 * max(1.0, abs(lim))


def parse_constraints(texts: list[str]) -> list[Constraint]:
    """``t1_p95<=1.1*naive``, ``t1_p95 <= 1.1x naive``, ``thrash<=0``, ``t2_p95<=default``."""
    out, errors = [], []
    for text in texts:
        m = _CONSTRAINT.match(text)
        if not m or (m.group(3) is None and m.group(4) is None):
            errors.append(f"--constraint {text!r}: expected NAME<=NUMBER, NAME<=FACTOR*naive or "
                          "NAME<=FACTOR*default")
            continue
        name, number, ref = m.group(1), m.group(3), m.group(4)
        try:
            metric(name)
        except KeyError:
            errors.append(f"--constraint {text!r}: unknown metric {name!r} (known: {_known()})")
            continue
        out.append(Constraint(name, float(number) if number else 1.0, ref, text.strip()))
    if errors:
        raise InputError(errors)
    return out
