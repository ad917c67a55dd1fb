"""The command lines as a user runs them (subprocesses), plus the sweep aggregator and eval resume (in process).

Each command runs in a process of its own: exit codes, one-line errors on stderr, JSON on stdout, recipes composing
with Hydra. Two run as a plain `python -m` in a fresh interpreter; the others go through a fork server (below) that
pays the ~4 s of torch/transformers/Hydra imports once, which keeps this file well under a minute on 2 CPU cores.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eagle_infer.models.chat import Message, prompt_ids
from eagle_infer.decoding.records import BatchResult, CycleStats, GenerationResult
from eagle_train.plumbing.benchmarks import BENCHMARKS, Question
from eval.harness import HarnessSettings, run as harness_run
from eval.records import RECORD_FIELDS, RecordWriter, read_records

REPO = Path(__file__).resolve().parent.parent
RECIPES = sorted(p.stem for p in (REPO / "recipes").glob("*.yaml"))
PNG = b"\x89PNG\r\n\x1a\n"


def _env() -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "WANDB_MODE": "disabled"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR"):
        env.pop(k, None)  # the in-process DeepSpeed fixture's variables are not the command line's business
    return env


def python_m(module: str, *args: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """`python -m module args...` in a fresh interpreter, from the repository root."""
    return subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, env=_env(), capture_output=True, text=True,
                          timeout=timeout)


# A fresh `python -m` spends ~4 s of CPU importing torch, transformers and Hydra before it does anything. The fork
# server pays that once: it imports those libraries (not the CLI modules), then serves each command by forking a
# child that runs the CLI module as __main__ exactly as `python -m` does (runpy), with its own stdout/stderr files
# and exit status. Each command still runs in its own process with fresh Hydra state.
FORK_SERVER = r"""
import json, os, runpy, sys, traceback
import torch, transformers, hydra, omegaconf, tqdm, safetensors.torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
import transformers.models.llama.modeling_llama
import eagle_infer.models.target, eagle_infer.decoding.engine, eagle_infer.head.draft_head, eagle_infer.models.chat
import eagle_train.features.featurize, eagle_train.training.train, eagle_train.plumbing.benchmarks, eval.harness, eval.methods, eval.metrics, eval.report
for line in sys.stdin:
    job = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for fd, path in ((1, job["out"]), (2, job["err"])):
                f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
                os.dup2(f, fd)
                os.close(f)
            sys.argv = [job["module"], *job["args"]]
            runpy.run_module(job["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush(); sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"rc": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@pytest.fixture(scope="module")
def fork_server():
    proc = subprocess.Popen([sys.executable, "-c", FORK_SERVER], cwd=REPO, env=_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    yield proc
    proc.stdin.close()
    proc.wait(timeout=30)


@pytest.fixture
def cli(fork_server, tmp_path_factory):
    """cli(module, *args) -> CompletedProcess of that command line, run by the fork server from the repo root."""
    def run(module: str, *args: str) -> subprocess.CompletedProcess:
        logs = tmp_path_factory.mktemp("cli")
        out, err = logs / "stdout", logs / "stderr"
        fork_server.stdin.write(json.dumps({"module": module, "args": list(args), "out": str(out), "err": str(err)}) + "\n")
        fork_server.stdin.flush()
        reply = fork_server.stdout.readline()
        assert reply, "the fork server died"
        return subprocess.CompletedProcess([module, *args], json.loads(reply)["rc"], out.read_text(), err.read_text())

    return run


def assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit code 2 and exactly one stderr line, `error: ...`, containing every needle; returns that line."""
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr[-2000:]
    for needle in needles:
        assert needle in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tiny_smol):
    """tiny-smol saved with save_pretrained, loadable by directory name."""
    path = tmp_path_factory.mktemp("tiny-smol") / "model"
    tiny_smol.model.save_pretrained(path)
    tiny_smol.tokenizer.save_pretrained(path)
    assert (path / "config.json").exists()
    return str(path)


# --- eagle_infer.entry.cli -----------------------------------------------------------------------------------------------


def test_infer_json(model_dir):
    """A real `python -m` in a fresh interpreter: the entry point end to end."""
    proc = python_m("eagle_infer.entry.cli", f"model.name={model_dir}", "model.dtype=float32", "infer.head=random",
                    "chat=Hi", "infer.max_new_tokens=8", "output=json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(out) == {"text", "tokens", "stats"}
    assert isinstance(out["text"], str) and len(out["tokens"]) == 8 and all(isinstance(t, int) for t in out["tokens"])
    stats = out["stats"]
    assert stats["new_tokens"] == 8 and stats["stop_reason"] == "length"
    assert stats["tau"] >= 1.0 and stats["cycles"]
    assert {"tree_size", "tree_depth", "accepted", "draft_s", "verify_s"} <= set(stats["cycles"][0])
    assert stats["tau"] == pytest.approx(sum(c["accepted"] + 1 for c in stats["cycles"]) / len(stats["cycles"]))


def test_infer_unknown_model():
    """A real `python -m`: nothing but the error line reaches stderr of a fresh interpreter."""
    assert_one_line_error(python_m("eagle_infer.entry.cli", "model.name=nope-model", "chat=Hi"), "'nope-model'", "smollm2-135m")


@pytest.mark.parametrize(
    "args, needles",
    [
        (["infer.method=bogus"], ["'bogus'", "vanilla", "eagle2"]),
        (["infer.head=/no/such/dir"], ["/no/such/dir", "does not exist"]),
        (["infer.top_k=100000"], ["top_k 100000", "49152"]),
        (["output=yaml"], ["'yaml'", "json"]),
        (["chat=Hi", "Hello there"], ["given 2 times", "chat=", "the command line"]),
        (["infer.temperature=nan"], ["temperature nan is invalid", ">= 0"]),
        (["infer.method=lookup", "lookup.min_ngram=3"], ["lookup.min_ngram 3", "lookup.max_ngram 2"]),
        (["infer.lookup=true", "infer.total_tokens=8"], ["lookup.num_tokens 10", "8"]),
        (["chat="], ["chat=''", "empty"]),
        (["infer.batch_size=0"], ["batch_size 0", "max_batch_size 16"]),
        (["infer.batch_size=1000"], ["batch_size 1000", "max_batch_size 16"]),
    ],
    ids=["bogus-method", "missing-head", "top_k-over-vocab", "bad-output", "two-prompts", "nan-temperature", "lookup-ngram", "lookup-budget",
         "empty-chat", "batch-size-0", "batch-size-1000"],
)
def test_infer_bad_input(cli, model_dir, args, needles):
    base = [f"model.name={model_dir}", "model.dtype=float32", "infer.head=random", "chat=Hi", "infer.max_new_tokens=4"]
    overridden = {a.split("=", 1)[0] for a in args}
    proc = cli("eagle_infer.entry.cli", *[a for a in base if a.split("=", 1)[0] not in overridden], *args)
    assert_one_line_error(proc, *needles)


# --- eagle_train.cli -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("args, needles", [
    (["train.epochs=0"], ["train.epochs 0", ">= 1"]),
    (["train.max_steps=0"], ["train.max_steps 0", ">= 1"]),
    (["train.keep_checkpoints=-1"], ["train.keep_checkpoints -1", ">= 1", "0 to keep"]),
    (["train.lr=-1"], ["train.lr -1.0 is invalid", "> 0"]),
])
def test_train_that_would_train_nothing_is_refused_before_featurizing(cli, args, needles):
    assert_one_line_error(cli("eagle_train.cli", "recipes=demo", "stage=featurize", *args), *needles)


@pytest.mark.parametrize("args, needles", [
    (["head.block_size=300"], ["head.block_size 300 is above the context", "max_length 256"]),
    (["head.block_size=1"], ["head.block_size 1 is invalid", ">= 2"]),
    (["head.mask_token_id=17"], ["head.mask_token_id 17 is text to the tokenizer", "the default is 0"]),
])
def test_a_dflash_drafter_it_cannot_train_is_refused_before_featurizing(cli, model_dir, tmp_path, args, needles):
    assert_one_line_error(cli("eagle_train.cli", "recipes=demo", "block=dflash", "stage=featurize",
                              f"model.name={model_dir}", "head.feature_layers=[0,1]",
                              f"data.features_dir={tmp_path / 'features'}", *args), *needles)


def test_train_unknown_data_template(cli):
    assert_one_line_error(cli("eagle_train.cli", "recipes=demo", "stage=featurize", "data.template=bogus"),
                          "'bogus'", "tokenizer", "chatml")


def test_data_template_renders_the_features(cli, model_dir, tmp_path):
    """data.template overrides the model's chat template for the data; the features' manifest records it."""
    source = tmp_path / "chats.jsonl"
    source.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Q{i}"},
                                                       {"role": "assistant", "content": f"A{i}"}]}) + "\n"
                              for i in range(3)))
    proc = cli("eagle_train.cli", "recipes=demo", "stage=featurize", f"model.name={model_dir}", f"data.source={source}",
               "data.conversations=2", "data.heldout=1", f"data.features_dir={tmp_path / 'features'}",
               "data.template=chatml", "featurize.regenerate=false")
    assert proc.returncode == 0, proc.stderr[-500:]
    manifest = json.loads((tmp_path / "features" / "train" / "manifest.json").read_text())
    assert manifest["template"] == "chatml" and manifest["conversations"] == 2


def test_train_unknown_recipe(cli):
    line = assert_one_line_error(cli("eagle_train.cli", "recipes=nope"), "'nope'")
    assert all(name in line for name in RECIPES)


def test_train_unknown_block(cli):
    assert_one_line_error(cli("eagle_train.cli", "recipes=demo", "block=eagle4", "stage=plan"), "unknown block 'eagle4'",
                          "eagle3")


@pytest.mark.parametrize("row, steps", [("eagle3-block-k7-1000k", 6), ("eagle3-block-k1-1000k", 0)])
def test_block_eagle3_trains_the_ablation_rows_eagle3_block(cli, tmp_path, row, steps):
    """block=eagle3 (conf/block/eagle3.yaml, `make train BLOCK=eagle3`) over a recipe gives EAGLE-3's draft model with
    its reference trainer's settings; the ablation's eagle3-block-* rows select it, their own overrides after it."""
    from lab import ablate_head as ab

    spec = ab.load_spec("smollm2-135m")
    args, _ = ab.row_overrides(spec, "smollm2-135m", next(r for r in spec["rows"] if r["name"] == row))
    assert "block=eagle3" in args
    proc = cli("eagle_train.cli", "recipes=smollm2-135m", "stage=plan", f"hydra.run.dir={tmp_path}", *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "head: block eagle3, layers 1, features fused" in proc.stdout
    assert "epochs 5," in proc.stdout and "then cosine" in proc.stdout
    assert (f"noise 0.0, w_cls 1.0, w_reg 0.0, ttt_steps {steps}, loss per position (draftable positions)"
            in proc.stdout)
    assert "features fused" in proc.stdout.split("data: ")[1].splitlines()[0]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_composes(cli, recipe, tmp_path):
    from lab.ablate_head import recipe as composed

    spec = composed(recipe)  # with the recipes it builds on (its defaults list)
    proc = cli("eagle_train.cli", f"recipes={recipe}", "stage=plan", f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"recipe: {spec['recipe']}" in proc.stdout
    assert f"model: {spec['model']['name']} ({spec['model']['dtype']}" in proc.stdout
    assert f"deepspeed ({spec['train']['deepspeed_config']})" in proc.stdout
    assert f"micro batch {spec['train']['batch_size']}" in proc.stdout


# --- eval.cli ------------------------------------------------------------------------------------------------------


def test_eval_unknown_benchmark(cli, model_dir, tmp_path):
    proc = cli("eval.cli", f"model.name={model_dir}", "model.dtype=float32", "bench.names=[bogus]",
               f"results_dir={tmp_path}", "wandb.mode=disabled")
    assert_one_line_error(proc, "'bogus'", *BENCHMARKS)
    assert not any(tmp_path.iterdir())  # refused before writing anything


def test_eval_answers_with_the_default_method(cli, model_dir, tmp_path):
    """A run in answer mode end to end: vanilla and the default method (EAGLE-2 with prompt lookup, a random head)
    answer a question each into records.jsonl and the table."""
    (tmp_path / "data" / "mt_bench").mkdir(parents=True)
    (tmp_path / "data" / "mt_bench" / "question.jsonl").write_text(json.dumps(
        {"question_id": 1, "category": "writing", "turns": ["Say hi."]}) + "\n")
    proc = cli("eval.cli", f"model.name={model_dir}", "model.dtype=float32", f"results_dir={tmp_path}", "run=r",
               f"bench.data_dir={tmp_path / 'data'}", "bench.names=[mt_bench]", "bench.max_turns=1",
               "infer.max_new_tokens=6", "infer.head=random", "infer.budget=fixed", "wandb.mode=disabled",
               "methods=[vanilla,eagle2+lookup]")
    assert proc.returncode == 0, proc.stderr
    records = [json.loads(line) for line in (tmp_path / "r" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["method"] for r in records) == ["eagle2+lookup", "vanilla"]
    assert "eagle2+lookup" in (tmp_path / "r" / "table.md").read_text()


@pytest.mark.parametrize(
    "args,needles",
    [
        (["mode=fast"], ["'fast'", "answers", "throughput"]),
        (["mode=throughput", "batch_sizes=[1,32]", "methods=[vanilla]"], ["batch size 32", "max_batch_size 16"]),
        (["infer.batch_size=0"], ["batch size 0"]),
        (["infer.batch_size=4", "methods=[vanilla,pld]"], ["'pld'", "one request at a time"]),
    ],
)
def test_eval_bad_batches(cli, model_dir, tmp_path, args, needles):
    proc = cli("eval.cli", f"model.name={model_dir}", "model.dtype=float32", f"results_dir={tmp_path}",
               "wandb.mode=disabled", *args)
    assert_one_line_error(proc, *needles)
    assert not any(tmp_path.iterdir())


# --- eval.sweep ----------------------------------------------------------------------------------------------------


def record(method: str, qid: str, wall_s: float, cycles: list[dict], tokens=(1, 2, 3, 4)) -> dict:
    rec = {"benchmark": "mt_bench", "method": method, "question_id": qid, "turns": ["x"], "new_tokens": 8,
           "wall_s": wall_s, "cycles": cycles, "temperature": 0.0, "tokens": list(tokens)}
    assert set(rec) == set(RECORD_FIELDS)
    return rec


def cycle(accepted: int, depth: int = 3) -> dict:
    return {"tree_size": 8, "tree_depth": depth, "accepted": accepted, "draft_s": 0.01, "verify_s": 0.02,
            "tested_conf": [0.9, 0.2], "tested_hit": [True, False]}


def write_records(path: Path, records: list[dict]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_sweep_aggregator(tmp_path):
    from eval.sweep import collect, main, write

    sweep = tmp_path / "sweep-tiny"
    write_records(sweep / "baseline", [record("vanilla", "1", 2.0, [cycle(0, 0)] * 8),
                                       record("vanilla", "2", 2.0, [cycle(0, 0)] * 8)])
    # vanilla: 16 tokens in 4 s. depth 3: 16 tokens in 2 s, 2x, tau 2; depth 5: 16 tokens in 1 s, 4x (best), tau 3.
    write_records(sweep / "infer.depth=3,infer.total_tokens=8", [record("eagle2", q, 1.0, [cycle(1)] * 4) for q in "12"])
    write_records(sweep / "infer.depth=5,infer.total_tokens=16", [record("eagle2", q, 0.5, [cycle(2)] * 3) for q in "12"])
    failed = sweep / "infer.depth=7,infer.total_tokens=32"
    failed.mkdir()
    (failed / "failed.txt").write_text("RuntimeError: out of memory\n\nTraceback (most recent call last):\n  ...\n")

    points = collect(sweep)
    assert [p.job for p in points] == ["infer.depth=3,infer.total_tokens=8", "infer.depth=5,infer.total_tokens=16",
                                       "infer.depth=7,infer.total_tokens=32"]
    assert points[0].settings == {"depth": "3", "total_tokens": "8"}
    assert [p.speedup for p in points[:2]] == [pytest.approx(2.0), pytest.approx(4.0)]
    assert [p.tau for p in points[:2]] == [pytest.approx(2.0), pytest.approx(3.0)]
    assert [p.questions for p in points] == [2, 2, 0]
    assert points[2].error == "RuntimeError: out of memory" and points[2].tok_s is None

    md = write(points, sweep)
    assert (sweep / "sweep.md").read_text() == md
    rows = {line.split("|")[1].strip() + "," + line.split("|")[2].strip(): line
            for line in md.splitlines()[2:]}
    assert set(rows) == {"3,8", "5,16", "7,32"}
    assert "2.00x" in rows["3,8"] and "**best**" not in rows["3,8"]
    assert "4.00x" in rows["5,16"] and "**best**" in rows["5,16"]
    assert "RuntimeError: out of memory" in rows["7,32"] and "—" in rows["7,32"]
    assert md.count("**best**") == 1
    for name in ("sweep_speedup.png", "sweep_tau.png"):
        assert (sweep / name).read_bytes()[:8] == PNG
    csv_lines = (sweep / "sweep.csv").read_text().splitlines()
    assert csv_lines[0] == "depth,total_tokens,questions,tok_s,speedup,tau,error" and len(csv_lines) == 4

    with pytest.raises(SystemExit) as exit_:
        main([f"sweep_dir={tmp_path / 'missing'}"])
    assert exit_.value.code == 2


def test_sweep_jobs_with_different_keys(tmp_path):
    """A sweep dir holding jobs of two sweeps (the second one adding infer.expand_by) must still aggregate."""
    from eval.sweep import collect, write

    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline", [record("vanilla", "1", 2.0, [])])
    write_records(sweep / "infer.depth=3,infer.total_tokens=8", [record("eagle2", "1", 1.0, [cycle(1)])])
    write_records(sweep / "infer.depth=5,infer.total_tokens=8", [record("eagle2", "1", 1.0, [cycle(1)])])
    write_records(sweep / "infer.depth=5,infer.expand_by=confidence,infer.total_tokens=8",
                  [record("eagle2", "1", 0.5, [cycle(2)])])
    md = write(collect(sweep), sweep)
    assert md.count("**best**") == 1 and (sweep / "sweep_speedup.png").exists()


def test_sweep_compares_the_auto_job_with_the_best_fixed_one(tmp_path):
    from eval.sweep import collect, write

    sweep = tmp_path / "sweep"
    write_records(sweep / "baseline", [record("vanilla", "1", 2.0, [])])
    write_records(sweep / "infer.depth=3,infer.total_tokens=8", [record("eagle2", "1", 1.0, [cycle(1)])])
    write_records(sweep / "infer.depth=auto,infer.total_tokens=auto", [record("eagle2", "1", 1.25, [cycle(1)])])
    md = write(collect(sweep), sweep)
    assert md.rstrip().splitlines()[-1] == ("auto (infer.depth=auto,infer.total_tokens=auto): 6.4 tok/s = 0.80x the best "
                                            "fixed setting (infer.depth=3,infer.total_tokens=8, 8.0 tok/s)")
    assert (sweep / "sweep_speedup.png").exists()


# --- eval resume ---------------------------------------------------------------------------------------------------


class FakeMethod:
    """Answers every prompt with the same three tokens; records each call."""

    name = "fake"

    def __init__(self):
        self.calls: list[tuple[list[int], int]] = []  # one per prompt
        self.batches: list[int] = []  # batch size of each call

    def generate_batch(self, prompts, max_new, sampling, stops, seed, batch_size=1) -> BatchResult:
        self.calls += [(list(ids), max_new) for ids in prompts]
        self.batches.append(batch_size)
        cycle = CycleStats(tree_size=8, tree_depth=3, accepted=2, draft_s=0.01, verify_s=0.02, tested_conf=[0.9],
                           tested_hit=[True])
        results = [GenerationResult(tokens=[28, 29, 30], cycles=[cycle], prefill_s=0.0, wall_s=0.1, stop_reason="length")
                   for _ in prompts]
        return BatchResult(results=results, wall_s=0.1 * len(prompts) / batch_size, batch_size=batch_size, cache_bytes=0)


def test_eval_resume(tiny_smol, tmp_path):
    tok = tiny_smol.tokenizer
    questions = [Question("q1", "writing", ["Hello"], None), Question("q2", "math", ["What is 2+2?", "And 3+3?"], None)]
    settings = HarnessSettings(max_new_tokens=5)
    path = tmp_path / "records.jsonl"

    method = FakeMethod()
    assert harness_run({"mt_bench": questions}, [method], tiny_smol, settings, RecordWriter(path), [2]) == 2
    answered = [c for c in method.calls if c[1] == 5]  # the warm-up asks for 8 tokens
    assert len(method.calls) == 4 and len(answered) == 3  # warm-up, q1, q2 turn 1, q2 turn 2
    first = tok.decode([28, 29, 30], skip_special_tokens=True)
    turn2 = [Message("user", "What is 2+2?"), Message("assistant", first), Message("user", "And 3+3?")]
    assert answered[2][0] == prompt_ids(tok, turn2, tiny_smol.template)  # turn 2 follows the method's own answer
    records = read_records(path)
    assert [(r["question_id"], r["new_tokens"], len(r["cycles"])) for r in records] == [("q1", 3, 1), ("q2", 6, 2)]

    method = FakeMethod()
    assert harness_run({"mt_bench": questions}, [method], tiny_smol, settings, RecordWriter(path), [2]) == 0
    assert method.calls == []  # nothing left to do: not even the warm-up
    assert read_records(path) == records

    # Interrupted mid-write of q2's record: its truncated line is dropped and only q2 is answered again.
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    method = FakeMethod()
    assert harness_run({"mt_bench": questions}, [method], tiny_smol, settings, RecordWriter(path), [2]) == 1
    assert [c[1] for c in method.calls] == [8, 5, 5]  # warm-up, then q2's two turns
    assert read_records(path) == records


def test_eval_answers_in_batches(tiny_smol, tmp_path):
    """batch_size 2: the questions' first turns are one batch, q2's second turn follows its own answer; each
    record's wall_s is its token share of its batches' time."""
    questions = [Question("q1", "writing", ["Hello"], None), Question("q2", "math", ["What is 2+2?", "And 3+3?"], None),
                 Question("q3", "math", ["Hi"], None)]
    method = FakeMethod()
    settings = HarnessSettings(max_new_tokens=5, batch_size=2)
    assert harness_run({"mt_bench": questions}, [method], tiny_smol, settings, RecordWriter(tmp_path / "r.jsonl"), [2]) == 3
    assert method.batches == [1, 2, 1, 1]  # warm-up, (q1, q2) turn 1, q2 turn 2, q3
    records = read_records(tmp_path / "r.jsonl")
    assert [r["question_id"] for r in records] == ["q1", "q2", "q3"]
    assert [r["wall_s"] for r in records] == pytest.approx([0.05, 0.15, 0.1])
