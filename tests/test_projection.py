"""The projected speedup of a synthetic target (lab/projection.py) and bench-engine's projection table."""
from __future__ import annotations

from pathlib import Path

import pytest

from eagle_infer.models.registry import MODELS
from eagle_infer.trees.tree import check_paths
from lab.projection import EAGLE_TREE, PAPER_FIGURES, projected_speedup
from tests.scripts import load_script
from tests.test_engine_errors import one_line_error

REPO = Path(__file__).resolve().parent.parent


def test_projected_speedup_arithmetic():
    assert projected_speedup(3.94, 10.0, 4.0, 6.0) == pytest.approx(3.94)  # a cycle that costs one step
    assert projected_speedup(2.0, 10.0, 5.0, 15.0) == pytest.approx(1.0)  # costs two steps: τ 2 breaks even
    assert projected_speedup(4.0, 30.0, 10.0, 50.0) == pytest.approx(2.0)
    one_line_error(lambda: projected_speedup(3.94, 10.0, 0.0, 6.0), "draft ms 0.0", "positive")
    one_line_error(lambda: projected_speedup(float("nan"), 10.0, 1.0, 6.0), "tau nan")


def test_paper_figures_name_registered_models_and_eagle_tree_is_a_valid_static_tree():
    assert set(PAPER_FIGURES) <= set(MODELS)
    vicuna = PAPER_FIGURES["vicuna-7b"]
    assert (vicuna.tau, vicuna.speedup) == (3.94, 2.90) and "Table 2" in vicuna.tau_source
    assert "Table 7" in vicuna.speedup_source
    check_paths(EAGLE_TREE)  # closed under prefixes: every node's parent is in the tree
    assert (len(EAGLE_TREE), max(map(len, EAGLE_TREE)), 1 + max(max(p) for p in EAGLE_TREE)) == (25, 5, 4)


def runs_of(module, vanilla_ms: list[float], draft_ms: list[float], verify_ms: list[float]):
    """bench-engine's Runs holding these per-cycle times (ms) for the "this" column's vanilla and EAGLE-tree runs."""
    runs = module.Runs()
    runs.data["this vanilla"] = {"verify": [v / 1000 for v in vanilla_ms]}
    runs.data["this eagle tree"] = {"draft": [d / 1000 for d in draft_ms], "verify": [v / 1000 for v in verify_ms],
                                    "per_level": [d / 6000 for d in draft_ms]}  # 6 head forwards a cycle
    return runs


def test_bench_engine_projects_from_per_cycle_medians_and_prints_it_beside_the_paper(capsys):
    module = load_script("bench_engine")
    runs = runs_of(module, [20.0, 21.0, 99.0], [3.0, 2.5, 2.0], [24.0, 25.0, 40.0])
    row = module.projection(runs, "this", PAPER_FIGURES["vicuna-7b"])
    assert row["vanilla_step_ms"] == pytest.approx(21.0) and row["cycle_vs_step"] == pytest.approx(27.5 / 21.0)
    assert row["projected_speedup"] == pytest.approx(3.94 * 21.0 / 27.5)
    result = {"model": "synthetic:vicuna-7b", "projection": {
        "paper": {"tau": 3.94, "tau_source": "EAGLE, Table 2", "speedup": 2.9, "speedup_source": "EAGLE, Table 7"},
        "tree_nodes": 25, "tree_depth": 5, "engine": {"this": row}}}
    module.print_projection(result)
    printed = capsys.readouterr().out
    assert f"| PROJECTED speedup at τ 3.94 (EAGLE, Table 2) | {3.94 * 21.0 / 27.5:.2f}x |" in printed
    assert "not a measurement" in printed and "2.90x (EAGLE, Table 7)" in printed
    assert "| verify ms per cycle (26 tokens) | 25.00 |" in printed


def test_bench_engine_without_a_published_tau_prints_no_projection(capsys):
    module = load_script("bench_engine")
    row = module.projection(runs_of(module, [20.0], [3.0], [24.0]), "this", None)
    assert row["projected_speedup"] is None
    module.print_projection({"model": "synthetic:smollm2-135m", "projection": {
        "paper": None, "tree_nodes": 25, "tree_depth": 5, "engine": {"this": row}}})
    printed = capsys.readouterr().out
    assert "PROJECTED" not in printed and "No published τ for smollm2-135m" in printed
