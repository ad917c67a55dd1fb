"""What `make reproduce` measures: inference experiments on the shipped head (each one `eval.cli` run into
<results>/<name>, resumable record by record) and the draft-input heads (`lab.ablate_head spec=draft-inputs`,
resumable row by row), each with the command that makes it and whether it is complete.

`limit` is the number of questions per benchmark (bench.limit: the first `limit` of each; MT-bench with both
turns), and the questions of each draft-input head's τ and speed runs. Throughput points need at least
THROUGHPUT_MIN_QUESTIONS questions (a batch of 4 needs 4 prompts), so that experiment decodes max(limit, 4).
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from eagle_infer.config import InferConf
from eagle_infer.config import DEFAULT_STATIC_PATHS
from eval import throughput
from eval.records import read_records, record_key

MODEL = "smollm2-135m"  # with its shipped head (infer.head=shipped, the default)
STATIC_NODES = len(DEFAULT_STATIC_PATHS)  # EAGLE-1's static tree: 26 nodes ...
STATIC_DEPTH = max(map(len, DEFAULT_STATIC_PATHS))  # ... 6 levels, so 6 draft forwards, as a chain of 6
# Chain, EAGLE-1 and EAGLE-2 at the same draft forwards and the same tree budget (EAGLE-2's fixed budget = the static
# tree's nodes and depth; the chain's depth).
EQUAL_BUDGET = ("infer.budget=fixed", f"infer.depth={STATIC_DEPTH}", f"infer.total_tokens={STATIC_NODES}")
THROUGHPUT_BATCHES = (1, 2, 3, 4)
THROUGHPUT_MIN_QUESTIONS = max(THROUGHPUT_BATCHES)
MAX_BATCH = InferConf().max_batch_size  # the largest batch the throughput experiment may measure
ABLATION_SPEC = "draft-inputs"  # conf/ablate/draft-inputs.yaml


@dataclass(frozen=True)
class Experiment:
    """One eval.cli run: methods × benchmarks with the shipped head under `overrides`; `throughput`: mode=throughput
    (tokens/s per batch size over first turns) instead of answer records."""

    name: str
    benches: tuple[str, ...]
    methods: tuple[str, ...]
    overrides: tuple[str, ...] = ()
    throughput: bool = False

    def questions(self, limit: int) -> int:
        return max(limit, THROUGHPUT_MIN_QUESTIONS) if self.throughput else limit

    def batch_sizes(self, limit: int) -> tuple[int, ...]:
        """Batch sizes 1–4 and the largest this run can fill (every question at once, at most MAX_BATCH)."""
        largest = min(MAX_BATCH, self.questions(limit))
        return tuple(sorted({*THROUGHPUT_BATCHES, largest}))

    def run_name(self, limit: int) -> str:
        """The results directory's name; throughput points depend on the question count, so it is in the name."""
        return f"{self.name}-{self.questions(limit)}q" if self.throughput else self.name

    def command(self, results: Path, limit: int, data_dir: str | None) -> list[str]:
        cmd = [sys.executable, "-m", "eval.cli", f"model.name={MODEL}", f"results_dir={results}",
               f"run={self.run_name(limit)}", f"bench.names=[{','.join(self.benches)}]",
               f"methods=[{','.join(self.methods)}]", f"bench.limit={self.questions(limit)}", "wandb.mode=disabled",
               *self.overrides]
        if self.throughput:
            cmd += ["mode=throughput", f"batch_sizes=[{','.join(map(str, self.batch_sizes(limit)))}]"]
        return cmd + ([f"bench.data_dir={data_dir}"] if data_dir else [])

    def missing(self, results: Path, questions: dict[str, list[str]], limit: int) -> int:
        """How many answers (or throughput points) the run lacks; `questions`: each benchmark's first question ids."""
        out = results / self.run_name(limit)
        if self.throughput:
            path, key = out / throughput.FILE, throughput.point_key
            wanted = {(b, m, size) for b in self.benches for m in self.methods for size in self.batch_sizes(limit)}
        else:
            path, key = out / "records.jsonl", record_key
            wanted = {(b, m, q) for b in self.benches for m in self.methods for q in questions[b][:limit]}
        done = {key(r) for r in read_records(path)} if path.exists() else set()
        return len(wanted - done)


EXPERIMENTS = (
    # EAGLE Table 2 (T=0), Table 5 (chain vs tree), EAGLE-2's static vs dynamic tree and value expansion + rerank
    Experiment("mt-bench-t0", ("mt_bench",), ("vanilla", "chain", "eagle1", "eagle2"), EQUAL_BUDGET),
    Experiment("mt-bench-t1", ("mt_bench",), ("vanilla", "chain", "eagle1", "eagle2"),
               EQUAL_BUDGET + ("infer.temperature=1.0",)),
    # EAGLE-2's expansion by confidence instead of path value, and without reranking (its Table 3)
    Experiment("expand-confidence", ("mt_bench",), ("vanilla", "eagle2"),
               EQUAL_BUDGET + ("infer.expand_by=confidence",)),
    Experiment("no-rerank", ("mt_bench",), ("vanilla", "eagle2"), EQUAL_BUDGET + ("infer.rerank=false",)),
    Experiment("confidence-no-rerank", ("mt_bench",), ("vanilla", "eagle2"),
               EQUAL_BUDGET + ("infer.expand_by=confidence", "infer.rerank=false")),
    # EAGLE Table 1, EAGLE-2's calibration and acceptance by position (Alpaca); eagle2 with the toolkit's defaults
    Experiment("tasks", ("humaneval", "gsm8k", "alpaca"), ("vanilla", "eagle1", "eagle2")),
    # EAGLE Table 7
    Experiment("throughput", ("mt_bench",), ("vanilla", "eagle2"), throughput=True),
)
BY_NAME = {e.name: e for e in EXPERIMENTS}


def ablation_command(limit: int) -> list[str]:
    """Train (or resume) the draft-input heads and measure their τ and speed on `limit` MT-bench first turns."""
    return [sys.executable, "-m", "lab.ablate_head", f"spec={ABLATION_SPEC}", f"questions={limit}"]
