"""What a GPU model's name says about the NVLink between a node's GPUs: one table
for both adapters (Slurm GRES types and node features; Kubernetes GPU Feature
Discovery's ``nvidia.com/gpu.product`` label).

A name is split into lowercase words at anything that is not a letter or digit
(``nvidia_a100-sxm4-80gb`` -> nvidia, a100, sxm4, 80gb). In this order:

1. MIG slices (the word ``mig``): ``none`` (no peer-to-peer at all).
2. PCIe cards: a word containing ``pcie``, the word ``nvl`` (H100 NVL, H200 NVL:
   PCIe cards bridged in pairs at most), L4, L40, L40S, L20, A2, A10, A10G, A16,
   A30, A40, T4, P4, P40, ``rtx...``: ``none``.
3. SXM2 boards (DGX-1: P100, V100): a hybrid cube-mesh, not all-to-all: not
   known (the caller takes the conservative layout and says why).
4. ``sxm3`` and later (``sxm``, ``sxm4``, ``sxm5``), ``hgx``, B200, B300,
   GB200, GB300, and the names NVML gives SXM boards: ``H100 80GB HBM3`` (the H100
   SXM5; the PCIe card is HBM2e) and, after ``nvidia``, a bare ``H200``:
   ``nvswitch``. GB200/GB300 nodes are also part of a multi-node NVLink domain
   (an NVL72 rack), which the name does not identify.
5. A model sold both as SXM boards and as PCIe cards, named without saying which
   (``a100``, ``h100``, ``h200``, ``h800``, ``a800``, ``h20``; many PCIe clusters
   name their GRES just ``a100``): not known, the caller takes the conservative
   layout and says why.

Anything else is not known.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

PCIE_MODELS = frozenset({"l4", "l40", "l40s", "l20", "a2", "a10", "a10g", "a16", "a30", "a40",
                         "t4", "p4", "p40"})
"""PCIe-only cards without NVLink between all GPUs."""
NVL72_MODELS = frozenset({"gb200", "gb300"})
"""Grace-Blackwell superchips: NVSwitch inside the node, one NVLink domain per rack."""
NVSWITCH_MODELS = frozenset({"hgx", "b200", "b300"}) | NVL72_MODELS
"""SXM-only boards whose GPUs all sit on NVSwitch."""
BOTH_FORMS = frozenset({"a100", "h100", "h200", "h800", "a800", "h20"})
"""Models sold as SXM boards (NVSwitch) and as PCIe cards (no NVLink)."""
VENDOR = frozenset({"nvidia", "tesla"})
"""A leading word NVML's device names have (and Slurm's AutoDetect GRES types)."""

AMBIGUOUS = "ambiguous"
SXM2 = "sxm2"


@dataclass(frozen=True)
class ModelLayout:
    """``layout``: ``nvswitch``, ``none`` or None (not known); ``word``: the word that
    decided; ``caveat``: why a named model is not known (``AMBIGUOUS``, ``SXM2``,
    or empty); ``nvl72``: the nodes are part of a multi-node NVLink domain."""

    layout: str | None
    word: str = ""
    caveat: str = ""
    nvl72: bool = False

    def why(self) -> str:
        """Why the layout is not known, as a clause for a warning (empty if it is
        known or the model is simply not in the table)."""
        if self.caveat == SXM2:
            return (f"{self.word!r} is an SXM2 board (DGX-1: P100, V100), whose GPUs are "
                    "linked in a hybrid cube-mesh, not all to all")
        if self.caveat == AMBIGUOUS:
            return (f"{self.word!r} is sold both as SXM boards (NVSwitch) and as PCIe cards "
                    "(no NVLink), and the name does not say which")
        return ""


def words(names: Iterable[str | None]) -> list[str]:
    """The lowercase words of ``names`` (split at anything not a letter or digit)."""
    out: list[str] = []
    for n in names:
        if n:
            out.extend(t for t in re.split(r"[^0-9a-z]+", str(n).lower()) if t)
    return out


def model_layout(names: Iterable[str | None]) -> ModelLayout:
    """The NVLink layout the GPU model named in ``names`` implies (see the module
    docstring); a PCIe word wins over a model name."""
    per_name = [words([n]) for n in names]
    tokens = {t for ws in per_name for t in ws}
    if "mig" in tokens:
        return ModelLayout("none", "mig")
    pcie = sorted(t for t in tokens if "pcie" in t or t == "nvl" or t in PCIE_MODELS
                  or t.startswith("rtx"))
    if pcie:
        return ModelLayout("none", pcie[0])
    sxm2 = sorted(t for t in tokens if t.startswith("sxm2"))
    if sxm2:
        return ModelLayout(None, sxm2[0], SXM2)
    nvl72 = sorted(tokens & NVL72_MODELS)
    if nvl72:
        return ModelLayout("nvswitch", nvl72[0], nvl72=True)
    sxm = sorted(t for t in tokens if t.startswith("sxm") or t in NVSWITCH_MODELS)
    if sxm:
        return ModelLayout("nvswitch", sxm[0])
    if "h100" in tokens and "hbm3" in tokens:
        return ModelLayout("nvswitch", "h100")
    if any(ws and ws[0] in VENDOR and "h200" in ws for ws in per_name):
        return ModelLayout("nvswitch", "h200")
    both = sorted(tokens & BOTH_FORMS)
    if both:
        return ModelLayout(None, both[0], AMBIGUOUS)
    return ModelLayout(None)
