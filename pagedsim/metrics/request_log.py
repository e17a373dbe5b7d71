"""Per-request records in compact columns: about 76 bytes a request (a million requests
take 76 MB; as tuples of Python objects they took about 400).

One row per request, written when the request finishes or is rejected, in the order of
:data:`REQUEST_COLUMNS`. Times are simulated seconds (NaN: never happened, e.g. a
rejected request's finish); counts are tokens or events (-1 in ``cached_prompt_tokens``:
never admitted, NaN in frames).
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

REQUEST_COLUMNS = (
    "request_id", "arrival_s", "prompt_len", "output_len", "n", "beam_width",
    "first_scheduled_s", "first_token_s", "finish_s", "num_output", "num_preemptions",
    "cached_prompt_tokens", "first_token_end_s",
)  # fmt: skip
#: The array typecode of each column: 'q' int64, 'i' int32, 'd' float64.
_TYPES = dict(zip(REQUEST_COLUMNS, "qdiiiidddiiid", strict=True))
#: Columns whose None is stored as NaN (floats) or -1 (cached_prompt_tokens).
_NONE_AS = {c: (math.nan if t == "d" else -1) for c, t in _TYPES.items()}


class RequestLog:
    """Columns of per-request rows (:data:`REQUEST_COLUMNS`); rows as tuples in, numpy
    columns or a DataFrame out, sorted as the simulator added the requests (by arrival,
    then request id)."""

    __slots__ = ("_cols", "_sorted")

    def __init__(self, rows: Iterable[tuple] = ()) -> None:
        self._cols = {c: array(t) for c, t in _TYPES.items()}
        self._sorted = True
        for row in rows:
            self.add(row)

    def __len__(self) -> int:
        return len(self._cols["request_id"])

    def add(self, row: tuple) -> None:
        """Append one row (None for a time that never came, or a cache never asked)."""
        if len(row) != len(REQUEST_COLUMNS):
            raise ValueError(f"a request row has {len(REQUEST_COLUMNS)} fields "
                             f"({', '.join(REQUEST_COLUMNS)}), got {len(row)}")
        for (name, col), value in zip(self._cols.items(), row, strict=True):
            col.append(_NONE_AS[name] if value is None else value)
        self._sorted = False

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array (a read-only view, in add order until sorted)."""
        self._sort()
        return np.frombuffer(self._cols[name], dtype=self._cols[name].typecode) \
            if len(self) else np.array([], dtype=self._cols[name].typecode)

    def _sort(self) -> None:
        """Rows in the order the simulator added their requests: arrival, then id."""
        if self._sorted or len(self) < 2:
            self._sorted = True
            return
        ids = np.frombuffer(self._cols["request_id"], dtype=np.int64)
        arrivals = np.frombuffer(self._cols["arrival_s"], dtype=np.float64)
        order = np.lexsort((ids, arrivals))
        if not (order[1:] > order[:-1]).all():
            for name, col in self._cols.items():
                values = np.frombuffer(col, dtype=col.typecode)[order]
                self._cols[name] = array(col.typecode, values.tobytes())
        self._sorted = True

    def rows(self) -> Iterator[tuple]:
        """The rows as tuples of Python values (None where nothing happened)."""
        self._sort()
        cols = [self._cols[c] for c in REQUEST_COLUMNS]
        for values in zip(*cols, strict=True):
            yield tuple(None if (isinstance(v, float) and math.isnan(v))
                        or (name == "cached_prompt_tokens" and v < 0) else v
                        for name, v in zip(REQUEST_COLUMNS, values, strict=True))

    def frame(self) -> pd.DataFrame:
        """The rows as a DataFrame (int columns int64; NaN where nothing happened), plus
        ``latency_s`` (finish - arrival), ``normalized_latency_s`` (latency / output
        tokens), ``ttft_s`` (time to first token: the end of the step that sampled it -
        arrival) and ``tpot_s`` (time per output token after the first: (latency -
        ttft) / (output_len - 1); NaN for a 1-token output), as vLLM's
        ``benchmark_serving`` defines them."""
        import pandas as pd

        data = {}
        for name in REQUEST_COLUMNS:
            values = self.column(name)
            if name == "cached_prompt_tokens":
                values = np.where(values < 0, np.nan, values)
            elif values.dtype.kind == "i":
                values = values.astype(np.int64)
            data[name] = values
        df = pd.DataFrame(data)
        df["latency_s"] = df["finish_s"] - df["arrival_s"]
        df["normalized_latency_s"] = df["latency_s"] / df["output_len"]
        df["ttft_s"] = df["first_token_end_s"] - df["arrival_s"]
        df["tpot_s"] = (df["latency_s"] - df["ttft_s"]) / (df["output_len"] - 1).where(
            df["output_len"] > 1)
        return df
