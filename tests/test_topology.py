"""Tests for planner.core.topology: the four nvlink forms, R3 connectivity, best fit."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest

from planner.core import topology
from planner.core.topology import (
    best_fit,
    canonical_key,
    connected_subsets,
    fits,
    is_connected,
    islands,
    list_to_mask,
    mask_to_list,
    max_connected_free,
    nvlink_graph,
)

PAIRS = [[0, 1], [2, 3], [4, 5], [6, 7]]
# DGX-1 (V100) hybrid cube-mesh: two K4 quads {0,1,2,3}, {4,5,6,7} plus i -- i+4.
DGX1_EDGES = [[0, 1], [0, 2], [0, 3], [0, 4], [1, 2], [1, 3], [1, 5], [2, 3],
              [2, 6], [3, 7], [4, 5], [4, 6], [4, 7], [5, 6], [5, 7], [6, 7]]
DGX1 = {"edges": DGX1_EDGES}
ALL8 = 0xFF


def m(*gpus: int) -> int:
    return list_to_mask(gpus)


def oracle(graph: nx.Graph, avail: int, size: int) -> tuple[int, ...]:
    """Brute force: every size-combination of available GPUs that induces a connected graph."""
    free = mask_to_list(avail)
    return tuple(sorted(
        list_to_mask(c) for c in itertools.combinations(free, size)
        if nx.is_connected(graph.subgraph(c))
    ))


# ---------------------------------------------------------------- the four forms


def test_nvswitch_is_complete_graph():
    g = nvlink_graph("nvswitch", 8)
    assert sorted(g.nodes) == list(range(8))
    assert g.number_of_edges() == 28  # C(8, 2)
    assert islands("nvswitch", 8) == [ALL8]


def test_none_has_no_edges():
    g = nvlink_graph("none", 4)
    assert sorted(g.nodes) == [0, 1, 2, 3]
    assert g.number_of_edges() == 0
    assert islands("none", 4) == [1, 2, 4, 8]


def test_island_list_cliques_and_unlisted_gpus_alone():
    g = nvlink_graph([[0, 1, 2], [4, 5]], 6)
    assert sorted(g.nodes) == list(range(6))
    assert sorted(tuple(sorted(e)) for e in g.edges) == [(0, 1), (0, 2), (1, 2), (4, 5)]
    assert islands([[0, 1, 2], [4, 5]], 6) == [m(0, 1, 2), m(3), m(4, 5)]  # ascending ints
    assert islands(PAIRS, 8) == [m(0, 1), m(2, 3), m(4, 5), m(6, 7)]


def test_explicit_edges():
    g = nvlink_graph(DGX1, 8)
    assert g.number_of_edges() == 16
    assert all(g.degree(v) == 4 for v in range(8))
    assert islands(DGX1, 8) == [ALL8]
    assert islands({"edges": [[0, 1], [1, 2]]}, 4) == [m(0, 1, 2), m(3)]


def test_graph_is_a_fresh_copy():
    g = nvlink_graph(PAIRS, 8)
    g.add_edge(1, 2)
    assert not nvlink_graph(PAIRS, 8).has_edge(1, 2)


# ---------------------------------------------------------------- canonical keys


def test_same_layout_written_differently_shares_key():
    full = {"edges": [[a, b] for a, b in itertools.combinations(range(8), 2)]}
    assert canonical_key("nvswitch", 8) == canonical_key([list(range(8))], 8)
    assert canonical_key("nvswitch", 8) == canonical_key(full, 8)
    assert canonical_key("none", 8) == canonical_key([], 8)
    assert canonical_key("none", 8) == canonical_key({"edges": []}, 8)
    assert canonical_key("none", 8) == canonical_key([[0], [5]], 8)
    assert canonical_key(PAIRS, 8) == canonical_key([[7, 6], [1, 0], [3, 2], [5, 4]], 8)
    assert canonical_key(PAIRS, 8) == canonical_key({"edges": [[1, 0], [2, 3], [5, 4], [6, 7]]}, 8)
    reversed_dup = {"edges": [[b, a] for a, b in reversed(DGX1_EDGES)] + DGX1_EDGES}
    assert canonical_key(DGX1, 8) == canonical_key(reversed_dup, 8)
    assert canonical_key(DGX1, 8) == (8, "edges", tuple(tuple(e) for e in DGX1_EDGES))
    hash(canonical_key(DGX1, 8))


def test_different_layouts_have_different_keys():
    keys = {canonical_key(x, 8) for x in ("nvswitch", "none", PAIRS, DGX1)}
    assert len(keys) == 4
    assert canonical_key("nvswitch", 8) != canonical_key("nvswitch", 4)


def test_equivalent_spellings_share_the_subset_cache():
    full = {"edges": [[a, b] for a, b in itertools.combinations(range(6), 2)]}
    topology._connected_subsets.cache_clear()
    first = connected_subsets("nvswitch", 6, 0b111111, 3)
    second = connected_subsets(full, 6, 0b111111, 3)
    assert first == second and len(first) == 20  # C(6, 3)
    info = topology._connected_subsets.cache_info()
    assert (info.hits, info.misses) == (1, 1)


# ---------------------------------------------------------------- connectivity


def test_is_connected():
    assert is_connected(PAIRS, 8, m(0, 1))
    assert not is_connected(PAIRS, 8, m(1, 2))
    assert is_connected(PAIRS, 8, m(5))  # one GPU is connected
    assert not is_connected(PAIRS, 8, 0)  # the empty set is not
    assert is_connected("nvswitch", 8, m(0, 3, 7))
    assert not is_connected("none", 8, m(0, 1))
    assert not is_connected(DGX1, 8, m(0, 5))  # 0 and 5 are not linked
    assert is_connected(DGX1, 8, m(0, 1, 5))  # 0-1-5
    assert is_connected(DGX1, 8, m(3, 7, 6, 2))  # 3-7-6-2 around a cube face


def test_max_connected_free():
    assert max_connected_free(PAIRS, 8, m(1, 2)) == 1
    assert max_connected_free(PAIRS, 8, m(1, 2, 3, 6, 7)) == 2
    assert max_connected_free("none", 8, ALL8) == 1
    assert max_connected_free("nvswitch", 8, m(0, 4, 6)) == 3
    assert max_connected_free(DGX1, 8, m(0, 5, 6, 7)) == 3  # {5,6,7}; 0 alone
    assert max_connected_free(DGX1, 8, 0) == 0


# ---------------------------------------------------------------- enumeration


@pytest.mark.parametrize("size,count", [(1, 8), (2, 16), (3, 32), (4, 56), (5, 56), (6, 28),
                                        (7, 8), (8, 1)])
def test_dgx1_connected_subset_counts(size, count):
    # By hand: pairs = 16 edges; triples = paths through a centre, 8 * C(4, 2) = 48,
    # minus 2 per triangle (each is 3 paths but one set), 8 triangles in the two K4s:
    # 48 - 16 = 32; 6-sets: no 2 GPUs cut the (4-connected) graph, so all C(8, 2) = 28;
    # 7-sets: all 8; the whole node: 1.
    got = connected_subsets(DGX1, 8, ALL8, size)
    assert len(got) == count
    assert got == oracle(nvlink_graph(DGX1, 8), ALL8, size)


def test_dgx1_connected_pairs_are_the_edges():
    assert set(connected_subsets(DGX1, 8, ALL8, 2)) == {m(a, b) for a, b in DGX1_EDGES}


def test_subsets_are_ascending_and_inside_the_mask():
    avail = m(0, 1, 2, 4, 6, 7)
    got = connected_subsets(DGX1, 8, avail, 3)
    assert list(got) == sorted(got)
    # By hand: {0,1,2} (K4 part), {0,2,4}? 0-2, 0-4: yes; {0,2,6} 0-2-6; {0,4,6};
    # {0,4,7}; {2,4,6}: 2-6-4; {2,6,7}; {4,6,7}; {0,1,4}: 1-0-4; {1,2,6}: 1-2-6.
    expected = [m(0, 1, 2), m(0, 2, 4), m(0, 2, 6), m(0, 4, 6), m(0, 4, 7), m(2, 4, 6),
                m(2, 6, 7), m(4, 6, 7), m(0, 1, 4), m(1, 2, 6)]
    assert got == tuple(sorted(expected))
    assert got == oracle(nvlink_graph(DGX1, 8), avail, 3)


@pytest.mark.parametrize("nvlink", ["nvswitch", "none", PAIRS, [[0, 1, 2], [5, 6]], DGX1])
def test_matches_brute_force_on_every_mask(nvlink):
    g = nvlink_graph(nvlink, 8)
    for avail in range(0, 256, 7):
        for size in range(1, 9):
            assert connected_subsets(nvlink, 8, avail, size) == oracle(g, avail, size)


def test_matches_brute_force_on_random_graphs():
    rng = random.Random(7)
    for _ in range(20):
        n = rng.randint(2, 11)
        edges = [[a, b] for a, b in itertools.combinations(range(n), 2) if rng.random() < 0.3]
        nvlink = {"edges": edges}
        g = nvlink_graph(nvlink, n)
        avail = rng.getrandbits(n)
        for size in range(1, n + 1):
            got = connected_subsets(nvlink, n, avail, size)
            assert got == oracle(g, avail, size)
            assert fits(nvlink, n, avail, size, True) == bool(got)


def test_limit_stops_early():
    full = connected_subsets(DGX1, 8, ALL8, 4)
    few = connected_subsets(DGX1, 8, ALL8, 4, limit=5)
    assert len(few) == 5 and set(few) <= set(full) and list(few) == sorted(few)
    assert connected_subsets(DGX1, 8, ALL8, 4, limit=1000) == full
    assert connected_subsets(DGX1, 8, ALL8, 4, limit=0) == ()
    assert len(connected_subsets("nvswitch", 8, ALL8, 4, limit=3)) == 3


def test_long_path_needs_no_recursion():
    # A 1024-GPU chain: the connected 1000-sets are the 25 windows of 1000 GPUs.
    path = {"edges": [[i, i + 1] for i in range(1023)]}
    got = connected_subsets(path, 1024, (1 << 1024) - 1, 1000)
    assert got == tuple(((1 << 1000) - 1) << s for s in range(25))
    assert fits(path, 1024, (1 << 1024) - 1 - (1 << 512), 512, True)
    assert not fits(path, 1024, (1 << 1024) - 1 - (1 << 512), 513, True)


# ---------------------------------------------------------------- fits (R3, section 7)


def test_pairs_free_but_not_linked():
    avail = m(1, 2)  # 1 is in island {0,1}, 2 in {2,3}: free but not linked
    assert not fits(PAIRS, 8, avail, 2, need_nvlink=True)
    assert fits(PAIRS, 8, avail, 2, need_nvlink=False)
    assert connected_subsets(PAIRS, 8, avail, 2) == ()
    assert best_fit(PAIRS, 8, avail, 2, need_nvlink=True) is None
    assert best_fit(PAIRS, 8, avail, 2, need_nvlink=False) == m(1, 2)
    assert fits(PAIRS, 8, m(1, 2, 3), 2, need_nvlink=True)


def test_none_node_section_7():
    assert fits("none", 8, ALL8, 1, need_nvlink=True)  # a 1-GPU job always can
    assert not fits("none", 8, ALL8, 2, need_nvlink=True)
    assert fits("none", 8, ALL8, 8, need_nvlink=False)
    assert not fits("none", 8, 0, 1, need_nvlink=False)


def test_fits_counts():
    assert fits("nvswitch", 8, m(0, 2, 4), 3, True)
    assert not fits("nvswitch", 8, m(0, 2, 4), 4, True)
    assert not fits(DGX1, 8, m(0, 5, 6, 7), 4, True)  # 0 is cut off from {5,6,7}
    assert fits(DGX1, 8, m(0, 5, 6, 7), 4, False)


# ---------------------------------------------------------------- best fit


def test_best_fit_picks_smallest_fitting_island():
    nvlink = [[0, 1, 2, 3], [4, 5], [6, 7]]
    avail = ALL8 & ~m(6)  # free components: {0,1,2,3}, {4,5}, {7}
    assert best_fit(nvlink, 8, avail, 1, True) == m(7)
    assert best_fit(nvlink, 8, avail, 2, True) == m(4, 5)
    assert best_fit(nvlink, 8, avail, 3, True) == m(0, 1, 2)
    assert best_fit(nvlink, 8, avail, 4, True) == m(0, 1, 2, 3)
    assert best_fit(nvlink, 8, avail, 5, True) is None
    # Topology "any": exact island first, else use up the small islands.
    assert best_fit(nvlink, 8, avail, 2, False) == m(4, 5)
    assert best_fit(nvlink, 8, avail, 3, False) == m(4, 5, 7)
    assert best_fit(nvlink, 8, avail, 5, False) == m(0, 1, 4, 5, 7)
    assert best_fit(nvlink, 8, avail, 6, False) == m(0, 1, 2, 4, 5, 7)
    assert best_fit(nvlink, 8, avail, 8, False) is None


def test_best_fit_ties_take_lowest_indices():
    assert best_fit(PAIRS, 8, ALL8, 2, True) == m(0, 1)
    assert best_fit(PAIRS, 8, m(2, 3, 6, 7), 2, True) == m(2, 3)
    assert best_fit("nvswitch", 8, m(1, 3, 5, 7), 2, True) == m(1, 3)
    assert best_fit("none", 8, m(3, 6), 1, True) == m(3)


def test_best_fit_dgx1_keeps_the_rest_connected():
    assert best_fit(DGX1, 8, ALL8, 2, True) == m(0, 1)
    assert best_fit(DGX1, 8, ALL8, 4, True) == m(0, 1, 2, 3)  # leaves the other K4


def test_best_fit_does_not_strand_gpus():
    # 0-1, 1-2, 1-3, 3-4: taking {0,1} (lowest) would strand 2; {3,4} leaves 0-1-2.
    tree = {"edges": [[0, 1], [1, 2], [1, 3], [3, 4]]}
    assert best_fit(tree, 5, 0b11111, 2, True) == m(3, 4)


def test_best_fit_is_valid_and_deterministic():
    g = nvlink_graph(DGX1, 8)
    for avail in range(256):
        for size in range(1, 9):
            got = best_fit(DGX1, 8, avail, size, True)
            if not oracle(g, avail, size):
                assert got is None
                continue
            assert got is not None and got & ~avail == 0 and got.bit_count() == size
            assert is_connected(DGX1, 8, got)
            assert best_fit(DGX1, 8, avail, size, True) == got
            anyfit = best_fit(DGX1, 8, avail, size, False)
            assert anyfit is not None and anyfit & ~avail == 0 and anyfit.bit_count() == size


# ---------------------------------------------------------------- big nodes


def test_1024_gpu_nvswitch_uses_the_clique_shortcut(monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("enumerated")

    monkeypatch.setattr(topology, "_enumerate", boom)
    monkeypatch.setattr(topology, "_connected_subsets", boom)
    every = (1 << 1024) - 1
    assert fits("nvswitch", 1024, every, 1024, True)
    assert not fits("nvswitch", 1024, every & ~1, 1024, True)
    assert fits("nvswitch", 1024, every & ~1, 1023, True)
    assert max_connected_free("nvswitch", 1024, every & ~(1 << 600)) == 1023
    assert is_connected("nvswitch", 1024, every)
    assert best_fit("nvswitch", 1024, every, 512, True) == (1 << 512) - 1
    assert not fits("none", 1024, every, 2, True)
    assert islands([list(range(512)), list(range(512, 1024))], 1024) == [
        (1 << 512) - 1, ((1 << 512) - 1) << 512]


def test_1024_gpu_nvswitch_limited_enumeration():
    every = (1 << 1024) - 1
    base = (1 << 511) - 1  # GPUs 0..510
    got = connected_subsets("nvswitch", 1024, every, 512, limit=3)
    assert got == (base | 1 << 511, base | 1 << 512, base | 1 << 513)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("nvlink,gpus,message", [
    ("nvswitchh", 8, "unknown form"),
    ("NVSwitch", 8, "unknown form"),
    (None, 8, "expected"),
    (5, 8, "expected"),
    ([[0, 8]], 8, "out of range"),
    ([[0, -1]], 8, "out of range"),
    ([[0, 1], [1, 2]], 8, "overlap"),
    ([[0, 1, 1]], 8, "overlap"),
    ([[0, "1"]], 8, "integer"),
    ([[0, True]], 8, "integer"),
    ([3], 8, "list of GPU indices"),
    ({"edges": [[2, 2]]}, 8, "self loop"),
    ({"edges": [[0, 9]]}, 8, "out of range"),
    ({"edges": [[0, 1, 2]]}, 8, "pair"),
    ({"edges": [0, 1]}, 8, "pair"),
    ({"edges": "0-1"}, 8, "list of"),
    ({"edge": [[0, 1]]}, 8, "unknown key"),
    ({}, 8, "'edges'"),
    ("nvswitch", 0, "gpus"),
])
def test_malformed_nvlink_raises(nvlink, gpus, message):
    with pytest.raises(ValueError, match=message):
        nvlink_graph(nvlink, gpus)
    with pytest.raises(ValueError, match=message):
        fits(nvlink, gpus, 1, 1, True)


def test_bad_masks_and_sizes_raise():
    with pytest.raises(ValueError, match="beyond"):
        is_connected(PAIRS, 8, 1 << 8)
    with pytest.raises(ValueError, match="non-negative"):
        fits(PAIRS, 8, -1, 1, True)
    with pytest.raises(ValueError, match="size"):
        connected_subsets(PAIRS, 8, ALL8, 0)
    with pytest.raises(ValueError, match="limit"):
        connected_subsets(PAIRS, 8, ALL8, 2, limit=-1)
    with pytest.raises(ValueError):
        mask_to_list(-3)
    with pytest.raises(ValueError):
        list_to_mask([1, -2])


def test_comment_keys_are_ignored():
    assert canonical_key({"_note": "cube mesh", "edges": DGX1_EDGES}, 8) == canonical_key(DGX1, 8)


# ---------------------------------------------------------------- helpers


def test_mask_helpers():
    assert mask_to_list(0) == []
    assert mask_to_list(0b10110) == [1, 2, 4]
    assert list_to_mask([4, 1, 2, 2]) == 0b10110
    assert list_to_mask(mask_to_list(1 << 1023 | 5)) == 1 << 1023 | 5


def test_layout_connected_subsets_is_connected_subsets_on_a_parsed_layout() -> None:
    """The planner's fast path (a node's layout parsed once) gives the sets the
    checked function gives: on a hybrid cube-mesh, a ring and islands, every mask
    of 8 GPUs and sizes 2-4, with and without a limit."""
    from planner.core.topology import layout, layout_connected_subsets

    cube = {"edges": [[0, 1], [0, 2], [0, 3], [1, 2], [1, 3], [2, 3], [4, 5], [4, 6], [4, 7],
                      [5, 6], [5, 7], [6, 7], [0, 4], [1, 5], [2, 6], [3, 7]]}
    ring = {"edges": [[i, (i + 1) % 8] for i in range(8)]}
    for raw in (cube, ring, [[0, 1, 2, 3], [4, 5, 6, 7]]):
        t = layout(raw, 8)
        for mask in range(256):
            for size in (2, 3, 4):
                assert layout_connected_subsets(t, mask, size) == \
                    connected_subsets(raw, 8, mask, size)
                assert layout_connected_subsets(t, mask, size, limit=3) == \
                    connected_subsets(raw, 8, mask, size, limit=3)
    # the cube-mesh's 4-GPU connected sets on all GPUs: more than its two islands
    assert len(layout_connected_subsets(layout(cube, 8), 0xFF, 4)) > 2
