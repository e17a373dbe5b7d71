"""Cost profiles: the constants that turn the roofline of :mod:`pagedsim.engine.cost` into
the step times of a real engine, read from ``cost_profiles.json`` (inside the package,
beside the GPU presets) or from a file a user wrote (``--cost-profile FILE``).

A profile holds, per GPU preset, the achieved fractions of peak HBM bandwidth and peak
FLOP/s, and, for every GPU, the per-step CPU overhead (fixed, and per decoding sequence),
the seconds of one tensor-parallel all-reduce and, per GPU preset, the bandwidth of the
link it runs over (``tp_link_bytes_per_s``), and whether a prompt's own attention is
charged (``prefill_attention``). Each constant names the public source
it came from in the profile's ``sources``.

* ``paper`` (the default of every run): the plain roofline at peak with 2 ms a step, the
  model the vLLM paper's figures were reproduced with; it keeps every committed figure as
  it was.
* ``vllm``: fitted to public ``benchmark_serving`` results of real vLLM runs
  (:mod:`pagedsim.experiments.validate` replays them and reports the error).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from ..user_files import JsonFileError, NotRegularFileError, read_json_file

#: The data file, inside the ``pagedsim`` package.
DATA_FILE = "cost_profiles.json"
#: The profile every run uses unless told otherwise.
DEFAULT_PROFILE = "paper"
#: Bytes and nesting a profile file may have (``pagedsim calibrate`` writes about 2 KB,
#: two deep).
MAX_PROFILE_BYTES = 2**20
MAX_PROFILE_DEPTH = 8


class CostProfileError(ValueError):
    """A profile name that is unknown, or a profile file that is not valid."""


def _fraction(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or not 0 < value <= 1:
        raise CostProfileError(f"{where} must be a fraction of the peak in (0, 1], "
                               f"got {value!r}")
    return float(value)


def _seconds(where: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(value) or value < 0:
        raise CostProfileError(f"{where} must be a number of seconds >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class CostProfile:
    """Step-time constants (see the module docstring). ``hbm_efficiency`` and
    ``flops_efficiency`` map a GPU preset name to the achieved fraction of its peak
    (``"*"``: any GPU not named); seconds are per step (``step_overhead_s``), per decoding
    sequence in a step (``step_overhead_per_seq_s``) and per all-reduce (``allreduce_s``,
    two per layer with tensor parallelism); ``prefill_attention``: charge a prompt's causal
    self-attention. ``sources`` says where each came from."""

    name: str
    hbm_efficiency: dict[str, float]
    flops_efficiency: dict[str, float]
    step_overhead_s: float
    step_overhead_per_seq_s: float = 0.0
    allreduce_s: float = 0.0
    prefill_attention: bool = False
    #: Seconds a step adds per layer of the model (the floor of its kernels' durations).
    layer_overhead_s: float = 0.0
    #: Per GPU preset (``"*"``: any other), the bytes/s per direction of the link its
    #: tensor-parallel all-reduces run over; a GPU not named: bytes cost nothing.
    tp_link_bytes_per_s: dict[str, float] = field(default_factory=dict)
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise CostProfileError(f"a cost profile needs a name, got {self.name!r}")
        for key in ("hbm_efficiency", "flops_efficiency"):
            table = getattr(self, key)
            if not isinstance(table, dict) or not table:
                raise CostProfileError(f"cost profile {self.name!r}: {key} must map GPU "
                                       f"names to fractions, got {table!r}")
            for gpu, value in table.items():
                _fraction(f"cost profile {self.name!r}: {key}[{gpu!r}]", value)
        for key in ("step_overhead_s", "step_overhead_per_seq_s", "allreduce_s",
                    "layer_overhead_s"):
            _seconds(f"cost profile {self.name!r}: {key}", getattr(self, key))
        if not isinstance(self.tp_link_bytes_per_s, dict):
            raise CostProfileError(f"cost profile {self.name!r}: tp_link_bytes_per_s must "
                                   f"map GPU names to bytes/s, got {self.tp_link_bytes_per_s!r}")
        for gpu, value in self.tp_link_bytes_per_s.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value <= 0:
                raise CostProfileError(f"cost profile {self.name!r}: tp_link_bytes_per_s"
                                       f"[{gpu!r}] must be a number of bytes/s > 0, "
                                       f"got {value!r}")
        if not isinstance(self.prefill_attention, bool):
            raise CostProfileError(f"cost profile {self.name!r}: prefill_attention must be "
                                   f"true or false, got {self.prefill_attention!r}")

    def efficiencies(self, gpu: str) -> tuple[float, float]:
        """(HBM fraction, FLOP/s fraction) for the GPU preset ``gpu``."""
        out = []
        for table in (self.hbm_efficiency, self.flops_efficiency):
            if gpu in table:
                out.append(table[gpu])
            elif "*" in table:
                out.append(table["*"])
            else:
                raise CostProfileError(f"cost profile {self.name!r} has no efficiency for "
                                       f"GPU {gpu!r}; it knows {', '.join(sorted(table))}")
        return out[0], out[1]

    def cost_kwargs(self, gpu: str) -> dict[str, Any]:
        """The :class:`~pagedsim.engine.cost.CostModel` fields this profile sets on ``gpu``."""
        hbm, flops = self.efficiencies(gpu)
        links = self.tp_link_bytes_per_s
        kwargs: dict[str, Any] = {
            "hbm_efficiency": hbm, "flops_efficiency": flops,
            "step_overhead_s": self.step_overhead_s,
            "step_overhead_per_seq_s": self.step_overhead_per_seq_s,
            "allreduce_s": self.allreduce_s, "prefill_attention": self.prefill_attention}
        if self.layer_overhead_s:  # 0: left at CostModel's default
            kwargs["layer_overhead_s"] = self.layer_overhead_s
        link = links.get(gpu, links.get("*"))
        if link is not None:  # absent: left at CostModel's default (bytes cost nothing)
            kwargs["tp_link_bytes_per_s"] = float(link)
        return kwargs

    def to_json(self) -> dict[str, Any]:
        """The profile as the data file writes it."""
        return {"name": self.name, "description": self.description,
                "hbm_efficiency": dict(self.hbm_efficiency),
                "flops_efficiency": dict(self.flops_efficiency),
                "step_overhead_s": self.step_overhead_s,
                "step_overhead_per_seq_s": self.step_overhead_per_seq_s,
                "allreduce_s": self.allreduce_s, "prefill_attention": self.prefill_attention,
                "layer_overhead_s": self.layer_overhead_s,
                "tp_link_bytes_per_s": dict(self.tp_link_bytes_per_s),
                "sources": dict(self.sources)}


_KEYS = {"name", "description", "hbm_efficiency", "flops_efficiency", "step_overhead_s",
         "step_overhead_per_seq_s", "allreduce_s", "prefill_attention",
         "layer_overhead_s", "tp_link_bytes_per_s", "sources"}


def profile_from_json(entry: object, where: str) -> CostProfile:
    """One profile from its JSON object (``where`` names it in errors)."""
    if not isinstance(entry, dict):
        raise CostProfileError(f"{where}: a cost profile must be a JSON object")
    unknown = set(entry) - _KEYS
    if unknown:
        raise CostProfileError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                               f"valid: {', '.join(sorted(_KEYS))}")
    missing = {"name", "hbm_efficiency", "flops_efficiency", "step_overhead_s"} - set(entry)
    if missing:
        raise CostProfileError(f"{where}: missing field(s) {', '.join(sorted(missing))}")
    return CostProfile(**entry)


def builtin_profiles() -> dict[str, CostProfile]:
    """The package's profiles, by name."""
    text = resources.files(__package__).joinpath(DATA_FILE).read_text(encoding="utf-8")
    return {p["name"]: profile_from_json(p, f"{DATA_FILE}: {p.get('name')}")
            for p in json.loads(text)["profiles"]}


def get_cost_profile(name_or_path: str) -> CostProfile:
    """A built-in profile by name, or the profile in a JSON file (``pagedsim calibrate``
    writes one). Raises :class:`CostProfileError` naming what is valid."""
    profiles = builtin_profiles()
    if name_or_path in profiles:
        return profiles[name_or_path]
    path = Path(name_or_path)
    if path.suffix == ".json" or path.exists():
        if not path.exists():
            raise CostProfileError(f"cost profile file {name_or_path!r} does not exist")
        try:  # read as config files are: a regular file, bounded, no key given twice
            entry = read_json_file(path, MAX_PROFILE_BYTES, MAX_PROFILE_DEPTH)
        except NotRegularFileError as err:
            raise CostProfileError(f"cost profile file {name_or_path!r} is {err.kind}, not "
                                   "a regular file") from None
        except (OSError, JsonFileError) as err:
            raise CostProfileError(f"cost profile file {name_or_path!r} is not readable "
                                   f"JSON: {err}") from None
        return profile_from_json(entry, f"cost profile file {name_or_path!r}")
    raise CostProfileError(f"unknown cost profile {name_or_path!r}; valid: "
                           f"{', '.join(profiles)} or a .json file")
