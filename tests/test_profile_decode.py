"""scripts/profile_decode.py --cycles, one case as its worker runs it (a subprocess: it patches the engine's classes):
the operators and host syncs of an EAGLE cycle, split by region, and with --by-function (--by-line) the eagle_infer
functions (lines) that dispatched the operators outside the forwards."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from eagle_infer.platform import HOST_READ_OPS

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("budget", ["fixed", "ahead"])
def test_a_cycle_reads_the_host_once_and_names_where_its_operators_go(budget):
    """A fixed tree, and an auto budget planning ahead (its evidence for the next plan rides in the cycle's one
    copy to the host); the operators by function (by line: the planning-ahead case)."""
    by_line = budget == "ahead"
    case = {"model": "smollm2-135m", "lookup": False, "budget": budget, "batch": 1, "new_tokens": 8,
            "host_reads": list(HOST_READ_OPS), "by_function": not by_line, "by_line": by_line, "rows": 40}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_decode.py"), "--threads", "2", "--worker",
                          json.dumps(case)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["cycles"] >= 1 and r["syncs"] == r["cycles"]  # the cycle's one copy to the host
    assert r["ops"]["target"] > r["ops"]["elsewhere"] > 0 and r["ops"]["head"] > 0
    functions = r["functions"]
    if by_line:  # 'folder/module.py:line function'
        assert all(re.fullmatch(r"[\w/]+\.py:\d+ \S+", name) for name in functions)
        by_function = Counter()
        for name, count in functions.items():
            by_function[name.split(":")[0] + ":" + name.split(" ")[1]] += count
        functions = by_function
    assert "decoding/verify.py:follow" in functions and "trees/drafting.py:grow_dynamic" in functions
    assert all(re.fullmatch(r"[\w/]+\.py:\S+", name) for name in functions)
    assert sum(functions.values()) <= r["ops"]["elsewhere"]


def test_a_block_drafters_cycle_counts_its_forwards_as_the_heads():
    """dflash+lookup with an untrained drafter, a fixed budget: the block forward and the context writes
    (BlockRunner calls) count as the head's, the block's candidates as drafting, one host read a cycle."""
    case = {"model": "smollm2-135m", "method": "dflash+lookup", "head": "random", "budget": "fixed", "batch": 1,
            "new_tokens": 8, "host_reads": list(HOST_READ_OPS), "by_function": True, "rows": 40}
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_decode.py"), "--threads", "2", "--worker",
                          json.dumps(case)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["cycles"] >= 1 and r["syncs"] == r["cycles"]
    assert r["ops"]["target"] > r["ops"]["head"] > 0 and r["ops"]["elsewhere"] > 0
    assert "trees/block_drafter.py:grow_block" in r["functions"] and "trees/merge.py:merge" in r["functions"]
    # the drafter's own modules dispatch nothing elsewhere: their calls are the head's
    assert not any(name.startswith(("head/block_runner.py", "head/dflash_head.py")) for name in r["functions"])


def test_a_missing_dflash_head_is_a_one_line_error(tmp_path):
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "profile_decode.py"), "--cycles", "--methods",
                          "dflash", "--dflash-head", str(tmp_path / "nothing")], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode != 0 and out.stderr.strip().count("\n") == 0
    assert out.stderr.startswith("error: --dflash-head") and "nothing" in out.stderr
