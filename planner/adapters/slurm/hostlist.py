"""Slurm hostlist expressions (``gpu[1-3,7]``, ``rack[1-2]-n[01-04]``).

Only expansion is needed: commands get comma-separated node names, which every
Slurm command accepts, so nothing is ever compressed.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 100_000


class HostlistError(ValueError):
    """A malformed hostlist expression."""


def _split_top(expr: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in expr:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"unbalanced ']' in {expr!r}")
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    if depth != 0:
        raise HostlistError(f"unbalanced '[' in {expr!r}")
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def _expand_one(word: str) -> list[str]:
    start = word.find("[")
    if start < 0:
        if "]" in word:
            raise HostlistError(f"unbalanced ']' in {word!r}")
        return [word]
    end = word.find("]", start)
    if end < 0:
        raise HostlistError(f"unbalanced '[' in {word!r}")
    prefix, body, rest = word[:start], word[start + 1:end], word[end + 1:]
    values: list[str] = []
    for item in body.split(","):
        m = _RANGE.match(item.strip())
        if not m:
            raise HostlistError(f"bad range {item!r} in {word!r}")
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"descending range {item!r} in {word!r}")
        if int(hi) - int(lo) > MAX_HOSTS:
            raise HostlistError(f"range {item!r} too large")
        width = len(lo) if lo.startswith("0") and len(lo) > 1 else 0
        values += [str(i).zfill(width) for i in range(int(lo), int(hi) + 1)]
    tails = _expand_one(rest) if rest else [""]
    return [prefix + v + t for v in values for t in tails]


def expand(expr: str | None) -> list[str]:
    """All host names of a hostlist expression, in order, duplicates kept once.

    >>> expand("gpu[1-3,7],cpu01")
    ['gpu1', 'gpu2', 'gpu3', 'gpu7', 'cpu01']
    """
    if not expr or expr in ("(null)", "None"):
        return []
    out: list[str] = []
    seen: set[str] = set()
    for word in _split_top(expr):
        for host in _expand_one(word):
            if host not in seen:
                seen.add(host)
                out.append(host)
            if len(out) > MAX_HOSTS:
                raise HostlistError(f"hostlist {expr[:50]!r} too large")
    return out
