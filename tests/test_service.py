"""Planning service over real HTTP on loopback (server on port 0 in a thread)."""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from planner.service import PlannerServer, make_server

# One tier-1 8-GPU pending job; one node fully held by an evictable tier-3 job
# (started 2 h ago > 1800 s immunity): the optimum evicts it and places the job.
SNAP: dict[str, Any] = {
    "version": 1,
    "now": "2026-11-29T08:00:00Z",
    "nodes": [{"id": "dgx-1", "gpus": 8}],
    "jobs": [
        {"id": "sweep", "tier": 3, "state": "running", "gpus_per_node": 8,
         "started_at": "2026-11-29T06:00:00Z",
         "placement": [{"node": "dgx-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]},
        {"id": "train", "tier": 1, "state": "pending", "gpus_per_node": 8},
    ],
}


@pytest.fixture(params=[False, True], ids=["threads", "processes"])
def server(request: pytest.FixtureRequest) -> Iterator[PlannerServer]:
    # every test runs against both ways of solving: on the request's thread, and in a
    # worker process (parsing and validation too, so the same 400s must come back)
    srv = make_server("127.0.0.1", 0, time_limit_s=2.0, max_body_bytes=64 * 1024, quiet=True,
                      processes=request.param)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def _addr(srv: PlannerServer) -> tuple[str, int]:
    host, port = srv.server_address[:2]
    return str(host), int(port)


def _conn(srv: PlannerServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection(*_addr(srv), timeout=30)


def request(srv: PlannerServer, method: str, path: str, body: Any = None,
            headers: dict[str, str] | None = None,
            raw: bytes | None = None) -> tuple[int, dict[str, str], Any]:
    conn = _conn(srv)
    try:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        conn.request(method, path, body=data, headers=headers or {})
        resp = conn.getresponse()
        payload = resp.read()
        ctype = resp.getheader("Content-Type", "")
        out = json.loads(payload) if "json" in ctype and payload else payload.decode()
        return resp.status, dict(resp.getheaders()), out
    finally:
        conn.close()


def raw_exchange(srv: PlannerServer, head: bytes) -> tuple[int, Any]:
    """Send raw request bytes (headers only) and read the answer: the server must
    reply without waiting for a body."""
    with socket.create_connection(_addr(srv), timeout=10) as s:
        s.sendall(head)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        head_part, _, rest = data.partition(b"\r\n\r\n")
        lines = head_part.decode().split("\r\n")
        status = int(lines[0].split()[1])
        length = next(int(ln.split(":")[1]) for ln in lines if ln.lower().startswith(
            "content-length"))
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
        return status, json.loads(rest[:length])


# ---------------------------------------------------------------------- plan
def test_plan_known_optimum(server: PlannerServer) -> None:
    status, headers, plan = request(server, "POST", "/v1/plan?deterministic=true", SNAP)
    assert status == 200, plan
    assert headers["Content-Type"] == "application/json"
    assert plan["status"] == "optimal"
    assert [(e["job"], e["preemptors"]) for e in plan["evictions"]] == [("sweep", ["train"])]
    assert plan["evictions"][0]["grace_s"] == 60
    assert plan["placements"] == [{"job": "train", "start_after_s": 60.0, "placement": [
        {"node": "dgx-1", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]}]
    assert plan["objective"]["admitted_gpus"]["1"] == 8


def test_the_history_comes_with_the_request(server: PlannerServer) -> None:
    # The caller sends its own eviction history and the time limits (section 9): SNAP
    # with a tier-2 job instead of the tier-1 one, four evictions in the last hour
    # (B = max(4, floor(0.05 x 1)) = 4: none left, THRASH_BUDGET until the oldest
    # leaves the window at 08:10), then the same with sweep ending at 08:05 (spared,
    # R17: ENDING_SOON until then), and with neither (evicted).
    snap = json.loads(json.dumps(SNAP))
    snap["jobs"][1] = {"id": "train", "tier": 2, "state": "pending", "gpus_per_node": 8}
    full = dict(snap, recent_evictions=[{"job": f"x{k}", "at": f"2026-11-29T07:{10 + k}:00Z"}
                                        for k in range(4)])
    status, _, plan = request(server, "POST", "/v1/plan?deterministic=true", full)
    assert status == 200, plan
    assert plan["evictions"] == [] and [(d["reason"], d["until"]) for d in plan["deferred"]] \
        == [("THRASH_BUDGET", "2026-11-29T08:10:00Z")]
    ending = json.loads(json.dumps(snap))
    ending["jobs"][0]["expected_end_at"] = "2026-11-29T08:05:00Z"
    status, _, plan = request(server, "POST", "/v1/plan?deterministic=true", ending)
    assert [(d["reason"], d["until"]) for d in plan["deferred"]] == [
        ("ENDING_SOON", "2026-11-29T08:05:00Z")]
    status, _, plan = request(server, "POST", "/v1/plan?deterministic=true", snap)
    assert [e["job"] for e in plan["evictions"]] == ["sweep"]


def test_a_cluster_key_gives_the_plans_made_without_it(server: PlannerServer) -> None:
    # One cluster's ticks sent with a key: the second and third take over the first's
    # records (sweep, the node, the policy); each plan is the plan made without a key.
    # Tick 1: SNAP (evict sweep for the tier-1 job); tick 2: sweep is expected to end
    # by 08:05, so it is spared (R17) and the tier-1 job waits (ENDING_SOON); tick 3:
    # an invalid tick (400, the same messages); tick 4: SNAP again.
    ending = json.loads(json.dumps(SNAP))
    ending["jobs"][0]["expected_end_at"] = "2026-11-29T08:05:00Z"
    bad = json.loads(json.dumps(SNAP))
    bad["jobs"][0]["gpus_per_node"] = 0
    for tick in (SNAP, ending, bad, SNAP):
        want = request(server, "POST", "/v1/plan?deterministic=true", tick)
        got = request(server, "POST", "/v1/plan?deterministic=true&cluster=prod-a", tick)
        assert got[0] == want[0] and got[2] == want[2] | ({"solver": got[2]["solver"]}
                                                          if got[0] == 200 else {})
    assert [(d["reason"], d["until"]) for d in
            request(server, "POST", "/v1/plan?deterministic=1", ending, {"X-Cluster": "a"})[2][
                "deferred"]] == [("ENDING_SOON", "2026-11-29T08:05:00Z")]
    status, _, err = request(server, "POST", "/v1/plan?cluster=a%20b", SNAP)
    assert status == 400 and err["messages"] == [
        "cluster: 'a b' is not a cluster key (1-128 of the characters A-Z a-z 0-9 . _ -)"]


def test_plan_options_by_header_and_query(server: PlannerServer) -> None:
    status, _, plan = request(server, "POST", "/v1/plan", SNAP,
                              {"X-Planner": "greedy", "X-Time-Limit-S": "0.5",
                               "X-Deterministic": "1"})
    assert status == 200 and plan["solver"]["engine"] == "greedy"
    assert [e["job"] for e in plan["evictions"]] == ["sweep"]
    status, _, err = request(server, "POST",
                             "/v1/plan?time_limit_s=-1&planner=magic&deterministic=maybe&x=1",
                             SNAP)
    assert status == 400 and err["error"] == "bad options"
    text = " ".join(err["messages"])
    for word in ("time_limit_s", "magic", "maybe", "unknown query parameter(s): x"):
        assert word in text


def test_a_client_may_ask_for_a_proven_bound(server: PlannerServer) -> None:
    # The greedy plan of SNAP (evict sweep, place train) is optimal, but greedy alone
    # cannot say so: "feasible", no gap. With bound_s the relaxation proves it (gap 0,
    # the plan's eviction cost is 0, and so is the least any plan can have).
    status, _, plan = request(server, "POST", "/v1/plan?planner=greedy&deterministic=1", SNAP)
    assert status == 200 and plan["status"] == "feasible" and plan["solver"]["gap"] is None
    status, _, plan = request(server, "POST", "/v1/plan?planner=greedy&deterministic=1",
                              SNAP, {"X-Bound-S": "2"})
    assert status == 200 and plan["status"] == "optimal"
    assert (plan["solver"]["gap"], plan["solver"]["bound"]) == (0.0, 0.0)
    assert "proves the plan optimal" in plan["solver"]["detail"]
    status, _, err = request(server, "POST", "/v1/plan?bound_s=-1", SNAP)
    assert status == 400 and err["messages"] == [
        "bound_s: '-1' is not 0 or a positive number of seconds"]


def test_bad_json_is_400(server: PlannerServer) -> None:
    status, _, err = request(server, "POST", "/v1/plan", raw=b'{"version": 1,',
                             headers={"Content-Type": "application/json"})
    assert status == 400
    assert err["error"] == "malformed JSON"
    assert err["messages"] and "line 1" in err["messages"][0]


def test_a_body_nested_too_deep_is_400_and_the_service_goes_on(server: PlannerServer) -> None:
    # 1,000 levels (also inside a comment key) made json/pydantic recurse: now the same
    # limit as the CLI's (64 levels) gives a 400, and the next request is served
    for body in (b"[" * 1000 + b"]" * 1000, b'{"_comment": ' + b"[" * 100 + b"]" * 100 + b"}"):
        status, _, err = request(server, "POST", "/v1/plan", raw=body,
                                 headers={"Content-Type": "application/json"})
        assert status == 400 and "nested more than 64 levels" in " ".join(err["messages"])
    status, _, plan = request(server, "POST", "/v1/plan?deterministic=true", SNAP)
    assert status == 200 and plan["status"] == "optimal"


def test_invalid_snapshot_is_400_with_messages(server: PlannerServer) -> None:
    bad = copy.deepcopy(SNAP)
    bad["jobs"][0]["placement"][0]["gpus"] = [0, 1, 2, 3, 4, 5, 6, 9]
    bad["jobs"][1]["tier"] = 7
    status, _, err = request(server, "POST", "/v1/plan", bad)
    assert status == 400 and err["error"] == "invalid snapshot"
    assert any("jobs[0].placement[0].gpus" in m and "GPU 9 out of range" in m
               for m in err["messages"])
    assert any("jobs[1].tier" in m for m in err["messages"])
    status, _, err = request(server, "POST", "/v1/plan", [1, 2])
    assert status == 400 and err["messages"]


def test_oversized_body_is_413_before_reading(server: PlannerServer) -> None:
    # headers only, announcing 100 MB: the answer comes without the body being sent
    status, err = raw_exchange(server, b"POST /v1/plan HTTP/1.1\r\nHost: x\r\n"
                                       b"Content-Type: application/json\r\n"
                                       b"Content-Length: 100000000\r\n\r\n")
    assert status == 413
    assert err["error"] == "request body too large"
    assert "65536" in err["messages"][0]
    # a real body just over the limit, through a client
    big = dict(SNAP, _comment="x" * (64 * 1024))
    try:
        status, _, err = request(server, "POST", "/v1/plan", big)
    except (BrokenPipeError, ConnectionResetError):
        pytest.skip("the client could not finish sending after the early 413")
    assert status == 413


def test_missing_content_length_is_411(server: PlannerServer) -> None:
    status, err = raw_exchange(server, b"POST /v1/plan HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 411 and err["error"] == "length required"
    status, err = raw_exchange(server, b"POST /v1/verify HTTP/1.1\r\nHost: x\r\n"
                                       b"Transfer-Encoding: chunked\r\n\r\n")
    assert status == 411


def test_unknown_path_and_wrong_method(server: PlannerServer) -> None:
    status, _, err = request(server, "GET", "/v2/plan")
    assert status == 404 and err["error"] == "not found"
    status, headers, err = request(server, "GET", "/v1/plan")
    assert status == 405 and headers["Allow"] == "POST" and err["error"] == "method not allowed"
    status, headers, _ = request(server, "POST", "/healthz", {})
    assert status == 405 and "GET" in headers["Allow"]
    status, _, _ = request(server, "DELETE", "/v1/verify")
    assert status == 405


def test_healthz(server: PlannerServer) -> None:
    assert request(server, "GET", "/healthz")[::2] == (200, {"status": "ok"})


def test_keep_alive_survives_errors(server: PlannerServer) -> None:
    conn = _conn(server)
    try:
        for body, want in ((b"not json", 400), (json.dumps(SNAP).encode(), 200),
                           (b"{}", 400), (json.dumps(SNAP).encode(), 200)):
            conn.request("POST", "/v1/plan?deterministic=1", body=body)
            resp = conn.getresponse()
            resp.read()
            assert resp.status == want
    finally:
        conn.close()


def test_a_cluster_keys_bodies_are_read_from_their_text() -> None:
    # A keyed request's body is read from its text (models/records.py): a record
    # whose text is the last body's is taken over without parsing; a body that is not
    # JSON is still "malformed JSON", and one the text way does not read is parsed
    from planner.service import server as srv

    srv._loops.pop("text-1", None)
    body = json.dumps(SNAP).encode()
    later = json.loads(json.dumps(SNAP))
    later["now"] = "2026-11-29T08:01:00Z"
    opts = {"cluster": "text-1", "deterministic": True}
    assert srv._plan_job(body, opts)[0] == "plan"
    loader = srv._loop("text-1").loader
    assert loader._texts and loader.validated == 3 and loader.reused == 0
    kind, (data, *_rest) = srv._plan_job(json.dumps(later).encode(), opts)
    assert kind == "plan" and (loader.reused, loader.validated) == (3, 0)
    want = srv._plan_job(json.dumps(later).encode(), {"deterministic": True})[1][0]
    assert json.loads(data) | {"solver": None} == json.loads(want) | {"solver": None}
    assert srv._plan_job(b'{"version": 1', opts)[0] == "malformed JSON"
    escaped = json.dumps({**later, "comment": "a \\ b"}).encode()  # (a backslash: parsed)
    assert srv._plan_job(escaped, opts)[0] == "plan" and not loader._texts
    srv._loops.pop("text-1", None)


def test_a_string_body_is_not_read_as_a_server_path(server: PlannerServer) -> None:
    # The loaders read a string as a file's path (the command line's way): a body
    # that is a JSON string must not make the server read its own files (a real
    # instance, /dev/zero, standard input), on /v1/plan with or without a cluster
    # key, nor through /v1/verify's snapshot
    real = str(Path(__file__).resolve().parents[1] / "instances" / "budget.json")
    for path in ("/v1/plan", "/v1/plan?cluster=c1"):
        for target in (real, "/dev/zero", "-", "/nonexistent"):
            status, _, err = request(server, "POST", path, target)
            assert (status, err["error"]) == (400, "invalid snapshot"), err
            assert err["messages"] == [
                "snapshot: must be a JSON object (the snapshot document itself)"]
    status, _, err = request(server, "POST", "/v1/verify", {"snapshot": real, "plan": {}})
    assert status == 400 and err["messages"][0] == (
        "snapshot: must be a JSON object (the snapshot document itself)")


def test_a_number_of_thousands_of_digits_is_malformed_json(server: PlannerServer) -> None:
    status, _, err = request(server, "POST", "/v1/plan", raw=b'{"version": ' + b"9" * 5000 + b"}")
    assert (status, err["error"]) == (400, "malformed JSON")
    assert err["messages"] == [
        ("malformed JSON: a number has more than 4,300 digits (no value of the contract "
         "needs that many)")]


def _exchange(srv: PlannerServer, data: bytes) -> bytes:
    """Send raw bytes and read until the server closes (or 5 s of silence)."""
    with socket.create_connection(_addr(srv), timeout=5) as s:
        s.sendall(data)
        out = b""
        with contextlib.suppress(TimeoutError):
            while chunk := s.recv(65536):
                out += chunk
        return out


def test_an_unread_body_closes_the_connection(server: PlannerServer) -> None:
    # A body the answer does not read (GET with a body, a 404 or 405 with a chunked
    # body) would be taken for the next request on a kept-alive connection: the
    # answer says Connection: close and the bytes after it are never parsed as a
    # request (one answer, not two)
    smuggled = b"GET /nothere HTTP/1.1\r\nHost: x\r\n\r\n"
    for head in (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                 % len(smuggled),
                 b"POST /v2/plan HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n",
                 b"DELETE /v1/plan HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n"
                 % len(smuggled)):
        out = _exchange(server, head + smuggled)
        assert out.count(b"HTTP/1.1 ") == 1, out
        assert b"\r\nConnection: close\r\n" in out
    # a body read whole keeps the connection: two answers on one
    body = json.dumps(SNAP).encode()
    post = (b"POST /v1/plan?deterministic=1 HTTP/1.1\r\nHost: x\r\nContent-Length: %d"
            b"\r\n\r\n" % len(body)) + body
    out = _exchange(server, post + b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close"
                    b"\r\n\r\n")
    assert out.count(b"HTTP/1.1 200 ") == 2, out


def test_content_length_must_be_one_plain_number(server: PlannerServer) -> None:
    for given in ([b"7", b"50"], [b"+5"], [b"1_0"], [b"-1"], [b"0x10"]):
        head = b"POST /v1/plan HTTP/1.1\r\nHost: x\r\n" + b"".join(
            b"Content-Length: %s\r\n" % g for g in given) + b"\r\n"
        status, err = raw_exchange(server, head)
        assert (status, err["error"]) == (400, "bad Content-Length"), (given, err)


def test_a_bad_request_target_is_a_400(server: PlannerServer) -> None:
    status, err = raw_exchange(server, b"GET http://[::1/v1/plan HTTP/1.1\r\nHost: x\r\n\r\n")
    assert (status, err["error"]) == (400, "bad request target")


def test_a_body_that_stops_arriving_is_a_408(monkeypatch: pytest.MonkeyPatch) -> None:
    # (READ_TIMEOUT_S shortened: a client that sends half its body and waits)
    from planner.service import server as service

    monkeypatch.setattr(service._Handler, "timeout", 0.5)
    srv = make_server("127.0.0.1", 0, quiet=True)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    try:
        status, err = raw_exchange(srv, b"POST /v1/plan HTTP/1.1\r\nHost: x\r\n"
                                        b"Content-Length: 100\r\n\r\n{\"now\"")
        assert (status, err["error"]) == (408, "request timeout")
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


# -------------------------------------------------------------------- verify
def test_verify_valid_and_invalid(server: PlannerServer) -> None:
    _, _, plan = request(server, "POST", "/v1/plan?deterministic=1", SNAP)
    status, _, out = request(server, "POST", "/v1/verify", {"snapshot": SNAP, "plan": plan})
    assert status == 200 and out == {"valid": True, "violations": []}
    broken = copy.deepcopy(plan)
    broken["evictions"] = []  # place on GPUs still held by the running job
    status, _, out = request(server, "POST", "/v1/verify", {"snapshot": SNAP, "plan": broken})
    assert status == 200 and out["valid"] is False
    assert any(v["rule"] == "R1" for v in out["violations"])
    assert all(set(v) == {"rule", "job", "message"} for v in out["violations"])


def test_verify_bad_requests(server: PlannerServer) -> None:
    status, _, err = request(server, "POST", "/v1/verify", {"snapshot": SNAP})
    assert status == 400 and "snapshot" in err["messages"][0]
    status, _, err = request(server, "POST", "/v1/verify",
                             {"snapshot": {"now": "never"}, "plan": {"status": "great"}})
    assert status == 400 and err["error"] == "invalid snapshot or plan"
    assert any(m.startswith("snapshot") or "now" in m for m in err["messages"])
    assert any("plan" in m for m in err["messages"])


# ------------------------------------------------------------------- metrics
def test_metrics(server: PlannerServer) -> None:
    request(server, "POST", "/v1/plan?deterministic=1", SNAP)
    request(server, "POST", "/v1/plan", raw=b"{")
    request(server, "GET", "/nowhere")
    status, headers, text = request(server, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert ('preempt_planner_http_requests_total{endpoint="/v1/plan",method="POST",'
            'status="200"} 1.0') in text
    assert ('preempt_planner_http_requests_total{endpoint="/v1/plan",method="POST",'
            'status="400"} 1.0') in text
    assert 'preempt_planner_http_requests_total{endpoint="other",method="GET",status="404"}' \
        in text
    assert "preempt_planner_evictions_planned_total 1.0" in text
    assert "preempt_planner_placements_planned_total 1.0" in text
    assert 'preempt_planner_plan_seconds_count{planner="cpsat"} 1.0' in text
    assert 'preempt_planner_plans_total{status="optimal"} 1.0' in text


def test_a_request_is_counted_before_its_answer_goes_out(
        server: PlannerServer, monkeypatch: pytest.MonkeyPatch) -> None:
    # A client that reads /metrics right after its answer must find its request
    # counted (a monitoring probe does; test_metrics did, and failed now and then
    # when the count came after the answer). When the answer starts, the count is
    # there already.
    from planner.service import server as service

    seen: list[float] = []
    real = service._Handler.send_response

    def send_response(self: Any, code: int, message: str | None = None) -> None:
        if code == 404:
            seen.append(server.metrics.requests.labels("other", "GET", "404")._value.get())
        real(self, code, message)

    monkeypatch.setattr(service._Handler, "send_response", send_response)
    status, _, _ = request(server, "GET", "/nowhere")
    assert status == 404 and seen == [1.0]


def test_servers_have_their_own_registries(server: PlannerServer) -> None:
    other = make_server("127.0.0.1", 0, quiet=True)
    try:
        assert other.metrics.registry is not server.metrics.registry
    finally:
        other.server_close()


# --------------------------------------------------------------- concurrency
def test_twenty_concurrent_requests(server: PlannerServer) -> None:
    """Different snapshots at once; every answer must match its own request."""
    def variant(i: int) -> tuple[dict[str, Any], list[str]]:
        snap = copy.deepcopy(SNAP)
        snap["jobs"][1]["id"] = f"train-{i}"
        if i % 2:  # tier 3 cannot preempt: nothing is evicted, the job waits
            snap["jobs"][1]["tier"] = 3
            return snap, []
        return snap, ["sweep"]

    def call(i: int) -> tuple[int, int, dict[str, Any]]:
        snap, _ = variant(i)
        status, _, plan = request(server, "POST", "/v1/plan?deterministic=1&time_limit_s=5",
                                  snap)
        return i, status, plan

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(call, range(20)))
    for i, status, plan in results:
        assert status == 200, plan
        _, evicted = variant(i)
        assert [e["job"] for e in plan["evictions"]] == evicted
        if evicted:
            assert [p["job"] for p in plan["placements"]] == [f"train-{i}"]
        else:
            assert [d["job"] for d in plan["deferred"]] == [f"train-{i}"]


# ------------------------------------------------------------------- OpenAPI
def test_openapi_document_in_sync_and_valid(server: PlannerServer) -> None:
    from pathlib import Path

    import yaml

    from planner.service import openapi_document

    path = Path(__file__).resolve().parents[1] / "docs" / "openapi.yaml"
    doc = yaml.safe_load(path.read_text())
    assert doc == json.loads(json.dumps(openapi_document())), \
        "docs/openapi.yaml is stale: regenerate it (see its header)"
    assert doc["openapi"] == "3.1.0"
    assert set(doc["paths"]) == {"/v1/plan", "/v1/verify", "/healthz", "/metrics"}
    try:
        import openapi_spec_validator
    except ImportError:  # not a declared dependency: check the spec where it is installed
        pass
    else:
        openapi_spec_validator.validate(doc)
    jsonschema = pytest.importorskip("jsonschema")

    def check(name: str, instance: Any) -> None:
        schema = {"$ref": f"#/components/schemas/{name}", "components": doc["components"]}
        jsonschema.Draft202012Validator(schema).validate(instance)

    _, _, plan = request(server, "POST", "/v1/plan?deterministic=1", SNAP)
    check("Snapshot", dict(SNAP, _comment="comments are allowed"))
    check("Plan", plan)
    _, _, out = request(server, "POST", "/v1/verify", {"snapshot": SNAP, "plan": plan})
    check("VerifyResult", out)
    _, _, err = request(server, "POST", "/v1/plan", raw=b"[")
    check("Error", err)
    with pytest.raises(jsonschema.ValidationError):
        check("Snapshot", dict(SNAP, nodez=[]))


def test_serve_cli_rejects_bad_options() -> None:
    from cli import main

    assert main(["serve", "--planner", "magic"]) == 2
    assert main(["serve", "--time-limit", "0"]) == 2


def test_worker_processes_may_use_a_second_lane() -> None:
    # The request threads of the server rule out the second lane (planner/solver/lanes.py:
    # no forking with other threads running); the pool's workers, started by a fork
    # server, are single-threaded, non-daemonic processes, where it is allowed.
    from planner.solver import lanes

    if lanes.cores() < 2:
        pytest.skip("needs two cores")
    srv = make_server("127.0.0.1", 0, quiet=True, processes=True, max_concurrent=1)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        assert not lanes.available(2)  # here: the serving thread runs
        assert srv.pool is not None and srv.pool.submit(lanes.available, 2).result(30)
        status, _, plan = request(srv, "POST", "/v1/plan?deterministic=true", SNAP)
        assert status == 200 and plan["objective"]["admitted_gpus"]["1"] == 8
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)
    with pytest.raises(RuntimeError):  # the workers are gone with the server
        srv.pool.submit(lanes.available, 2)


def _serve_and_plan(*args: str) -> subprocess.Popen:
    """``preempt-planner serve --port 0 --quiet ARGS`` in a new process, once it has
    answered one plan request (by a worker: its status is "optimal")."""
    proc = subprocess.Popen([sys.executable, "-c", "import cli; raise SystemExit(cli.main())",
                             "serve", "--port", "0", "--quiet", *args],
                            stderr=subprocess.PIPE, text=True,
                            cwd=str(__import__("pathlib").Path(__file__).parent.parent))
    try:
        assert proc.stderr is not None
        line = ""
        while "serving on" not in line:
            line += proc.stderr.readline()
            assert proc.poll() is None, line
        url = line.split("serving on ")[1].split()[0]
        host, port = url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/v1/plan?deterministic=true", body=json.dumps(SNAP).encode())
        resp = conn.getresponse()
        assert resp.status == 200 and json.loads(resp.read())["status"] == "optimal"
        conn.close()
    except BaseException:
        proc.kill()
        raise
    return proc


def test_serve_stops_cleanly_on_sigterm() -> None:
    # Kubernetes and systemd stop a service with SIGTERM: the server then closes its
    # socket and stops its worker processes, and exits with status 0, no traceback.
    proc = _serve_and_plan()
    try:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0
    assert "Traceback" not in err


def _descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:  # (gone meanwhile)
                continue
            children.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        out += kids
        todo += kids
    return out


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc and prctl: Linux")
def test_the_workers_end_with_a_server_killed_by_sigkill() -> None:
    # A server killed by SIGKILL (out of memory, kill -9) cannot stop its workers.
    # They close their copy of the pipe by which the fork server knows the server
    # lives, so the fork server ends with it, and each asks to be killed when the
    # fork server ends: nothing is left (before, the fork server, both workers and
    # the resource tracker waited for ever).
    proc = _serve_and_plan("--max-concurrent", "2")
    below: list[int] = []
    try:
        below = _descendants(proc.pid)
        assert len(below) >= 4  # the fork server, two workers, the resource tracker
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        for _ in range(300):  # (at most 30 s; they go within a second)
            if not any(_running(p) for p in below):
                break
            time.sleep(0.1)
        assert [p for p in below if _running(p)] == []
    finally:
        for p in [proc.pid, *below]:
            if _running(p):
                os.kill(p, signal.SIGKILL)


def test_a_dead_worker_gives_503_and_the_workers_are_restarted() -> None:
    # A worker process killed (say, out of memory) breaks the whole process pool; the
    # request that finds it broken gets 503, a new pool replaces it, and the next
    # request is planned.
    import os
    import signal

    srv = make_server("127.0.0.1", 0, quiet=True, processes=True, max_concurrent=1)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True)
    t.start()
    try:
        status, _, _plan = request(srv, "POST", "/v1/plan?deterministic=true", SNAP)
        assert status == 200
        broken = srv.pool
        assert broken is not None
        for pid in list(broken._processes):  # (the test kills them)
            os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 10
        while not broken._broken and time.time() < deadline:
            time.sleep(0.05)
        status, _, err = request(srv, "POST", "/v1/plan?deterministic=true", SNAP)
        assert status == 503 and err["error"] == "worker process died"
        assert srv.pool is not broken
        status, _, plan = request(srv, "POST", "/v1/plan?deterministic=true", SNAP)
        assert status == 200 and plan["status"] == "optimal"
    finally:
        srv.shutdown()
        srv.server_close()
        t.join(5)


def test_serve_on_a_busy_port_says_so_and_exits_2() -> None:
    # Bad --host/--port input: a clear error naming the options, exit status 2, no
    # traceback (and no worker processes: the socket is bound before they start).
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        res = subprocess.run([sys.executable, "-c", "import cli; raise SystemExit(cli.main())",
                              "serve", "--port", str(port), "--quiet"],
                             check=False, capture_output=True, text=True, timeout=60,
                             cwd=str(__import__("pathlib").Path(__file__).parent.parent))
    finally:
        busy.close()
    assert res.returncode == 2
    assert f"--host/--port: cannot listen on 127.0.0.1:{port}: Address already in use" in (
        " ".join(res.stderr.split()))
    assert "Traceback" not in res.stderr


def test_a_script_without_the_main_guard_fails_at_once_with_the_reason(tmp_path: Any) -> None:
    # The worker processes import the main module. A script that creates the server
    # at import time re-creates it in them (first in the fork server, which may not
    # start processes while it imports the module, and dies), and every request got
    # 503. Now make_server waits for the workers to start, and raises a RuntimeError
    # that names the fix.
    script = tmp_path / "embed.py"
    repo = str(__import__("pathlib").Path(__file__).parent.parent)
    script.write_text(f"import sys\nsys.path.insert(0, {repo!r})\n"
                      "from planner.service import make_server\n"
                      "srv = make_server('127.0.0.1', 0, processes=True, quiet=True)\n"
                      "print('serving', flush=True)\n")
    res = subprocess.run([sys.executable, str(script)], check=False, capture_output=True,
                         text=True, timeout=120, cwd=str(tmp_path))
    assert res.returncode == 1 and "serving" not in res.stdout
    said = [x for x in res.stderr.splitlines() if x.startswith("RuntimeError: processes=True")]
    assert said and said[0].startswith(
        "RuntimeError: processes=True: the worker processes died while starting. They import "
        'the main module: a script that creates the server must do so under `if __name__ == '
        '"__main__":`'), res.stderr


def test_serve_names_every_meaningless_option(capsys: pytest.CaptureFixture[str]) -> None:
    # Each bad number by its option, at once, exit 2. Before, one sentence named all
    # four options whichever was wrong, NaN time limits passed, and --max-concurrent -2
    # ended in a traceback (a semaphore of -2 slots).
    import cli

    assert cli.main(["serve", "--port", "0", "--time-limit", "nan", "--max-body-mb", "0",
                     "--max-concurrent", "-2"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert ("error: invalid input (3 problem(s)) - --time-limit: must be a positive number, "
            "got nan - --max-body-mb: must be a positive number, got 0 - --max-concurrent: "
            "must be at least 1, got -2") in err, err


def test_serve_refuses_options_that_are_in_range_but_meaningless(
        capsys: pytest.CaptureFixture[str]) -> None:
    # Each of these started a server: --host '' listened on every interface unasked,
    # a default time limit above the maximum was raised silently, and a body limit
    # of 1e-9 MiB answered every request 413. Now exit 2 at once, naming the option.
    import cli

    for argv, said in (
            (["--host", ""],
             ("--host: empty; give the address to listen on: 127.0.0.1 (the default) for this "
              "machine only, 0.0.0.0 (or ::) for every interface")),
            (["--time-limit", "100", "--max-time-limit", "10"],
             ("--time-limit: 100 s is more than --max-time-limit 10 s, the largest a request "
              "may ask for; the default limit may not exceed it")),
            (["--max-body-mb", "1e-9"],
             ("--max-body-mb: must be at least 0.001 (MiB, about 1 KiB: a smaller limit refuses "
              "every request), got 1e-09")),
            (["--max-body-mb", "2000"],
             ("--max-body-mb: must be at most 1024 (MiB: 1 GiB, the largest document the "
              "planner reads), got 2000"))):
        assert cli.main(["serve", "--no-processes", "--port", "0", *argv]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"error: invalid input (1 problem(s)) - {said}" in err, err
        assert "serving on" not in err
    # (one message per option: a limit that is no positive number is said once)
    assert cli.main(["serve", "--port", "0", "--time-limit", "nan", "--max-time-limit",
                     "-1", "--max-body-mb", "inf"]) == 2
    assert "(3 problem(s))" in capsys.readouterr().err


def test_an_internal_error_is_500_one_log_line_and_the_service_goes_on(
        server: PlannerServer, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    # A bug answers 500 with a JSON error and the service keeps serving; its log says
    # so in one line (the traceback only at DEBUG: it went to stderr by default)
    import logging

    import planner.checks.verify

    def boom(*_a: Any, **_k: Any) -> Any:
        raise ZeroDivisionError("division by zero")

    plan = request(server, "POST", "/v1/plan?deterministic=true", SNAP)[2]
    monkeypatch.setattr(planner.checks.verify, "verify", boom)
    with caplog.at_level(logging.INFO, logger="preempt_planner.service"):
        status, _, err = request(server, "POST", "/v1/verify", {"snapshot": SNAP, "plan": plan})
    assert status == 500
    assert err == {"error": "internal error", "messages": ["ZeroDivisionError: division by zero"]}
    (record,) = [r for r in caplog.records if r.levelno >= logging.INFO]
    assert record.levelname == "ERROR" and record.exc_info is None
    assert "internal error on POST /v1/verify: ZeroDivisionError: division by zero" in \
        record.getMessage()
    assert request(server, "GET", "/healthz")[0] == 200
    with caplog.at_level(logging.DEBUG, logger="preempt_planner.service"):
        assert request(server, "POST", "/v1/verify", {"snapshot": SNAP, "plan": plan})[0] == 500
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG)


@pytest.mark.parametrize("body,said", [
    (json.dumps(SNAP).encode("utf-16"), "the file is UTF-16 text; save it as UTF-8"),
    (json.dumps(SNAP).encode("utf-16-le"), "this is UTF-16 text without a byte-order mark"),
    (json.dumps({**SNAP, "_comment": "café"}, ensure_ascii=False).encode("latin-1"),
     "not UTF-8 text (byte 0xe9"),
])
def test_a_body_that_is_not_utf8_is_400_as_on_the_command_line(server: PlannerServer,
                                                                body: bytes, said: str) -> None:
    # json.loads reads UTF-16 and UTF-32 bytes: the service planned them, where the CLI
    # refuses any file that is not UTF-8
    status, _, err = request(server, "POST", "/v1/plan", raw=body,
                             headers={"Content-Type": "application/json"})
    assert status == 400 and err["error"] == "malformed JSON"
    assert said in err["messages"][0]


def test_sigterm_interrupts_as_ctrl_c_and_puts_the_handler_back() -> None:
    # (planner.interrupts: slurm apply and serve stop on SIGTERM as on Ctrl-C)
    import os
    import signal

    from planner.interrupts import sigterm_interrupts

    def mine(_signum: int, _frame: object) -> None:
        raise AssertionError("the block's handler should have run")

    before = signal.signal(signal.SIGTERM, mine)
    try:
        with pytest.raises(KeyboardInterrupt), sigterm_interrupts():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)  # (the handler runs between bytecodes, at once)
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)
