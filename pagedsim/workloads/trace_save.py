"""Writing requests as a trace file in pagedsim's schema (:func:`save_trace`), the inverse
of :func:`pagedsim.workloads.traces.load_trace` for that schema: what is saved loads back bit for
bit.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Iterable

from .trace_rows import PAGEDSIM_REQUIRED
from .workload import Request


def save_trace(requests: Iterable[Request], path: str | os.PathLike[str]) -> None:
    """Write requests in the pagedsim schema: JSONL if ``path`` ends in ``.jsonl``, else CSV.

    Optional columns (``n``, ``beam_width``, ``prefix_id``) are written only when some
    request needs them; arrivals use ``repr`` so they read back bit for bit. Request ids
    are not written (loading numbers requests 0, 1, ... in file order).
    """
    requests = list(requests)
    for before, after in zip(requests, requests[1:], strict=False):
        if after.arrival_s < before.arrival_s:
            raise ValueError(f"requests must be sorted by arrival_s: request {after.request_id} "
                             f"({after.arrival_s} s) comes after request {before.request_id} "
                             f"({before.arrival_s} s)")
    name = os.fspath(path)
    if name.endswith(".jsonl"):
        with open(name, "w", encoding="utf-8") as file:
            for r in requests:
                obj: dict[str, object] = {"arrival_s": r.arrival_s, "prompt_len": r.prompt_len,
                                          "output_len": r.output_len}
                if r.n != 1:
                    obj["n"] = r.n
                if r.beam_width != 1:
                    obj["beam_width"] = r.beam_width
                if r.prefix_id is not None:
                    obj["prefix_id"] = r.prefix_id
                file.write(json.dumps(obj) + "\n")
        return
    optional = [col for col, used in (
        ("n", any(r.n != 1 for r in requests)),
        ("beam_width", any(r.beam_width != 1 for r in requests)),
        ("prefix_id", any(r.prefix_id is not None for r in requests)),
    ) if used]
    with open(name, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, lineterminator="\n")
        writer.writerow(list(PAGEDSIM_REQUIRED) + optional)
        for r in requests:
            row: list[object] = [repr(r.arrival_s), r.prompt_len, r.output_len]
            for col in optional:
                value = getattr(r, col)
                row.append("" if value is None else value)
            writer.writerow(row)
