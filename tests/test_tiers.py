"""The suite's two tiers (tests/conftest.py): the slow tier holds every compiled `path` case of the engine's and the
heads' lossless tests beside the tests marked slow, and the fast tier (make test) holds none of them."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def collected(marks: str) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marks,
                          "tests"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return [line for line in out.stdout.splitlines() if "::" in line]


@pytest.mark.slow  # it collects the whole suite twice (~20 s); CI runs it with the slow tier
def test_compiled_cases_are_in_the_slow_tier_only():
    slow, fast = collected("slow and not serve"), collected("not serve and not slow")
    assert not [i for i in fast if "compiled]" in i or "-compiled-" in i]
    for module in ("test_engine_lossless", "test_engine_batch", "test_engine_sampling", "test_head_training"):
        assert any(f"{module}.py::" in i and "compiled" in i.split("[")[-1] for i in slow), module
    assert any("test_train_ranks.py::" in i for i in slow) and len(slow) < len(fast)
