"""Our figure for each published finding, read from the result files `make reproduce` writes (eval records,
throughput points, ablation tables; `sections`) or from the checkout's committed ablation file alone
(`committed_sections`), set against the paper's (lab.published) with a verdict (lab.verdict).

A `Section` is one paper table or figure: its findings (claim, paper, ours, verdict, reason), a detail table, the
plots it draws and the result files its figures come from. Nothing here runs a model.
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from eagle_infer.entry.cli_support import REPO
from eval import throughput
from eval.metrics import ALL, CycleRow, Row, alpha, calibration, cycle_split, summarize
from eval.records import read_records
from eval.report import line_plot
from lab import published as pub
from lab.ablate_head import load_spec
from lab.ablation_findings import Declared, declared
from lab.ablation_file import ABLATION, ablation_path, plot_path
from lab.result_store import read
from lab.reproduce_plan import ABLATION_SPEC, BY_NAME, STATIC_DEPTH, STATIC_NODES
from lab.verdict import AtMost, Larger, Near, Rule, verdict

MIN_CHAINS = 10  # an acceptance rate at a position counts when at least this many cycles reached it
MIN_BUCKET = 20  # a calibration rate counts over at least this many draft tokens
CALIBRATION_TOLERANCE = 0.05  # our tolerance around EAGLE-2's ~4 % and ~98 %
ABLATE_HEAD = "ablate-head"  # make ablate-head's directory under the cache root
ABLATE_HEAD_SPEC = "smollm2-135m"  # its spec, whose committed result file (lab.ablation_file) the findings read
TRAINED_HERE = f"make reproduce (python -m lab.ablate_head spec={ABLATION_SPEC})"


@dataclass
class Finding:
    """One published claim: the paper's figure, ours, the effect both are judged by, and the verdict."""

    claim: str
    paper: str
    rule: Rule
    ours: str
    effect: float | None
    source: str
    reason: str = ""

    @property
    def verdict(self) -> str:
        return verdict(self.rule, self.effect)


@dataclass
class Section:
    title: str
    note: str
    findings: list[Finding]
    header: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    plots: list[Path] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)


class Results:
    """The result files of one reproduction: experiment runs under `results`, counted over each benchmark's first
    `limit` questions (`questions`: their ids), ablation tables under the cache root `cache`, and the committed
    ablation files of the checkout `root`."""

    def __init__(self, results: Path, questions: dict[str, list[str]], limit: int, cache: Path,
                 root: Path | None = None):
        self.results, self.questions, self.limit, self.cache = results, questions, limit, cache
        self.root = REPO if root is None else root
        self._records: dict[str, list[dict]] = {}
        self._rows: dict[str, dict[tuple[str, str], Row]] = {}

    def run_dir(self, experiment: str) -> Path:
        return self.results / BY_NAME[experiment].run_name(self.limit)

    def records(self, experiment: str, method: str | None = None, bench: str | None = None) -> list[dict]:
        """The run's answer records within the first `limit` questions of each benchmark."""
        if experiment not in self._records:
            path = self.run_dir(experiment) / "records.jsonl"
            wanted = {b: set(ids[: self.limit]) for b, ids in self.questions.items()}
            self._records[experiment] = [r for r in (read_records(path) if path.exists() else [])
                                         if str(r["question_id"]) in wanted.get(r["benchmark"], ())]
        return [r for r in self._records[experiment]
                if (method is None or r["method"] == method) and (bench is None or r["benchmark"] == bench)]

    def row(self, experiment: str, method: str, bench: str = ALL) -> Row | None:
        if experiment not in self._rows:
            self._rows[experiment] = {(r.benchmark, r.method): r for r in summarize(self.records(experiment))}
        return self._rows[experiment].get((bench, method))

    def cycles(self, experiment: str, method: str) -> CycleRow | None:
        return next((r for r in cycle_split(self.records(experiment)) if (r.benchmark, r.method) == (ALL, method)),
                    None)

    def throughput(self) -> list[throughput.ThroughputRow]:
        path = self.run_dir("throughput") / throughput.FILE
        return throughput.rows(read_records(path)) if path.exists() else []

    def ablation(self, directory: str) -> dict[str, dict]:
        """Rows of <cache>/<directory>/table.csv (lab.ablate_head) by name, numbers parsed, empty cells None."""
        path = self.cache / directory / "table.csv"
        if not path.exists():
            return {}
        with path.open(newline="") as f:
            return {r["row"]: {k: _number(v) for k, v in r.items()} for r in csv.DictReader(f)}

    def source(self, experiment: str, what: str = "") -> str:
        name = "throughput.jsonl" if BY_NAME[experiment].throughput else "records.jsonl"
        return f"{_shown(self.run_dir(experiment) / name)}" + (f" ({what})" if what else "")


def sections(res: Results, plot_dir: Path) -> list[Section]:
    """The sections of docs/reproduction.md that read a pass's result files, in the papers' order; plots are written
    into `plot_dir`."""
    plot_dir.mkdir(parents=True, exist_ok=True)
    return [table2(res, plot_dir), table1(res), table5(res), figure8(res), table6(res), table7(res, plot_dir),
            eagle2(res, plot_dir)]


def committed_sections(root: Path) -> list[Section]:
    """The sections that read the checkout `root`'s committed result files only (`make results-docs` keeps them
    current): EAGLE-3's, from make ablate-head's rows."""
    return [eagle3(root)]


def table2(res: Results, plot_dir: Path) -> Section:
    vicuna, vicuna_t1 = pub.TABLE2["Vicuna 7B"], pub.TABLE2_T1["Vicuna 7B"]
    rows = [[f"{pub.TABLE2['source']}: {target}", _f(pub.TABLE2[target]["tau"]), *map(_f, pub.TABLE2[target]["alpha"]),
             "", ""] for target in ("Vicuna 7B", "LLaMA2-Chat 7B")]
    rows.append([f"{pub.TABLE2_T1['source']}: Vicuna 7B", _f(vicuna_t1["tau"]),
                 *map(_f, vicuna_t1["alpha"] + [None] * 3), "", ""])
    findings, series = [], {}
    for temp, experiment, paper in ((0, "mt-bench-t0", vicuna), (1, "mt-bench-t1", vicuna_t1)):
        chain, tree = res.row(experiment, "chain"), res.row(experiment, "eagle1")
        cycles = [c for r in res.records(experiment, "chain") for c in r["cycles"]]
        alphas = [getattr(chain, f"alpha_{n}") if chain else None for n in range(5)]
        reached = [_reached(cycles, n) for n in range(5)]
        series[f"ours, chain, T={temp}"] = alphas
        rows.append([f"ours, SmolLM2-135M, T={temp}", _f(_get(tree, "tau")), *map(_f, alphas),
                     _x(_get(tree, "speedup_vs_vanilla")), _x(_get(chain, "speedup_vs_vanilla"))])
        a = paper["alpha"]
        findings.append(Finding(
            f"0-α above 1-α (T={temp})", f"Vicuna 7B: 0-α {a[0]:.2f}, 1-α {a[1]:.2f} ({a[0] - a[1]:+.2f})",
            Larger(round(a[0] - a[1], 4)), _pair("0-α", alphas[0], "1-α", alphas[1]), _diff(alphas[0], alphas[1]),
            res.source(experiment, "chain")))
        if temp == 0:
            kept = [x for x, n in zip(alphas[1:], reached[1:]) if n >= MIN_CHAINS]
            spread, paper_spread = _spread(kept), round(max(a[1:]) - min(a[1:]), 4)
            findings.append(Finding(
                "1-α…4-α vary little (T=0): robust to feature errors",
                f"Vicuna 7B: 1-α…4-α {min(a[1:]):.2f}–{max(a[1:]):.2f} (spread {paper_spread:.2f})",
                AtMost(paper_spread), "—" if spread is None else f"spread {spread:.2f} ({', '.join(map(_f, kept))})",
                spread, res.source(experiment, "chain"),
                f"positions reached by ≥ {MIN_CHAINS} chains (1…4: {', '.join(map(str, reached[1:]))} chains)"))
    t0, t1 = res.row("mt-bench-t0", "eagle1"), res.row("mt-bench-t1", "eagle1")
    findings.append(Finding(
        "τ lower at T=1 than at T=0 (EAGLE's tree)",
        "Vicuna 7B: " + _change_text(vicuna["tau"], vicuna_t1["tau"], name="τ "),
        Larger(round(_drop(vicuna["tau"], vicuna_t1["tau"]), 4)),
        _change_text(_get(t0, "tau"), _get(t1, "tau"), name="τ "), _drop(_get(t0, "tau"), _get(t1, "tau")),
        res.source("mt-bench-t1", "eagle1") + " against T=0"))
    series["EAGLE, Vicuna 7B, T=0"] = vicuna["alpha"]
    plot = line_plot(plot_dir / "alpha.png", "chain position n", "n-α (acceptance at n, given n accepted)",
                     list(range(5)), series)
    return Section(
        "EAGLE Table 2 / Figure 2: τ and n-α on MT-bench, T=0 and T=1",
        f"τ with EAGLE's static tree (method eagle1: {STATIC_NODES} nodes, depth {STATIC_DEPTH}); n-α with a chain "
        f"of {STATIC_DEPTH} (method chain), as the paper measures them; speedups over vanilla in the same run (T=1: "
        "vanilla sampled at T=1).", findings,
        ["", "τ (tree)", "0-α", "1-α", "2-α", "3-α", "4-α", "tree × vanilla", "chain × vanilla"], rows, [plot],
        [res.source("mt-bench-t0"), res.source("mt-bench-t1")])


def table1(res: Results) -> Section:
    benches = ("humaneval", "gsm8k", "alpaca")
    findings, rows = [], []
    ours = {b: res.row("tasks", "eagle1", b) for b in benches}
    for column, index, label in (("speedup_vs_vanilla", 0, "speedup"), ("tau", 1, "τ")):
        paper = {b: pub.TABLE1["Vicuna 7B"][b][index] for b in benches}
        mine = {b: getattr(r, column) if r else None for b, r in ours.items()}
        findings.append(Finding(
            f"HumanEval (code) has the highest {label} (EAGLE's tree)",
            f"Vicuna 7B: {_trio(paper, index == 0)} ({_lead(paper):+.0%})", Larger(round(_lead(paper), 4)),
            _trio(mine, index == 0), _lead(mine), res.source("tasks", "eagle1"),
            "" if _lead(mine) is None else f"highest here: {max(mine, key=mine.get)}"))
    for b in benches:
        v, ll = pub.TABLE1["Vicuna 7B"][b], pub.TABLE1["LLaMA2-Chat 7B"][b]
        e1, e2 = ours[b], res.row("tasks", "eagle2", b)
        rows.append([b, f"{v[0]:.2f}x, τ {v[1]:.2f}", f"{ll[0]:.2f}x, τ {ll[1]:.2f}", _speed_tau(e1), _speed_tau(e2)])
    return Section(
        "EAGLE Table 1: speedup and τ on HumanEval, GSM8K, Alpaca (T=0)",
        f"Ours: EAGLE's static tree (eagle1, {STATIC_NODES} nodes) as the paper, and EAGLE-2 with the toolkit's "
        "defaults (tree chosen per cycle); speedups over vanilla in the same run.", findings,
        ["benchmark", "EAGLE, Vicuna 7B", "EAGLE, LLaMA2-Chat 7B", "ours, eagle1", "ours, eagle2 (defaults)"], rows,
        sources=[res.source("tasks")])


def table5(res: Results) -> Section:
    chain, tree = res.row("mt-bench-t0", "chain"), res.row("mt-bench-t0", "eagle1")
    paper = pub.TABLE5["Vicuna 7B"]
    gain = _change(_get(chain, "tau"), _get(tree, "tau"))
    speed_gain = _diff(_get(tree, "speedup_vs_vanilla"), _get(chain, "speedup_vs_vanilla"))
    costs = res.cycles("mt-bench-t0", "chain"), res.cycles("mt-bench-t0", "eagle1")
    reason = ""
    if all(c and c.draft_ms is not None for c in costs) and gain is not None:
        ratio = (costs[1].draft_ms + costs[1].verify_ms) / (costs[0].draft_ms + costs[0].verify_ms)
        reason = f"a tree cycle costs {ratio:.2f}× a chain cycle here (draft + verify ms) for {1 + gain:.2f}× the τ"
    low, high = pub.TABLE5_SPEEDUP_GAIN
    findings = [
        Finding("a tree raises τ over a chain at the same draft forwards",
                "Vicuna 7B: " + _change_text(paper["chain"], paper["tree"], name="τ "),
                Larger(round(paper["tree"] / paper["chain"] - 1, 4)),
                "—" if gain is None else f"τ {chain.tau:.2f} → {tree.tau:.2f} ({gain:+.0%})", gain,
                res.source("mt-bench-t0", "chain, eagle1")),
        Finding("the tree's speedup exceeds the chain's (by less than its τ gain)",
                f"+{low:.1f}–{high:.1f}x over a chain (~2.3–2.7x)", Larger(pub.midpoint(pub.TABLE5_SPEEDUP_GAIN)),
                "—" if speed_gain is None else
                f"{chain.speedup_vs_vanilla:.2f}x → {tree.speedup_vs_vanilla:.2f}x ({speed_gain:+.2f}x)", speed_gain,
                res.source("mt-bench-t0", "vanilla, chain, eagle1"), reason),
    ]
    rows = [[f"{pub.TABLE5['source']}: {t}", _f(v["chain"]), _f(v["tree"]), "", ""] for t, v in pub.TABLE5.items()
            if t != "source"]
    rows.append(["ours, SmolLM2-135M", _f(_get(chain, "tau")), _f(_get(tree, "tau")),
                 _x(_get(chain, "speedup_vs_vanilla")), _x(_get(tree, "speedup_vs_vanilla"))])
    return Section(
        "EAGLE Table 5 / Figure 7: chain vs tree at the same number of draft forwards (MT-bench, T=0)",
        f"A chain of {STATIC_DEPTH} and EAGLE's static tree of {STATIC_NODES} nodes over {STATIC_DEPTH} levels: "
        f"{STATIC_DEPTH} draft forwards each.", findings,
        ["", "chain τ", "tree τ", "chain × vanilla", "tree × vanilla"], rows, sources=[res.source("mt-bench-t0")])


def figure8(res: Results) -> Section:
    spec = load_spec(ABLATION_SPEC)
    table = res.ablation(f"ablate-{ABLATION_SPEC}")
    by_mode = {a.split("=", 1)[1]: r["name"] for r in spec["rows"] for a in r["overrides"]
               if a.startswith("train.input_mode=")}
    source = _shown(res.cache / f"ablate-{ABLATION_SPEC}" / "table.csv")
    findings = [evaluate(d, table, source, TRAINED_HERE) for d in declared(spec, "figure8")]
    rows = [[mode, name, *_ablation_cells(table.get(name))] for mode, name in by_mode.items()]
    return Section(
        "EAGLE Figure 8: draft-model inputs",
        f"Four heads trained alike by `python -m lab.ablate_head spec={ABLATION_SPEC}` (conf/ablate/"
        f"{ABLATION_SPEC}.yaml: the recipe's settings, one decoder layer, the first {_loss_tokens(spec)} loss tokens "
        "of the target's own answers, 2 epochs), differing in train.input_mode alone; held-out top-1 and α on the "
        "training's held-out split, τ on MT-bench first turns with EAGLE-2's fixed tree, speedup with the defaults. "
        "Training cost: the train min column (one thread).", findings,
        ["input", "row", *ABLATION_COLUMNS], rows, sources=[source])


def table6(res: Results) -> Section:
    findings, rows, sources, shown = [], [], [], []
    here = res.ablation(f"ablate-{ABLATION_SPEC}"), _shown(res.cache / f"ablate-{ABLATION_SPEC}" / "table.csv")
    committed = committed_ablation(res.root, ABLATE_HEAD_SPEC), committed_source(ABLATE_HEAD_SPEC)
    for spec_name, (table, source), directory in ((ABLATION_SPEC, here, f"ablate-{ABLATION_SPEC}"),
                                                   (ABLATE_HEAD_SPEC, committed, "make ablate-head")):
        for d in declared(load_spec(spec_name), "table6"):
            findings.append(evaluate(d, table, source, _trains(spec_name, d)))
            rows += [[name, directory, *_ablation_cells(table.get(name))] for name in d.rows]
            shown.append(d.rows)
        sources.append(source)
    (fixed_name, regen_name), *committed_rows = shown
    return Section(
        "EAGLE Table 6: fixed vs target-generated training data at equal tokens",
        f"Ours: the draft-input spec's shifted-token head ({regen_name}: the target's own answers) against "
        f"{fixed_name} (ShareGPT's answers, featurized once into the spec's fixed_features: part of the "
        "draft-inputs step's time), trained alike; and, reused where trained, make ablate-head's "
        + ", ".join(f"{regen} / {fixed}" for fixed, regen in committed_rows) + " rows.", findings,
        ["row", "from", *ABLATION_COLUMNS], rows, sources=sources)


def table7(res: Results, plot_dir: Path) -> Section:
    points = {(r.batch_size, r.method): r for r in res.throughput()}
    sizes = sorted({size for size, _ in points})
    eagle = {size: points.get((size, "eagle2")) for size in sizes}
    paper = pub.TABLE7["LLaMA2-Chat 70B"]
    first, fourth = eagle.get(1), eagle.get(4)
    largest = eagle[sizes[-1]] if sizes else None
    findings = [
        Finding("the speedup falls as the batch grows (batch 1 → 4)",
                "LLaMA2-Chat 70B: " + _change_text(paper[1], paper[4], unit="x"),
                Larger(round(_drop(paper[1], paper[4]), 4)),
                _change_text(_get(first, "speedup"), _get(fourth, "speedup"), unit="x"),
                _drop(_get(first, "speedup"), _get(fourth, "speedup")),
                res.source("throughput", "vanilla, eagle2")),
        Finding("EAGLE raises throughput at the largest batch (~2x vanilla's)",
                f"LLaMA2-Chat 70B: {paper['throughput']:.2f}x; Vicuna 7B: {pub.TABLE7['Vicuna 7B']['throughput']:.2f}x",
                Larger(round(paper["throughput"] - 1, 4)),
                "—" if _get(largest, "speedup") is None else f"{largest.speedup:.2f}x at batch {largest.batch_size}",
                _diff(_get(largest, "speedup"), 1.0), res.source("throughput", "vanilla, eagle2"),
                _scaling(points, sizes)),
    ]
    rows = [[str(size), _f(_get(points.get((size, "vanilla")), "tok_s"), 1), _f(_get(eagle[size], "tok_s"), 1),
             _x(_get(eagle[size], "speedup")), _f(_get(eagle[size], "tau")), _x(paper.get(size))] for size in sizes]
    plot = line_plot(plot_dir / "throughput.png", "batch size", "EAGLE speedup over vanilla", sizes or [1],
                     {"ours (eagle2, defaults)": [_get(eagle[s], "speedup") for s in sizes] or [None],
                      "EAGLE, LLaMA2-Chat 70B": [paper.get(s) for s in sizes] or [None]})
    return Section(
        "EAGLE Table 7: speedup and throughput by batch size (MT-bench first turns, T=0)",
        "One generate_batch call per point over every question (python -m eval.cli mode=throughput); EAGLE-2 with the "
        "toolkit's defaults; the largest batch is every question at once (up to infer.max_batch_size).", findings,
        ["batch", "vanilla tok/s", "eagle2 tok/s", "eagle2 × vanilla", "τ", "EAGLE, LLaMA2-Chat 70B"], rows, [plot],
        [res.source("throughput")])


def eagle2(res: Results, plot_dir: Path) -> Section:
    static = res.records("tasks", "eagle1", "alpaca")
    cycles = [c for r in static for c in r["cycles"]]
    positions = range(STATIC_DEPTH)
    means = [alpha(cycles, n) for n in positions]
    per_question = [[a for r in static if _reached(r["cycles"], n) >= MIN_CHAINS
                     for a in [alpha(r["cycles"], n)]] for n in positions]
    spreads = [statistics.pstdev(qs) if len(qs) > 1 else None for qs in per_question]
    within = _mean([s for s in spreads if s is not None])
    between = _spread_sd([m for m in means if m is not None])
    known = [m for m in means if m is not None]
    dynamic = res.records("tasks", "eagle2")
    buckets = calibration(dynamic, bins=20)
    low, high = buckets[0], buckets[-1]
    base, rows = res.row("mt-bench-t0", "eagle2"), []
    variants = {"value, rerank": base, "confidence, rerank": res.row("expand-confidence", "eagle2"),
                "value, no rerank": res.row("no-rerank", "eagle2"),
                "confidence, no rerank": res.row("confidence-no-rerank", "eagle2")}
    static_t0 = res.row("mt-bench-t0", "eagle1")
    findings = [
        Finding("acceptance depends on position: first highest, last lowest (EAGLE's static tree, Alpaca)",
                "stated, no figure (P1 highest, P6 lowest)", Larger(None),
                "—" if len(known) < 2 else f"{known[0]:.2f} at depth 1, {known[-1]:.2f} at depth {len(known)}",
                known[0] - known[-1] if len(known) > 1 else None, res.source("tasks", "eagle1, alpaca"),
                "acceptance at a depth given the path above it was accepted (n-α), all cycles pooled"),
        Finding("at one position acceptance varies with context more than between positions (dynamic trees)",
                "stated, no figure", Larger(None),
                "—" if within is None or between is None else
                f"within a position across questions (sd) {within:.2f}, between positions {between:.2f}",
                within - between if within is not None and between is not None else None,
                res.source("tasks", "eagle1, alpaca"),
                f"questions with ≥ {MIN_CHAINS} cycles at the position; their rates include sampling noise"),
        Finding("calibration: draft confidence < 0.05 → ~4 % accepted",
                f"~{pub.EAGLE2_CALIBRATION['below_0.05']:.0%}",
                Near(pub.EAGLE2_CALIBRATION["below_0.05"], CALIBRATION_TOLERANCE), _bucket(low), _rate(low),
                res.source("tasks", "eagle2"), _thin(low)),
        Finding("calibration: draft confidence > 0.95 → ~98 % accepted",
                f"~{pub.EAGLE2_CALIBRATION['above_0.95']:.0%}",
                Near(pub.EAGLE2_CALIBRATION["above_0.95"], CALIBRATION_TOLERANCE), _bucket(high), _rate(high),
                res.source("tasks", "eagle2"), _thin(high)),
        Finding("expanding by path value beats expanding by confidence (both reranked)", "stated, no figure "
                "(EAGLE-2 Table 3)", Larger(None),
                _change_text(_get(variants["confidence, rerank"], "tau"), _get(base, "tau"), name="τ "),
                _change(_get(variants["confidence, rerank"], "tau"), _get(base, "tau")),
                res.source("mt-bench-t0", "eagle2") + ", " + res.source("expand-confidence", "eagle2")),
        Finding("reranking after expansion raises τ (value expansion)", "stated, no figure (EAGLE-2 Table 3)",
                Larger(None), _change_text(_get(variants["value, no rerank"], "tau"), _get(base, "tau"), name="τ "),
                _change(_get(variants["value, no rerank"], "tau"), _get(base, "tau")),
                res.source("mt-bench-t0", "eagle2") + ", " + res.source("no-rerank", "eagle2")),
        Finding(f"a dynamic tree beats EAGLE-1's static tree at an equal budget ({STATIC_NODES} nodes, depth "
                f"{STATIC_DEPTH})", f"{pub.EAGLE2_OVER_EAGLE1[0]:.0%}–{pub.EAGLE2_OVER_EAGLE1[1]:.0%} faster (six "
                "tasks; EAGLE-2 at its own, larger budget)", Larger(pub.midpoint(pub.EAGLE2_OVER_EAGLE1)),
                _change_text(_get(static_t0, "speedup_vs_vanilla"), _get(base, "speedup_vs_vanilla"), unit="x"),
                _change(_get(static_t0, "speedup_vs_vanilla"), _get(base, "speedup_vs_vanilla")),
                res.source("mt-bench-t0", "eagle1, eagle2"),
                "" if not (static_t0 and base and static_t0.tau and base.tau) else
                f"τ {static_t0.tau:.2f} (static) against {base.tau:.2f} (dynamic)"),
    ]
    for label, row in variants.items():
        rows.append([f"EAGLE-2 expansion by {label}", _f(_get(row, "tau")), _x(_get(row, "speedup_vs_vanilla"))])
    rows.append(["EAGLE-1 static tree", _f(_get(static_t0, "tau")), _x(_get(static_t0, "speedup_vs_vanilla"))])
    buckets10 = calibration(dynamic, bins=10)
    plots = [
        line_plot(plot_dir / "position.png", "depth in EAGLE's static tree (Alpaca)", "acceptance at the depth",
                  [n + 1 for n in positions],
                  {"all questions": means,
                   "lowest question": [min(qs) if qs else None for qs in per_question],
                   "highest question": [max(qs) if qs else None for qs in per_question]}),
        line_plot(plot_dir / "calibration.png", "draft confidence (bucket middle)", "accepted share",
                  [round(b.low + 0.05, 2) for b in buckets10],
                  {"ours (eagle2; HumanEval, GSM8K, Alpaca)": [b.rate for b in buckets10],
                   "calibrated": [round(b.low + 0.05, 2) for b in buckets10]}),
    ]
    return Section(
        "EAGLE-2: acceptance by position, calibration, expansion and reranking, static vs dynamic trees",
        f"Acceptance by position from the tasks run's Alpaca answers (as EAGLE-2 measures it; EAGLE's static tree), "
        "calibration from all its EAGLE-2 answers (HumanEval, GSM8K, Alpaca: more draft tokens per bucket); "
        "expansion and "
        f"reranking on MT-bench, each variant with vanilla in its own run, all at EAGLE-1's budget ({STATIC_NODES} "
        f"nodes, depth {STATIC_DEPTH}, top-k 8).", findings,
        ["setting (MT-bench, T=0)", "τ", "speedup"], rows, plots,
        [res.source(e) for e in ("tasks", "mt-bench-t0", "expand-confidence", "no-rerank", "confidence-no-rerank")])


def eagle3(root: Path) -> Section:
    table = committed_ablation(root, ABLATE_HEAD_SPEC)
    source = committed_source(ABLATE_HEAD_SPEC)
    spec = load_spec(ABLATE_HEAD_SPEC)  # its `findings` say which rows, figures and rules; `findings_table` the rows
    findings = [evaluate(d, table, source, _trains(ABLATE_HEAD_SPEC, d)) for d in declared(spec, "eagle3")]
    names = [n for n in table if n.startswith(tuple(spec.get("findings_table", [])))]
    rows = [[name, *_ablation_cells(table.get(name)), table[name].get("commit") or "—"] for name in names]
    curve = plot_path(root, ABLATE_HEAD_SPEC)
    plots = [curve] if curve.exists() else []
    return Section(
        "EAGLE-3: training-time test, fused features, τ against data (make ablate-head)",
        "Read from make ablate-head's committed result file (rows of conf/ablate/smollm2-135m.yaml; this command trains "
        "none of them): EAGLE-3's own block at 2.4M loss tokens against the EAGLE-1 block at equal data and "
        "epochs, then the earlier rows that put EAGLE-3's ingredients on the EAGLE-1 block. Each row is its own head, "
        "measured at the commit its line names. Training cost: the train min column.", findings,
        ["row", *ABLATION_COLUMNS, "commit"], rows, plots, [source])


ABLATION_COLUMNS = ["loss tokens", "epochs", "held-out top-1", "0-α", "1-α", "τ", "speedup", "train min", "status"]


def _ablation_cells(row: dict | None) -> list[str]:
    if row is None:
        return ["—"] * (len(ABLATION_COLUMNS) - 1) + ["not run"]
    return [str(row["loss_tokens"] or "—"), str(row["epochs"] or "—"), _f(row["top1"], 3), _f(row["alpha_0"], 3),
            _f(row["alpha_1"], 3), _f(row["tau"]), _x(row.get("speedup")), _f(row["train_min"], 1),
            str(row["status"])]


def evaluate(finding: Declared, table: dict[str, dict], source: str, command: str) -> Finding:
    """A declared finding (lab.ablation_findings) judged on the ablation rows `table` (by name; only done rows
    count) read from `source`; while a row is missing or unfinished the reason names it, or `command`, which trains
    the missing rows."""
    def value(name: str, figure: str = finding.figure):
        return _get(_done(table.get(name)), figure)

    paper, paper_effect = pub.PAPER_EFFECTS[finding.paper]
    if finding.effect == "keeps_rising":
        with_test, without = (_diff(value(b), value(a)) for a, b in zip(finding.small, finding.large))
        effect = _diff(with_test, without)
        ours = ("—" if with_test is None or without is None else
                f"τ gain {with_test:+.2f} with the test, {without:+.2f} without")
    elif finding.effect == "difference":
        a, b = (value(name) for name in finding.rows)
        ours, effect = _pair(finding.labels[0], a, finding.labels[1], b), _diff(a, b)
    else:  # gain
        ours, effect = _gain_text(*(value(name) for name in finding.rows), finding.figure), _change(
            *(value(name) for name in finding.rows))
        also = [value(name, finding.also) for name in finding.rows] if finding.also else [None]
        if None not in also:
            ours += f"; {finding.also} " + _gain_text(*also, finding.also)
    note = finding.note + (f"; our tolerance {finding.near[1]}" if finding.near and finding.note else "")
    rule = Near(*finding.near) if finding.near else Larger(paper_effect)
    return Finding(finding.claim, paper, rule, ours, effect, source,
                   _pending_reason(table, finding.named_rows, command) or note)


def _gain_text(before: float | None, after: float | None, figure: str) -> str:
    return _change_text(before, after, **{"tau": {"name": "τ "}, "speedup": {"unit": "x"}}.get(figure, {}))


def _trains(spec: str, finding: Declared) -> str:
    """The command that trains a finding's rows of `spec`."""
    return TRAINED_HERE if spec == ABLATION_SPEC else f"make ablate-head ROWS={','.join(finding.named_rows)}"


def committed_ablation(root: Path, spec: str) -> dict[str, dict]:
    """The rows of the checkout `root`'s committed ablation file for `spec` (lab.ablation_file), each marked done."""
    return {name: {**line, "status": "done"} for name, line in read(ABLATION, ablation_path(root, spec)).items()}


def committed_source(spec: str) -> str:
    """The committed ablation file for `spec` as the pages name it: relative to the checkout, whatever the cwd."""
    return ablation_path(Path(), spec).as_posix()


def _done(row: dict | None) -> dict | None:
    return row if row and row["status"] == "done" and row["tau"] is not None else None


def _pending_reason(table: dict, names, command: str) -> str:
    """Why a finding reading these ablation rows is pending ("" when all are measured); `command` trains them."""
    for name in names:
        row = table.get(name)
        if row is None:
            return f"not trained: {command}"
        if _done(row) is None:
            return f"{name}: {row['status']}"
    return ""


def _loss_tokens(spec: dict) -> str:
    return ", ".join(sorted({f"{r['loss_tokens']:,}" for r in spec["rows"]}))


def _number(text: str):
    """A table.csv cell: an int, a float, text; None for an empty cell or NaN (a rate over no chains)."""
    for kind in (int, float):
        try:
            value = kind(text)
            return None if value != value else value
        except ValueError:
            pass
    return None if text in ("", "None") else text


def _shown(path: Path) -> str:
    """A path as the page shows it: relative to the working directory when inside it, ~ for the home directory."""
    path = path.resolve() if path.is_absolute() else path
    for base, label in ((Path.cwd(), ""), (Path.home(), "~/")):
        if path.is_relative_to(base):
            return label + str(path.relative_to(base))
    return str(path)


def _get(row, key: str):
    """A figure of an eval Row, a throughput point or an ablation table row (a dict); None without the row."""
    return None if row is None else row.get(key) if isinstance(row, dict) else getattr(row, key)


def _change(before: float | None, after: float | None) -> float | None:
    """after / before − 1, None while either is missing."""
    return None if before is None or after is None or not before else after / before - 1


def _drop(before: float | None, after: float | None) -> float | None:
    """1 − after / before: how much lower `after` is, None while either is missing."""
    change = _change(before, after)
    return None if change is None else -change


def _change_text(before: float | None, after: float | None, unit: str = "", name: str = "") -> str:
    change = _change(before, after)
    return "—" if change is None else f"{name}{before:.2f}{unit} → {after:.2f}{unit} ({change:+.0%})"


def _reached(cycles: list[dict], n: int) -> int:
    return sum(1 for c in cycles if c["tree_depth"] > n and c["accepted"] >= n)


def _scaling(points: dict, sizes: list[int]) -> str:
    """How each method's tokens/s grew from batch 1 to the largest batch (both measured at the same batch: a CPU's
    memory does not bind here, where a GPU's limits EAGLE's batch first)."""
    grown = {m: _change(_get(points.get((1, m)), "tok_s"), _get(points.get((sizes[-1], m)), "tok_s"))
             for m in ("vanilla", "eagle2")} if sizes else {}
    if any(g is None for g in grown.values()) or not grown:
        return ""
    return (f"from batch 1 to {sizes[-1]} vanilla's tokens/s grew {1 + grown['vanilla']:.2f}×, EAGLE-2's "
            f"{1 + grown['eagle2']:.2f}×; both at the same batch (a CPU's memory does not bind)")


def _rate(bucket) -> float | None:
    return bucket.rate if bucket.n >= MIN_BUCKET else None


def _thin(bucket) -> str:
    return "" if _rate(bucket) is not None else f"{bucket.n} draft tokens in the bucket, fewer than {MIN_BUCKET}"


def _bucket(bucket) -> str:
    return "—" if bucket.rate is None else f"{bucket.rate:.1%} of {bucket.n} draft tokens"


def _trio(values: dict, speed: bool) -> str:
    return ", ".join(f"{b} {_x(v) if speed else _f(v)}" for b, v in values.items())


def _lead(values: dict) -> float | None:
    """How far HumanEval's figure is above the best of the others (relative), None while any is missing."""
    if any(v is None for v in values.values()):
        return None
    return values["humaneval"] / max(v for b, v in values.items() if b != "humaneval") - 1


def _speed_tau(row: Row | None) -> str:
    return "—" if row is None else f"{_x(row.speedup_vs_vanilla)}, τ {_f(row.tau)}"


def _pair(a_name: str, a, b_name: str, b) -> str:
    return "—" if a is None or b is None else f"{a_name} {a:.2f}, {b_name} {b:.2f} ({a - b:+.2f})"


def _diff(a, b) -> float | None:
    return None if a is None or b is None else a - b


def _spread(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) - min(known) if len(known) > 1 else None


def _spread_sd(values: list[float]) -> float | None:
    return statistics.pstdev(values) if len(values) > 1 else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _f(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}x"
