"""`python -m eval.cli run=NAME bench.names=[mt_bench] bench.limit=10 methods=[vanilla,eagle2]` (make eval).

Writes results/<run>/records.jsonl as answers finish (a rerun resumes), then table.md / table.csv (with a
per-category table where a benchmark's questions span several categories), Spec-Bench answer files
model_answer/<method>.jsonl (eval.spec_bench), PNG plots and a W&B log (offline unless wandb.mode=online). infer.batch_size=N answers N questions per batch. mode=throughput
(make throughput) instead measures tokens/s at each of batch_sizes into throughput.jsonl / throughput.md. In a Hydra multirun (make sweep) each job is one run under
results/<sweep>/<job>; a failed job writes failed.txt and the sweep goes on.
"""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from eagle_infer.decoding.build import load_head_for
from eagle_infer.models.chat import stop_ids
from eagle_infer.entry.cli_support import launch, one_line_errors, setup_logging
from eagle_infer.paths import CONF_DIR
from eagle_infer.config import InferConf, LookupConf, ModelConf
from eagle_infer.errors import EagleError
from eagle_infer.config import DEFAULT_METHOD
from eagle_infer.models.synthetic import is_synthetic, synthetic_refusal
from eagle_infer.models.target import load_target
from eagle_train.plumbing.benchmarks import BENCHMARKS, benchmark_dir, check_names, load_benchmark
from eval import harness, throughput
from eval.harness import HarnessSettings
from eval.methods import PEER_METHODS, make_methods, needs_head
from eval.vllm_backend import VllmConf
from eval.metrics import cycle_split, summarize
from eval.records import RecordWriter, RunLock, read_records
from eval.report import category_table, log_wandb, plot_all, write_calibration, write_cycles, write_table
from eval.spec_bench import write_answer_files

log = logging.getLogger("eval")
DEFAULT_METHODS = ["vanilla", DEFAULT_METHOD, "eagle2", "chain", "hf_generate", "pld"]
MODES = ("answers", "throughput")


@dataclass
class BenchConf:
    """data_dir: folder with <name>/question.jsonl; null = the repo's sibling shared/data/benchmarks when present,
    then the PyPI packages, then the hub."""

    names: list[str] = field(default_factory=lambda: list(BENCHMARKS))
    data_dir: Optional[str] = None
    limit: Optional[int] = None
    max_turns: int = 2  # 1 = first turns only
    seed: int = 0


@dataclass
class WandbConf:
    mode: str = "offline"
    project: str = "eagle-toolkit"


@dataclass
class EvalRunConf:
    model: ModelConf = field(default_factory=ModelConf)
    infer: InferConf = field(default_factory=InferConf)
    lookup: LookupConf = field(default_factory=LookupConf)  # methods lookup, <method>+lookup and pld
    bench: BenchConf = field(default_factory=BenchConf)
    wandb: WandbConf = field(default_factory=WandbConf)
    methods: list[str] = field(default_factory=lambda: list(DEFAULT_METHODS))
    heads: dict[str, str] = field(default_factory=dict)  # label -> head directory, for methods "eagle2:LABEL"
    run: str = "${model.name}"
    results_dir: str = "results"
    assistant_model: Optional[str] = None
    vllm: VllmConf = field(default_factory=VllmConf)  # methods vllm and vllm:LABEL (eval.vllm_backend)
    threads: Optional[int] = None
    mode: str = "answers"  # answers: records + quality/speed table; throughput: tokens/s per batch size
    batch_sizes: list[int] = field(default_factory=lambda: [1, 2, 4, 8])  # throughput mode
    recipe: str = "none"
    notes: str = ""

    def __post_init__(self):
        self.infer.lookup_conf = self.lookup  # the `lookup` group is the engine config's lookup settings


ConfigStore.instance().store(name="eval_schema", node=EvalRunConf)


def evaluate(conf: EvalRunConf, out: Path) -> str:
    """Run (or resume) one evaluation into `out`; returns the Markdown table."""
    import torch

    if is_synthetic(conf.model.name):  # random weights: refused before any benchmark or model is loaded
        raise synthetic_refusal(conf.model.name)
    check_names(conf.bench.names, benchmark_dir(conf.bench.data_dir))
    _check_batches(conf)
    if conf.threads:
        torch.set_num_threads(conf.threads)
    benchmarks = {b: load_benchmark(b, benchmark_dir(conf.bench.data_dir), conf.bench.limit, conf.bench.seed) for b in conf.bench.names}
    target = load_target(conf.model.name, conf.model.dtype, conf.model.device, conf.model.pack,
                         conf.infer.compile)
    unlabelled = any(":" not in m and needs_head(m) for m in conf.methods)  # EAGLE methods drafting with the run's head
    head = load_head_for(conf.infer, target) if unlabelled else None
    methods = make_methods(conf.methods, target, conf.infer, head, conf.assistant_model, conf.model.dtype, conf.heads,
                           conf.vllm)
    settings = HarnessSettings(conf.infer.max_new_tokens, conf.infer.sampling(), conf.infer.seed, conf.bench.max_turns,
                               conf.infer.batch_size)
    out.mkdir(parents=True, exist_ok=True)
    _check_same_settings(conf, out)
    (out / "config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(conf)))
    if conf.mode == "throughput":
        writer = RecordWriter(out / throughput.FILE, throughput.FIELDS, throughput.point_key)
        throughput.run(benchmarks, methods, target, settings, conf.batch_sizes, writer, stop_ids(target))
        table = throughput.rows(writer.records)
        markdown = throughput.write_table(table, out)
        plots = throughput.plot(table, out)
        log_wandb(table, plots, out.name, OmegaConf.to_container(OmegaConf.structured(conf)), conf.wandb.mode,
                  conf.wandb.project)
        return markdown
    writer = RecordWriter(out / "records.jsonl")
    harness.run(benchmarks, methods, target, settings, writer, stop_ids(target))
    records = [r for r in read_records(out / "records.jsonl") if r["method"] in conf.methods and r["benchmark"] in benchmarks]
    rows = summarize(records)
    markdown = write_table(rows, out, str(target.dtype).removeprefix("torch."), category_table(records))
    write_answer_files(records, out, target.name)
    write_cycles(cycle_split(records), out)
    write_calibration(records, out)
    plots = plot_all(records, rows, out)
    log_wandb(rows, plots, out.name, OmegaConf.to_container(OmegaConf.structured(conf)), conf.wandb.mode, conf.wandb.project)
    return markdown


def _check_batches(conf: EvalRunConf) -> None:
    """Mode, batch sizes and methods that fit them, checked before any model is loaded."""
    if conf.mode not in MODES:
        raise EagleError(f"unknown mode {conf.mode!r}: expected one of {', '.join(MODES)}")
    if conf.infer.lookup:
        raise EagleError("infer.lookup=true is not used by eval: name hybrid methods instead, e.g. methods=[eagle2+lookup]")
    sizes = conf.batch_sizes if conf.mode == "throughput" else [conf.infer.batch_size]
    for size in sizes:
        if not 1 <= size <= conf.infer.max_batch_size:
            raise EagleError(f"batch size {size} is invalid: expected 1 <= batch size <= infer.max_batch_size "
                             f"{conf.infer.max_batch_size}")
    peers = [m for m in conf.methods if m.split(":")[0] in PEER_METHODS]
    if peers and max(sizes) > 1:
        raise EagleError(f"method {peers[0]!r} answers one request at a time: drop it from methods to batch "
                         f"(engine methods batch)")


def _setting(conf, key: str):
    """A run config's `key` group as compared on resuming: infer without method and lookup, which the `methods`
    list sets for each method it runs."""
    value = OmegaConf.select(conf, key)
    if key != "infer" or value is None:
        return value
    return {k: v for k, v in OmegaConf.to_container(value).items() if k not in ("method", "lookup")}


def _check_same_settings(conf: EvalRunConf, out: Path) -> None:
    """Records of one run must come from one setting: resuming with another model/infer/turns is refused (infer's
    method and lookup aside: each of `methods` sets its own, and the default method may change)."""
    path = out / "config.yaml"
    if not path.exists():
        return
    old = OmegaConf.load(path)
    new = OmegaConf.structured(conf)
    for key in ("model", "infer", "lookup", "bench.max_turns", "heads"):
        if _setting(old, key) != _setting(new, key):
            raise EagleError(f"{str(out)!r} holds records made with other {key} settings: give another run=NAME or delete it")


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="eval")
@one_line_errors
def main(cfg) -> None:
    setup_logging()
    conf: EvalRunConf = OmegaConf.to_object(cfg)
    multirun = HydraConfig.get().mode.name == "MULTIRUN"
    out = Path(HydraConfig.get().runtime.output_dir) if multirun else Path(conf.results_dir) / conf.run
    if not multirun:
        with RunLock(out):  # one writer per run directory
            print(evaluate(conf, out))
        print(f"results in {out}")
        return
    try:  # one failed sweep point must not stop the others
        with RunLock(out):
            print(evaluate(conf, out))
    except Exception as err:  # noqa: BLE001 - recorded for the aggregator, which reports it
        (out / "failed.txt").write_text(f"{type(err).__name__}: {err}\n\n{traceback.format_exc()}")
        log.error("sweep job failed: %s", err)


def run() -> None:
    """The console script's entry point."""
    launch(main)


if __name__ == "__main__":
    run()
