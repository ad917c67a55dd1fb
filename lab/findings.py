"""Our figure for each published finding, read from the result files `make reproduce` writes (eval records,
throughput points, ablation tables; `sections`) or from the checkout's committed ablation file alone
(`committed_sections`), set against the paper's (lab.published) with a verdict (lab.verdict). Which findings, what
they read and how each is judged is declared (lab.declared_findings); `Results.value` reads the figures a
declaration names, lab.finding_rules judges them.

A `Section` is one paper table or figure: its findings (claim, paper, ours, verdict, reason), a detail table, the
plots it draws and the result files its figures come from. Nothing here runs a model.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path

from eagle_infer.paths import REPO
from eval import throughput
from eval.metrics import ALL, Row, alpha, calibration, cycle_split, summarize
from eval.records import read_records
from eval.report import line_plot
from lab import published as pub
from lab.ablate_head import load_spec
from lab.ablation_file import ABLATION, ablation_path, plot_path
from lab.declaration import Declared, Ref
from lab.declared_findings import declared, run_findings, section_runs
from lab.figure_text import f as _f, x as _x
from lab.finding_rules import Finding, evaluate, rates_by_depth, reached as _reached
from lab.result_store import read
from lab.reproduce_plan import ABLATION_SPEC, BY_NAME, STATIC_DEPTH, STATIC_NODES

MIN_CHAINS = 10  # the position plot's per-question rates count a question whose chains reached it this often
ABLATE_HEAD_SPEC = "smollm2-135m"  # its spec, whose committed result file (lab.ablation_file) the findings read
TRAINED_HERE = f"make reproduce (python -m lab.ablate_head spec={ABLATION_SPEC})"


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

    def row_of(self, ref: Ref) -> Row | None:
        """The summary row of a section's role (lab.declared_findings.section_runs)."""
        return self.row(ref.run, ref.method, ref.bench)

    def throughput(self, experiment: str) -> list[throughput.ThroughputRow]:
        path = self.run_dir(experiment) / throughput.FILE
        return throughput.rows(read_records(path)) if path.exists() else []

    def resolve(self, ref: Ref) -> Ref:
        """`ref` with "largest" as the largest batch its run measured (kept while it measured none)."""
        sizes = [p.batch_size for p in self.throughput(ref.run)] if ref.batch == "largest" else []
        return replace(ref, batch=max(sizes)) if sizes else ref

    def value(self, ref: Ref):
        """A figure of a run (lab.declared_findings.RUN_FIGURES) as `ref` names it (resolved); None while missing."""
        bench = None if ref.bench == ALL else ref.bench
        if ref.batch is not None:
            points = {(p.batch_size, p.method): p for p in self.throughput(ref.run)}
            return _get(points.get((ref.batch, ref.method)), ref.figure)
        if ref.figure == "records":
            return self.records(ref.run, ref.method, bench)
        if ref.figure.startswith(("alpha_", "reached_")):
            cycles = [c for r in self.records(ref.run, ref.method, bench) for c in r["cycles"]]
            kind, n = ref.figure.rsplit("_", 1)
            return (alpha if kind == "alpha" else _reached)(cycles, int(n))
        if ref.figure == "cycle_ms":
            rows = cycle_split(self.records(ref.run))
            row = next((r for r in rows if (r.benchmark, r.method) == (ref.bench, ref.method)), None)
            return None if row is None or row.draft_ms is None else row.draft_ms + row.verify_ms
        return _get(self.row(ref.run, ref.method, ref.bench), ref.figure)

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
    judged: dict[str, list[Finding]] = {}
    for d in run_findings():
        judged.setdefault(d.section, []).append(judge(d, res))
    runs = section_runs()
    return [table2(res, judged["table2"], runs["table2"], plot_dir), table1(res, judged["table1"], runs["table1"]),
            table5(res, judged["table5"], runs["table5"]), figure8(res), table6(res),
            table7(res, judged["table7"], runs["table7"], plot_dir),
            eagle2(res, judged["eagle2"], runs["eagle2"], plot_dir)]


def _sources(res: Results, roles: dict) -> list[str]:
    """The result files of the runs a section's roles read, in the order they are declared."""
    refs = [r for value in roles.values() for r in (value.values() if isinstance(value, dict) else [value])]
    return [res.source(run) for run in dict.fromkeys(r.run for r in refs)]


def judge(d: Declared, res: Results) -> Finding:
    """A run finding (conf/reproduce/findings.yaml) judged on the figures it reads from `res`."""
    refs = [res.resolve(r) for r in d.read]
    reason = ""
    if d.because:
        text, of = d.because
        figures = [(*map(res.resolve, item),) if isinstance(item, tuple) else res.resolve(item) for item in of]
        values = [_ratio(*map(res.value, item)) if isinstance(item, tuple) else res.value(item) for item in figures]
        last = figures[-1][-1] if isinstance(figures[-1], tuple) else figures[-1]
        reason = "" if None in values else text.format(*values, batch=last.batch)
    source = ", ".join(res.source(run) + text[len(run):] for text in d.sources for run in [text.split()[0]])
    return evaluate(d, [res.value(r) for r in refs], refs, source, reason)


def _ratio(a: float | None, b: float | None) -> float | None:
    """b / a, None while either is missing or a is 0."""
    return None if a is None or b is None or not a else b / a


def committed_sections(root: Path) -> list[Section]:
    """The sections that read the checkout `root`'s committed result files only (`make results-docs` keeps them
    current): EAGLE-3's, from make ablate-head's rows."""
    return [eagle3(root)]


def table2(res: Results, findings: list[Finding], runs: dict[str, Ref], plot_dir: Path) -> Section:
    vicuna, vicuna_t1 = pub.TABLE2["Vicuna 7B"], pub.TABLE2_T1["Vicuna 7B"]
    rows = [[f"{pub.TABLE2['source']}: {target}", _f(pub.TABLE2[target]["tau"]), *map(_f, pub.TABLE2[target]["alpha"]),
             "", ""] for target in ("Vicuna 7B", "LLaMA2-Chat 7B")]
    rows.append([f"{pub.TABLE2_T1['source']}: Vicuna 7B", _f(vicuna_t1["tau"]),
                 *map(_f, vicuna_t1["alpha"] + [None] * 3), "", ""])
    series = {}
    for temp in (0, 1):
        chain, tree = res.row_of(runs[f"chain T={temp}"]), res.row_of(runs[f"tree T={temp}"])
        alphas = [getattr(chain, f"alpha_{n}") if chain else None for n in range(5)]
        series[f"ours, chain, T={temp}"] = alphas
        rows.append([f"ours, SmolLM2-135M, T={temp}", _f(_get(tree, "tau")), *map(_f, alphas),
                     _x(_get(tree, "speedup_vs_vanilla")), _x(_get(chain, "speedup_vs_vanilla"))])
    series["EAGLE, Vicuna 7B, T=0"] = vicuna["alpha"]
    plot = line_plot(plot_dir / "alpha.png", "chain position n", "n-α (acceptance at n, given n accepted)",
                     list(range(5)), series)
    return Section(
        "EAGLE Table 2 / Figure 2: τ and n-α on MT-bench, T=0 and T=1",
        f"τ with EAGLE's static tree (method eagle1: {STATIC_NODES} nodes, depth {STATIC_DEPTH}); n-α with a chain "
        f"of {STATIC_DEPTH} (method chain), as the paper measures them; speedups over vanilla in the same run (T=1: "
        "vanilla sampled at T=1).", findings,
        ["", "τ (tree)", "0-α", "1-α", "2-α", "3-α", "4-α", "tree × vanilla", "chain × vanilla"], rows, [plot],
        _sources(res, runs))


def table1(res: Results, findings: list[Finding], runs: dict[str, Ref]) -> Section:
    rows = []
    eagle1, eagle2 = runs["eagle1"], runs["eagle2"]
    for b in BY_NAME[eagle1.run].benches:
        v, ll = pub.TABLE1["Vicuna 7B"][b], pub.TABLE1["LLaMA2-Chat 7B"][b]
        e1, e2 = res.row(eagle1.run, eagle1.method, b), res.row(eagle2.run, eagle2.method, b)
        rows.append([b, f"{v[0]:.2f}x, τ {v[1]:.2f}", f"{ll[0]:.2f}x, τ {ll[1]:.2f}", _speed_tau(e1), _speed_tau(e2)])
    return Section(
        "EAGLE Table 1: speedup and τ on HumanEval, GSM8K, Alpaca (T=0)",
        f"Ours: EAGLE's static tree (eagle1, {STATIC_NODES} nodes) as the paper, and EAGLE-2 with the toolkit's "
        "defaults (tree chosen per cycle); speedups over vanilla in the same run.", findings,
        ["benchmark", "EAGLE, Vicuna 7B", "EAGLE, LLaMA2-Chat 7B", "ours, eagle1", "ours, eagle2 (defaults)"], rows,
        sources=_sources(res, runs))


def table5(res: Results, findings: list[Finding], runs: dict[str, Ref]) -> Section:
    chain, tree = res.row_of(runs["chain"]), res.row_of(runs["tree"])
    rows = [[f"{pub.TABLE5['source']}: {t}", _f(v["chain"]), _f(v["tree"]), "", ""] for t, v in pub.TABLE5.items()
            if t != "source"]
    rows.append(["ours, SmolLM2-135M", _f(_get(chain, "tau")), _f(_get(tree, "tau")),
                 _x(_get(chain, "speedup_vs_vanilla")), _x(_get(tree, "speedup_vs_vanilla"))])
    return Section(
        "EAGLE Table 5 / Figure 7: chain vs tree at the same number of draft forwards (MT-bench, T=0)",
        f"A chain of {STATIC_DEPTH} and EAGLE's static tree of {STATIC_NODES} nodes over {STATIC_DEPTH} levels: "
        f"{STATIC_DEPTH} draft forwards each.", findings,
        ["", "chain τ", "tree τ", "chain × vanilla", "tree × vanilla"], rows, sources=_sources(res, runs))


def figure8(res: Results) -> Section:
    spec = load_spec(ABLATION_SPEC)
    table = res.ablation(f"ablate-{ABLATION_SPEC}")
    by_mode = {a.split("=", 1)[1]: r["name"] for r in spec["rows"] for a in r["overrides"]
               if a.startswith("train.input_mode=")}
    source = _shown(res.cache / f"ablate-{ABLATION_SPEC}" / "table.csv")
    findings = [judge_rows(d, table, source, TRAINED_HERE) for d in declared(spec, "figure8")]
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
            findings.append(judge_rows(d, table, source, _trains(spec_name, d)))
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


def table7(res: Results, findings: list[Finding], runs: dict[str, Ref], plot_dir: Path) -> Section:
    vanilla, eagle2 = runs["vanilla"], runs["eagle2"]
    points = {(r.batch_size, r.method): r for r in res.throughput(eagle2.run)}
    sizes = sorted({size for size, _ in points})
    eagle = {size: points.get((size, eagle2.method)) for size in sizes}
    paper = pub.TABLE7["LLaMA2-Chat 70B"]
    rows = [[str(size), _f(_get(points.get((size, vanilla.method)), "tok_s"), 1), _f(_get(eagle[size], "tok_s"), 1),
             _x(_get(eagle[size], "speedup")), _f(_get(eagle[size], "tau")), _x(paper.get(size))] for size in sizes]
    plot = line_plot(plot_dir / "throughput.png", "batch size", "EAGLE speedup over vanilla", sizes or [1],
                     {"ours (eagle2, defaults)": [_get(eagle[s], "speedup") for s in sizes] or [None],
                      "EAGLE, LLaMA2-Chat 70B": [paper.get(s) for s in sizes] or [None]})
    return Section(
        "EAGLE Table 7: speedup and throughput by batch size (MT-bench first turns, T=0)",
        "One generate_batch call per point over every question (python -m eval.cli mode=throughput); EAGLE-2 with the "
        "toolkit's defaults; the largest batch is every question at once (up to infer.max_batch_size).", findings,
        ["batch", "vanilla tok/s", "eagle2 tok/s", "eagle2 × vanilla", "τ", "EAGLE, LLaMA2-Chat 70B"], rows, [plot],
        _sources(res, runs))


def eagle2(res: Results, findings: list[Finding], runs: dict, plot_dir: Path) -> Section:
    means, per_question = rates_by_depth(res.value(replace(runs["position"], figure="records")), STATIC_DEPTH,
                                         MIN_CHAINS)
    dynamic = res.value(replace(runs["calibration"], figure="records"))
    variants, rows = {label: res.row_of(ref) for label, ref in runs["expansion"].items()}, []
    static_t0 = res.row_of(runs["static"])
    for label, row in variants.items():
        rows.append([f"EAGLE-2 expansion by {label}", _f(_get(row, "tau")), _x(_get(row, "speedup_vs_vanilla"))])
    rows.append(["EAGLE-1 static tree", _f(_get(static_t0, "tau")), _x(_get(static_t0, "speedup_vs_vanilla"))])
    buckets10 = calibration(dynamic, bins=10)
    plots = [
        line_plot(plot_dir / "position.png", "depth in EAGLE's static tree (Alpaca)", "acceptance at the depth",
                  [n + 1 for n in range(STATIC_DEPTH)],
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
        _sources(res, runs))


def eagle3(root: Path) -> Section:
    table = committed_ablation(root, ABLATE_HEAD_SPEC)
    source = committed_source(ABLATE_HEAD_SPEC)
    spec = load_spec(ABLATE_HEAD_SPEC)  # its `findings` say which rows, figures and rules; `findings_table` the rows
    findings = [judge_rows(d, table, source, _trains(ABLATE_HEAD_SPEC, d)) for d in declared(spec, "eagle3")]
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


def judge_rows(d: Declared, table: dict[str, dict], source: str, command: str) -> Finding:
    """An ablation finding (conf/ablate/<spec>.yaml) judged on the ablation rows `table` (by name; only done rows
    count) read from `source`; while a row is missing or unfinished the reason names it, or `command`, which trains
    the missing rows."""
    def value(name: str, figure: str = d.figure):
        return _get(_done(table.get(name)), figure)

    values = [value(name) for name in d.named_rows] + [value(name, d.also) for name in d.rows if d.also]
    return evaluate(d, values, list(d.named_rows), source, _pending_reason(table, d.named_rows, command))


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



def _speed_tau(row: Row | None) -> str:
    return "—" if row is None else f"{_x(row.speedup_vs_vanilla)}, τ {_f(row.tau)}"


