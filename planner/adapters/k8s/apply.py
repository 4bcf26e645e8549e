"""Turn a plan back into Kubernetes API objects: ``policy/v1`` Evictions for every
pod of every victim and ``v1`` Bindings for every pod of every placed job, or
the equivalent ``kubectl`` commands.

Job ids map back to pods through the ``_k8s`` section that ``k8s snapshot``
writes into the snapshot (or a separate meta file). Without it, an id
``<namespace>/<pod>`` is taken as that one pod; group ids need the meta.
"""

from __future__ import annotations

import json
import math
import shlex
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from models import Eviction, InputError, Plan
from models.policy import MAX_SECONDS
from planner.adapters.k8s.config import PREFIX, K8sConfig
from planner.adapters.k8s.objects import iso, valid_namespace, valid_pod_name, what_is
from planner.adapters.k8s.snapshot import META_KIND, OCCUPIED_PREFIX

_WAIT_MARGIN_S = 60


@dataclass(frozen=True)
class JobPods:
    namespace: str
    pods: tuple[str, ...]


def read_meta(doc: Any, source: str | None = None) -> dict[str, Any]:
    """The pod mapping from a snapshot written by ``k8s snapshot`` (its ``_k8s``
    section) or from a standalone meta document."""
    if isinstance(doc, dict) and isinstance(doc.get("_k8s"), dict):
        doc = doc["_k8s"]
    if not isinstance(doc, dict) or doc.get("kind") != META_KIND \
            or not isinstance(doc.get("jobs"), dict):
        seen = what_is(doc)
        looks = f"this looks like {seen}: " if seen else ""
        raise InputError([(f"--snapshot-meta: {looks}not a snapshot written by 'preempt-planner "
                           f"k8s snapshot' (no _k8s section) nor a {META_KIND} document "
                           "(its --meta-out)")], source)
    problems = _meta_problems(doc)
    if problems:
        raise InputError([f"--snapshot-meta: {p} (a hand-edited meta? take the one 'k8s "
                          "snapshot' wrote)" for p in problems], source)
    return doc


def _meta_problems(meta: dict[str, Any]) -> list[str]:
    """What is wrong with the fields of a meta document that 'k8s apply' uses (their
    types, and the ranges of its durations: those of the config's)."""
    out = []
    for key in ("now", "prefix"):
        if meta.get(key) is not None and not isinstance(meta[key], str):
            out.append(f"{key}: must be a string, got {_shown(meta[key])}")
    # (max_plan_age_s defaults to twice interval_s: config.plan_age_limit_s)
    for key, most in (("interval_s", MAX_SECONDS), ("max_plan_age_s", 2 * MAX_SECONDS)):
        value = meta.get(key)
        if value is not None and not (isinstance(value, int | float)
                                      and not isinstance(value, bool)
                                      and 0 < value <= most):
            out.append(f"{key}: must be a number of seconds > 0 and at most {most:g}, "
                       f"got {_shown(value)}")
    out += [f"jobs.{job}: must be an object, got {_shown(entry)}"
            for job, entry in meta["jobs"].items() if not isinstance(entry, dict)]
    for key in ("mig_nodes", "occupied"):
        if meta.get(key) is not None and not isinstance(meta[key], dict):
            out.append(f"{key}: must be an object, got {_shown(meta[key])}")
    return out


def _shown(value: Any) -> str:
    return one_line(json.dumps(value))[:60]


def grace_seconds(grace_s: float) -> int:
    """``deleteOptions.gracePeriodSeconds``: the plan's grace rounded up to whole
    seconds, at least 1 (the API reads 0 as 'delete immediately', without SIGTERM)."""
    return max(1, math.ceil(round(grace_s, 6)))


def job_pods(job_id: str, meta: dict[str, Any] | None) -> JobPods:
    """The namespace and pods of a job: its entry in the snapshot meta, else (a plain
    ``<namespace>/<pod>`` id) that one pod. Every name must be a Kubernetes name (they
    go into API paths and commands); a stand-in job (``k8s-occupied@<node>``) has no
    pods to act on. InputError otherwise, naming the job."""
    if job_id.startswith(OCCUPIED_PREFIX):
        raise InputError([(f"job {job_id!r}: stands for the GPUs of pods the planner must never "
                           "evict (DaemonSet, static or terminating pods, other namespaces, "
                           "...); it is never evicted nor placed")])
    jobs = (meta or {}).get("jobs", {})
    entry = jobs.get(job_id) if isinstance(jobs, dict) else None
    if entry is not None:
        ns = entry.get("namespace") if isinstance(entry, dict) else None
        pods = entry.get("pods") if isinstance(entry, dict) else None
        if not isinstance(pods, list) or not pods:
            raise InputError([(f"job {job_id!r}: its entry in the snapshot meta has no 'pods' "
                               "list (a hand-edited meta?); take the meta 'k8s snapshot' "
                               "wrote")])
        bad = [] if valid_namespace(ns) else [f"namespace {ns!r}"]
        bad += [f"pod {x!r}" for x in pods if not valid_pod_name(x)]
        if bad or not isinstance(ns, str):
            raise InputError([(f"job {job_id!r}: its entry in the snapshot meta names "
                               f"{', '.join(bad)}, which Kubernetes does not allow as a name "
                               "(a hand-edited meta?)")])
        return JobPods(ns, tuple(pods))
    ns, sep, name = job_id.partition("/")
    if sep and valid_namespace(ns) and valid_pod_name(name):
        return JobPods(ns, (name,))
    hint = "" if meta else " (pass --snapshot-meta with the snapshot written by 'k8s snapshot')"
    raise InputError([f"job {job_id!r}: cannot map it to pods{hint}"])


def plan_age_limit(meta: dict[str, Any] | None, config: K8sConfig | None) -> tuple[float, str]:
    """How old a plan may be (seconds) and where that limit comes from: the config
    given to 'k8s apply', else the one 'k8s snapshot' wrote into the meta, else the
    defaults (2 x interval_s = 60 s)."""
    if config is not None:
        src = ("max_plan_age_s" if config.max_plan_age_s is not None
               else f"2 x interval_s = 2 x {config.interval_s:g} s")
        return config.plan_age_limit_s(), src
    limit = (meta or {}).get("max_plan_age_s")
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
        return float(limit), "max_plan_age_s in the snapshot meta, from the config of 'k8s snapshot'"
    cfg = K8sConfig()
    return cfg.plan_age_limit_s(), f"2 x the default interval_s = 2 x {cfg.interval_s:g} s"


def check_plan_age(plan: Plan, now: datetime, limit_s: float, source: str = "max_plan_age_s",
                   force: bool = False) -> list[str]:
    """Refuse (InputError) a plan older than ``limit_s`` at ``now``, measured from the
    plan's ``now``: its victims may have ended, moved or checkpointed, and its free GPUs
    may have been taken. ``force`` applies it anyway. Returns warnings (a forced old
    plan; a plan from the future, i.e. clock skew)."""
    now = now.replace(microsecond=0)
    age = round((now - plan.now).total_seconds(), 3)
    if age > limit_s:
        msg = (f"the plan is for {iso(plan.now)}, {age:.0f} s before now ({iso(now)}): older "
               f"than {limit_s:g} s ({source}); its victims and free GPUs may have changed "
               "since. Take a new snapshot and plan again, or pass --force to apply it anyway")
        if not force:
            raise InputError([msg], "plan")
        return [f"--force: applying a plan {age:.0f} s old (limit {limit_s:g} s, {source})"]
    if age < -limit_s:
        return [(f"the plan is for {iso(plan.now)}, {-age:.0f} s after now ({iso(now)}): are the "
                "clocks of the snapshot and of this machine apart?")]
    return []


def preconditions(job_id: str, pod: str, meta: dict[str, Any] | None) -> dict[str, str]:
    """``deleteOptions.preconditions`` of a victim pod: the ``uid`` and
    ``resourceVersion`` the snapshot saw (those it saw). The API server refuses the
    eviction (409 Conflict) when the pod of that name is another one (replaced, the
    same name reused) or has changed since."""
    entry = (meta or {}).get("jobs", {}).get(job_id) or {}
    out = {}
    for key, field in (("uids", "uid"), ("resource_versions", "resourceVersion")):
        known = entry.get(key)
        value = known.get(pod) if isinstance(known, dict) else None
        if isinstance(value, str) and value:
            out[field] = value
    return out


def _victim_pods(plan: Plan, meta: dict[str, Any] | None
                 ) -> Iterator[tuple[Eviction, str, str]]:
    """(eviction, namespace, pod) for each pod of each victim, once per pod (a pod
    planned as several jobs, one per GPU resource, is evicted once); the victims
    whose pods are unknown are bad input, all named after the others."""
    errors = []
    seen: set[tuple[str, str]] = set()
    for ev in plan.evictions:
        try:
            jp = job_pods(ev.job, meta)
        except InputError as exc:
            errors += exc.errors
            continue
        for pod in jp.pods:
            if (jp.namespace, pod) not in seen:
                seen.add((jp.namespace, pod))
                yield ev, jp.namespace, pod
    if errors:
        raise InputError(errors, "plan")


def eviction_objects(plan: Plan, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One Eviction per pod of each victim, grace = the victim's ``grace_s`` rounded up
    (a pod planned as several jobs, one per GPU resource, is evicted once), with the
    pod's uid and resourceVersion as preconditions when the snapshot saw them."""
    out = []
    for ev, namespace, pod in _victim_pods(plan, meta):
        options: dict[str, Any] = {"gracePeriodSeconds": grace_seconds(ev.grace_s)}
        pre = preconditions(ev.job, pod, meta)
        if pre:
            options["preconditions"] = pre
        out.append({
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
            "deleteOptions": options,
        })
    return out


EVENT_REASON = "PreemptPlannerEviction"  # what 'k8s snapshot --events' reads back (R15)


def event_objects(plan: Plan, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One ``v1`` Event per pod of each victim, reason EVENT_REASON at the plan's time:
    the record of the eviction that the next snapshot's ``recent_evictions`` reads
    (``k8s snapshot --events``), for the rolling eviction budget (R15)."""
    now = plan.model_dump(mode="json")["now"]
    stamp = int(plan.now.timestamp())
    out = []
    for ev, namespace, pod in _victim_pods(plan, meta):
        out.append({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{pod}.preempt-planner-{stamp}"[:253],
                         "namespace": namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod,
                               "namespace": namespace},
            "reason": EVENT_REASON, "type": "Normal", "count": 1,
            "message": (f"evicted by preempt-planner (job {ev.job}, tier {ev.tier}, grace "
                        f"{grace_seconds(ev.grace_s)} s) for "
                        f"{', '.join(ev.preemptors) or 'no placed job'}"),
            "firstTimestamp": now, "lastTimestamp": now,
            "source": {"component": "preempt-planner"},
            "reportingComponent": "preempt-planner", "reportingInstance": "preempt-planner",
        })
    return out


def _placed_pods(plan: Plan, meta: dict[str, Any] | None) -> list[tuple[Any, JobPods]]:
    out = []
    errors = []
    for pl in plan.placements:
        try:
            jp = job_pods(pl.job, meta)
        except InputError as exc:
            errors += exc.errors
            continue
        if len(jp.pods) != len(pl.placement):
            errors.append(f"job {pl.job!r}: {len(jp.pods)} pod(s) but the plan places it on "
                          f"{len(pl.placement)} node(s)")
            continue
        out.append((pl, jp))
    if errors:
        raise InputError(errors, "plan")
    return out


def node_name(node_id: str, meta: dict[str, Any] | None) -> str:
    """The Node of a contract node: ``gpu-1/mig-1g.10gb`` (the MIG slices of one
    profile, "mixed" strategy) is on Node ``gpu-1``. Node names never contain '/'."""
    entry = ((meta or {}).get("mig_nodes") or {}).get(node_id)
    if isinstance(entry, dict) and isinstance(entry.get("node"), str):
        return entry["node"]
    return node_id.partition("/")[0]


def victim_nodes(job_id: str, meta: dict[str, Any] | None) -> dict[str, str]:
    """pod -> the node the snapshot saw it on (empty when the meta does not say)."""
    entry = (meta or {}).get("jobs", {}).get(job_id) or {}
    nodes = entry.get("nodes")
    return {k: v for k, v in nodes.items() if isinstance(v, str)} \
        if isinstance(nodes, dict) else {}


def binding_objects(plan: Plan, meta: dict[str, Any] | None = None,
                    prefix: str | None = None) -> list[dict[str, Any]]:
    """One Binding per pod of each placed job: the i-th pod (natural name order) goes
    to the i-th node of the placement. The planned GPU indices and the wait travel
    as annotations, which the API server copies onto the pod when it binds it."""
    prefix = prefix or (meta or {}).get("prefix") or PREFIX
    out = []
    for pl, jp in _placed_pods(plan, meta):
        for pod, part in zip(jp.pods, pl.placement, strict=True):
            out.append({
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": pod, "namespace": jp.namespace, "annotations": {
                    prefix + "gpu-ids": ",".join(str(g) for g in part.gpus),
                    prefix + "start-after-s": str(grace_seconds(pl.start_after_s)
                                                  if pl.start_after_s > 0 else 0),
                }},
                "target": {"apiVersion": "v1", "kind": "Node",
                           "name": node_name(part.node, meta)},
            })
    return out


def object_list(plan: Plan, meta: dict[str, Any] | None = None,
                bindings: bool = True) -> dict[str, Any]:
    """A ``v1`` List: the Evictions first, then the Bindings."""
    items = eviction_objects(plan, meta)
    if bindings:
        items += binding_objects(plan, meta)
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def one_line(text: str) -> str:
    """``text`` with every control character (line and paragraph separators too)
    written as its escape (``\\n``, ``\\x1b``, ``\\u2028``): what the script interpolates
    into a comment or a message stays on its line of the script, whatever a name, a
    job id or a plan holds (a newline would end a comment, and the rest would run)."""
    return "".join(repr(c)[1:-1] if unicodedata.category(c) in ("Cc", "Zl", "Zp") else c
                   for c in text)


def _comment(text: str) -> str:
    """A comment line of the script (one line, see one_line)."""
    return "# " + one_line(text)


def _say(text: str) -> str:
    """A line of the script printing ``text`` on stderr (one quoted word, on one line)."""
    return f"echo {shlex.quote(one_line(text))} >&2"


def _post(path: str, obj: dict[str, Any], rehearse: bool = False) -> list[str]:
    body = json.dumps(obj, separators=(",", ":"), sort_keys=False)
    if rehearse:  # (the API server checks the request, admission and PDBs included)
        path += "?dryRun=All"
    return [f"kubectl create --raw {shlex.quote(path)} -f - <<'EOF'", body, "EOF"]


def _get_node(namespace: str, pod: str) -> str:
    """The shell words printing a pod's node: '' when unbound, '-' when the pod is gone
    (or the API server cannot be read: then the pod is skipped, which is safe)."""
    return (f"$(kubectl get pod -n {shlex.quote(namespace)} {shlex.quote(pod)} -o "
            "jsonpath='{.spec.nodeName}' 2>/dev/null || echo -)")


def kubectl_script(plan: Plan, meta: dict[str, Any] | None = None,
                   bindings: bool = True, max_age_s: float | None = None,
                   rehearse: bool = False) -> str:
    """A POSIX shell script: evictions through the Eviction API (PodDisruptionBudgets
    apply; a refusal stops the script), then, per placed job, a wait for its
    victims' pods to be gone and the bindings.

    ``rehearse``: the same script with nothing changed on the cluster: every
    Eviction and Binding is sent with ``?dryRun=All`` (the API server validates it
    and runs admission and PodDisruptionBudget checks, and stores nothing), each
    eviction's Event with ``--dry-run=server`` (so 'k8s snapshot --events' counts
    no eviction that did not happen), and the waits for victims' pods to be gone
    are said, not run (nothing is deleted in a rehearsal).

    Every victim pod is re-checked just before its eviction: a pod that no longer
    exists or no longer runs on the node the snapshot saw is skipped (a comment, and
    a message on stderr), and so is every placement that waited for it. A placed
    job's pods are re-checked before the bindings: when one is gone or already bound,
    the job is not bound. With ``max_age_s`` the script itself refuses to run once the
    plan is older than that (``date -u +%s``), as 'k8s apply' does."""
    by_job = {ev.job: ev for ev in plan.evictions}
    events = {(e["involvedObject"]["namespace"], e["involvedObject"]["name"]): e
              for e in event_objects(plan, meta)}
    evictions = {(e["metadata"]["namespace"], e["metadata"]["name"]): e
                 for e in eviction_objects(plan, meta)}
    lines = [
        "#!/bin/sh",
        _comment(f"preempt-planner k8s apply: plan for {plan.model_dump(mode='json')['now']} "
                 f"(status {plan.status}): {len(plan.evictions)} eviction(s), "
                 f"{len(plan.placements)} placement(s)"),
    ]
    if rehearse:
        lines.append(_comment("REHEARSAL (k8s apply --rehearse): every request is a "
                              "server-side dry run (dryRun=All); nothing on the cluster "
                              "changes"))
    lines.append("set -eu")
    if max_age_s is not None:
        deadline = int(plan.now.timestamp() + max_age_s)
        lines += ["", _comment(f"not after "
                               f"{iso(datetime.fromtimestamp(deadline, plan.now.tzinfo))}: the "
                               f"plan's now + {max_age_s:g} s (max_plan_age_s)"),
                  f'if [ "$(date -u +%s)" -gt {deadline} ]; then',
                  _say(f"preempt-planner: the plan for {iso(plan.now)} is older than "
                       f"{max_age_s:g} s; nothing applied (take a new snapshot and plan again)"),
                  "exit 1", "fi"]
    flag = {ev.job: f"pp_skip_{i}" for i, ev in enumerate(plan.evictions, 1)}
    if plan.evictions:
        lines += ["", _comment("pp_skip_N=1 when a pod of victim N was not evicted (gone or "
                               "moved)"),
                  " ".join(f"{v}=0" for v in flag.values())]
    done: set[tuple[str, str]] = set()
    for ev in plan.evictions:
        jp = job_pods(ev.job, meta)
        where = victim_nodes(ev.job, meta)
        lines += ["", _comment(f"evict {ev.job} (tier {ev.tier}, grace {ev.grace_s:g} s) for "
                               f"{', '.join(ev.preemptors) or '-'}")]
        for pod in jp.pods:
            key = (jp.namespace, pod)
            ref = f"{jp.namespace}/{pod}"
            if key in done:
                lines.append(_comment(f"{ref}: evicted above (planned as several jobs)"))
                continue
            done.add(key)
            node = where.get(pod)
            if node is not None:
                lines += [_comment(f"re-check: skipped if {ref} is gone or no longer on {node}"),
                          (f"if [ \"{_get_node(jp.namespace, pod)}\" = {shlex.quote(node)} ]; "
                          "then")]
                gone = f"{ref} is gone or no longer on {node}; not evicted"
            else:
                lines += [_comment(f"re-check: skipped if {ref} is gone (the snapshot meta does "
                                   "not say its node)"),
                          f"if [ \"{_get_node(jp.namespace, pod)}\" != - ]; then"]
                gone = f"{ref} is gone; not evicted"
            lines += _post(f"/api/v1/namespaces/{jp.namespace}/pods/{pod}/eviction",
                           evictions[key], rehearse)
            lines.append(_comment("the record 'k8s snapshot --events' reads back (rolling "
                                  "budget, R15)"))
            lines += [f"kubectl create{' --dry-run=server' if rehearse else ''} -f - <<'EOF'",
                      json.dumps(events[key], separators=(",", ":")), "EOF"]
            lines += ["else", _say("preempt-planner: skip: " + gone),
                      f"{flag[ev.job]}=1", "fi"]
    if bindings:
        objs = iter(binding_objects(plan, meta))
        for pl, jp in _placed_pods(plan, meta):
            lines += ["", _comment(f"place {pl.job} on "
                                   f"{', '.join(p.node for p in pl.placement)}")]
            victims = [ev for ev in plan.evictions if pl.job in ev.preemptors]
            closing = []
            if victims:
                names = " or ".join(v.job for v in victims)
                lines += [_comment(f"only when every pod of its victims was evicted ({names})"),
                          (f"if [ \"{''.join('$' + flag[v.job] for v in victims)}\" = "
                          f"{'0' * len(victims)} ]; then")]
                timeout = max(grace_seconds(by_job[v.job].grace_s) for v in victims)
                timeout += _WAIT_MARGIN_S
                for v in victims:
                    vp = job_pods(v.job, meta)
                    names = " ".join(shlex.quote(f"pod/{n}") for n in vp.pods)
                    wait = (f"kubectl wait --for=delete {names} -n "
                            f"{shlex.quote(vp.namespace)} --timeout={timeout}s")
                    lines.append(_say(f"preempt-planner: rehearsal: would run: {wait}")
                                 if rehearse else wait)
                closing = ["else", _say(f"preempt-planner: skip: not placing {pl.job}: a pod of "
                                        "its victims was not evicted"), "fi"]
            lines += [_comment("re-check: not bound if one of its pods is gone or already bound"),
                      "pp_place=yes"]
            for pod in jp.pods:
                lines += [f"if [ -n \"{_get_node(jp.namespace, pod)}\" ]; then",
                          _say(f"preempt-planner: skip: not placing {pl.job}: "
                               f"{jp.namespace}/{pod} is gone or already bound"),
                          "pp_place=no", "fi"]
            lines.append('if [ "$pp_place" = yes ]; then')
            for pod in jp.pods:
                lines += _post(f"/api/v1/namespaces/{jp.namespace}/pods/{pod}/binding",
                               next(objs), rehearse)
            lines.append("fi")
            lines += closing
    return "\n".join(lines) + "\n"
