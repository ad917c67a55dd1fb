"""The papers' published figures that `make reproduce` sets ours against, transcribed from
../shared/reference/paper-tables.md: EAGLE (Li et al., 2024), EAGLE-2 (Li et al., 2024), EAGLE-3 (Li et al., 2025).
All on GPUs with 7B–70B targets, greedy unless T=1 is named; each table names its source. A reproduction on another
target compares directions and sizes of effects, not absolute values.
"""
from __future__ import annotations

from lab.figure_text import change, change_text, drop, lead, listed, pair

TABLE2 = {  # EAGLE Table 2: MT-bench, T=0, τ (EAGLE's tree) and 0-α…4-α (chain drafts)
    "source": "EAGLE Table 2 (MT-bench, T=0)",
    "Vicuna 7B": {"tau": 3.94, "alpha": [0.79, 0.74, 0.72, 0.73, 0.67]},
    "Vicuna 13B": {"tau": 3.98, "alpha": [0.79, 0.74, 0.72, 0.74, 0.70]},
    "LLaMA2-Chat 7B": {"tau": 3.62, "alpha": [0.76, 0.69, 0.67, 0.68, 0.68]},
    "LLaMA2-Chat 70B": {"tau": 3.81, "alpha": [0.75, 0.69, 0.65, 0.64, 0.64]},
}
TABLE2_T1 = {  # stated beside EAGLE Table 2
    "source": "EAGLE Table 2 (MT-bench, T=1)",
    "Vicuna 7B": {"tau": 3.17, "alpha": [0.71, 0.68]},
    "LLaMA2-Chat 7B": {"tau": 3.30, "alpha": []},
}
TABLE1 = {  # EAGLE Table 1: (speedup, τ) per benchmark, T=0
    "source": "EAGLE Table 1 (T=0)",
    "Vicuna 7B": {"humaneval": (3.33, 4.29), "gsm8k": (3.01, 4.00), "alpaca": (2.79, 3.86)},
    "LLaMA2-Chat 7B": {"humaneval": (3.17, 4.24), "gsm8k": (2.91, 3.82), "alpaca": (2.78, 3.71)},
}
TABLE5 = {  # EAGLE Table 5: τ of a chain and of EAGLE's tree, MT-bench, T=0
    "source": "EAGLE Table 5 (MT-bench, T=0)",
    "Vicuna 7B": {"chain": 3.20, "tree": 3.94},
    "Vicuna 13B": {"chain": 3.23, "tree": 3.98},
    "LLaMA2-Chat 7B": {"chain": 3.00, "tree": 3.62},
    "LLaMA2-Chat 70B": {"chain": 3.12, "tree": 3.81},
}
TABLE5_SPEEDUP_GAIN = (0.3, 0.5)  # EAGLE Table 5's reading: a tree adds 0.3–0.5 to the speedup (×) over a chain
FIGURE8_SPEEDUP = {"feature": 1.9, "feature+shifted_token": 2.8}  # EAGLE Figure 8 / Figure 4: Vicuna 7B, MT-bench
TABLE6 = {  # EAGLE Table 6: LLaMA2-Chat 7B, MT-bench, T=0: (speedup, τ)
    "source": "EAGLE Table 6 (LLaMA2-Chat 7B, MT-bench, T=0)",
    "fixed": (2.78, 3.62),
    "regenerated": (2.88, 3.75),
}
TABLE7 = {  # EAGLE Table 7: speedup per batch size, MT-bench, T=0; "throughput": at the largest batch that fits
    "source": "EAGLE Table 7 (MT-bench, T=0)",
    "LLaMA2-Chat 70B": {1: 3.01, 2: 2.81, 3: 2.50, 4: 2.40, "throughput": 1.99},
    "Vicuna 7B": {1: 2.90, "throughput": 1.97},
}
EAGLE2_CALIBRATION = {"below_0.05": 0.04, "above_0.95": 0.98}  # EAGLE-2: accepted share by draft confidence (Alpaca)
EAGLE2_OVER_EAGLE1 = (0.2, 0.4)  # EAGLE-2: 20–40 % faster than EAGLE-1 over six tasks (its own budgets, not equal)
EAGLE3_TABLE2 = {  # EAGLE-3 Table 2: LLaMA-3.1-8B, MT-bench, T=0, τ
    "source": "EAGLE-3 Table 2 (LLaMA-3.1-8B, MT-bench, T=0)",
    "eagle2": 4.05,
    "ttt": 5.37,
    "ttt+fused": 6.13,
}


def midpoint(span: tuple[float, float]) -> float:
    """The middle of a range the paper states ("0.3–0.5"), the size a verdict compares with."""
    return (span[0] + span[1]) / 2


def _gain(before: float, after: float, text: str) -> tuple[str, float]:
    """A published change from `before` to `after`: `text` (formatted with before, after and the change) and the
    change, after / before − 1, that a verdict compares with."""
    return text.format(before=before, after=after, change=after / before - 1), round(after / before - 1, 4)


_EAGLE3 = [k for k in EAGLE3_TABLE2 if k != "source"]


def _alphas(model: str, table: dict) -> tuple[str, float]:
    a = table[model]["alpha"]
    return f"{model}: {pair('0-α', a[0], '1-α', a[1])}", round(a[0] - a[1], 4)


def _spread(model: str) -> tuple[str, float]:
    a = TABLE2[model]["alpha"][1:]
    return f"{model}: 1-α…4-α {min(a):.2f}–{max(a):.2f} (spread {max(a) - min(a):.2f})", round(max(a) - min(a), 4)


def _lead(index: int) -> tuple[str, float]:
    """HumanEval's lead in Table 1 over the next benchmark, in speedup (index 0) or τ (1), Vicuna 7B."""
    paper = {b: v[index] for b, v in TABLE1["Vicuna 7B"].items()}
    return f"Vicuna 7B: {listed(paper, index == 0)} ({lead(paper):+.0%})", round(lead(paper), 4)


# The published effects a declared finding (lab.declared_findings: conf/ablate/*.yaml and conf/reproduce/findings.yaml
# `paper`) is set against: the page's text for the paper's figure, and the effect (None: a direction stated without a
# figure).
PAPER_EFFECTS: dict[str, tuple[str, float | None]] = {
    "stated": ("stated, no figure", None),
    "stated: about the same": ("stated, no figure", 0.0),
    "stated (EAGLE-3 Figure 1)": ("stated, no figure (EAGLE-3 Figure 1)", None),
    "stated (EAGLE-2: P1 highest, P6 lowest)": ("stated, no figure (P1 highest, P6 lowest)", None),
    "stated (EAGLE-2 Table 3)": ("stated, no figure (EAGLE-2 Table 3)", None),
    "EAGLE Table 2: 0-α − 1-α, T=0": _alphas("Vicuna 7B", TABLE2),
    "EAGLE Table 2: 0-α − 1-α, T=1": _alphas("Vicuna 7B", TABLE2_T1),
    "EAGLE Table 2: spread of 1-α…4-α, T=0": _spread("Vicuna 7B"),
    "EAGLE Table 2: τ from T=0 to T=1": (
        "Vicuna 7B: " + change_text(TABLE2["Vicuna 7B"]["tau"], TABLE2_T1["Vicuna 7B"]["tau"], name="τ "),
        round(drop(TABLE2["Vicuna 7B"]["tau"], TABLE2_T1["Vicuna 7B"]["tau"]), 4)),
    "EAGLE Table 1: HumanEval's lead in speedup": _lead(0),
    "EAGLE Table 1: HumanEval's lead in τ": _lead(1),
    "EAGLE Table 5: chain → tree": (
        "Vicuna 7B: " + change_text(TABLE5["Vicuna 7B"]["chain"], TABLE5["Vicuna 7B"]["tree"], name="τ "),
        round(change(TABLE5["Vicuna 7B"]["chain"], TABLE5["Vicuna 7B"]["tree"]), 4)),
    "EAGLE Table 5: a tree's speedup over a chain's": (
        f"+{TABLE5_SPEEDUP_GAIN[0]:.1f}–{TABLE5_SPEEDUP_GAIN[1]:.1f}x over a chain (~2.3–2.7x)",
        midpoint(TABLE5_SPEEDUP_GAIN)),
    "EAGLE Table 7: speedup from batch 1 to 4": (
        "LLaMA2-Chat 70B: " + change_text(TABLE7["LLaMA2-Chat 70B"][1], TABLE7["LLaMA2-Chat 70B"][4], unit="x"),
        round(drop(TABLE7["LLaMA2-Chat 70B"][1], TABLE7["LLaMA2-Chat 70B"][4]), 4)),
    "EAGLE Table 7: throughput over vanilla's at the largest batch": (
        f"LLaMA2-Chat 70B: {TABLE7['LLaMA2-Chat 70B']['throughput']:.2f}x; "
        f"Vicuna 7B: {TABLE7['Vicuna 7B']['throughput']:.2f}x", round(TABLE7["LLaMA2-Chat 70B"]["throughput"] - 1, 4)),
    **{f"EAGLE-2: accepted share at draft confidence {bucket.replace('_', ' ')}": (f"~{share:.0%}", share)
       for bucket, share in EAGLE2_CALIBRATION.items()},
    "EAGLE-2: dynamic over static tree": (
        f"{EAGLE2_OVER_EAGLE1[0]:.0%}–{EAGLE2_OVER_EAGLE1[1]:.0%} faster (six tasks; EAGLE-2 at its own, larger "
        "budget)",
        midpoint(EAGLE2_OVER_EAGLE1)),
    "EAGLE Figure 8: feature → feature+shifted_token": _gain(
        FIGURE8_SPEEDUP["feature"], FIGURE8_SPEEDUP["feature+shifted_token"],
        "Vicuna 7B: {before:.1f}x → {after:.1f}x ({change:+.0%})"),
    "EAGLE Table 6: fixed → regenerated": _gain(
        TABLE6["fixed"][1], TABLE6["regenerated"][1],
        "τ {before:.2f} → {after:.2f} ({change:+.1%}); speedup " + f"{TABLE6['fixed'][0]:.2f}x → "
        f"{TABLE6['regenerated'][0]:.2f}x"),
    **{f"EAGLE-3 Table 2: {a} → {b}": _gain(EAGLE3_TABLE2[a], EAGLE3_TABLE2[b],
                                            "τ {before:.2f} → {after:.2f} ({change:+.0%})")
       for i, a in enumerate(_EAGLE3) for b in _EAGLE3[i + 1:]},
}
