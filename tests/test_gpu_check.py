"""make gpu-check (scripts/gpu_check.py): one line and a non-zero exit without CUDA; --cpu-smoke runs every step
(check-lossless, bench-engine on SmolLM2 and on a synthetic target, featurize, train) at toy sizes and writes the
JSON and the table; a step that outruns the budget is stopped and later ones are skipped."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.scripts import load_script

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "gpu_check.py"
STEPS = ["check-lossless", "bench-smollm2", "bench-synthetic", "featurize", "train"]


def env() -> dict:
    environ = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    for k in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "DS_ACCELERATOR"):
        environ.pop(k, None)  # the in-process DeepSpeed fixture's variables
    return environ


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_without_cuda_says_so_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out-dir", str(tmp_path)], cwd=REPO, env=env(),
                          capture_output=True, text=True, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and "no CUDA" in lines[0] and "--cpu-smoke" in lines[0], proc.stderr
    assert not (tmp_path / "gpu-check.json").exists()


def test_a_step_past_the_budget_is_stopped_later_ones_skipped_and_a_failure_shows_its_last_line(tmp_path):
    module = load_script("gpu_check")
    sleeper = module.Step("sleep", [sys.executable, "-c", "import time; time.sleep(30)"])
    record = module.run(sleeper, tmp_path / "sleep.log", time.monotonic() + 1.0)
    assert record["status"] == "timed out" and record["seconds"] < 20
    assert module.run(sleeper, tmp_path / "later.log", time.monotonic() - 1.0)["status"] == "skipped"
    failing = module.Step("fail", [sys.executable, "-c", "print('boom'); print(); raise SystemExit(3)"])
    record = module.run(failing, tmp_path / "fail.log", time.monotonic() + 60)
    assert (record["status"], record["rc"], record["last_line"]) == ("failed", 3, "boom")
    report = {"mode": "gpu", "machine": {"gpu": "a GPU", "torch": "2"}, "steps": {"fail": record}}
    assert "| fail | failed |" in module.markdown(report) and "| boom |" in module.markdown(report)


@pytest.mark.integration
@pytest.mark.slow
def test_cpu_smoke_runs_every_step_and_writes_the_report(tmp_path):
    conversations = tmp_path / "conversations.jsonl"
    topics = ["the sky", "rivers", "bread", "chess", "trains", "volcanoes", "bees", "tea"]
    conversations.write_text("".join(json.dumps({"conversations": [
        {"from": "human", "value": f"Tell me about {topic}."},
        {"from": "gpt", "value": f"A few facts about {topic}: it is old, and many people like it."}]}) + "\n"
        for topic in topics))
    out = tmp_path / "results"
    # the default 540 s budget is sized for a GPU; on a busy 2-core CPU the toy steps alone can take longer
    proc = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--out-dir", str(out), "--conversations",
                           str(conversations), "--budget-s", "1500"], cwd=REPO, env=env(), capture_output=True,
                          text=True, timeout=1600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu-check.json").read_text())
    assert report["mode"] == "cpu-smoke" and report["passed"] and list(report["steps"]) == STEPS
    steps = {name: record.get("figures", {}) for name, record in report["steps"].items()}
    for method in ("eagle2", "eagle2+lookup", "dflash", "dflash+lookup"):  # check_lossless's methods, a line each
        assert any(f"; {method} = vanilla on 1/1" in "; " + line.split(": ", 1)[-1]
                   for line in steps["check-lossless"]["lines"]), method
    for bench in ("bench-smollm2", "bench-synthetic"):
        assert steps[bench]["dtype"] == "float32" and steps[bench]["this vanilla tok/s"] > 0
        assert steps[bench]["this forward 4 / 1 tokens"] > 0
        assert steps[bench]["this EAGLE-2 host aten ops per cycle"] > 0
        assert steps[bench]["this EAGLE-2 graph replays per cycle"] == 0  # eager, and no GPU
    assert steps["bench-smollm2"]["this eagle2+lookup vs vanilla"] > 0  # --hybrid: the default method too
    assert steps["bench-smollm2"]["this eagle2+lookup host aten ops per cycle"] > 0
    assert "this eagle2+lookup vs vanilla" not in steps["bench-synthetic"]
    assert steps["bench-synthetic"]["this draft + verify / step, EAGLE's tree"] > 1  # a cycle costs more than a step
    assert "paper tau" not in steps["bench-synthetic"]  # SmolLM2's shape: no published τ to project from
    assert steps["train"]["loss tokens/s"] > 0 and steps["train"]["heldout top1"] is not None
    table = (out / "gpu-check.md").read_text()
    assert all(f"| {name} | passed |" in table for name in STEPS)
