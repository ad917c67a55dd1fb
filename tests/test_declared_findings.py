"""The findings make reproduce judges from its runs are data (conf/reproduce/findings.yaml): every run, method,
benchmark and figure they name exists in the plan; a bad declaration is a one-line error; and the one evaluator's
measures and rules give the numbers, texts and verdicts they state."""
from __future__ import annotations

import pytest

from eagle_infer.errors import EagleError
from lab.declaration import Declared, Ref
from lab.declared_findings import RUN_SECTIONS, run_findings, section_runs
from lab.finding_rules import MEASURES, evaluate
from lab.reproduce_plan import BY_NAME
from lab.verdict import FAILS, HOLDS, WEAKER
from tests.test_eval_metrics import cycle, record


def test_every_run_a_declared_finding_names_is_a_run_of_the_plan():
    """A run renamed in lab/reproduce_plan.py (or in the declarations) cannot leave a finding, or a section's table,
    reading nothing."""
    findings = run_findings()
    for d in findings:
        assert d.runs and d.runs <= set(BY_NAME), d.claim
        for ref in d.read:
            experiment = BY_NAME[ref.run]
            assert ref.method in experiment.methods and ref.bench in ("all", *experiment.benches), (d.claim, ref)
    assert {d.section for d in findings} == set(RUN_SECTIONS)
    sections = section_runs()
    refs = [r for roles in sections.values() for value in roles.values()
            for r in (value.values() if isinstance(value, dict) else [value])]
    assert set(sections) == set(RUN_SECTIONS) and refs
    assert all(r.run in BY_NAME and r.method in BY_NAME[r.run].methods for r in refs)


@pytest.mark.parametrize("sections, message", [
    ("{table1: {eagle1: tasks chain}}", "sections table1: expected table2, table1, table5, table7, eagle2"),
    ("{table2: {a: tasks eagle1}, table1: {a: mt-bench-t9 eagle1}, table5: {}, table7: {}, eagle2: {}}",
     "section 'table1' has run 'mt-bench-t9'"),
    ("{table2: {a: tasks eagle1 tau}, table1: {}, table5: {}, table7: {}, eagle2: {}}",
     "section 'table2' reads 'tasks eagle1 tau': expected '<run> <method>\\[ on <bench>\\]'"),
    ("{table2: {a: {b: tasks chain}}, table1: {}, table5: {}, table7: {}, eagle2: {}}",
     "section 'table2' has method \\(of run tasks\\) 'chain'"),
])
def test_a_bad_section_role_is_a_one_line_error(tmp_path, sections, message):
    path = tmp_path / "findings.yaml"
    path.write_text(f"sections: {sections}\n")
    with pytest.raises(EagleError, match=message):
        section_runs(path)


GOOD = "{claim: c, section: table5, effect: gain, paper: stated, read: [%s], from: ['%s (chain)']}"


@pytest.mark.parametrize("read, source, message", [
    ("mt-bench-t9 chain tau, mt-bench-t0 eagle1 tau", "mt-bench-t0",
     "has run 'mt-bench-t9': expected one of mt-bench-t0"),
    ("mt-bench-t0 chain tau, tasks chain tau", "mt-bench-t0", "has method \\(of run tasks\\) 'chain'"),
    ("tasks eagle1 tau on mt_bench, tasks eagle2 tau", "tasks", "has benchmark \\(of run tasks\\) 'mt_bench'"),
    ("mt-bench-t0 chain speed, mt-bench-t0 eagle1 tau", "mt-bench-t0", "reads figure 'speed'"),
    ("mt-bench-t0 chain tau at batch 1, mt-bench-t0 eagle1 tau", "mt-bench-t0", "exactly when the run is a throughput"),
    ("throughput eagle2 speedup, throughput vanilla tok_s at batch 1", "throughput", "exactly when the run is a"),
    ("mt-bench-t0/chain/tau, mt-bench-t0 eagle1 tau", "mt-bench-t0", "reads 'mt-bench-t0/chain/tau': expected"),
    ("mt-bench-t0 chain tau, mt-bench-t0 eagle1 tau", "mt-bench-t9", "has from 'mt-bench-t9'"),
])
def test_a_bad_run_finding_is_a_one_line_error(tmp_path, read, source, message):
    path = tmp_path / "findings.yaml"
    path.write_text(f"findings:\n  - {GOOD % (read, source)}\n")
    with pytest.raises(EagleError, match=message):
        run_findings(path)


def test_a_good_run_finding_reads_what_it_names(tmp_path):
    path = tmp_path / "findings.yaml"
    path.write_text("findings:\n  - " + GOOD % ("mt-bench-t0 chain tau, throughput eagle2 speedup at batch largest",
                                                "mt-bench-t0") + "\n")
    [d] = run_findings(path)
    assert d.read == (Ref("mt-bench-t0", "chain", "tau"), Ref("throughput", "eagle2", "speedup", batch="largest"))
    assert d.figure == "tau" and d.runs == {"mt-bench-t0", "throughput"}


def _declared(effect: str, **keys) -> Declared:
    return Declared("c", "s", effect, keys.pop("paper", "stated"), **keys)


@pytest.mark.parametrize("effect, keys, values, ours, number", [
    ("gain", {}, [2.0, 2.5], "τ 2.00 → 2.50 (+25%)", 0.25),
    ("gain", {"figure": "speedup_vs_vanilla"}, [1.0, 0.9], "1.00x → 0.90x (-10%)", -0.1),
    ("drop", {"figure": "speedup"}, [2.0, 1.5], "2.00x → 1.50x (-25%)", 0.25),
    ("difference", {"labels": ("0-α", "1-α")}, [0.5, 0.4], "0-α 0.50, 1-α 0.40 (+0.10)", 0.1),
    ("increase", {"figure": "speedup_vs_vanilla"}, [1.1, 1.3], "1.10x → 1.30x (+0.20x)", 0.2),
    ("keeps_rising", {}, [1.5, 1.6, 2.6, 2.3], "τ gain +1.10 with the test, +0.70 without", 0.4),
    ("falls", {}, [0.8, 0.7, 0.6, None], "0.80 at depth 1, 0.60 at depth 3", 0.2),
    ("falls", {}, [0.8, None], "—", None),
    ("gain", {}, [None, 2.5], "—", None),
])
def test_measures_make_the_number_and_text_they_state(effect, keys, values, ours, number):
    measured = MEASURES[effect](_declared(effect, **keys), values, [])
    assert measured.ours == ours
    assert measured.effect == pytest.approx(number) if number is not None else measured.effect is None


def test_lead_names_the_highest_benchmark():
    refs = [Ref("tasks", "eagle1", "tau", bench) for bench in ("humaneval", "gsm8k", "alpaca")]
    measured = MEASURES["lead"](_declared("lead"), [2.5, 2.0, 3.0], refs)
    assert (measured.ours, measured.reason) == ("humaneval 2.50, gsm8k 2.00, alpaca 3.00", "highest here: alpaca")
    assert measured.effect == pytest.approx(2.5 / 3.0 - 1)


def test_spread_keeps_the_positions_reached_often_enough():
    d = _declared("spread", min_count=10, labels=("1…3",))
    measured = MEASURES["spread"](d, [0.5, 0.7, 0.1, 40, 12, 3], [])
    assert measured.ours == "spread 0.20 (0.50, 0.70)" and measured.effect == pytest.approx(0.2)
    assert measured.reason == "positions reached by ≥ 10 chains (1…3: 40, 12, 3 chains)"


def test_calibrated_reads_the_named_bucket_and_needs_enough_tokens():
    tested = [0.99] * 30 + [0.01] * 5, [1] * 29 + [0] + [0] * 5  # 29 of 30 sure tokens accepted; 5 unsure rejected
    records = [record("alpaca", "eagle2", "1", 10, 1.0, [], [cycle(2, 1, *tested)])]
    last = MEASURES["calibrated"](_declared("calibrated", bins=20, bucket="last", min_count=20), [records], [])
    assert (last.ours, last.reason) == ("96.7% of 30 draft tokens", "") and last.effect == pytest.approx(29 / 30)
    first = MEASURES["calibrated"](_declared("calibrated", bins=20, bucket="first", min_count=20), [records], [])
    assert first.effect is None and first.reason == "5 draft tokens in the bucket, fewer than 20"


def test_context_over_position_compares_spreads_across_questions_and_depths():
    """Two questions: one accepts every depth, one none; so at depth 0 their rates are 1 and 0 (sd 0.5), and only
    depth 0 has both; the pooled rates by depth are 0.5 at depth 0 and 1 at depth 1 (sd 0.25)."""
    records = [record("alpaca", "eagle1", str(q), 10, 1.0, [], [cycle(2, accepted)] * 10)
               for q, accepted in (("1", 2), ("2", 0))]
    measured = MEASURES["context_over_position"](_declared("context_over_position", min_count=10), [records], [])
    assert measured.ours == "within a position across questions (sd) 0.50, between positions 0.25"
    assert measured.effect == pytest.approx(0.25)


@pytest.mark.parametrize("rule, tolerance, paper, verdict", [
    ("larger", None, "EAGLE Table 5: chain → tree", WEAKER),  # 0.1 < half the paper's 0.23
    ("at_most", None, "EAGLE Table 2: spread of 1-α…4-α, T=0", WEAKER),  # 0.1 within twice 0.07
    ("near", 0.02, "EAGLE-2: accepted share at draft confidence below 0.05", FAILS),  # 0.1 is 0.06 from 0.04
    ("near", 0.1, "EAGLE-2: accepted share at draft confidence below 0.05", HOLDS),
])
def test_the_rule_is_picked_by_name(rule, tolerance, paper, verdict):
    d = _declared("difference", paper=paper, rule=rule, tolerance=tolerance, labels=("a", "b"), note="n")
    finding = evaluate(d, [0.3, 0.2], [], "source")
    assert finding.verdict == verdict and finding.effect == pytest.approx(0.1)
    assert finding.reason == ("n; our tolerance " + str(tolerance) if rule == "near" else "n")
