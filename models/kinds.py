"""Recognising a document from another tool, so that a wrong file gets one message
("this looks like X; use Y") instead of pages of field errors.

One recogniser for every reader: the loaders of snapshots, plans and policies
(``models.load``), and the Slurm and Kubernetes adapters, which word the message
for their own options (``planner/adapters/slurm/parse.py``, ``planner/adapters/k8s/objects.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

KUBECTL = {"Node": "kubectl get nodes -o json", "Pod": "kubectl get pods -A -o json",
           "Event": "kubectl get events -A -o json"}
META_KIND = "preempt-planner/k8s-meta"


@dataclass(frozen=True)
class Seen:
    """What a document is: ``name`` one of ``snapshot``, ``k8s-snapshot`` (a snapshot
    written by ``k8s snapshot``), ``plan``, ``policy``, ``tick`` (a record of ``slurm
    run --plan-dir``), ``k8s-meta``, ``k8s`` (Kubernetes objects; ``detail`` is the
    kind, ``PodList``, ``Pod``, ... or a list of kinds), ``squeue``, ``sinfo``,
    ``nodes`` (``scontrol show nodes --json``, or sinfo's older form), ``sacct``;
    ``what`` says so in a few words."""

    name: str
    what: str
    detail: str = ""


def _first(doc: Mapping[str, Any], key: str) -> Any:
    v = doc.get(key)
    return v[0] if isinstance(v, list) and v and isinstance(v[0], Mapping) else None


def _article(word: str) -> str:
    return f"a{'n' if word[:1] in 'AEIOU' else ''} {word}"


def _kubernetes(doc: Any) -> Seen | None:
    """Kubernetes objects: a List (``kubectl get ... -o json``), a bare list of
    objects, or one object; ``detail`` is ``PodList``, ``Pod``, ``List of A, B``."""
    items: Any
    if isinstance(doc, list):
        if not doc or not all(isinstance(o, Mapping) and isinstance(o.get("kind"), str)
                              and ("apiVersion" in o or "metadata" in o) for o in doc):
            return None
        items, kind = doc, "List"
    elif isinstance(doc, Mapping) and isinstance(doc.get("kind"), str) \
            and ("apiVersion" in doc or "items" in doc):
        items, kind = doc.get("items"), doc["kind"]
    else:
        return None
    if kind == "List":
        kinds = sorted({str(o.get("kind")) for o in items or [] if isinstance(o, Mapping)})
        if len(kinds) != 1:
            listed = ", ".join(kinds) or "no"
            return Seen("k8s", f"a Kubernetes list of {listed} objects", f"List of {listed}")
        kind = f"{kinds[0]}List"
    if kind.endswith("List") and kind[:-4] in KUBECTL:
        return Seen("k8s", f"{_article(kind[:-4])} list (the output of '{KUBECTL[kind[:-4]]}')",
                    kind)
    return Seen("k8s", f"a Kubernetes {kind}", kind)


def recognise(doc: Any) -> Seen | None:
    """What ``doc`` is, or None when it is none of the documents above (which
    includes a broken document of an expected kind: its field errors are the
    message then)."""
    if isinstance(doc, Mapping) and doc.get("kind") == META_KIND:
        return Seen("k8s-meta", "the job-to-pods mapping written by 'k8s snapshot --meta-out'")
    seen = _kubernetes(doc)
    if seen is not None or not isinstance(doc, Mapping):
        return seen
    if {"tick", "snapshot", "plan"} <= set(doc):
        return Seen("tick", "a tick record of 'slurm run --plan-dir'")
    if "objective" in doc or "solver" in doc or ("evictions" in doc and "placements" in doc):
        return Seen("plan", "a preempt-planner plan")
    job, node = _first(doc, "jobs"), _first(doc, "nodes")
    lists = isinstance(doc.get("jobs"), list) or isinstance(doc.get("nodes"), list)
    if "version" in doc and ("now" in doc or lists) and not (job and "job_id" in job):
        if isinstance(doc.get("_k8s"), Mapping):
            return Seen("k8s-snapshot", "a contract snapshot written by 'preempt-planner k8s "
                                        "snapshot'")
        return Seen("snapshot", "a contract snapshot (preempt-planner's own format)")
    jobs = [j for j in doc.get("jobs") or [] if isinstance(j, Mapping)] \
        if isinstance(doc.get("jobs"), list) else []
    if any("steps" in j or (isinstance(j.get("state"), Mapping) and "job_state" not in j)
           for j in jobs):
        return Seen("sacct", "the output of 'sacct --json' (Slurm)")
    if (job is not None and "job_id" in job) or (isinstance(doc.get("jobs"), list)
                                                 and "last_backfill" in doc):
        return Seen("squeue", "the output of 'squeue --json' (Slurm)")
    if isinstance(doc.get("sinfo"), list):
        return Seen("sinfo", "the output of 'sinfo --json' or 'scontrol show nodes --json' "
                             "(Slurm)")
    if node is not None and ("hostname" in node or "partitions" in node):
        return Seen("nodes", "the output of 'sinfo --json' or 'scontrol show nodes --json' "
                             "(Slurm)")
    if _is_policy(doc):
        return Seen("policy", "a policy (the 'policy' section of a snapshot)")
    return None


def _is_policy(doc: Mapping[str, Any]) -> bool:
    from models.policy import Policy

    keys = {k for k in doc if not (isinstance(k, str) and k.startswith("_"))}
    return bool(keys) and keys <= set(Policy.model_fields)


# what each document is for, in a message to someone who gave it in the wrong place
USE = {
    "snapshot": "give it as SNAPSHOT ('preempt-planner plan FILE', 'validate FILE')",
    "k8s-snapshot": "give it as SNAPSHOT ('preempt-planner plan FILE')",
    "plan": ("give it as PLAN: 'preempt-planner verify SNAPSHOT PLAN' (the snapshot first), "
             "'k8s apply PLAN' or 'slurm apply PLAN'"),
    "policy": "give it with --policy FILE (or check it alone: 'validate FILE --kind policy')",
    "tick": "its 'snapshot' and 'plan' members are a snapshot and a plan",
    "k8s-meta": "give it to 'k8s apply --snapshot-meta'",
    "k8s": "turn it into a snapshot with 'preempt-planner k8s snapshot --nodes F --pods G'",
    "squeue": ("turn it into a snapshot with 'preempt-planner slurm snapshot --squeue-json F "
               "--nodes-json G'"),
    "sinfo": ("turn it into a snapshot with 'preempt-planner slurm snapshot --squeue-json F "
              "--nodes-json G'"),
    "nodes": ("turn it into a snapshot with 'preempt-planner slurm snapshot --squeue-json F "
              "--nodes-json G'"),
    "sacct": "accounting records do not say which jobs hold GPUs now: use 'squeue --json'",
}
EXPECTED = {"snapshot": ("a snapshot", {"snapshot", "k8s-snapshot"}),
            "plan": ("a plan", {"plan"}),
            "policy": ("a policy", {"policy"})}


def wrong_document(doc: Any, expected: str) -> str | None:
    """``this looks like X, not Y; use ...`` when ``doc`` is recognisably another
    document than the ``expected`` one (``snapshot``, ``plan`` or ``policy``), else
    None."""
    seen = recognise(doc)
    want, ok = EXPECTED[expected]
    if seen is None or seen.name in ok:
        return None
    return f"this looks like {seen.what}, not {want}; {USE[seen.name]}"
