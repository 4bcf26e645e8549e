"""The NVLink clique cover the problem build uses (topology.clique_cover, on bitmasks)
against networkx's cliques, on hand-worked layouts and random graphs."""

from __future__ import annotations

import random

import networkx as nx
import pytest

from planner.core import topology as topo
from planner.core.problem import clique_layout


def _adj(n: int, edges: list[tuple[int, int]]) -> list[int]:
    adj = [0] * n
    for a, b in edges:
        adj[a] |= 1 << b
        adj[b] |= 1 << a
    return adj


def _m(*gpus: int) -> int:
    return topo.list_to_mask(gpus)


def test_ring_of_eight_pairs_up_from_gpu_zero() -> None:
    # every maximal clique of a ring is an edge; the least list first: 0-1, then
    # 2-3 (1 is gone), 4-5, 6-7
    ring = [(i, (i + 1) % 8) for i in range(8)]
    islands, composites = topo.clique_cover(_adj(8, ring))
    assert islands == [_m(0, 1), _m(2, 3), _m(4, 5), _m(6, 7)]
    assert composites == [(_m(*range(8)), [0, 1, 2, 3])]


def test_cliques_and_a_triangle_with_a_tail() -> None:
    # {0,1,2,3} a clique, {4,5,6} a triangle with 7 hanging off 6
    edges = [(a, b) for a in range(4) for b in range(a + 1, 4)]
    edges += [(4, 5), (4, 6), (5, 6), (6, 7)]
    islands, composites = topo.clique_cover(_adj(8, edges))
    assert islands == [_m(0, 1, 2, 3), _m(4, 5, 6), _m(7)]
    assert composites == [(_m(4, 5, 6, 7), [1, 2])]


def test_maximum_clique_prefers_the_least_gpu_list() -> None:
    # two triangles sharing GPU 2: {0,1,2} and {2,3,4}
    adj = _adj(5, [(0, 1), (0, 2), (1, 2), (2, 3), (2, 4), (3, 4)])
    assert topo.maximum_clique(adj, _m(0, 1, 2, 3, 4)) == _m(0, 1, 2)
    assert topo.maximum_clique(adj, _m(1, 2, 3, 4)) == _m(2, 3, 4)
    assert topo.maximum_clique(adj, 0) == 0


def test_problem_layout_of_an_edge_list() -> None:
    islands, composites = clique_layout(
        topo.layout({"edges": [[0, 1], [1, 2], [2, 3], [3, 0]]}, 4))
    assert islands == (_m(0, 1), _m(2, 3))
    assert composites == ((_m(0, 1, 2, 3), (0, 1)),)


@pytest.mark.parametrize("seed", range(4))
def test_random_graphs_against_networkx(seed: int) -> None:
    rnd = random.Random(seed)
    for _ in range(300):
        n = rnd.choice([2, 4, 6, 8, 8, 12, 16])
        p = rnd.random()
        edges = [(a, b) for a in range(n) for b in range(a + 1, n) if rnd.random() < p]
        g = nx.Graph()
        g.add_nodes_from(range(n))
        g.add_edges_from(edges)
        islands, composites = topo.clique_cover(_adj(n, edges))
        # a partition of the GPUs into cliques
        assert sum(m.bit_count() for m in islands) == n
        union = 0
        for m in islands:
            assert not union & m
            union |= m
            members = topo.mask_to_list(m)
            assert g.subgraph(members).number_of_edges() == len(members) * (len(members) - 1) // 2
        # components: a clique component is one island, the others listed
        comps = sorted(nx.connected_components(g), key=min)
        listed = {c for c, _ in composites}
        for comp in comps:
            mask = topo.list_to_mask(comp)
            k = len(comp)
            if g.subgraph(comp).number_of_edges() == k * (k - 1) // 2:
                assert mask in islands and mask not in listed
            else:
                assert mask in listed
        # each clique taken is a largest one of what was left of its component
        for comp_mask, idx in composites:
            rest = comp_mask
            for i in idx:
                best = max(len(c) for c in nx.find_cliques(g.subgraph(topo.mask_to_list(rest))))
                assert islands[i].bit_count() == best
                rest &= ~islands[i]
            assert rest == 0
