"""An eval run's figures as the headline result file of the machine it ran on (`lab.result_file`), in two steps
around the eval:

    python -m lab.headline step=begin run_dir=results/headline       # before it: the checkout's commit
    python -m lab.headline step=end run_dir=results/headline 'command=make headline'

(conf/command/headline.yaml). `end` writes docs/results/data/<platform>/headline.json, stamped with the commit
`begin` saw (the code the eval ran), the machine, threads and load read here (run it on the machine that ran the
eval, right after it: `make headline` does), the settings from the run's config.yaml and the figures from its records
(`eval.metrics.summarize`, one line per method over every question).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Callable
from datetime import datetime, timezone
from pathlib import Path

import torch
from omegaconf import OmegaConf

from eagle_infer.decoding.build import SHIPPED_HEADS_DIR
from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_infer.platform import machine_label, resolve_device, resolve_dtype
from eagle_train.plumbing.command_line import command_settings
from eagle_train.plumbing.provenance import checkout_commit
from eval.cli import EvalRunConf
from eval.metrics import ALL, summarize
from eval.records import read_records
from lab.result_file import FORMAT, HeadlineResult, MethodResult, RunSettings, result_path, write_result


def run_conf(run_dir: Path) -> EvalRunConf:
    """The settings an eval run recorded in its config.yaml, checked against the eval schema."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise EagleError(f"{path} does not exist; expected the directory of an eval run (results/<run>)")
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(EvalRunConf), OmegaConf.load(path)))


def head_label(model: str, head: str) -> str:
    """The head setting as the result file records it: "shipped" names the ablation row its card says it came from
    ("shipped (layers2-all-cosine-2400k)"), so a table stays tied to its head after another is shipped."""
    card = SHIPPED_HEADS_DIR / model / "card.json"
    row = json.loads(card.read_text()).get("ablation_row") if head == "shipped" and card.is_file() else None
    return f"shipped ({row})" if row else head


def method_results(records: list[dict]) -> list[MethodResult]:
    """One MethodResult per method over all benchmarks, in the run's method order; the run must include vanilla."""
    if not any(r["method"] == "vanilla" for r in records):
        raise EagleError("the run has no vanilla records; expected method vanilla, which speedups divide by")
    rounded = lambda value, digits: None if value is None else round(value, digits)  # noqa: E731
    return [MethodResult(row.method, row.questions, row.new_tokens, round(row.tok_s, 2),
                         rounded(row.speedup_vs_vanilla, 3), rounded(row.tau, 3), rounded(row.identical_share, 3))
            for row in summarize(records) if row.benchmark == ALL]


CHECKOUT_FILE = "checkout.json"


def begin(run_dir: Path, root: Path) -> Path:
    """Before the eval: record the checkout's commit in `run_dir`/checkout.json; returns its path."""
    commit, changed = checkout_commit(root)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / CHECKOUT_FILE
    path.write_text(json.dumps({"commit": commit, "uncommitted_changes": changed}) + "\n", encoding="utf-8")
    return path


def begun_checkout(run_dir: Path) -> tuple[str, bool]:
    """The (commit, uncommitted_changes) that `begin` recorded for the run."""
    path = run_dir / CHECKOUT_FILE
    if not path.is_file():
        raise EagleError(f"{path} does not exist; expected `python -m lab.headline step=begin "
                         f"run_dir={run_dir}` before the eval")
    stamp = json.loads(path.read_text(encoding="utf-8"))
    return stamp["commit"], stamp["uncommitted_changes"]


def headline_result(run_dir: Path, command: str) -> HeadlineResult:
    """The headline result of the eval run in `run_dir`, begun by `begin` and measured on this machine."""
    commit, changed = begun_checkout(run_dir)
    conf = run_conf(run_dir)
    records = [r for r in read_records(run_dir / "records.jsonl")
               if r["method"] in conf.methods and r["benchmark"] in conf.bench.names]
    device = resolve_device(conf.model.device)
    settings = RunSettings(
        model=conf.model.name, head=head_label(conf.model.name, conf.infer.head), benchmarks=list(conf.bench.names),
        questions_per_benchmark=conf.bench.limit, max_turns=conf.bench.max_turns,
        max_new_tokens=conf.infer.max_new_tokens, temperature=conf.infer.temperature, depth=conf.infer.depth,
        top_k=conf.infer.top_k, total_tokens=conf.infer.total_tokens, pack=conf.model.pack, compile=conf.infer.compile)
    return HeadlineResult(
        format=FORMAT, machine=machine_label(device), device=device.type,
        threads=conf.threads or torch.get_num_threads(),
        dtype=str(resolve_dtype(conf.model.dtype, device)).removeprefix("torch."),
        torch=torch.__version__.split("+")[0], commit=commit, uncommitted_changes=changed, command=command,
        date=datetime.now(timezone.utc).date().isoformat(), load_average=round(os.getloadavg()[0], 2),
        settings=settings, methods=method_results(records))


@dataclass
class HeadlineSettings:
    step: str
    run_dir: str
    command: str | None
    root: str


def run_step(settings: HeadlineSettings, end: Callable[[Path, str, Path], Path]) -> None:
    """A two-step command's step: `begin` records the checkout (begin), `end` writes the run's result file with
    end(run_dir, command, root) -> its path; both print what they wrote."""
    run_dir, root = Path(settings.run_dir), Path(settings.root)
    if settings.step == "begin":
        print(f"wrote {begin(run_dir, root)}")
        return
    if settings.step != "end":
        raise EagleError(f"step={settings.step} is unknown; expected step=begin (before the eval) or step=end (after "
                         "it)")
    if not settings.command:
        raise EagleError("step=end needs command: the command that produced the run, e.g. 'command=make headline'")
    print(f"wrote {end(run_dir, settings.command, root)}")


def write_headline(run_dir: Path, command: str, root: Path) -> Path:
    result = headline_result(run_dir, command)
    return write_result(result, result_path(root, result.machine))


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    run_step(command_settings("headline", HeadlineSettings, argv), write_headline)


if __name__ == "__main__":
    main()
