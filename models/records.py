"""The records of a snapshot's JSON text, found without parsing it.

A scheduling loop sends the same cluster tick after tick, and most records
(storage targets, nodes, jobs) are the same text as in the last tick's file.
:func:`split_records` finds the text of each record of the top-level lists with
numpy, from the positions of the brackets outside strings, so that
:class:`models.cache.SnapshotCache` parses and validates only the records whose text
is new: a record is a JSON object whose validation depends on its text alone, so
the same text gives the same record.

It answers only for texts it can read exactly, and None for any other (a backslash
anywhere, a list given twice, an element that is not an object, anything but
whitespace and single commas between records, too deep a nesting): those are read
the usual way, which says what is wrong with them. What it finds is checked by
parsing: each new record, and the text outside the records (the skeleton), whose
lists it empties.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np

# bytes.translate's table: a quote 1, the brackets 2-5, anything else 0 (one C pass
# over the text and one numpy pass for their positions: a third of the time that
# comparing the text with each character took)
_QUOTE, _LBRACE, _LBRACKET, _RBRACE, _RBRACKET = 1, 2, 3, 4, 5
_MARKS = bytes({ord('"'): _QUOTE, ord("{"): _LBRACE, ord("["): _LBRACKET, ord("}"): _RBRACE,
                ord("]"): _RBRACKET}.get(c, 0) for c in range(256))
_WHITESPACE = b" \t\n\r"  # (JSON's; bytes.strip's default takes more)


@dataclass
class Records:
    """A JSON text cut into the texts of the records of some top-level lists and the
    rest (``skeleton``: the text with those lists emptied, ``[]``)."""

    skeleton: bytes
    lists: dict[str, list[bytes]]  # key -> the text of each record, in order


def split_records(data: bytes, keys: tuple[str, ...], max_depth: int) -> Records | None:
    """The records of the lists ``keys`` of the top-level object of the JSON text
    ``data`` (a list absent is left out), or None where the text is not one this
    reads exactly (see the module). ``max_depth``: the most nesting levels allowed
    (None for more)."""
    if b"\\" in data:  # (escapes: a quote in a string would need looking at)
        return None
    marks = np.frombuffer(data.translate(_MARKS), dtype=np.uint8)
    at = np.flatnonzero(marks.view(np.bool_))  # (the quotes and brackets, in order)
    what = marks[at]
    quote = what == _QUOTE
    outside = ~np.logical_xor.accumulate(quote)  # (even quotes so far: outside a string)
    if not outside[-1:].all():  # (an odd number of quotes)
        return None
    keep = outside & ~quote
    pos, kind = at[keep], what[keep]
    if not len(pos) or kind[0] != _LBRACE:
        return None
    opens = (kind == _LBRACE) | (kind == _LBRACKET)
    depth = np.cumsum(np.where(opens, 1, -1))  # (open brackets after each one)
    if (depth.min() < 0 or depth[-1] != 0 or np.count_nonzero(depth == 0) != 1
            or depth.max() >= max_depth):
        return None
    # the top-level lists: a [ that opens the second level, and its key
    arrays = np.flatnonzero(opens & (kind == _LBRACKET) & (depth == 2))
    found: dict[str, tuple[int, int]] = {}  # key -> (index of its [, of its ])
    closes_to_1 = np.flatnonzero(depth == 1)
    for a in arrays.tolist():
        key = _key_before(data, int(pos[a]))
        if key is None:
            return None
        if key not in keys:
            continue
        if key in found:  # (a list given twice: the parser keeps the last)
            return None
        found[key] = (a, int(closes_to_1[np.searchsorted(closes_to_1, a)]))
    lists: dict[str, list[bytes]] = {}
    pieces: list[bytes] = []
    start = 0
    for key, (a, b) in sorted(found.items(), key=lambda kv: kv[1]):
        inner = slice(a + 1, b)
        starts = np.flatnonzero(opens[inner] & (depth[inner] == 3)) + a + 1
        ends = np.flatnonzero(~opens[inner] & (depth[inner] == 2)) + a + 1
        if len(starts) != len(ends) or (len(starts) and (
                np.any(kind[starts] != _LBRACE) or np.any(kind[ends] != _RBRACE))):
            return None
        lo, hi = pos[starts].tolist(), (pos[ends] + 1).tolist()  # (each record's slice)
        if not _only_commas(data, int(pos[a]), int(pos[b]), lo, hi):
            return None
        lists[key] = list(map(data.__getitem__, map(slice, lo, hi)))
        pieces += (data[start:pos[a] + 1],)
        start = int(pos[b])
    pieces.append(data[start:])
    return Records(b"".join(pieces), lists)


def _key_before(data: bytes, at: int) -> str | None:
    """The key of the value starting at ``at`` in an object (``"key" :`` before it,
    whitespace around the colon), or None."""
    head = data[max(0, at - 256):at].rstrip(_WHITESPACE)
    if not head.endswith(b":"):
        return None
    head = head[:-1].rstrip(_WHITESPACE)
    if not head.endswith(b'"'):
        return None
    begin = head.rfind(b'"', 0, len(head) - 1)
    if begin < 0:
        return None
    try:
        return head[begin + 1:-1].decode("utf-8")
    except UnicodeDecodeError:
        return None


def _only_commas(data: bytes, left: int, right: int, lo: list[int], hi: list[int]) -> bool:
    """Between the brackets of a list at ``left`` and ``right``, whose records are
    ``data[lo[k]:hi[k]]``: nothing but whitespace, and one comma between two records.
    (C loops: a slice and a strip per gap.)"""
    if not lo:
        return not data[left + 1:right].strip(_WHITESPACE)
    if data[left + 1:lo[0]].strip(_WHITESPACE) or data[hi[-1]:right].strip(_WHITESPACE):
        return False
    gaps = set(map(bytes.strip, map(data.__getitem__, map(slice, hi, lo[1:])),
                   repeat(_WHITESPACE)))
    return not gaps or gaps == {b","}
