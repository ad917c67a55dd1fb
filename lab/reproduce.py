"""`make reproduce [LIMIT=n]` (python -m lab.reproduce limit=n; conf/command/reproduce.yaml): the EAGLE papers'
findings against ours, written to docs/reproduction.md and its plots (lab.reproduction_doc), one verdict per finding
(lab.findings, lab.verdict).

Steps (lab.reproduce_plan): the inference experiments on the shipped head, one eval.cli run each into
<results>/<name>, then the draft-input heads (lab.ablate_head spec=draft-inputs). A complete step is skipped; an
interrupted one resumes (eval's records, ablate-head's rows), so nothing finished is lost or repeated. The page is
rewritten after every step, and each step's wall time goes to <results>/steps.jsonl, which the page sums.
make ablate-head's rows (EAGLE-3, the 100k data rows) are read where trained, never trained here.
"""
from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import torch

from eagle_infer.entry.cli_support import one_line_errors, setup_logging
from eagle_infer.paths import REPO
from eagle_infer.errors import EagleError
from eagle_infer.platform import cache_root, cpu
from eagle_train.plumbing.benchmarks import benchmark_dir, load_benchmark
from eagle_train.plumbing.command_line import command_settings
from eagle_train.plumbing.provenance import checkout_commit
from eval.records import read_records
from lab import findings
from lab.ablate_head import load_spec, speed_run, tau_run
from lab.headline import head_label
from lab.reproduce_plan import ABLATION_SPEC, EXPERIMENTS, ablation_command
from lab.reproduction_doc import Stamp, write

log = logging.getLogger("reproduce")
LEDGER = "steps.jsonl"


def questions(data_dir: str | None, limit: int) -> dict[str, list[str]]:
    """Each benchmark's first question ids (as many as any step decodes), from where eval.cli reads them."""
    directory = benchmark_dir(data_dir)
    most = max(e.questions(limit) for e in EXPERIMENTS)
    return {b: [str(q.question_id) for q in load_benchmark(b, directory, most)]
            for b in dict.fromkeys(b for e in EXPERIMENTS for b in e.benches)}


def ablation_missing(limit: int, cache: Path) -> int:
    """Draft-input rows not yet trained, or with fewer than `limit` τ answers / 2 × `limit` speed answers."""
    out = cache / f"ablate-{ABLATION_SPEC}"

    def count(run: str) -> int:
        path = out / run / "records.jsonl"
        return len(read_records(path)) if path.exists() else 0

    return sum(1 for row in load_spec(ABLATION_SPEC)["rows"]
               if not (out / row["name"] / "summary.json").exists() or count(tau_run(row)) < limit
               or count(speed_run(row)) < 2 * limit)


def run_step(cmd: list[str], log_path: Path) -> None:
    """Run one step's command: its stdout to `log_path`, its progress (stderr) to the terminal."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as f:
        code = subprocess.call(cmd, stdout=f)
    if code:
        raise EagleError(f"{' '.join(cmd[1:4])} … exited with {code} (its output: {log_path})")


def shown(cmd: list[str]) -> str:
    """The command as the page prints it: `python -m ...`, the benchmark directory as $DATA_DIR (`make reproduce`'s
    variable) rather than one machine's absolute path."""
    return " ".join(["python", *(re.sub(r"^bench\.data_dir=\S+$", "bench.data_dir=$DATA_DIR", a) for a in cmd[1:])])


@dataclass
class ReproduceSettings:
    limit: int
    data_dir: str | None
    results: str
    doc: str
    doc_only: bool


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    conf = command_settings("reproduce", ReproduceSettings, argv)
    setup_logging()
    if conf.limit < 1:
        raise EagleError(f"limit={conf.limit} is invalid: expected a positive number of questions")
    if conf.data_dir and not Path(conf.data_dir).is_dir():
        raise EagleError(f"data_dir={conf.data_dir!r} is not a directory: expected one holding <name>/question.jsonl")
    reproduce(conf.limit, conf.data_dir, Path(conf.results), Path(conf.doc), conf.doc_only)


def reproduce(limit: int, data_dir: str | None, results: Path, doc: Path, doc_only: bool = False) -> str:
    """Run every incomplete step, rewriting the page after each; return the page."""
    cache = cache_root()
    ids = questions(data_dir, limit)
    steps = {e.name: (e.command(results, limit, data_dir), lambda e=e: e.missing(results, ids, limit))
             for e in EXPERIMENTS}
    steps[ABLATION_SPEC] = (ablation_command(limit), lambda: ablation_missing(limit, cache))
    started = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{cpu().label}, {torch.get_num_threads()} torch thread(s)"
    commit = _commit()  # before this pass writes anything: the page it rewrites would mark the tree changed

    def page() -> str:
        ledger = read_records(results / LEDGER) if (results / LEDGER).exists() else []
        ran_on = list(dict.fromkeys(e["machine"] for e in ledger if e.get("machine")))  # where the steps ran
        ran_at = list(dict.fromkeys(e["commit"] for e in ledger if e.get("commit")))  # and the checkouts they ran
        stamp = Stamp(f"make reproduce LIMIT={limit}", limit, "; ".join(ran_on) or machine, "; ".join(ran_at) or commit,
                      ledger, {name: shown(cmd) for name, (cmd, _) in steps.items()},
                      head_label("smollm2-135m", "shipped"))
        res = findings.Results(results, ids, limit, cache)
        return write(doc, findings.sections(res, doc.parent / doc.stem), stamp, res.root)

    for i, (name, (cmd, missing)) in enumerate(steps.items(), 1):
        todo = 0 if doc_only else missing()
        if not todo:
            log.info("[%d/%d] %s: %s", i, len(steps), name, "skipped (--doc-only)" if doc_only else "complete")
            continue
        log.info("[%d/%d] %s: %d to do: %s", i, len(steps), name, todo, shown(cmd))
        start = time.perf_counter()
        try:
            run_step(cmd, results / "logs" / f"{name}.log")
        finally:  # time spent counts even when the step fails or is interrupted
            _ledger(results, {"step": name, "seconds": round(time.perf_counter() - start, 1), "limit": limit,
                              "pass": started, "machine": machine, "commit": commit})
        page()
    markdown = page()
    log.info("wrote %s", doc)
    return markdown


def _ledger(results: Path, entry: dict) -> None:
    results.mkdir(parents=True, exist_ok=True)
    with (results / LEDGER).open("a") as f:
        f.write(json.dumps(entry) + "\n")


def _commit() -> str:
    """The checkout's short commit, marked when the working tree has changes."""
    try:
        head, dirty = checkout_commit(REPO)
    except EagleError:
        return "unknown"
    return head + (" with uncommitted changes" if dirty else "")


if __name__ == "__main__":
    main()
