"""A fake training loop that survives preemption with ``planner.trap``.

The "model" is a step counter plus ``--state-mb`` MB of payload that changes
every step. The loop resumes from ``--checkpoint`` if one exists, writes a
periodic checkpoint every ``--every`` steps and, on SIGTERM or SIGUSR1,
finishes the current step, checkpoints and exits 0::

    python examples/train_loop.py --checkpoint /tmp/ckpt.bin --steps 1000 &
    kill -TERM $!            # "SIGTERM: checkpointed step 37, exiting"
    python examples/train_loop.py --checkpoint /tmp/ckpt.bin --steps 1000
                             # "resumed from step 37 ..."

The checkpoint is ``TRAINLOOP1 <json header>\\n<payload>``; the header holds the
step, the payload length and its SHA-256, which ``decode`` verifies.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from typing import IO, Any

try:
    from planner.trap import CheckpointTrap, load_latest
except ImportError:  # run from a checkout without installing: load the file itself
    import importlib.util

    _spec = importlib.util.spec_from_file_location(
        "preempt_planner_trap",
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "planner", "trap.py"),
    )
    assert _spec is not None and _spec.loader is not None
    _trap = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_trap)
    CheckpointTrap, load_latest = _trap.CheckpointTrap, _trap.load_latest

MAGIC = b"TRAINLOOP1 "
CHUNK = 4 << 20


def make_payload(step: int, size: int) -> bytes:
    """Deterministic payload for ``step`` (so a reader can check it too)."""
    seed = hashlib.sha256(f"step-{step}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def encode_header(step: int, payload: bytes) -> bytes:
    header = {
        "step": step,
        "payload_len": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
    }
    return MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n"


def decode(blob: bytes) -> dict[str, Any]:
    """Parse and verify a checkpoint; raise ValueError if it is not complete."""
    if not blob.startswith(MAGIC) or b"\n" not in blob:
        raise ValueError("not a train_loop checkpoint")
    line, payload = blob[len(MAGIC) :].split(b"\n", 1)
    header = json.loads(line)
    if len(payload) != header["payload_len"]:
        raise ValueError(f"payload is {len(payload)} bytes, header says {header['payload_len']}")
    if hashlib.sha256(payload).hexdigest() != header["sha256"]:
        raise ValueError("payload checksum mismatch")
    return {"step": header["step"], "payload": payload}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="checkpoint file")
    p.add_argument("--steps", type=int, default=100, help="train until this step")
    p.add_argument("--every", type=int, default=10, help="periodic checkpoint every N steps")
    p.add_argument("--state-mb", type=float, default=1.0, help="payload size in MB (1e6 bytes)")
    p.add_argument("--step-seconds", type=float, default=0.1, help="duration of one step")
    p.add_argument("--restore-s", type=float, default=0, help="reported in the sidecar")
    p.add_argument("-v", "--verbose", action="store_true", help="print every step")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    size = int(args.state_mb * 1e6)

    blob = load_latest(args.checkpoint)
    if blob is None:
        state = {"step": 0, "payload": make_payload(0, size)}
        print(f"no checkpoint at {args.checkpoint}; starting at step 0", flush=True)
    else:
        state = decode(blob)
        print(f"resumed from step {state['step']} ({args.checkpoint})", flush=True)

    def write(f: IO[bytes]) -> None:
        payload = memoryview(state["payload"])
        f.write(encode_header(state["step"], state["payload"]))
        for i in range(0, len(payload), CHUNK):
            f.write(payload[i : i + CHUNK])

    saved_step = state["step"]

    def report(meta: dict[str, Any]) -> None:
        nonlocal saved_step
        saved_step = state["step"]
        print(
            f"checkpoint: step {state['step']}, {meta['size_gb'] * 1e3:.3f} MB, "
            f"{meta['reason']} -> {args.checkpoint}",
            flush=True,
        )

    with CheckpointTrap(
        args.checkpoint, write, exit_on_signal=False, restore_s=args.restore_s, on_checkpoint=report
    ) as trap:
        while state["step"] < args.steps:
            time.sleep(args.step_seconds)  # the "forward/backward pass"
            state["step"] += 1
            state["payload"] = make_payload(state["step"], size)
            if args.verbose:
                print(f"step {state['step']}", flush=True)
            if trap.step_done(save=state["step"] % args.every == 0):
                print(
                    f"{trap.received or 'stop request'}: checkpointed step "
                    f"{state['step']}, exiting",
                    flush=True,
                )
                return 0
        if saved_step != state["step"]:
            trap.save()
    print(f"done: step {state['step']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
