"""NVLink topology inside one node: islands, connectivity and GPU-set choice (R3).

Works on the raw contract values of a node's ``nvlink`` field (section 2), never on
``models`` objects, so the CP-SAT builder, the greedy planner and the verifier can
all share it. GPU sets are Python int bitmasks (bit ``i`` = GPU ``i``).

Every layout is reduced to a canonical key; the work behind the public functions
is memoised on that key, so the same layout written differently (``"nvswitch"``
versus its full edge list) and thousands of identical nodes share one cache
entry. Layouts whose components are cliques (``"nvswitch"``, ``"none"``, island
lists, or edge lists that amount to one of those) take shortcuts: any subset of a
clique is connected, so no graph search is needed there.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # (imported where a graph is built: networkx takes 0.3 s to import)
    import networkx as nx

__all__ = [
    "best_fit",
    "canonical_key",
    "clique_cover",
    "connected_subsets",
    "fits",
    "is_connected",
    "islands",
    "list_to_mask",
    "mask_to_list",
    "max_connected_free",
    "maximum_clique",
    "nvlink_graph",
]

_FORMS = "'nvswitch', 'none', a list of islands or {'edges': [[a, b], ...]}"
_BEST_FIT_CANDIDATES = 512  # connected sets scored by best_fit on a non-clique graph
_CACHE = 65536


# ---------------------------------------------------------------- bitmask helpers


def mask_to_list(mask: int) -> list[int]:
    """GPU indices of a bitmask, ascending."""
    if mask < 0:
        raise ValueError(f"GPU mask must be non-negative, got {mask}")
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out


def list_to_mask(gpus: Any) -> int:
    """Bitmask of an iterable of GPU indices (duplicates collapse)."""
    mask = 0
    for g in gpus:
        if not _is_int(g) or g < 0:
            raise ValueError(f"GPU index must be a non-negative integer, got {g!r}")
        mask |= 1 << g
    return mask


def _bits(mask: int) -> Iterator[int]:
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _popcount(mask: int) -> int:
    return mask.bit_count()


def _low_first(mask: int) -> tuple[int, ...]:
    """Sort key: lexicographic on the ascending GPU list ("lowest indices first")."""
    return tuple(_bits(mask))


# ---------------------------------------------------------------- parsing


@dataclass(frozen=True, eq=False)
class _Topo:
    """A parsed layout. Equality and hash follow the canonical key (hash precomputed)."""

    gpus: int
    key: tuple
    adj: tuple[int, ...]  # adj[i]: neighbour mask of GPU i
    cliques: bool  # every component of the full graph is a clique
    comp_of: tuple[int, ...]  # comp_of[i]: mask of GPU i's component in the full graph
    _hash: int = field(repr=False)

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Topo) and self.key == other.key)

    def __hash__(self) -> int:
        return self._hash


def _freeze(nvlink: Any) -> Any:
    """Hashable copy of a raw ``nvlink`` value; shape and type errors raise here."""
    if isinstance(nvlink, str):
        if nvlink not in ("nvswitch", "none"):
            raise ValueError(f"nvlink: unknown form {nvlink!r}; expected {_FORMS}")
        return nvlink
    if isinstance(nvlink, Mapping):
        extra = sorted(str(k) for k in nvlink if k != "edges" and not str(k).startswith("_"))
        if extra:
            raise ValueError(f"nvlink: unknown key(s) {', '.join(extra)}; expected only 'edges'")
        if "edges" not in nvlink:
            raise ValueError("nvlink: a mapping needs an 'edges' list")
        edges = nvlink["edges"]
        if isinstance(edges, (str, bytes, Mapping)) or not hasattr(edges, "__iter__"):
            raise ValueError(f"nvlink.edges: expected a list of [a, b] pairs, got {edges!r}")
        out = []
        for k, e in enumerate(edges):
            if isinstance(e, (str, bytes, Mapping)) or not hasattr(e, "__iter__"):
                raise ValueError(f"nvlink.edges[{k}]: expected a pair [a, b], got {e!r}")
            e = tuple(e)
            if len(e) != 2 or not all(_is_int(g) for g in e):
                raise ValueError(f"nvlink.edges[{k}]: expected a pair of GPU indices, got {list(e)}")
            out.append(e)
        return ("edges", tuple(out))
    if isinstance(nvlink, (list, tuple)):
        out = []
        for k, island in enumerate(nvlink):
            if isinstance(island, (str, bytes, Mapping)) or not hasattr(island, "__iter__"):
                raise ValueError(f"nvlink[{k}]: expected a list of GPU indices, got {island!r}")
            island = tuple(island)
            for g in island:
                if not _is_int(g):
                    raise ValueError(f"nvlink[{k}]: GPU index must be an integer, got {g!r}")
            out.append(island)
        return ("islands", tuple(out))
    raise ValueError(f"nvlink: expected {_FORMS}, got {nvlink!r}")


def _topo(nvlink: Any, gpus: int) -> _Topo:
    if not _is_int(gpus) or gpus < 1:
        raise ValueError(f"gpus must be a positive integer, got {gpus!r}")
    return _parse(_freeze(nvlink), gpus)


@lru_cache(maxsize=4096)
def _parse(frozen: Any, gpus: int) -> _Topo:
    """Validate ranges and overlaps, then canonicalise (cached on the frozen input)."""
    if frozen == "nvswitch":
        return _from_cliques(gpus, ((1 << gpus) - 1,))
    if frozen == "none":
        return _from_cliques(gpus, ())
    form, items = frozen
    if form == "islands":
        seen: dict[int, int] = {}
        masks = []
        for k, island in enumerate(items):
            mask = 0
            for g in island:
                if not 0 <= g < gpus:
                    raise ValueError(f"nvlink[{k}]: GPU {g} out of range (node has {gpus} GPUs)")
                if g in seen:
                    raise ValueError(f"nvlink[{k}]: GPU {g} is also in island {seen[g]} "
                                     "(islands must not overlap)")
                seen[g] = k
                mask |= 1 << g
            masks.append(mask)
        return _from_cliques(gpus, tuple(masks))
    adj = [0] * gpus
    for k, (a, b) in enumerate(items):
        if not (0 <= a < gpus and 0 <= b < gpus):
            raise ValueError(f"nvlink.edges[{k}]: edge {[a, b]} out of range "
                             f"(node has {gpus} GPUs)")
        if a == b:
            raise ValueError(f"nvlink.edges[{k}]: self loop on GPU {a}")
        adj[a] |= 1 << b
        adj[b] |= 1 << a
    comps = _components_of(tuple(adj), (1 << gpus) - 1)
    if all(all(adj[g] | (1 << g) == c for g in _bits(c)) for c in comps):
        return _from_cliques(gpus, comps)  # an edge list that is just a union of cliques
    edges = tuple((a, b) for a in range(gpus) for b in _bits(adj[a] >> (a + 1) << (a + 1)))
    return _intern((gpus, "edges", edges), tuple(adj), False)


def _from_cliques(gpus: int, masks: tuple[int, ...]) -> _Topo:
    cliques = tuple(sorted(m for m in masks if _popcount(m) >= 2))
    adj = [0] * gpus
    for m in cliques:
        for g in _bits(m):
            adj[g] = m ^ (1 << g)
    return _intern((gpus, "islands", cliques), tuple(adj), True)


@lru_cache(maxsize=4096)
def _intern(key: tuple, adj: tuple[int, ...], cliques: bool) -> _Topo:
    """One object per canonical key, so downstream caches hit across spellings."""
    gpus = key[0]
    comp_of = [0] * gpus
    for c in _components_of(adj, (1 << gpus) - 1):
        for g in _bits(c):
            comp_of[g] = c
    return _Topo(gpus, key, adj, cliques, tuple(comp_of), hash(key))


def _check_mask(t: _Topo, mask: Any, name: str) -> None:
    if not _is_int(mask) or mask < 0:
        raise ValueError(f"{name} must be a non-negative integer bitmask, got {mask!r}")
    if mask >> t.gpus:
        raise ValueError(f"{name} {bin(mask)} names GPUs beyond the node's {t.gpus}")


def _check_size(size: Any) -> None:
    if not _is_int(size) or size < 1:
        raise ValueError(f"size must be a positive integer, got {size!r}")


# ---------------------------------------------------------------- graph search


def _reach(adj: tuple[int, ...], start: int, within: int, enough: int | None = None) -> int:
    """GPUs of ``within`` reachable from the set ``start`` (included); stops at ``enough``."""
    seen = frontier = start
    while frontier:
        nxt = 0
        for g in _bits(frontier):
            nxt |= adj[g]
        frontier = nxt & within & ~seen
        seen |= frontier
        if enough is not None and _popcount(seen) >= enough:
            break
    return seen


def _components_of(adj: tuple[int, ...], mask: int) -> tuple[int, ...]:
    out = []
    while mask:
        c = _reach(adj, mask & -mask, mask)
        out.append(c)
        mask &= ~c
    return tuple(sorted(out))


def _maximal_cliques(adj: tuple[int, ...] | list[int], within: int) -> Iterator[int]:
    """Maximal cliques of the subgraph induced by ``within`` (Bron-Kerbosch with a
    pivot, on bitmasks)."""
    stack = [(0, within, 0)]
    while stack:
        r, p, x = stack.pop()
        if not p:
            if not x:
                yield r
            continue
        px = p | x
        u = max(_bits(px), key=lambda v: (_popcount(adj[v] & p), -v))
        for v in _bits(p & ~adj[u]):
            b = 1 << v
            stack.append((r | b, p & adj[v], x & adj[v]))
            p &= ~b
            x |= b


def maximum_clique(adj: tuple[int, ...] | list[int], within: int) -> int:
    """A largest clique of the subgraph induced by ``within`` (``adj[i]``: GPU i's
    neighbour mask); among the largest, the one whose ascending GPU list is
    lexicographically least. 0 for an empty ``within``."""
    if not within:
        return 0
    return max(_maximal_cliques(adj, within),
               key=lambda c: (_popcount(c), tuple(-g for g in _bits(c))))


def clique_cover(adj: tuple[int, ...] | list[int]) -> tuple[list[int], list[tuple[int, list[int]]]]:
    """Partition a graph into cliques: each component that is a clique is one; a
    component that is not is covered by taking its largest clique
    (:func:`maximum_clique`) out of what is left, again and again. Returns the
    cliques (components in order of their lowest GPU) and, per component that is
    not a clique, its mask and the indices of its cliques in that list."""
    islands: list[int] = []
    composites: list[tuple[int, list[int]]] = []
    comps = sorted(_components_of(tuple(adj), (1 << len(adj)) - 1), key=lambda m: m & -m)
    for comp in comps:
        if all(not comp & ~(adj[g] | 1 << g) for g in _bits(comp)):
            islands.append(comp)
            continue
        rest, idx = comp, []
        while rest:
            best = maximum_clique(adj, rest)
            idx.append(len(islands))
            islands.append(best)
            rest &= ~best
        composites.append((comp, idx))
    return islands, composites


@lru_cache(maxsize=_CACHE)
def _components(t: _Topo, avail: int) -> tuple[int, ...]:
    """Components of the subgraph induced by ``avail``, ascending as ints."""
    if t.cliques:  # a clique stays a clique under any restriction
        out = []
        rest = avail
        while rest:
            c = t.comp_of[(rest & -rest).bit_length() - 1]
            out.append(avail & c)
            rest &= ~c
        return tuple(sorted(out))
    return _components_of(t.adj, avail)


def _enumerate(t: _Topo, avail: int, size: int, limit: int | None) -> list[int]:
    """Connected ``size``-subsets of ``avail`` by ESU (Wernicke 2006), up to ``limit``.

    Each set is grown from its smallest GPU ``v`` by adding only GPUs above ``v``
    from the extension set, which holds exclusive neighbours of the set so far, so
    every connected set comes out exactly once. A branch is cut when the GPUs it
    could still reach are too few (checked by BFS where the branch can fork), so
    dead ends cost at most a forced chain. Iterative: sizes go up to 1024.
    """
    out: list[int] = []
    if limit is not None and limit <= 0:
        return out
    adj = t.adj
    for v in _bits(avail):
        root = 1 << v
        above = avail & ~((root << 1) - 1)  # available GPUs above v
        if _popcount(above) + 1 < size:
            break  # later roots have even fewer GPUs above them
        if size == 1:
            out.append(root)
        elif _popcount(_reach(adj, root, above | root, size)) >= size:
            # frame: [subset, extension, closed neighbourhood of subset, |subset|]
            stack = [[root, adj[v] & above, adj[v] | root, 1]]
            while stack:
                frame = stack[-1]
                sub, ext, closed, n = frame
                if not ext:
                    stack.pop()
                    continue
                w = ext & -ext
                ext ^= w
                frame[1] = ext
                if n + 1 == size:
                    out.append(sub | w)
                    if limit is not None and len(out) >= limit:
                        return out
                    continue
                wi = w.bit_length() - 1
                new_ext = ext | (adj[wi] & above & ~closed)
                new_closed = closed | adj[wi] | w
                need = size - n - 1
                room = above & ~new_closed | new_ext  # GPUs the branch may still add
                if _popcount(room) < need:
                    continue
                if 2 <= _popcount(new_ext) < need and _popcount(_reach(adj, new_ext, room, need)) < need:
                    continue  # BFS only where the branch can fork: a forced chain is linear
                stack.append([sub | w, new_ext, new_closed, n + 1])
        if limit is not None and len(out) >= limit:
            break
    return out


@lru_cache(maxsize=_CACHE)
def _connected_subsets(t: _Topo, avail: int, size: int, limit: int | None) -> tuple[int, ...]:
    if t.cliques:
        out: list[int] = []
        for c in _components(t, avail):
            if _popcount(c) < size:
                continue
            for combo in itertools.combinations(_bits(c), size):
                out.append(sum(1 << g for g in combo))
                if limit is not None and len(out) >= limit:
                    return tuple(sorted(out))
        return tuple(sorted(out))
    return tuple(sorted(_enumerate(t, avail, size, limit)))


@lru_cache(maxsize=_CACHE)
def _max_connected(t: _Topo, avail: int) -> int:
    return max((_popcount(c) for c in _components(t, avail)), default=0)


def _pick_connected(t: _Topo, comp: int, size: int) -> int:
    """A connected ``size``-set inside the connected set ``comp`` that leaves the rest
    of ``comp`` as connected as possible, then lowest indices."""
    if _popcount(comp) == size:
        return comp
    if t.cliques:  # the rest of a clique stays connected whatever we take
        out = 0
        for g in itertools.islice(_bits(comp), size):
            out |= 1 << g
        return out
    cands = _enumerate(t, comp, size, _BEST_FIT_CANDIDATES)
    return min(cands, key=lambda s: (-_max_connected(t, comp & ~s), _low_first(s)))


@lru_cache(maxsize=_CACHE)
def _best_fit(t: _Topo, avail: int, size: int, need_nvlink: bool) -> int | None:
    comps = sorted(_components(t, avail), key=lambda c: (_popcount(c), _low_first(c)))
    if need_nvlink:
        for c in comps:
            if _popcount(c) >= size:
                return _pick_connected(t, c, size)
        return None
    if _popcount(avail) < size:
        return None
    for c in comps:  # an exactly fitting island: the job stays local, nothing splits
        if _popcount(c) == size:
            return c
    chosen, left = 0, size
    for c in comps:  # otherwise use up the smallest islands, keeping big ones whole
        if _popcount(c) <= left:
            chosen |= c
            left -= _popcount(c)
        else:
            return chosen | _pick_connected(t, c, left)
        if not left:
            break
    return chosen


# ---------------------------------------------------------------- public API


def nvlink_graph(nvlink: Any, gpus: int) -> nx.Graph:
    """The node's NVLink graph: nodes ``0..gpus-1``, one edge per link (a fresh copy).

    Raises ValueError for an unknown form, an index out of range, overlapping
    islands or a self loop.
    """
    import networkx as nx

    t = _topo(nvlink, gpus)
    g = nx.Graph()
    g.add_nodes_from(range(t.gpus))
    g.add_edges_from((a, b) for a in range(t.gpus) for b in _bits(t.adj[a] >> (a + 1) << (a + 1)))
    return g


def canonical_key(nvlink: Any, gpus: int) -> tuple:
    """Hashable canonical form of a layout; equal for equal graphs however written.

    ``(gpus, "islands", clique masks)`` when every component is a clique (so a
    1024-GPU nvswitch key stays small), else ``(gpus, "edges", sorted (a, b), a < b)``.
    """
    return _topo(nvlink, gpus).key


def islands(nvlink: Any, gpus: int) -> list[int]:
    """Connected components of the NVLink graph as bitmasks, ascending (singletons too)."""
    t = _topo(nvlink, gpus)
    return list(_components(t, (1 << t.gpus) - 1))


def is_connected(nvlink: Any, gpus: int, gpu_mask: int) -> bool:
    """Whether ``gpu_mask`` induces a connected NVLink subgraph (R3); empty is not."""
    t = _topo(nvlink, gpus)
    _check_mask(t, gpu_mask, "gpu_mask")
    if not gpu_mask:
        return False
    low = (gpu_mask & -gpu_mask).bit_length() - 1
    if t.cliques:
        return not gpu_mask & ~t.comp_of[low]
    return _reach(t.adj, 1 << low, gpu_mask) == gpu_mask


def max_connected_free(nvlink: Any, gpus: int, available_mask: int) -> int:
    """Size of the largest connected set of available GPUs (0 when none): the biggest
    NVLink job the node can take, handy for pruning."""
    t = _topo(nvlink, gpus)
    _check_mask(t, available_mask, "available_mask")
    return _max_connected(t, available_mask)


def connected_subsets(
    nvlink: Any, gpus: int, available_mask: int, size: int, limit: int | None = None
) -> tuple[int, ...]:
    """Every connected set of exactly ``size`` available GPUs, as ascending bitmasks.

    With ``limit``, the enumeration stops after ``limit`` sets (those grown from the
    lowest GPUs first), still returned ascending. Memoised per canonical layout,
    mask, size and limit; clique layouts use combinations instead of graph search.
    """
    t = _topo(nvlink, gpus)
    _check_mask(t, available_mask, "available_mask")
    _check_size(size)
    if limit is not None and (not _is_int(limit) or limit < 0):
        raise ValueError(f"limit must be a non-negative integer or None, got {limit!r}")
    return _connected_subsets(t, available_mask, size, limit)


def fits(nvlink: Any, gpus: int, available_mask: int, size: int, need_nvlink: bool) -> bool:
    """Whether a ``size``-GPU job can go on these available GPUs (R3, section 7).

    Without NVLink any ``size`` GPUs do. With it a connected set is needed, which
    exists exactly when some component of the available GPUs has ``size`` or more
    (a BFS prefix of it is connected), so nothing is enumerated; a 1-GPU job always
    fits on a free GPU, a multi-GPU job never on an nvlink ``"none"`` node.
    """
    t = _topo(nvlink, gpus)
    _check_mask(t, available_mask, "available_mask")
    _check_size(size)
    if not need_nvlink:
        return _popcount(available_mask) >= size
    return _max_connected(t, available_mask) >= size


def best_fit(
    nvlink: Any, gpus: int, available_mask: int, size: int, need_nvlink: bool
) -> int | None:
    """GPUs (bitmask) for a ``size``-GPU job that keep large islands free (objective 6).

    With NVLink: the component of the available GPUs with the fewest GPUs that
    still fits (ties: lowest GPU), and in it the connected set that leaves the
    rest best connected, then lowest indices. Without NVLink: an island of exactly
    ``size`` if there is one, else whole smallest islands first, the remainder
    taken from the next one the same way. Deterministic; None when it does not fit.
    """
    t = _topo(nvlink, gpus)
    _check_mask(t, available_mask, "available_mask")
    _check_size(size)
    return _best_fit(t, available_mask, size, bool(need_nvlink))


# -- fast path for planners: parse a node's layout once, then query by mask ----------
Layout = _Topo


def layout(nvlink: Any, gpus: int) -> Layout:
    """Parsed, interned layout of a node; pass it to the ``layout_*`` queries, which
    skip re-parsing and argument checks (planners call them millions of times)."""
    return _topo(nvlink, gpus)


def layout_fits(t: Layout, available_mask: int, size: int, need_nvlink: bool) -> bool:
    """``fits`` on a parsed layout (masks are trusted)."""
    if available_mask.bit_count() < size:
        return False
    if not need_nvlink:
        return True
    return _max_connected(t, available_mask) >= size


def layout_connected_subsets(t: Layout, available_mask: int, size: int,
                             limit: int | None = None) -> tuple[int, ...]:
    """``connected_subsets`` on a parsed layout (masks and sizes are trusted)."""
    return _connected_subsets(t, available_mask, size, limit)


def layout_best_fit(t: Layout, available_mask: int, size: int, need_nvlink: bool) -> int | None:
    """``best_fit`` on a parsed layout (masks are trusted)."""
    return _best_fit(t, available_mask, size, bool(need_nvlink))
