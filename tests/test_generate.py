"""The snapshot generator: determinism, requested shares, contract consistency."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import networkx as nx
import pytest

import cli
from models import Snapshot, load_snapshot
from models.rules import immune_for_s, in_cooldown
from planner.sim.generate import CUBE_EDGES, generate, parse_mix, to_json


def _load(**params: object) -> Snapshot:
    return load_snapshot(generate(**params))  # type: ignore[arg-type]


def _occupancy(snap: Snapshot) -> float:
    return sum(j.total_gpus for j in snap.running()) / sum(n.gpus for n in snap.nodes)


def test_same_seed_same_bytes() -> None:
    a = to_json(generate(nodes=64, seed=7))
    b = to_json(generate(nodes=64, seed=7))
    assert a == b
    assert a != to_json(generate(nodes=64, seed=8))


def test_cli_same_seed_same_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["generate", "--nodes", "40", "--pools", "--pending", "7", "--seed", "11"]
    one, two, other = tmp_path / "1.json", tmp_path / "2.json", tmp_path / "3.json"
    assert cli.main([*args, "--out", str(one)]) == 0
    assert cli.main([*args, "--out", str(two)]) == 0
    assert cli.main([*args[:-1], "12", "--out", str(other)]) == 0
    assert one.read_bytes() == two.read_bytes() != other.read_bytes()
    assert cli.main(["validate", str(one)]) == 0
    assert "valid: 40 nodes, 320 GPUs" in capsys.readouterr().out
    assert cli.main(["generate", "--nodes", "4", "--seed", "11"]) == 0
    assert json.loads(capsys.readouterr().out)["version"] == 1


@pytest.mark.parametrize("occupancy", [0.0, 0.3, 0.75, 0.9, 1.0])
def test_occupancy(occupancy: float) -> None:
    snap = _load(nodes=128, occupancy=occupancy, seed=3)
    assert abs(_occupancy(snap) - occupancy) <= 0.01


@pytest.mark.parametrize("pending", [0, 1, 17, 200])
def test_pending_count(pending: int) -> None:
    snap = _load(nodes=32, pending=pending, seed=1)
    assert len(snap.pending()) == pending


def test_default_pending_count() -> None:
    assert len(_load(nodes=64, seed=1).pending()) == 16


@pytest.mark.parametrize("share", [0.0, 0.1, 0.25, 0.5])
def test_immune_share(share: float) -> None:
    snap = _load(nodes=256, immune_share=share, seed=5)
    running = snap.running()
    immune = [j for j in running if immune_for_s(snap.policy, snap.now, j) > 0]
    assert abs(len(immune) / len(running) - share) <= 0.02
    assert all(j.tier != 1 for j in immune)  # tier 1 has min_runtime 0


def test_multinode_share_and_shapes() -> None:
    snap = _load(nodes=512, multinode_share=0.2, seed=9)
    running = snap.running()
    gang_gpus = sum(j.total_gpus for j in running if j.nodes > 1)
    assert abs(gang_gpus / sum(j.total_gpus for j in running) - 0.2) <= 0.03
    for j in running:
        if j.nodes > 1:
            assert 2 <= j.nodes <= 8 and j.gpus_per_node == 8
        else:
            assert j.gpus_per_node in (1, 2, 4, 8)


def test_tier_and_nvlink_mix() -> None:
    snap = _load(nodes=400, nvlink_mix={"nvswitch": 0.5, "pairs": 0.25, "cube": 0.25},
                 tier_mix={1: 0.1, 3: 0.9}, seed=2)
    kinds = Counter("cube" if hasattr(n.nvlink, "edges")
                    else "pairs" if isinstance(n.nvlink, list) else n.nvlink for n in snap.nodes)
    assert kinds == {"nvswitch": 200, "pairs": 100, "cube": 100}
    tiers = Counter(j.tier for j in snap.jobs)
    assert set(tiers) == {1, 3}
    assert 0.05 < tiers[1] / len(snap.jobs) < 0.15


def test_placements_respect_topology_pools_and_blocks() -> None:
    snap = _load(nodes=200, pools=True, blocks_per=8, seed=4)
    nodes = snap.node_map()
    assert snap.policy.pools == {"reserved": [1]}
    assert 0 < sum(n.pool == "reserved" for n in snap.nodes) <= 40
    for j in snap.running():
        for part in j.placement or []:
            node = nodes[part.node]
            assert snap.policy.pool_admits(node.pool, j.tier)
            if j.gpu_type:
                assert node.gpu_type == j.gpu_type
            if j.topology == "nvlink":
                graph = _graph(node.nvlink_raw(), node.gpus)
                assert nx.is_connected(graph.subgraph(part.gpus)), (j.id, part)
        if j.same_block:
            assert len({nodes[p.node].block for p in j.placement or []}) == 1


def _graph(nvlink: object, gpus: int) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(gpus))
    if nvlink == "nvswitch":
        g.add_edges_from((a, b) for a in range(gpus) for b in range(a + 1, gpus))
    elif isinstance(nvlink, dict):
        g.add_edges_from(nvlink["edges"])
    elif isinstance(nvlink, list):
        for island in nvlink:
            g.add_edges_from((a, b) for a in island for b in island if a < b)
    return g


def test_realistic_values() -> None:
    snap = _load(nodes=128, seed=6)
    assert {n.gpu_type for n in snap.nodes} <= {"H100", "H200"}
    assert all(20 <= s.write_gb_per_s <= 100 for s in snap.storage)
    local = [n.local_write_gb_per_s for n in snap.nodes if n.local_write_gb_per_s is not None]
    assert local and all(2 <= x <= 7 for x in local)
    cube = [n for n in snap.nodes if hasattr(n.nvlink, "edges")]
    assert cube
    edges = cube[0].nvlink.edges  # type: ignore[union-attr]
    assert [list(e) for e in edges] == CUBE_EDGES
    ck = [j.checkpoint for j in snap.jobs]
    assert all(5 <= c.barrier_s <= 30 and 2 <= c.cleanup_s <= 10 for c in ck)
    assert all(60 <= c.restore_s <= 900 for c in ck)
    assert any(c.signal is None for c in ck) and any(c.signal for c in ck)
    assert any(c.last_at is not None and (snap.now - c.last_at).total_seconds() > 6 * 3600
               for c in ck)
    per_gpu = [j.checkpoint.size_gb / j.total_gpus for j in snap.jobs if j.nodes == 1]
    assert 10 < sum(per_gpu) / len(per_gpu) < 20  # about 14 GB per GPU


def test_backoff_jobs() -> None:
    snap = _load(nodes=512, seed=8)
    preempted = [j for j in snap.pending() if j.preemptions > 0]
    assert preempted and all(j.last_preempted_at is not None for j in preempted)
    held = [j for j in preempted if in_cooldown(snap.policy, snap.now, j)]
    assert 0 < len(held) < len(preempted)


def test_node_states() -> None:
    snap = _load(nodes=300, drain_share=0.05, down_share=0.02, seed=1)
    states = Counter(n.state for n in snap.nodes)
    assert states["drain"] == 15 and states["down"] == 6


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("nodes", [1, 2, 3, 16, 97])
def test_generated_snapshots_load(nodes: int, seed: int) -> None:
    gpus = [8, 4, 8, 2, 8, 6][seed]
    snap = _load(nodes=nodes, seed=seed, pools=seed % 2 == 1, gpus_per_node=gpus)
    assert len(snap.nodes) == nodes


def test_other_tiers_get_a_policy() -> None:
    snap = _load(nodes=32, tier_mix={2: 0.5, 4: 0.5}, seed=1)
    assert 4 in snap.policy.tiers and snap.policy.tiers[4].preemptible


def test_bad_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ValueError, match="unknown NVLink layout"):
        generate(nodes=4, nvlink_mix={"ring": 1.0})
    with pytest.raises(ValueError, match="occupancy"):
        generate(nodes=4, occupancy=1.5)
    with pytest.raises(ValueError, match="no time zone"):
        generate(nodes=4, now="2026-11-29T08:00:00")
    with pytest.raises(ValueError, match="not KEY=SHARE"):
        parse_mix("nvswitch")
    assert parse_mix("1=0.2, 3=0.8", int_keys=True) == {1: 0.2, 3: 0.8}
    assert cli.main(["generate", "--nodes", "4", "--nvlink-mix", "ring=1"]) == 2
    assert "unknown NVLink layout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["generate", "--nodes", "4", "--occupancy", "2"])


def test_large_cluster_is_fast() -> None:
    start = time.perf_counter()
    doc = generate(nodes=4096, seed=1)
    text = to_json(doc)
    elapsed = time.perf_counter() - start
    assert elapsed < 10, f"4096 nodes took {elapsed:.1f} s"
    snap = load_snapshot(json.loads(text))
    assert len(snap.nodes) == 4096
    assert abs(_occupancy(snap) - 0.9) <= 0.01
