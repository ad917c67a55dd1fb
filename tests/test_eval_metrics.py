"""eval.metrics on hand-made records with hand-computed expectations."""
from dataclasses import replace

import pytest

from eagle_infer.errors import EagleError
from eval.metrics import ROW_COLUMNS, accept_length_hist, alpha, calibration, cycle_split, summarize, tau


def cycle(depth, accepted, conf=(), hit=(), draft_s=0.0, verify_s=0.0, head_forwards=0):
    return {
        "head_forwards": head_forwards,
        "tree_size": depth * 2,
        "tree_depth": depth,
        "accepted": accepted,
        "draft_s": draft_s,
        "verify_s": verify_s,
        "tested_conf": list(conf),
        "tested_hit": list(hit),
    }


def record(benchmark, method, qid, new_tokens, wall_s, tokens, cycles=()):
    return {
        "benchmark": benchmark,
        "method": method,
        "question_id": qid,
        "turns": ["answer"],
        "new_tokens": new_tokens,
        "wall_s": wall_s,
        "cycles": list(cycles),
        "temperature": 0.0,
        "tokens": tokens,
    }


EAGLE_MT = [cycle(3, 2), cycle(3, 0), cycle(2, 2), cycle(4, 1)]  # question "1"
EAGLE_MT_2 = [cycle(1, 1)]  # question "2"
EAGLE_GSM = [cycle(2, 2), cycle(2, 1)]
RECORDS = [
    record("mt_bench", "vanilla", "1", 10, 2.0, [1, 2, 3], [cycle(0, 0)] * 10),
    record("mt_bench", "vanilla", "2", 6, 1.0, [4, 5]),
    record("mt_bench", "eagle2", "2", 6, 0.5, [4, 9], EAGLE_MT_2),  # differs from vanilla
    record("mt_bench", "eagle2", "1", 10, 0.5, [1, 2, 3], EAGLE_MT),
    record("mt_bench", "hf_generate", "1", 10, 2.5, [1, 2, 3]),
    record("mt_bench", "hf_generate", "2", 6, 1.5, [4, 5]),
    record("gsm8k", "vanilla", "1", 8, 2.0, [7, 7]),
    record("gsm8k", "eagle2", "1", 8, 1.0, [7, 7], EAGLE_GSM),
]


def rows_by_key():
    return {(row.benchmark, row.method): row for row in summarize(RECORDS)}


def test_tau_and_alpha_hand_computed():
    cycles = EAGLE_MT + EAGLE_MT_2  # accepted 2, 0, 2, 1, 1 -> tokens per forward 3, 1, 3, 2, 2
    assert tau(cycles) == pytest.approx(2.2)
    assert alpha(cycles, 0) == pytest.approx(0.8)  # 4 of 5 accepted the first draft token
    assert alpha(cycles, 1) == pytest.approx(2 / 3)  # depth>1 and accepted>=1: (3,2) (2,2) (4,1)
    assert alpha(cycles, 2) == 0.0  # only (3,2) qualifies, and it stops at 2
    assert alpha(cycles, 3) is None
    assert tau([cycle(0, 0)] * 4) == 1.0
    assert tau([]) is None


def test_summarize_speedups_tau_identical():
    rows = rows_by_key()
    eagle, vanilla, hf = rows["mt_bench", "eagle2"], rows["mt_bench", "vanilla"], rows["mt_bench", "hf_generate"]
    assert vanilla.tok_s == pytest.approx(16 / 3)
    assert (eagle.questions, eagle.new_tokens, eagle.tok_s) == (2, 16, pytest.approx(16.0))
    assert eagle.speedup_vs_vanilla == pytest.approx(3.0)
    assert eagle.speedup_vs_hf == pytest.approx(4.0)
    assert hf.speedup_vs_vanilla == pytest.approx(0.75)
    assert vanilla.speedup_vs_vanilla == pytest.approx(1.0)
    assert eagle.tau == pytest.approx(2.2)
    assert (eagle.alpha_0, eagle.alpha_1, eagle.alpha_2, eagle.alpha_3) == (
        pytest.approx(0.8),
        pytest.approx(2 / 3),
        0.0,
        None,
    )
    assert vanilla.tau == 1.0 and vanilla.alpha_0 is None
    assert hf.tau is None
    assert eagle.identical_share == 0.5
    assert hf.identical_share == 1.0
    assert vanilla.identical_share is None
    assert rows["gsm8k", "eagle2"].speedup_vs_hf is None  # no hf_generate on gsm8k


def test_summarize_all_row():
    rows = summarize(RECORDS)
    assert [(row.benchmark, row.method) for row in rows][-3:] == [
        ("all", "vanilla"),
        ("all", "eagle2"),
        ("all", "hf_generate"),
    ]
    eagle = rows_by_key()["all", "eagle2"]
    assert (eagle.questions, eagle.new_tokens) == (3, 24)
    assert eagle.tok_s == pytest.approx(12.0)  # 24 tokens / 2.0 s
    assert eagle.speedup_vs_vanilla == pytest.approx(2.5)  # vanilla: 24 tokens / 5.0 s = 4.8
    assert eagle.tau == pytest.approx(16 / 7)  # accepted 2,0,2,1,1,2,1
    assert eagle.alpha_0 == pytest.approx(6 / 7)
    assert eagle.identical_share == pytest.approx(2 / 3)  # ids collide across benchmarks; matched per benchmark
    assert [f for f in ROW_COLUMNS][:3] == ["benchmark", "method", "questions"]


def test_summarize_without_baseline_and_duplicates():
    only_eagle = [r for r in RECORDS if r["method"] == "eagle2"]
    row = summarize(only_eagle)[0]
    assert row.speedup_vs_vanilla is None and row.identical_share is None
    with pytest.raises(EagleError, match="duplicate"):
        summarize(RECORDS + RECORDS[:1])


def test_hist_calibration_split():
    records = [
        record("gsm8k", "eagle2", "1", 8, 1.0, [], [
            cycle(3, 2, conf=[0.95, 0.05, 0.5], hit=[True, False, True], draft_s=0.1, verify_s=0.3, head_forwards=3),
            cycle(3, 0, conf=[1.0, 0.55], hit=[False, False], draft_s=0.3, verify_s=0.5, head_forwards=5),
        ]),
        record("gsm8k", "vanilla", "1", 8, 2.0, [], [cycle(0, 0, verify_s=0.2)]),
        record("gsm8k", "hf_generate", "1", 8, 2.0, []),
    ]
    assert accept_length_hist(records) == {"eagle2": [1, 0, 1]}
    buckets = calibration(records, bins=2)
    assert [(b.low, b.high, b.n, b.rate) for b in buckets] == [(0.0, 0.5, 1, 0.0), (0.5, 1.0, 4, 0.5)]
    assert [b.confidence for b in buckets] == [pytest.approx(0.05), pytest.approx((0.95 + 0.5 + 1.0 + 0.55) / 4)]
    assert calibration(records, bins=20)[3].confidence is None  # [0.15, 0.2): no node
    split = {(row.benchmark, row.method): row for row in cycle_split(records)}
    eagle2, vanilla, hf = split["gsm8k", "eagle2"], split["gsm8k", "vanilla"], split["gsm8k", "hf_generate"]
    assert (eagle2.cycles, eagle2.draft_ms, eagle2.verify_ms) == (2, pytest.approx(200.0), pytest.approx(400.0))
    assert (eagle2.tree_nodes, eagle2.accepted, eagle2.ms_per_token) == (6.0, 1.0, pytest.approx(125.0))
    assert eagle2.ms_per_head_forward == pytest.approx(400.0 / 8)  # 0.4 s of drafting over 8 head forwards
    assert (vanilla.cycles, vanilla.draft_ms, vanilla.verify_ms) == (1, 0.0, pytest.approx(200.0))
    assert vanilla.ms_per_head_forward is None and hf.ms_per_head_forward is None
    assert (hf.cycles, hf.draft_ms, hf.ms_per_token) == (0, None, pytest.approx(250.0))
    assert split["all", "eagle2"] == replace(eagle2, benchmark="all")
    bad = [record("gsm8k", "eagle2", "1", 1, 1.0, [], [cycle(1, 0, conf=[1.5], hit=[False])])]
    with pytest.raises(EagleError, match="1.5"):
        calibration(bad)
