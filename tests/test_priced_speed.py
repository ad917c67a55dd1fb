"""scripts/priced_speed.py prices each method's cycles by a cost model and judges the default against its parts."""
from __future__ import annotations

import json

import pytest

from tests.scripts import load_script


def cycle(size: int, accepted: int, forwards: int = 0) -> dict:
    return {"tree_size": size, "accepted": accepted, "head_forwards": forwards, "batch": 1, "draft_s": 0.0,
            "verify_s": 0.011}


def record(method: str, cycles: list[dict], wall_s: float) -> dict:
    tokens = sum(c["accepted"] + 1 for c in cycles)
    return {"benchmark": "gsm8k", "question_id": "0", "method": method, "cycles": cycles, "new_tokens": tokens,
            "wall_s": wall_s}


def test_cycles_priced_by_the_cost_model_and_judged_against_the_best_part(tmp_path, capsys):
    priced = load_script("priced_speed")
    cost = {"key": {"model": "m"}, "sizes": [1, 2, 4], "forward_ms": [10.0, 12.0, 20.0], "level_ms": 2.0}
    (tmp_path / "cost.json").write_text(json.dumps(cost))
    records = [
        record("vanilla", [cycle(0, 0)] * 4, 0.04),  # 4 tokens at 4 x 10 ms
        record("eagle2", [cycle(1, 1, forwards=1)] * 2, 0.02),  # 4 tokens at 2 x (2 + 12) ms
        record("lookup", [cycle(3, 3)], 0.03),  # 4 tokens at one forward of 4 tokens: 20 ms
        record("eagle2+lookup", [cycle(3, 3, forwards=2)], 0.02),  # 4 tokens at 4 + 20 ms
    ]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    model = priced.read_cost(tmp_path / "cost.json")
    assert priced.priced_ms(records[1]["cycles"], model) == 28.0
    (question, ratio, by_price, by_clock), = priced.judged(priced.speeds(records, model), "eagle2+lookup",
                                                          ["eagle2", "lookup"])
    assert ratio["lookup"] == pytest.approx((40 / 20, 0.04 / 0.03))
    assert by_price == pytest.approx((40 / 24) / (40 / 20))  # the default over lookup, the best part priced
    assert by_clock == pytest.approx(1.0)  # measured: as fast as eagle2
    groups = priced.clock_over_price(records, model)
    assert groups["vanilla"][0] == (4, pytest.approx(11 / 10))  # each cycle measured 11 ms, priced 10
    assert groups["lookup"][1] == (1, pytest.approx(11 / 20)) and groups["lookup"][0][0] == 0
    priced.main([str(tmp_path / "records.jsonl"), "--cost", str(tmp_path / "cost.json")])
    out = capsys.readouterr().out
    assert "priced: eagle2+lookup / best of eagle2, lookup: geometric mean 0.833x" in out
    assert "below 0.97x on 1 of 1" in out


def test_bad_input_is_one_line(tmp_path, capsys):
    priced = load_script("priced_speed")
    (tmp_path / "cost.json").write_text("{}")
    with pytest.raises(SystemExit):
        priced.main([str(tmp_path / "none.jsonl"), "--cost", str(tmp_path / "cost.json")])
    err = capsys.readouterr().err
    assert "is not a cost model JSON" in err and err.count("\n") == 1
