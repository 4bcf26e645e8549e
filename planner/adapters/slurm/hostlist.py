"""Slurm hostlist expressions (``gpu[1-3,7]``, ``rack[1-2]-n[01-04]``).

Only expansion is needed: commands get comma-separated node names, which every
Slurm command accepts, so nothing is ever compressed.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"^([0-9]{1,18})(?:-([0-9]{1,18}))?$")  # (ASCII digits, as Slurm's)
MAX_HOSTS = 100_000


class HostlistError(ValueError):
    """A malformed hostlist expression."""


class HostlistTooLarge(HostlistError):
    """A hostlist expression that names more than MAX_HOSTS nodes."""


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


_Pieces = list[list[tuple[str, str]] | str]


def _pieces(word: str) -> _Pieces:
    """A word (no top-level comma) as its literal texts and its brackets' ranges
    (``(lo, hi)`` digit strings), in order, without expanding any range."""
    out: _Pieces = []
    rest = word
    while rest:
        start = rest.find("[")
        if start < 0:
            if "]" in rest:
                raise HostlistError(f"unbalanced ']' in {word!r}")
            out.append(rest)
            break
        end = rest.find("]", start)
        if end < 0:
            raise HostlistError(f"unbalanced '[' in {word!r}")
        if "]" in rest[:start]:
            raise HostlistError(f"unbalanced ']' in {word!r}")
        ranges = []
        for item in rest[start + 1:end].split(","):
            m = _RANGE.match(item.strip())
            if not m:
                raise HostlistError(f"bad range {item!r} in {word!r}")
            lo, hi = m.group(1), m.group(2) or m.group(1)
            if int(hi) < int(lo):
                raise HostlistError(f"descending range {item!r} in {word!r}")
            ranges.append((lo, hi))
        out += [rest[:start], ranges]
        rest = rest[end + 1:]
    return out


def _size(pieces: _Pieces) -> int:
    """How many names a word has: the product of its brackets' range lengths (any
    number above MAX_HOSTS once it is that large)."""
    size = 1
    for piece in pieces:
        if not isinstance(piece, str):
            size *= sum(int(hi) - int(lo) + 1 for lo, hi in piece)
            if size > MAX_HOSTS:
                break
    return size


def _names(pieces: _Pieces) -> list[str]:
    names = [""]
    for piece in pieces:
        values = [piece] if isinstance(piece, str) else [
            str(i).zfill(len(lo) if lo.startswith("0") and len(lo) > 1 else 0)
            for lo, hi in piece for i in range(int(lo), int(hi) + 1)]
        names = [n + v for n in names for v in values]
    return names


def _parsed(expr: str) -> list[_Pieces]:
    """The words of `expr`, parsed; HostlistTooLarge when they name more than
    MAX_HOSTS nodes (duplicates counted), found from the ranges before any is
    expanded: ``gpu[0-99999][0-99999]`` (ten billion names) is refused at once."""
    words = [_pieces(word) for word in _split_top(expr)]
    total = 0
    for pieces in words:
        total += _size(pieces)
        if total > MAX_HOSTS:
            raise HostlistTooLarge(f"hostlist {expr[:50]!r} names more than {MAX_HOSTS:,} "
                                   "nodes")
    return words


def count(expr: str | None) -> int:
    """How many names `expr` has (duplicates counted), without expanding it; raises
    HostlistError (HostlistTooLarge above MAX_HOSTS) as :func:`expand` does."""
    if not expr or expr in ("(null)", "None"):
        return 0
    return sum(_size(pieces) for pieces in _parsed(expr))


def expand(expr: str | None) -> list[str]:
    """All host names of a hostlist expression, in order, duplicates kept once.

    >>> expand("gpu[1-3,7],cpu01")
    ['gpu1', 'gpu2', 'gpu3', 'gpu7', 'cpu01']
    """
    if not expr or expr in ("(null)", "None"):
        return []
    out: list[str] = []
    seen: set[str] = set()
    for pieces in _parsed(expr):
        for host in _names(pieces):
            if host not in seen:
                seen.add(host)
                out.append(host)
    return out
