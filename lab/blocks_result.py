"""Block drafters beside EAGLE heads, side by side in one eval run (`make compare-blocks`), as a result file of the
machine it ran on, in two steps around the eval:

    python -m lab.blocks_result step=begin run_dir=results/blocks
    python -m lab.blocks_result step=end run_dir=results/blocks 'command=make compare-blocks'

`end` writes docs/results/data/<platform>/blocks.json (blocks-<dtype>.json for a dtype other than float32): the
stamp of a headline file (machine, threads, dtype, torch, the commit `begin` saw, command, date, load), the run's
settings, each labelled head's card (block, layers, training steps and seconds, held-out simulated acceptance and
top-1), a line per (benchmark, method) (`eval.metrics.summarize`: questions, new tokens, tok/s, × vanilla, τ,
identical to vanilla) and a line per question (each method's tok/s over vanilla's on that question, and τ).
`lab.results_docs` renders it into docs/results/<platform>-blocks.md (-blocks-<dtype>.md), whose per-question table
holds the default method beside the best of its parts (DEFAULT_PARTS) and, where the run timed the default twice
(`DEFAULT:again`, the same method with the same head under the label AGAIN), the noise bands that say which of its
losses are beyond noise.
"""
from __future__ import annotations

import json
import math
import os
import statistics
from datetime import datetime, timezone
from pathlib import Path

import torch

from eagle_infer.config import DEFAULT_METHOD
from eagle_infer.entry.cli_support import one_line_errors
from eagle_infer.errors import EagleError
from eagle_infer.platform import machine_label, resolve_device, resolve_dtype
from eagle_train.plumbing.command_line import command_settings
from eagle_train.plumbing.markdown import table
from eval.metrics import ALL, summarize, tau
from eval.records import read_records
from lab.headline import HeadlineSettings, begun_checkout, run_conf, run_step
from lab.result_file import platform_slug
from lab.result_store import DATA_DIR

FORMAT = 1
FILE_NAME = "blocks.json"  # float32's; another dtype's is blocks-<dtype>.json (file_name)
FIELDS = ("format", "machine", "device", "threads", "dtype", "torch", "commit", "uncommitted_changes", "command", "date",
          "load_average", "settings", "heads", "methods", "questions")
CARD_FIELDS = ("block", "layers", "steps", "train_s", "machine", "heldout/acceptance", "heldout/top1_1")
# the default method's parts: a per-question speed at or above the best of them is what makes it the default
DEFAULT_PARTS = {"eagle2+lookup": ("eagle2", "lookup")}
AGAIN = "again"  # the label of the default method timed a second time with the same head: its spread is the noise


def noise_band(ratios: list[float], robust: bool = False) -> float | None:
    """The noise of one per-question speed ratio, from `ratios` of the same work timed twice (again / first):
    twice their root mean square log, as a factor (1.06: a ratio below 1 / 1.06 is beyond noise), or `robust`,
    twice 1.4826 times their median absolute log (the same for normal noise, unmoved by a few disturbed timings);
    None without ratios."""
    logs = [abs(math.log(r)) for r in ratios if r]
    if not logs:
        return None
    if robust:
        return math.exp(2 * 1.4826 * statistics.median(logs))
    return math.exp(2 * math.sqrt(sum(x * x for x in logs) / len(logs)))


def _rounded(value, digits: int = 3):
    return None if value is None else round(value, digits)


def head_cards(heads: dict[str, str]) -> dict[str, dict]:
    """Each labelled head's card.json fields CARD_FIELDS (block and layers from its config.json) and directory."""
    cards = {}
    for label, directory in heads.items():
        path = Path(directory)
        card = json.loads((path / "card.json").read_text()) if (path / "card.json").is_file() else {}
        config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
        cards[label] = {"directory": directory, **{k: card.get(k, config.get(k)) for k in CARD_FIELDS}}
    return cards


def question_lines(records: list[dict]) -> list[dict]:
    """A line per (benchmark, question): each method's tok/s over vanilla's on that question and its τ."""
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in records:
        by.setdefault((r["benchmark"], str(r["question_id"])), {})[r["method"]] = r
    lines = []
    for (benchmark, question), methods in by.items():
        base = methods.get("vanilla")
        speed = lambda r: r["new_tokens"] / r["wall_s"] if r["wall_s"] else None  # noqa: E731
        lines.append({"benchmark": benchmark, "question": question, "methods": {
            m: {"speedup": _rounded(speed(r) / speed(base)) if base and speed(r) and speed(base) else None,
                "tau": _rounded(tau(r["cycles"]), 2) if m != "vanilla" else 1.0,
                "identical": r["tokens"] == base["tokens"] if base else None}
            for m, r in methods.items()}})
    return lines


def blocks_result(run_dir: Path, command: str) -> dict:
    """The result file's object for the eval run in `run_dir` (begun by `begin`), measured on this machine."""
    commit, changed = begun_checkout(run_dir)
    conf = run_conf(run_dir)
    records = [r for r in read_records(run_dir / "records.jsonl")
               if r["method"] in conf.methods and r["benchmark"] in conf.bench.names]
    if not any(r["method"] == "vanilla" for r in records):
        raise EagleError("the run has no vanilla records; expected method vanilla, which speedups divide by")
    device = resolve_device(conf.model.device)
    methods = [{"benchmark": row.benchmark, "method": row.method, "questions": row.questions,
                "new_tokens": row.new_tokens, "tok_s": _rounded(row.tok_s, 2),
                "speedup": _rounded(row.speedup_vs_vanilla), "tau": _rounded(row.tau),
                "identical": _rounded(row.identical_share)} for row in summarize(records)]
    settings = {"model": conf.model.name, "head": conf.infer.head, "benchmarks": list(conf.bench.names),
                "questions_per_benchmark": conf.bench.limit, "max_turns": conf.bench.max_turns,
                "max_new_tokens": conf.infer.max_new_tokens, "temperature": conf.infer.temperature,
                "depth": conf.infer.depth, "total_tokens": conf.infer.total_tokens, "compile": conf.infer.compile,
                "methods": list(conf.methods)}
    return {"format": FORMAT, "machine": machine_label(device), "device": device.type,
            "threads": conf.threads or torch.get_num_threads(),
            "dtype": str(resolve_dtype(conf.model.dtype, device)).removeprefix("torch."),
            "torch": torch.__version__.split("+")[0], "commit": commit, "uncommitted_changes": changed,
            "command": command, "date": datetime.now(timezone.utc).date().isoformat(),
            "load_average": round(os.getloadavg()[0], 2), "settings": settings, "heads": head_cards(dict(conf.heads)),
            "methods": methods, "questions": question_lines(records)}


def read_blocks(path: Path) -> dict:
    """A blocks result file; bad JSON or a missing or unknown field is a one-line EagleError naming the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise EagleError(f"{path} is not JSON ({err}); expected a blocks result file") from None
    missing, unknown = [f for f in FIELDS if f not in data], [f for f in data if f not in FIELDS]
    if missing or unknown or data["format"] != FORMAT:
        raise EagleError(f"{path}: fields missing {missing}, unknown {unknown}, format {data.get('format')!r}; "
                         f"expected the fields of lab/blocks_result.py, format {FORMAT}")
    return data


def dtype_suffix(dtype: str) -> str:
    """What a result of `dtype` adds to its file and page names: nothing for float32, "-<dtype>" for another."""
    return "" if dtype == "float32" else f"-{dtype}"


def file_name(dtype: str) -> str:
    return FILE_NAME.replace(".json", f"{dtype_suffix(dtype)}.json")


def blocks_files(root: Path) -> list[Path]:
    return sorted((root / DATA_DIR).glob(f"*/{FILE_NAME.replace('.json', '*.json')}"))


def page_name(data: dict) -> str:
    return f"{platform_slug(data['machine'])}-blocks{dtype_suffix(data['dtype'])}.md"


def _x(value) -> str:
    return "—" if value is None else f"{value:.2f}x"


def _num(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def blocks_page(data: dict, source: str) -> str:
    """The Markdown page of one blocks result file (`source`: its path relative to the page)."""
    s = data["settings"]
    parts = [f"# Block drafters beside EAGLE heads on {data['machine']}",
             f"Generated by `make results-docs` from [{source}]({source}) (its format: `lab/blocks_result.py`); do not "
             f"edit by hand. To measure again, run `{data['command']}` on a CPU of this kind.",
             f"{data['machine']} ({data['device']}), {data['threads']} threads, {data['dtype']}, torch {data['torch']}, "
             f"commit {data['commit']}{' (with uncommitted changes)' if data['uncommitted_changes'] else ''}, "
             f"{data['date']}, load average {data['load_average']} when written. {s['model']}; "
             f"{s['questions_per_benchmark']} questions of each of {', '.join(s['benchmarks'])} (first turns), "
             f"{s['max_new_tokens']} new tokens, temperature {s['temperature']}; depth {s['depth']}, total tokens "
             f"{s['total_tokens']}; unlabelled EAGLE methods draft with the head `{s['head']}`, `method:LABEL` with the "
             "head LABEL below. Every method ran in one run, question by question (eval.harness), so the speeds are "
             "side by side."]
    heads = [[label, h["block"] or "—", str(h["layers"] or "—"), str(h["steps"] or "—"),
              _num((h["train_s"] or 0) / 60, 1) + " min", h["machine"] or "—", _num(h["heldout/acceptance"], 3),
              _num(h["heldout/top1_1"], 3), f"`{h['directory']}`"] for label, h in data["heads"].items()]
    if heads:
        parts += ["## The heads", "Simulated acceptance: the held-out greedy acceptance length a block or chain "
                  "would reach (bonus token included) as training logged it; top-1 of the first drafted position.",
                  table(["label", "block", "layers", "steps", "trained", "on", "simulated acceptance", "top-1 (1st)",
                         "directory"], heads).rstrip("\n")]
    for benchmark in s["benchmarks"] + [ALL]:
        rows = [[m["method"], str(m["questions"]), str(m["new_tokens"]), _num(m["tok_s"], 1), _x(m["speedup"]),
                 _num(m["tau"]), "—" if m["identical"] is None else f"{m['identical']:.0%}"]
                for m in data["methods"] if m["benchmark"] == benchmark]
        parts += [f"## {'All benchmarks' if benchmark == ALL else benchmark}",
                  table(["method", "questions", "new tokens", "tok/s", "× vanilla", "τ", "identical to vanilla"],
                        rows).rstrip("\n")]
    methods = [m for m in s["methods"] if m != "vanilla"]
    default = DEFAULT_METHOD if DEFAULT_METHOD in methods else None
    parts_of = [p for p in DEFAULT_PARTS.get(default, ()) if p in methods]
    again = f"{default}:{AGAIN}" if parts_of and f"{default}:{AGAIN}" in methods else None

    def ratio(got: dict, top: str, bottom: float | None) -> float | None:
        return got[top]["speedup"] / bottom if top in got and got[top]["speedup"] and bottom else None

    columns = ["benchmark", "question"] + methods + ([f"{default} / best of {' and '.join(parts_of)}"]
                                                     if parts_of else []) + ([f"{again} / {default}"] if again else [])

    def differs(got: dict, m: str) -> bool:  # an answer other than vanilla's
        return got[m].get("identical") is False

    rows, losses, agains, unjudged = [], [], [], 0
    for line in data["questions"]:
        got = line["methods"]
        row = [line["benchmark"], line["question"]] + [
            f"{_x(got[m]['speedup'])} (τ {_num(got[m]['tau'])}){' ≠' if differs(got, m) else ''}" if m in got else "—"
            for m in methods]
        if parts_of:
            best = max((p for p in parts_of if p in got), key=lambda p: got[p]["speedup"] or 0)
            loss = ratio(got, default, got[best]["speedup"])
            other_text = default in got and (differs(got, default) or differs(got, best))
            unjudged += other_text
            losses.append(None if other_text else loss)
            row.append(_x(loss) + (" ≠" if other_text else ""))
        if again:
            agains.append(ratio(got, again, got.get(default, {}).get("speedup")))
            row.append(_x(agains[-1]))
        rows.append(row)
    said = [f"; ≠ marks an answer other than vanilla's" if any("≠" in c for r in rows for c in r) else "",
            f"; the column {default} / best, the default method over the faster of its parts on that question "
            "(below 1.00x: a part alone was faster)" if parts_of else ""]
    if unjudged:
        said.append(f", not judged where the default's or that part's answer differs from vanilla's (on {unjudged} "
                    f"question{'s' if unjudged > 1 else ''}: the two decoded different texts)")
    band = noise_band([a for a in agains if a]) if again else None
    if band:
        judged = [x for x in losses if x]

        def beyond(limit: float) -> str:
            below = [x for x in judged if x < 1 / limit]
            return (f"{1 / limit:.2f}x, on {len(below)} of {len(judged)} questions"
                    + (f" (at worst {min(below):.2f}x)" if below else ""))

        said.append(f"; the last column, the default timed a second time in the same run ({again}, the same head) "
                    f"over its first timing. That spread is the noise. The default is slower than the best of its "
                    f"parts beyond twice the spread's root mean square, below {beyond(band)}; beyond twice its "
                    f"median-based spread (1.4826 median absolute log, unmoved by a few disturbed timings), below "
                    f"{beyond(noise_band([a for a in agains if a], robust=True))}.")
    parts += ["## Per question", "Each method's tok/s over vanilla's on the same question (τ in brackets)"
              + "".join(said) + ("" if band else "."), table(columns, rows).rstrip("\n")]
    return "\n\n".join(parts) + "\n"


def rendered_pages(root: Path, pages_dir: Path) -> dict[Path, str]:
    """Every blocks page under `root`/`pages_dir` and its text, one per blocks result file."""
    pages = {}
    for path in blocks_files(root):
        data = read_blocks(path)
        if path.parent.name != platform_slug(data["machine"]):
            raise EagleError(f"{path}: machine {data['machine']!r} belongs in folder "
                             f"{platform_slug(data['machine'])!r}, not {path.parent.name!r}")
        page = root / pages_dir / page_name(data)
        pages[page] = blocks_page(data, os.path.relpath(path, page.parent))
    return pages


def write_blocks(run_dir: Path, command: str, root: Path) -> Path:
    """The run's blocks result file under `root`'s data folder for its machine; returns its path."""
    data = blocks_result(run_dir, command)
    path = root / DATA_DIR / platform_slug(data["machine"]) / file_name(data["dtype"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    run_step(command_settings("blocks_result", HeadlineSettings, argv), write_blocks)


if __name__ == "__main__":
    main()
