"""``pagedsim calibrate``: fit a cost profile to your own ``benchmark_serving`` results
(:mod:`pagedsim.experiments.calibrate`) and write it, for ``--cost-profile FILE``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..engine.scheduler import POLICIES
from ..models.specs import GPUS, MODELS
from .argtypes import nonempty, preset, whole
from .base import CliError


def _at_least_one(text: str) -> int:
    value = whole(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {text}")
    return value


def add_calibrate(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "calibrate",
        help="fit the step-time constants to benchmark_serving result files",
        description=("Replay each benchmark_serving / 'vllm bench serve' result file (saved "
                     "with --save-result, and --save-detailed in vllm bench serve: it needs "
                     "input_lens and output_lens) through the simulator, fit a cost "
                     "profile's constants to the measured median TTFT, median TPOT and "
                     "output throughput, and write the profile for --cost-profile FILE. "
                     "The flags describe the server the files measured."),
    )
    p.add_argument("results", nargs="+", metavar="RESULTS.json",
                   help="result files of runs of one server setting, at most 20,000 "
                        "requests in all (the fit replays them up to about 100 times; a "
                        "line on stderr as each pass starts)")
    p.add_argument("--model", required=True, type=preset("model", MODELS), metavar="NAME",
                   help="the served model's preset")
    p.add_argument("--gpu", required=True, type=preset("GPU", GPUS), metavar="NAME",
                   help="the GPU preset")
    p.add_argument("--num-gpus", type=_at_least_one, default=1, metavar="N",
                   help="tensor-parallel GPUs (default 1)")
    p.add_argument("--max-model-len", type=_at_least_one, default=None, metavar="TOKENS",
                   help="the server's --max-model-len (default: the model's context)")
    p.add_argument("--policy", default="chunked", choices=POLICIES,
                   help="the server's scheduling: chunked (default: vLLM v1) or v0")
    p.add_argument("--max-num-batched-tokens", type=_at_least_one, default=None,
                   metavar="TOKENS",
                   help="the server's token budget per step (default: 8192 with chunked, "
                        "max(2048, max-model-len) with v0)")
    p.add_argument("--max-num-seqs", type=_at_least_one, default=256, metavar="N",
                   help="the server's --max-num-seqs (default 256)")
    p.add_argument("--num-scheduler-steps", type=_at_least_one, default=1, metavar="K",
                   help="vLLM 0.6's --num-scheduler-steps (v0 only; default 1)")
    p.add_argument("--start", default="vllm", metavar="NAME|FILE",
                   help="the profile the fit starts from (default vllm)")
    p.add_argument("--name", default="calibrated", type=nonempty("a name"),
                   help="the fitted profile's name (default calibrated)")
    p.add_argument("--out", required=True, type=nonempty("a file"), metavar="FILE.json",
                   help="where to write the fitted profile")
    p.set_defaults(run=run_calibrate)


def run_calibrate(args: argparse.Namespace) -> int:
    from ..experiments.calibrate import (
        ResultFileError,
        case_from_result,
        check_fit_size,
        fit_profile,
    )
    from ..experiments.validate import format_table, run_case_list
    from ..models.cost_profiles import CostProfileError, get_cost_profile
    from ..models.specs import get_model

    if args.num_scheduler_steps > 1 and args.policy != "v0":
        raise CliError("argument --num-scheduler-steps: needs --policy v0 (vLLM 0.6's "
                       f"multi-step), got --policy {args.policy}")
    try:
        start = get_cost_profile(args.start)
        start.efficiencies(args.gpu)
    except CostProfileError as err:
        raise CliError(f"argument --start: {err}") from None
    max_len = args.max_model_len or get_model(args.model).max_model_len
    batched = args.max_num_batched_tokens or (8192 if args.policy == "chunked"
                                              else max(2048, max_len))
    settings = {"model": args.model, "gpu": args.gpu, "num_gpus": args.num_gpus,
                "scheduler": args.policy, "max_model_len": max_len,
                "max_num_batched_tokens": batched, "max_num_seqs": args.max_num_seqs,
                "num_scheduler_steps": args.num_scheduler_steps}
    try:
        cases = [case_from_result(path, settings) for path in args.results]
        check_fit_size(cases)
    except ResultFileError as err:
        raise CliError(f"argument RESULTS.json: {err}") from None
    print(format_table(run_case_list(cases, start), f"{start.name} (before)"))
    fitted, loss = fit_profile(cases, start, name=args.name,
                               log=lambda line: print(line, file=sys.stderr, flush=True))
    print()
    print(format_table(run_case_list(cases, fitted), f"{fitted.name} (fitted; loss "
                                                     f"{loss:.5f})"))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(fitted.to_json(), indent=2) + "\n", encoding="utf-8")
    print(f"\nwrote {out}: use it with --cost-profile {out}")
    return 0
