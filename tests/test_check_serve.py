"""vLLM as an eval method (eval.vllm_backend) and `make check-serve` (scripts/check_serve.py).

The worker protocol, vLLM's errors in one line and the acceptance arithmetic are checked with a stand-in worker (a
shell script), always. The minimal check-serve itself (random heads, 1 question, 16 tokens, vLLM eager: a few
minutes) needs vLLM's environment, .venv-serve (`make .venv-serve/.installed`): it is marked `serve`, which `make
test` leaves out, and skipped where that environment is missing; run it with
`.venv/bin/python -m pytest -q tests/test_check_serve.py`.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from eagle_infer.config import InferConf, SamplingParams
from eagle_infer.errors import EagleError
from eagle_infer.head.dflash_head import random_dflash_head
from eagle_infer.head.draft_head import random_head
from eval.vllm_backend import LONGEST, VllmConf, VllmMethod, VllmWorker, root_cause, served_as
from scripts import check_serve
from tests.tiny import tiny_target

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check_serve.py"
SERVE_PYTHON = ROOT / ".venv-serve" / "bin" / "python"
ENGINE = {"model": "m", "dtype": "float32", "speculative": None, "max_model_len": 64, "eager": True}


def stand_in(tmp_path: Path, replies: list[dict], log: str = "") -> str:
    """A 'python' that ignores its arguments, logs `log` to standard error and answers each input line with the
    next of `replies`."""
    (tmp_path / "log").write_text(log + "\n")
    (tmp_path / "replies").write_text("".join(json.dumps(r) + "\n" for r in replies))
    script = tmp_path / "python"
    script.write_text(f"#!/bin/bash\ncat {tmp_path / 'log'} >&2\nexec 3< {tmp_path / 'replies'}\n"
                      'while read -r reply <&3; do read -r line || exit 0; echo "$reply"; done\n')
    script.chmod(0o755)
    return str(script)


def failure(err) -> str:
    """The message of a worker's EagleError; the log it names (kept for the user) is removed."""
    message = str(err.value)
    Path(message.rsplit("(its log: ", 1)[1].rstrip(")")).unlink()
    return message


def test_a_missing_vllm_environment_is_one_line():
    with pytest.raises(EagleError, match=r"vllm.python '/nowhere/python' does not exist: make .venv-serve") as err:
        VllmWorker(VllmConf(python="/nowhere/python"), ENGINE, "x")
    assert "\n" not in str(err.value)


def engine_failure(tmp_path: Path, log: str, what: str) -> str:
    """The one-line message of a worker whose engine logged `log` and whose frontend then reported only that the
    engine failed."""
    python = stand_in(tmp_path, [{"error": "RuntimeError: Engine core initialization failed. See root cause above."}],
                      log)
    with pytest.raises(EagleError) as err:
        VllmWorker(VllmConf(python=python), ENGINE, what)
    message = failure(err)
    assert "\n" not in message
    return message


def test_vllms_own_error_is_named_not_the_frontends(tmp_path):
    """The engine process's error, which its log holds behind vLLM's prefix, not 'Engine core initialization
    failed' that the frontend raises."""
    message = engine_failure(tmp_path, "(Worker pid=7) ERROR 12-06 08:01:33 [multiproc_executor.py:953] ValueError: "
                             "There is no module or parameter named 'draft_id_to_target_id' in Eagle3LlamaForCausalLM",
                             "smollm2-135m (float32)")
    assert message.startswith("vLLM failed on smollm2-135m (float32): ValueError: There is no module or parameter "
                              "named 'draft_id_to_target_id'"), message


def test_a_target_vllm_cannot_run_is_vllms_own_line(tmp_path):
    """A target whose architecture vLLM's CPU build lacks: vLLM's own registry error, cut to one short line."""
    supported = ", ".join(f"Arch{i}ForCausalLM" for i in range(200))
    message = engine_failure(tmp_path, "(EngineCore pid=5) ERROR 12-06 10:01:02 [core.py:1000] ValueError: Model "
                             f"architectures ['FooForCausalLM'] are not supported for now. Supported architectures: "
                             f"[{supported}]", "foo (float32)")
    assert message.startswith("vLLM failed on foo (float32): ValueError: Model architectures ['FooForCausalLM'] are "
                              "not supported for now."), message
    assert len(message) < LONGEST + 200


def test_root_cause_is_cut_to_one_short_line():
    long = "ValueError: " + "x" * 1000
    assert len(root_cause(long, "RuntimeError: failed")) == LONGEST
    assert root_cause("nothing useful", "RuntimeError: failed") == "RuntimeError: failed"


def test_a_worker_that_dies_is_one_line(tmp_path):
    python = stand_in(tmp_path, [], "(EngineCore pid=9) ERROR [core.py:1] MemoryError: no room")
    with pytest.raises(EagleError) as err:
        VllmWorker(VllmConf(python=python), ENGINE, "x")
    assert "MemoryError: no room" in failure(err)


def test_vllms_steps_become_cycles(tmp_path):
    """Each verification step vLLM reports is one cycle (accepted, drafted); stop reason from the last token."""
    target_dir = tmp_path / "target"
    target_dir.mkdir()
    (target_dir / "config.json").write_text("{}")
    python = stand_in(tmp_path, [{"vllm": "0.32.0", "load_s": 1.0},
                                 {"tokens": [5, 6, 7, 8, 2], "wall_s": 0.5, "accepted": [2, 0], "drafted": [3, 3]}])
    target = SimpleNamespace(name=str(target_dir), dtype=torch.float32)
    method = VllmMethod("vllm", target, InferConf(), None, VllmConf(python=python))
    method.worker.drafts = True  # as with a head: the stand-in answers with steps
    result = method.generate_batch([[1, 2, 3]], 8, SamplingParams(), [2], 0).results[0]
    assert [(c.accepted, c.tree_depth) for c in result.cycles] == [(2, 3), (0, 3)]
    assert result.stop_reason == "stop" and result.tau == 2.0 and method.worker.version == "0.32.0"


def test_acceptance_counts_positions_and_finds_the_first_differing_step():
    cycles = [{"tree_depth": 3, "tree_size": 3, "accepted": a} for a in (3, 1, 0, 2)]
    stats = check_serve.acceptance(cycles, 3)
    assert stats["accepted_per_position"] == [3, 2, 1] and stats["drafts"] == 4 and stats["draft_tokens"] == 12
    assert stats["alpha"] == [0.75, 2 / 3, 0.5] and stats["tau"] == 2.5
    assert check_serve.first_difference(cycles, cycles) is None
    assert check_serve.first_difference(cycles, cycles[:2] + [{"accepted": 1}]) == 2
    assert check_serve.first_difference(cycles, cycles[:3]) == 3


@pytest.mark.serve
@pytest.mark.skipif(not SERVE_PYTHON.exists(), reason="no vLLM environment: make .venv-serve/.installed installs it")
def test_minimal_check_serve(tmp_path):
    """Random heads of every kind (EAGLE-3, EAGLE-1, DFlash) load in vLLM, its greedy output with each equals its
    own without one, and the table holds every engine's speed."""
    done = subprocess.run([sys.executable, str(SCRIPT), "--heads", "random", "--questions", "1", "--max-new-tokens",
                           "16", "--vllm-eager", "--work", str(tmp_path / "work"), "--results", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "check-serve" / "serve.json").read_text())
    assert [(r["head"], r["loads"], r["identical_to_vllm"]) for r in report["heads"]] == [
        ("eagle3", True, 1), ("eagle1", True, 1), ("dflash", True, 1)]
    assert {r["method"] for r in report["speeds"]} >= {"vanilla", "vllm", "vllm:eagle3", "vllm:eagle1", "vllm:dflash",
                                                       "dflash:dflash"}


def test_each_block_is_served_in_its_format():
    """EAGLE-3 as speculators/eagle3 and EAGLE-1 as vllm/eagle drafting chains of infer.depth; DFlash as
    speculators/dflash drafting its block's B - 1 tokens."""
    target = tiny_target(layers=6)  # EAGLE-3 and DFlash fuse several layers
    heads = [random_head(target, block="eagle3"), random_head(target), random_dflash_head(target, 95, block_size=5)]
    assert [served_as(h, 3) for h in heads] == [("speculators", "eagle3", 3), ("vllm", "eagle", 3),
                                                ("speculators", "dflash", 4)]
