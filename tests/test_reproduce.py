"""make reproduce without models: fake eval and ablation runs write small records, then the verdict rule, resume,
LIMIT passing through and the page (every section, pending rows shown as pending) are checked."""
from __future__ import annotations

import json

import pytest
import torch

import lab.reproduce as rp
from eagle_infer.errors import EagleError
from eval import throughput
from lab import ablate_head, findings
from lab.ablation_file import ABLATION, ablation_path, full_lines
from lab.result_store import merge
from eval.records import RecordWriter
from lab.reproduce_plan import ABLATION_SPEC, EXPERIMENTS, STATIC_DEPTH, STATIC_NODES
from lab.verdict import FAILS, HOLDS, PENDING, WEAKER, AtMost, Larger, Near, verdict
from tests.test_eval_metrics import cycle, record

SECTIONS = ("EAGLE Table 2 / Figure 2", "EAGLE Table 1", "EAGLE Table 5 / Figure 7", "EAGLE Figure 8", "EAGLE Table 6",
            "EAGLE Table 7", "EAGLE-2", "EAGLE-3")
# accepted draft tokens per cycle, per method: the tree accepts more than the chain, EAGLE-2 more than EAGLE-1
ACCEPTED = {"vanilla": 0, "chain": 1, "eagle1": 2, "eagle2": 3}
SECONDS = {"vanilla": 4.0, "chain": 3.0, "eagle1": 2.5, "eagle2": 2.0}


def test_verdict_rules():
    assert [verdict(Larger(0.2), x) for x in (0.1, 0.3, 0.05, 0.0, -0.1, None)] == [
        HOLDS, HOLDS, WEAKER, FAILS, FAILS, PENDING]
    assert [verdict(Larger(None), x) for x in (0.001, 0.0)] == [HOLDS, FAILS]  # a direction without a figure
    assert [verdict(AtMost(0.07), x) for x in (0.05, 0.1, 0.2)] == [HOLDS, WEAKER, FAILS]
    assert [verdict(Near(0.04, 0.05), x) for x in (0.0, 0.12, 0.2)] == [HOLDS, WEAKER, FAILS]
    with pytest.raises(EagleError, match="not a number"):
        verdict(Larger(0.2), float("nan"))


@pytest.fixture()
def setup(tmp_path, monkeypatch):
    """Three questions per benchmark in a data directory, the cache root in tmp_path, and a fake step runner that
    writes what each command would have (records, throughput points, trained ablation rows); returns its calls."""
    data = tmp_path / "data"
    for bench in ("mt_bench", "humaneval", "gsm8k", "alpaca"):
        (data / bench).mkdir(parents=True)
        (data / bench / "question.jsonl").write_text("".join(
            json.dumps({"question_id": f"{bench}-{i}", "category": "c", "turns": [f"question {i}?"]}) + "\n"
            for i in range(5)))
    monkeypatch.setenv("EAGLE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(findings, "REPO", tmp_path)  # the checkout whose committed ablation file is read: none yet
    monkeypatch.chdir(tmp_path)
    calls = []

    def fake_step(cmd, log_path):
        calls.append(cmd)
        if "lab.ablate_head" in cmd:
            questions = int(next(a for a in cmd if a.startswith("questions=")).split("=", 1)[1])
            return _train_ablation(tmp_path / "cache" / f"ablate-{ABLATION_SPEC}", questions)
        args = dict(a.split("=", 1) for a in cmd[3:])
        out = tmp_path / args["results_dir"] / args["run"]
        benches, methods = args["bench.names"].strip("[]").split(","), args["methods"].strip("[]").split(",")
        limit = int(args["bench.limit"])
        if args.get("mode") == "throughput":
            writer = RecordWriter(out / throughput.FILE, throughput.FIELDS, throughput.point_key)
            for size in map(int, args["batch_sizes"].strip("[]").split(",")):
                for m in methods:
                    writer.append({"benchmark": benches[0], "method": m, "batch_size": size, "questions": limit,
                                   "new_tokens": 100, "wall_s": SECONDS[m] * (1 + 0.1 * size if m != "vanilla" else 1),
                                   "tau": 1 + ACCEPTED[m], "peak_memory_bytes": None, "cache_bytes": 0, "tokens": []})
            return
        writer = RecordWriter(out / "records.jsonl")
        done = writer.done_keys()
        for bench in benches:
            for i in range(limit):
                for m in methods:
                    if (bench, m, f"{bench}-{i}") not in done:
                        writer.append(_answer(bench, m, f"{bench}-{i}"))

    monkeypatch.setattr(rp, "run_step", fake_step)
    return data, calls


def _answer(bench, method, qid):
    a = ACCEPTED[method]
    depth = 0 if method == "vanilla" else STATIC_DEPTH
    tested = ([0.99, 0.01], [1, 0]) if depth else ([], [])  # a sure token accepted, an unsure one rejected
    cycles = [cycle(depth, a if k % 2 else max(a - 1, 0), *tested, draft_s=0.001 * depth, verify_s=0.01)
              for k in range(10)]
    return record(bench, method, qid, 100, SECONDS[method], list(range(100)), cycles)


def _train_ablation(out, questions):
    """What `lab.ablate_head spec=draft-inputs` leaves for the draft-input rows: a summary, τ and speed records,
    the table; the token-only row stays pending."""
    spec = ablate_head.load_spec(ABLATION_SPEC)
    results = []
    for i, row in enumerate(spec["rows"]):
        if row["name"].startswith("input-token"):
            results.append(ablate_head.row_result(out, row, "pending: features hold 5 loss tokens", None))
            continue
        (out / row["name"]).mkdir(parents=True, exist_ok=True)
        (out / row["name"] / "summary.json").write_text(json.dumps({
            "loss_tokens": row["loss_tokens"], "epochs": 2, "train_s": 60.0, "heldout/top1": 0.3 + 0.01 * i,
            **{f"heldout/alpha_{k}": 0.3 - 0.01 * k + 0.02 * i for k in range(6)},
            "heldout/alpha_6": float("nan")}))  # no chain reached 6: a NaN in the table, read as no figure
        for run, n in ((ablate_head.tau_run(row), questions), (ablate_head.speed_run(row), 2 * questions)):
            writer = RecordWriter(out / run / "records.jsonl")
            for q in range(n):
                writer.append(record("mt_bench", "eagle2", f"{run}-{q}", 10, 1.0, [], [cycle(2, 1)]))
        results.append(ablate_head.row_result(out, row, "done", 1.5 + 0.1 * i, None,
                                              {"speedup": 1.0 + 0.1 * i, "speed_cpu": "cpu"}))
    ablate_head.write_table(out, results)


def test_limit_passes_through_to_every_command():
    for e in EXPERIMENTS:
        cmd = e.command(rp.Path("results/reproduce"), 2, "/data")
        assert f"bench.limit={4 if e.throughput else 2}" in cmd and "bench.data_dir=/data" in cmd
        assert ("mode=throughput" in cmd) == e.throughput
    by = {e.name: e for e in EXPERIMENTS}
    assert "batch_sizes=[1,2,3,4]" in by["throughput"].command(rp.Path("r"), 2, None)
    assert "batch_sizes=[1,2,3,4,12]" in by["throughput"].command(rp.Path("r"), 12, None)
    assert by["throughput"].run_name(12) == "throughput-12q" and by["tasks"].run_name(12) == "tasks"
    assert {"infer.budget=fixed", f"infer.total_tokens={STATIC_NODES}", f"infer.depth={STATIC_DEPTH}"} <= set(
        by["mt-bench-t0"].command(rp.Path("r"), 2, None))
    assert rp.ablation_command(3)[-2:] == [f"spec={ABLATION_SPEC}", "questions=3"]


def test_resume_runs_only_what_is_missing(setup, tmp_path):
    data, calls = setup
    rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    assert len(calls) == len(EXPERIMENTS) + 1  # every experiment and the ablation, once
    assert all("bench.limit=2" in c or "bench.limit=4" in c or "questions=2" in c for c in calls)
    ledger = [json.loads(line) for line in (tmp_path / "results/reproduce" / rp.LEDGER).read_text().splitlines()]
    assert [s["step"] for s in ledger] == [e.name for e in EXPERIMENTS] + [ABLATION_SPEC]
    calls.clear()
    rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    assert [c[3] for c in calls if "lab.ablate_head" in c] == [f"spec={ABLATION_SPEC}"]  # its token row is pending
    assert len(calls) == 1  # complete experiments are not rerun
    calls.clear()
    rp.reproduce(3, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    runs = {c[c.index("-m") + 1] for c in calls}
    # one more question each; the throughput points already decode 4 questions, so they are complete
    assert len(calls) == len(EXPERIMENTS) and runs == {"eval.cli", "lab.ablate_head"}
    records = (tmp_path / "results/reproduce/tasks/records.jsonl").read_text().splitlines()
    assert len(records) == 3 * 3 * 3  # three benchmarks × three methods × three questions, none twice


def test_page_names_the_machines_the_steps_ran_on(setup, tmp_path, monkeypatch):
    """A page rewritten with --doc-only on another machine still names where its figures were measured."""
    data, _ = setup
    rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    ledger = tmp_path / "results/reproduce" / rp.LEDGER
    ledger.write_text(ledger.read_text().replace(', "machine": "', ', "machine": "Elsewhere CPU, 7 threads; '))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)
    page = rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"), doc_only=True)
    machine_line = next(line for line in page.splitlines() if line.startswith("- **Machine**"))
    assert "Elsewhere CPU, 7 threads" in machine_line and "5 torch thread" not in machine_line


def test_page_names_the_commit_its_steps_ran_at(setup, tmp_path, monkeypatch):
    """The commit is read before a pass writes anything (the page it rewrites after each step would mark the tree
    changed) and kept in the ledger, so a page rewritten later names the checkout its figures came from."""
    data, _ = setup
    monkeypatch.setattr(rp, "_commit", lambda: "abc1234")
    rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    ledger = tmp_path / "results/reproduce" / rp.LEDGER
    assert {json.loads(line)["commit"] for line in ledger.read_text().splitlines()} == {"abc1234"}
    monkeypatch.setattr(rp, "_commit", lambda: "def5678 with uncommitted changes")
    page = rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"), doc_only=True)
    machine_line = next(line for line in page.splitlines() if line.startswith("- **Machine**"))
    assert "commit abc1234." in machine_line and "def5678" not in machine_line


def test_page_names_the_shipped_heads_ablation_row(setup, tmp_path, monkeypatch):
    """The inference rows' head is named by the ablation row its card says it came from, so the page stays tied to
    its head after another is shipped."""
    data, _ = setup
    monkeypatch.setattr(rp, "head_label", lambda model, head: f"{head} (row-of-{model})")
    page = rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"), doc_only=True)
    target_line = next(line for line in page.splitlines() if line.startswith("- **Target**"))
    assert "the head row-of-smollm2-135m (`eagle_infer/shipped_heads/smollm2-135m` at commit " in target_line
    measured = [line for line in page.splitlines() if line.startswith("Measured by `make reproduce LIMIT=2` at commit")]
    sections = page[:page.index("<!-- sections from committed result files")].count("\n## ") - 1  # not Verdicts
    assert len(measured) == sections > 0 and all("the head row-of-smollm2-135m" in m for m in measured)
    commands = page[page.index("## Commands"):]
    assert str(data) not in commands and "bench.data_dir=$DATA_DIR" in commands  # no machine's absolute path


def test_page_has_every_section_with_verdicts_and_pending_rows(setup, tmp_path):
    data, _ = setup
    page = rp.reproduce(2, str(data), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    assert page == (tmp_path / "docs/reproduction.md").read_text()
    for title in SECTIONS:
        assert f"## {title}" in page
    lines = summary(page)
    assert "τ 1.50 → 2.50 (+67%) | **holds**" in lines["a tree raises τ over a chain at the same draft forwards"]
    assert "**holds**" in lines["calibration: draft confidence > 0.95 → ~98 % accepted"]
    # the token-only head is pending (too little data), so the finding that needs it is, with the ablation's reason
    assert "**pending** | input-token-200k: pending: features hold 5 loss tokens" in lines[
        "features beat tokens slightly (few draft parameters)"]
    assert "(-0.04) | **does not hold**" in lines["feature & unshifted token: much higher 1-α than feature only"]
    # make ablate-head's rows are not in the checkout's result file: pending, with the command that trains them, in
    # the EAGLE-3 section's own verdict table (make results-docs keeps it current), not the pass's
    committed = summary(page, "EAGLE-3")
    assert "**pending** | not trained: make ablate-head ROWS=baseline,ttt3" in committed[
        "the training-time test raises τ (ttt3 vs baseline: EAGLE-1 block, 1M tokens, 2 epochs)"]
    assert not any(line.startswith("| EAGLE-3 |") for line in lines.values())
    assert "**LIMIT = 2**: each benchmark's first 2 questions" in page
    assert "minutes per step: mt-bench-t0" in page
    for plot in ("alpha", "throughput", "position", "calibration"):
        assert f"![{plot}](reproduction/{plot}.png)" in page
        assert (tmp_path / "docs/reproduction" / f"{plot}.png").read_bytes()[:4] == b"\x89PNG"
    csv_lines = (tmp_path / "docs/reproduction/findings.csv").read_text().splitlines()
    assert len(csv_lines) == 1 + len(lines) and all(f"## {title}" in page for title in SECTIONS)
    # pending: the token row (×1), 1-α…4-α (no fake chain reached 2), Table 6 at 100k (×1); EAGLE-3 (×10)
    assert sum(line.count("**pending**") for line in lines.values()) == 3
    assert sum(line.count("**pending**") for line in committed.values()) == 10


def test_eagle3_findings_read_the_committed_ablation_file(setup, tmp_path):
    """make ablate-head's rows come from docs/results/data/ablation/smollm2-135m.csv of the checkout, not the cache."""
    taus = {"all-cosine-300k": 1.6, "all-cosine-2400k": 2.3, "eagle3-block-k7-300k": 1.5,
            "eagle3-block-k7-2400k": 2.6, "regen-100k": 1.5, "fixed-100k": 1.4}
    merge(ABLATION, ablation_path(tmp_path, "smollm2-135m"), full_lines([{"row": r, "tau": t} for r, t in taus.items()]))
    page = rp.reproduce(2, str(setup[0]), rp.Path("results/reproduce"), rp.Path("docs/reproduction.md"))
    lines = {**summary(page), **summary(page, "EAGLE-3")}
    assert "τ 2.30 → 2.60 (+13%) | **holds weaker**" in lines[
        "EAGLE-3's block (fused features, 7-step training-time test) beats the EAGLE-1 block at equal data and epochs "
        "(2.4M tokens, 5 epochs)"]
    assert "τ 1.60 → 1.50 (-6%) | **does not hold**" in lines[
        "EAGLE-3's block (fused features, 7-step training-time test) beats the EAGLE-1 block at equal data and epochs "
        "(300k tokens, 5 epochs)"]
    assert "docs/results/data/ablation/smollm2-135m.csv" in page.split("## EAGLE-3")[1]
    assert "τ gain +1.10 with the test, +0.70 without | **holds**" in lines[
        "with EAGLE-3's block τ keeps rising with data (300k → 2.4M), more than with EAGLE-1's"]
    assert "τ 1.40 → 1.50 (+7%)" in lines["target-generated answers beat fixed data at equal tokens (regen-100k vs "
                                          "fixed-100k)"]


def summary(page: str, section: str = "Verdicts") -> dict[str, str]:
    """The lines of the summary table under the page's heading `section` by finding."""
    table = page.split(f"## {section}")[1].split("\n## ")[0]
    return {line.split(" | ")[1]: line for line in table.splitlines() if line.startswith("| EAGLE")}


def test_bad_limit_and_data_dir_are_one_line_errors(capsys, tmp_path):
    for argv, message in ((["limit=0"], "limit=0 is invalid"), ([f"data_dir={tmp_path / 'nope'}"], "is not a directory"),
                          (["limit=ten"], "limit=ten: Value 'ten' of type 'str' could not be converted to Integer"),
                          (["limt=3"], "Could not override 'limt'")):
        with pytest.raises(SystemExit) as exit_info:
            rp.main(argv)
        assert exit_info.value.code == 2 and message in capsys.readouterr().err
