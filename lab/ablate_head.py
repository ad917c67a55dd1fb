"""`make ablate-head` (python -m lab.ablate_head [key=value ...], conf/command/ablate_head.yaml): which training
choices make a draft head good, one at a time.

Rows come from conf/ablate/<recipe>.yaml. Each row trains a head (`eagle_train.cli stage=train` under the deepspeed
launcher, the same command as `make train`, with the row's overrides and a cap on training loss tokens), then
measures τ on MT-bench first turns with the default EAGLE-2 tree through `eval.cli`, and τ on as many of the recipe's
held-out first turns (question set `heldout`: the head's own distribution, so the two τ separate what the head
learned from how far MT-bench lies from its data), and EAGLE-2's speedup over vanilla decoding on the same MT-bench first
turns with the defaults (auto budget, packed weights: the speed a user gets; both methods in one run, so the ratio
is measured side by side; the CPU it ran on is in the row). Every step resumes: a trained
row (summary.json) is not retrained, an interrupted one continues from its DeepSpeed checkpoint, τ records resume.
A row whose features hold fewer loss tokens than it asks for is reported as pending, never trained on less; with
`featurize=true` the recipes its data comes from are featurized first (each resumable, hours per part on a CPU), so one
command carries every row of a spec from nothing to its table.

Everything lives under the cache root ($EAGLE_CACHE or ~/.cache/eagle-toolkit)/ablate-head, so rows that take
hours resume across sessions and checkouts: one directory per row (its DeepSpeed checkpoints, head, summary.json,
τ records) and table.md|csv (held-out top-1 and simulated 0-α..6-α on the one held-out split, both τ,
training time), tau_vs_tokens.png (τ against training loss tokens per family of rows), and coverage.md: the share
of the target's held-out argmax tokens inside draft vocabularies of 4k..32k ids, which justifies the recipe's size.
Finished rows are merged into the checkout's committed result files: the ablation table (lab.ablation_file) and the
rows' training curves (lab.training_curves, held-out top-1 over training and per unrolled step, and the training
loss), whose plot shows the spec's `curves` rows.
On a lent GPU machine, `featurize=true train_only=true conversations=FILE` (docs/gpu.md) featurizes and trains rows
from the kept answers and a conversations file instead of the ShareGPT package, and measures nothing: the rows'
directories come back to a CPU machine, where the same command without those options measures and records them.
`spec=NAME` takes the rows of conf/ablate/NAME.yaml instead, trained with the recipe it names, under ablate-NAME/
(`make reproduce` trains the draft-inputs spec so; its eval.heldout: false skips the held-out τ); `questions=N`
sets the questions of every τ and speed run.
"""
from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from eagle_infer.entry.cli_support import check_recipe_arg, one_line_errors, setup_logging
from eagle_infer.paths import CONF_DIR, REPO
from eagle_infer.errors import EagleError
from eagle_infer.platform import cache_root, cpu
from eagle_infer.models.target import load_target
from eagle_train.cli import TrainRunConf  # noqa: F401 (registers the schema `recipes=` composes over)
from eagle_train.plumbing.command_line import command_settings
from eagle_train.data.conversations import SHAREGPT_PACKAGE
from eagle_train.features.shards import Manifest, read_samples
from eagle_train.launch import accelerator_env, free_port
from eagle_train.training.objective import frequent_tokens
from eagle_train.plumbing.provenance import checkout_commit
from eagle_train.training.train import ALPHA_STEPS, HeadConf, TrainConfig
from eagle_train.plumbing.markdown import table
from eval.metrics import ALL, summarize, tau
from eval.records import read_records
from lab.declared_findings import check_finding
from lab.ablation_file import ABLATION, FIGURES, ablation_path, full_lines, plot_path
from lab.result_store import merge, read
from lab.training_curves import CURVES, curves_path, curves_plot_path, plot_curves, row_curves

log = logging.getLogger("ablate")
COVERAGE_SIZES = (4096, 8192, 16384, 32768)


def _load_yaml(path: Path) -> dict:
    """A YAML config with its ${...} interpolations resolved (${eagle_cache:} included)."""
    return OmegaConf.to_container(OmegaConf.load(path), resolve=True)


# self_features / self_more_features: a row's own self-written recipe / further parts (one name or a list)
ROW_KEYS = {"name", "loss_tokens", "overrides", "self_features", "self_more_features"}


def load_spec(recipe: str) -> dict:
    path = REPO / "conf" / "ablate" / f"{recipe}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in (REPO / "conf" / "ablate").glob("*.yaml"))
        raise EagleError(f"no ablation spec for recipe {recipe!r}: known are {', '.join(known)}")
    spec = _load_yaml(path)
    names = [r["name"] for r in spec["rows"]]
    if len(set(names)) != len(names):
        raise EagleError(f"{path}: row names repeat: {names}")
    for row in spec["rows"]:
        if set(row) - ROW_KEYS:
            raise EagleError(f"{path}: row {row['name']!r} has unknown keys {sorted(set(row) - ROW_KEYS)}: expected "
                             f"{', '.join(sorted(ROW_KEYS))}")
    stray = [c for c in spec.get("curves", []) if c not in names]
    if stray:
        raise EagleError(f"{path}: curves names {stray[0]!r}, which is no row: expected some of {', '.join(names)}")
    for finding in spec.get("findings", []):
        check_finding(path, finding, names)
    return spec


def recipe(name: str, overrides: list[str] | tuple[str, ...] = ()) -> dict:
    """The training config `eagle_train.cli recipes=<name> [overrides]` runs: composed by Hydra (the schema's
    defaults, the recipes in its defaults list, then its own keys, then the overrides), interpolations resolved."""
    check_recipe_arg([f"recipes={name}", *overrides])
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose("train", [f"recipes={name}", *overrides, f"hydra.searchpath=[file://{REPO}]"])
    return OmegaConf.to_container(cfg, resolve=True)


def named_rows(spec: dict, names: list[str]) -> list[dict]:
    """The spec's rows named in `names`, in the spec's order; an unknown name is a one-line error."""
    known = [r["name"] for r in spec["rows"]]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise EagleError(f"unknown ablation row {unknown[0]!r}: expected some of {', '.join(known)}")
    return [r for r in spec["rows"] if r["name"] in names]


def row_settings(name: str, row_name: str) -> tuple[TrainConfig, HeadConf]:
    """The training and head settings the row `row_name` of conf/ablate/<name>.yaml trains with: recipes/<name>.yaml
    composed with the row's overrides, as `make ablate-head` passes them."""
    spec = load_spec(name)
    [row] = named_rows(spec, [row_name])
    composed = recipe(name, row_overrides(spec, name, row)[0])
    return (OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(TrainConfig), composed["train"])),
            OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(HeadConf), composed["head"])))


def features_dir(name: str) -> Path:
    """The recipe's feature directory (its data.features_dir; the training default otherwise)."""
    return Path(recipe(name)["data"]["features_dir"])


def _run(cmd: list[str], log_path: Path) -> None:
    env = {**os.environ, **accelerator_env()}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log.info("$ %s  (log: %s)", " ".join(cmd), log_path)
    with log_path.open("a") as f:
        code = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if code:
        tail = log_path.read_text().strip().splitlines()[-1:] or [""]
        raise EagleError(f"{cmd[0]} exited with {code}: {tail[0]} (see {log_path})")


def _loss_tokens(directory: Path) -> int:
    return Manifest.load(directory).loss_tokens if (directory / "manifest.json").exists() else 0


def _fixed_features(out: Path, spec: dict, name: str) -> Path:
    """Featurize ShareGPT's own answers (the fixed-data row's features) once; resumes like any featurize."""
    root = Path(spec["fixed_features"])
    if not (root / "train" / "manifest.json").exists() or _loss_tokens(root / "train") == 0:
        _run([sys.executable, "-m", "eagle_train.cli", f"recipes={name}", "stage=featurize",
              "featurize.regenerate=false", "featurize.features=last", f"featurize.max_shards={spec['fixed_shards']}",
              f"data.features_dir={root}"], out / "logs" / "featurize-fixed.log")
    return root / "train"


DATA_WORDS = ("fixed", "more", "self", "self-only")  # row overrides that name feature directories


def _self_features(spec: dict, row: dict) -> Path:
    return features_dir(row.get("self_features") or spec["self_features"]) / "train"


def _self_more(spec: dict, row: dict) -> list[str]:
    """The recipes of the self-written prompts' further parts: the row's self_more_features, else the spec's."""
    more = row.get("self_more_features") or spec.get("self_more_features") or []
    return [more] if isinstance(more, str) else list(more)


def row_overrides(spec: dict, name: str, row: dict) -> tuple[list[str], list[Path]]:
    """(the overrides a row trains with on top of recipes/<name>.yaml, later ones winning; its feature directories).
    The row's own overrides come after the spec's shared ones; DATA_WORDS name feature directories: `fixed`
    ShareGPT's own answers, `self` the recipe's features and the self-written prompts' in equal shares of loss
    tokens, `self-only` the self-written prompts alone, `more` the data's second part (with `self-only`, the
    self-written prompts' further parts, in equal shares with the first; with `self`, both sources' further parts,
    every directory an equal share). A row's `self_features` names another
    recipe for the self-written prompts than the spec's, its `self_more_features` other further parts."""
    words = [a for a in row["overrides"] if a in DATA_WORDS]
    args = [f"train.max_loss_tokens={row['loss_tokens']}", *spec.get("train", []),
            *(a for a in row["overrides"] if a not in DATA_WORDS)]
    feats, more = [features_dir(name) / "train"], [spec.get("more_features")]
    if "fixed" in words:  # ShareGPT's own answers (_fixed_features makes them)
        feats = [Path(spec["fixed_features"]) / "train"]
    if "self-only" in words:
        feats, more = [_self_features(spec, row)], _self_more(spec, row)
    if "more" in words:  # the further parts of the data, each featurized by its own recipe
        feats.extend(features_dir(part) / "train" for part in more)
    if "self" in words:
        feats.append(_self_features(spec, row))
        if "more" in words:
            if not _self_more(spec, row):  # else the self-written share would silently shrink to a third
                raise EagleError(f"row {row['name']!r}: `self` with `more` needs self_more_features (the "
                                 "self-written prompts' further parts); neither the row nor the spec names any")
            feats.extend(features_dir(part) / "train" for part in _self_more(spec, row))
    if feats[0] != features_dir(name) / "train":
        args.append(f"train.features_dir={feats[0]}")
    if len(feats) > 1:
        args.append(f"train.extra_features=[{','.join(str(f) for f in feats[1:])}]")
    if "self" in words or ("self-only" in words and len(feats) > 1):
        args.append("train.equal_shares=true")
    return args, feats


def row_recipes(spec: dict, name: str, row: dict, feats: list[Path]) -> list[str]:
    """The recipes whose feature directories are among `feats` (the fixed-data directory is none: _fixed_features
    makes it), in the order of `feats`."""
    names = [name, spec.get("more_features"), row.get("self_features") or spec.get("self_features"),
             *_self_more(spec, row)]
    by_dir = {features_dir(r) / "train": r for r in names if r}
    return [by_dir[f] for f in feats if f in by_dir]


def heldout_missing(name: str) -> bool:
    """Whether the held-out features recipe `name` trains against (its train.heldout, scored during training) are
    not featurized yet."""
    heldout = recipe(name)["train"]["heldout"]
    return bool(heldout) and not (Path(heldout) / "manifest.json").exists()


def featurize_command(part: str, conversations: str | None = None) -> list[str]:
    """`eagle_train.cli stage=featurize` of recipe `part`; `conversations` (a file stage=export-conversations wrote)
    replaces the ShareGPT package where the recipe reads it, for a machine without the package (a lent GPU)."""
    cmd = [sys.executable, "-m", "eagle_train.cli", f"recipes={part}", "stage=featurize"]
    if conversations is not None and recipe(part)["data"]["source"] == SHAREGPT_PACKAGE:
        if not Path(conversations).is_file():
            raise EagleError(f"conversations={conversations!r} does not exist: expected the .jsonl file "
                             "`eagle_train.cli stage=export-conversations` writes")
        cmd.append(f"data.source={Path(conversations).resolve()}")
    return cmd


def train_row(out: Path, spec: dict, name: str, row: dict, featurize: bool = False,
              conversations: str | None = None) -> str:
    """Train the row's head under out/<row> unless done; returns "done" or why it is pending. featurize=True first
    featurizes (resuming) the recipes of a row whose directories hold too few loss tokens (reading `conversations`
    for ShareGPT, see featurize_command)."""
    row_dir = out / row["name"]
    if (row_dir / "summary.json").exists():
        return "done"
    args, feats = row_overrides(spec, name, row)
    if "fixed" in row["overrides"]:
        _fixed_features(out, spec, name)
    equal = "train.equal_shares=true" in args

    def held() -> int:
        return min(_loss_tokens(f) for f in feats) * len(feats) if equal else sum(_loss_tokens(f) for f in feats)

    have = held()
    if have < row["loss_tokens"] and featurize:
        for part in row_recipes(spec, name, row, feats):
            _run(featurize_command(part, conversations), out / "logs" / f"featurize-{part}.log")
        have = held()
    if have < row["loss_tokens"]:
        where = " + ".join(str(f) for f in feats)
        return f"pending: {where} holds {have} loss tokens, the row needs {row['loss_tokens']}"
    if featurize and heldout_missing(name):  # a row reading none of the recipe's own data still is scored on it
        _run(featurize_command(name, conversations) + ["featurize.max_shards=1"],  # the split and one train shard
             out / "logs" / f"featurize-{name}-heldout.log")
    # DeepSpeed's launcher as a module (what its `deepspeed` script runs): no script path, so it also runs where
    # DeepSpeed was installed without one on PATH (a lent GPU machine's --target install).
    _run([sys.executable, "-m", "deepspeed.launcher.runner", "--num_gpus", "1", "--master_port", str(free_port()),
          "--no_local_rank", "--module", "eagle_train.cli", f"recipes={name}", "stage=train",
          f"train.out_dir={row_dir}", "train.wandb_mode=disabled", *args], out / "logs" / f"{row['name']}.log")
    return "done"


HELDOUT = "heldout"  # the second τ's question set: the recipe's held-out prompts (eagle_train.cli stage=heldout-questions)


def tau_run(row: dict, bench: str = "") -> str:
    """The eval run of a row's τ on the spec's benchmark (bench ""), or on another question set."""
    return f"{row['name']}-tau" + (f"-{bench}" if bench else "")


def heldout_questions(out: Path, name: str) -> Path:
    """The recipe's held-out first turns as eval's question set `heldout`, written once beside its held-out features."""
    path = features_dir(name) / HELDOUT / "question.jsonl"
    if not path.exists():
        _run([sys.executable, "-m", "eagle_train.cli", f"recipes={name}", "stage=heldout-questions"],
             out / "logs" / "heldout-questions.log")
    return path


def tau_row(out: Path, spec: dict, name: str, row: dict, bench: str = "") -> float | None:
    """Measure τ of the row's head on the spec's benchmark, or with bench=HELDOUT on the recipe's held-out prompts
    (records resume; a complete set is not rerun)."""
    model = recipe(name)["model"]["name"]
    ev = spec["eval"]
    records = out / tau_run(row, bench) / "records.jsonl"
    if records.exists() and len(read_records(records)) >= ev["questions"]:
        return recorded_tau(out, row, bench)
    questions = [f"bench.names=[{ev['bench']}]"]
    if bench == HELDOUT:
        heldout_questions(out, name)
        questions = [f"bench.names=[{HELDOUT}]", f"bench.data_dir={features_dir(name)}"]
    # Unpacked weights (model.pack=off): τ is a property of the head, so it must not depend on the CPU's kernels; the
    # fixed EAGLE-2 tree (infer.budget=fixed: depth 6, top-k 8, 32 tokens), so τ does not depend on a cost model.
    _run([sys.executable, "-m", "eval.cli", f"model.name={model}", "model.pack=off", f"results_dir={out}",
          f"run={tau_run(row, bench)}", "methods=[eagle2]", "infer.budget=fixed",
          f"infer.head={out / row['name'] / 'head'}", *questions, f"bench.limit={ev['questions']}",
          "bench.max_turns=1", f"infer.max_new_tokens={ev['max_new_tokens']}", "wandb.mode=disabled"],
         out / "logs" / f"{tau_run(row, bench)}.log")
    return recorded_tau(out, row, bench)


def recorded_tau(out: Path, row: dict, bench: str = "") -> float | None:
    """τ over every cycle of the row's τ records (on the spec's benchmark, or `bench`), None before any."""
    records = out / tau_run(row, bench) / "records.jsonl"
    return tau([c for r in read_records(records) for c in r["cycles"]]) if records.exists() else None


def speed_run(row: dict) -> str:
    return f"{row['name']}-speed"


def speed_row(out: Path, spec: dict, name: str, row: dict) -> dict:
    """EAGLE-2 (defaults: auto budget, packed) against vanilla on the spec's benchmark, both in one eval run
    (records resume); returns recorded_speed."""
    ev = spec["eval"]
    records = out / speed_run(row) / "records.jsonl"
    if not records.exists() or len(read_records(records)) < 2 * ev["questions"]:
        _run([sys.executable, "-m", "eval.cli", f"model.name={recipe(name)['model']['name']}", f"results_dir={out}",
              f"run={speed_run(row)}", "methods=[vanilla,eagle2]", f"infer.head={out / row['name'] / 'head'}",
              f"bench.names=[{ev['bench']}]", f"bench.limit={ev['questions']}", "bench.max_turns=1",
              f"infer.max_new_tokens={ev['max_new_tokens']}", "wandb.mode=disabled"],
             out / "logs" / f"{speed_run(row)}.log")
        (out / speed_run(row) / "cpu.txt").write_text(cpu().label + "\n")
    return recorded_speed(out, row)


def recorded_speed(out: Path, row: dict) -> dict:
    """{"speedup": EAGLE-2 tok/s / vanilla tok/s, "speed_cpu": the CPU it was measured on}, None before both ran."""
    run = out / speed_run(row)
    records = run / "records.jsonl"
    rows = [r for r in summarize(read_records(records)) if r.benchmark == ALL and r.method == "eagle2"] if records.exists() else []
    machine = (run / "cpu.txt").read_text().strip() if (run / "cpu.txt").exists() else None
    return {"speedup": rows[0].speedup_vs_vanilla if rows else None, "speed_cpu": machine}


def row_result(out: Path, row: dict, status: str, tau_value: float | None, tau_heldout: float | None = None,
               speed: dict | None = None) -> dict:
    summary_path = out / row["name"] / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    result = {"row": row["name"], "status": status, "loss_tokens": summary.get("loss_tokens"),
              "epochs": summary.get("epochs"), "top1": summary.get("heldout/top1"), "tau": tau_value,
              "tau_heldout": tau_heldout, **(speed or {"speedup": None, "speed_cpu": None}),
              "train_min": summary["train_s"] / 60 if "train_s" in summary else None}
    for k in range(ALPHA_STEPS):  # NaN: no chain reached position k in the held-out split, so no figure
        alpha = summary.get(f"heldout/alpha_{k}")
        result[f"alpha_{k}"] = None if alpha is None or math.isnan(alpha) else alpha
    return result


def record_rows(root: Path, spec_name: str, spec: dict, out: Path, results: list[dict]) -> Path | None:
    """Merge the finished rows of `results` into the committed ablation file of the checkout `root`
    (lab.ablation_file), each with the machine its head trained on and the checkout's commit; returns the file when
    it changed. Outside a git checkout nothing is written."""
    try:
        commit, changed = checkout_commit(root, exclude=("docs",))  # the code's state, not the results being written
    except EagleError as err:
        log.warning("ablation file not updated: %s", err)
        return None
    lines = []
    for result in results:
        if result["status"] != "done":
            continue
        card = out / result["row"] / "head" / "card.json"
        machine = json.loads(card.read_text()).get("machine") if card.exists() else None
        lines.append({**result, "trained_on": machine,
                      "commit": commit + (" with uncommitted changes" if changed else "")})
    path = ablation_path(root, spec_name)
    return path if merge(ABLATION, path, full_lines(lines), [r["name"] for r in spec["rows"]]) else None


def record_curves(root: Path, spec_name: str, spec: dict, out: Path, results: list[dict]) -> Path | None:
    """Merge the training curves of the finished rows of `results` whose logs are in `out` into the checkout's
    curve file (lab.training_curves) and redraw its plot of the spec's `curves` rows; returns the plot when the
    file changed."""
    rows = {r["row"]: row_curves(out / r["row"]) for r in results if r["status"] == "done"}
    path = curves_path(root, spec_name)
    if not merge(CURVES, path, {name: c for name, c in rows.items() if c}, [r["name"] for r in spec["rows"]]):
        return None
    return plot_curves(read(CURVES, path), spec.get("curves", []), curves_plot_path(root, spec_name))


def _fmt(value, digits: int = 3) -> str:
    if value is None:
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def write_table(out: Path, results: list[dict]) -> str:
    out.mkdir(parents=True, exist_ok=True)
    columns = ["row", *FIGURES, "status"]
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({c: r.get(c) for c in columns} for r in results)
    head = (["row", "loss tokens", "epochs", "held-out top-1"] + [f"{k}-α" for k in range(ALPHA_STEPS)]
            + ["τ", "τ held-out prompts", "EAGLE-2 × vanilla", "speed measured on", "train min", ""])
    markdown = table(head, [
        [r["row"], _fmt(r["loss_tokens"]), _fmt(r["epochs"]), _fmt(r["top1"])]
        + [_fmt(r[f"alpha_{k}"]) for k in range(ALPHA_STEPS)]
        + [_fmt(r["tau"], 2), _fmt(r.get("tau_heldout"), 2), _fmt(r.get("speedup"), 2), _fmt(r.get("speed_cpu")),
           _fmt(r["train_min"], 1), "" if r["status"] == "done" else r["status"]]
        for r in results
    ])
    (out / "table.md").write_text(markdown)
    return markdown


def family(name: str) -> str:
    """Rows that differ only in data size share a family: 'ttt3-100k' and 'ttt3' are both 'ttt3'; the baseline's
    smaller points are 'regen-*'."""
    base = name.rsplit("-", 1)[0] if name.rsplit("-", 1)[-1].endswith("k") else name
    return "baseline" if base in ("regen", "baseline") else base


def plot(out: Path, results: list[dict]) -> Path | None:
    """τ against training loss tokens per family: MT-bench solid, the recipe's held-out prompts dashed (same colour)."""
    points: dict[str, list[tuple[int, float, float | None]]] = {}
    for r in results:
        if r["tau"] is not None and r["loss_tokens"] and not r["row"].startswith("fixed"):
            points.setdefault(family(r["row"]), []).append((r["loss_tokens"], r["tau"], r.get("tau_heldout")))
    if not points:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8))
    colours = plt.get_cmap("tab20").colors  # one colour per family: the default cycle repeats after ten
    for i, (name, pts) in enumerate(sorted(points.items())):
        pts.sort()
        line = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name,
                       color=colours[i % len(colours)])[0]
        held = [(p[0], p[2]) for p in pts if p[2] is not None]
        if held:
            ax.plot([p[0] for p in held], [p[1] for p in held], marker="x", linestyle="--", color=line.get_color())
    ax.set_xscale("log")
    ax.set_xlabel("training loss tokens")
    ax.set_ylabel("τ, default tree (—: MT-bench, --: held-out)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    ax.grid(alpha=0.3)
    path = out / "tau_vs_tokens.png"
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def coverage(out: Path, name: str) -> str:
    """Share of the target's held-out argmax tokens (at loss positions) inside the draft vocabulary made from the
    training features' most frequent answer tokens, per vocabulary size."""
    import torch


    root = features_dir(name)
    model = recipe(name)["model"]["name"]
    target = load_target(model, "float32", "cpu")
    train, heldout = read_samples(root / "train", aux=False), read_samples(root / "heldout", aux=False)
    with torch.no_grad():
        argmax = torch.cat([target.lm_head(s.hidden[1:-1].float())[s.loss_mask[2:] > 0].argmax(-1) for s in heldout])
    shares = [(size, torch.isin(argmax, frequent_tokens(train, size)).float().mean().item()) for size in COVERAGE_SIZES]
    markdown = (f"Draft-vocabulary coverage: {argmax.numel()} held-out target argmax tokens, vocabularies from "
                f"{sum(int(s.loss_mask[2:].sum()) for s in train)} training loss tokens ({root}).\n\n"
                + table(["draft_vocab_size", "coverage"], [[size, f"{share:.4f}"] for size, share in shares]))
    out.mkdir(parents=True, exist_ok=True)
    (out / "coverage.md").write_text(markdown)
    return markdown


@dataclass
class AblateSettings:
    """conf/command/ablate_head.yaml's settings."""

    recipe: str
    spec: str | None
    rows: list[str]
    table_only: bool
    featurize: bool
    train_only: bool
    conversations: str | None
    coverage: bool
    questions: int | None
    out: str | None
    results_root: str | None


@one_line_errors
def main(argv: list[str] | None = None) -> None:
    args = command_settings("ablate_head", AblateSettings, argv)
    results_root = Path(args.results_root) if args.results_root else REPO
    setup_logging()
    out = Path(args.out) if args.out else cache_root() / (f"ablate-{args.spec}" if args.spec else "ablate-head")
    log.info("ablation runs in %s", out)
    try:
        spec = load_spec(args.spec or args.recipe)
        name = spec["recipe"] if args.spec else args.recipe
        if args.questions is not None:
            if args.questions < 1:
                raise EagleError(f"questions={args.questions} is invalid: expected a positive number of questions")
            spec["eval"]["questions"] = args.questions
        benches = ("", HELDOUT) if spec["eval"].get("heldout", True) else ("",)  # eval.heldout: false: MT-bench only
        wanted = list(args.rows)
        named_rows(spec, wanted)  # an unknown name stops here
        results = []
        for row in spec["rows"]:
            picked = (not wanted or row["name"] in wanted) and not args.table_only
            if picked:
                status = train_row(out, spec, name, row, args.featurize, args.conversations)
            else:
                status = "done" if (out / row["name"] / "summary.json").exists() else "not run"
            if picked and status == "done" and not args.train_only:
                taus = [tau_row(out, spec, name, row, b) if b in benches else None for b in ("", HELDOUT)]
                speed = speed_row(out, spec, name, row)
            else:
                taus = [recorded_tau(out, row, b) for b in ("", HELDOUT)]
                speed = recorded_speed(out, row)
            results.append(row_result(out, row, status, *taus, speed))
            write_table(out, results)
        print(write_table(out, results))
        # The committed file holds rows scored on the spec's own questions only (`questions` changes what τ means),
        # and only after they were measured (train_only=true measures nothing).
        keep = args.questions is None and not args.train_only
        recorded = None if not keep else record_rows(
            results_root, args.spec or args.recipe, spec, out, results)
        if recorded:
            print(f"updated {recorded}: commit it, then run make results-docs")
        drawn = None if not keep else record_curves(
            results_root, args.spec or args.recipe, spec, out, results)
        if drawn:
            print(f"training curves: {drawn}")
        # τ against data for every row the committed file holds (rows of earlier sessions too), else this run's
        committed = read(ABLATION, ablation_path(results_root, args.spec or args.recipe))
        picture = plot(out, list(committed.values()) if committed else results)
        if picture:
            print(f"plot: {picture}")
        if picture and recorded:
            shutil.copyfile(picture, plot_path(results_root, args.spec or args.recipe))
        if args.coverage:
            print(coverage(out, name))
    except EagleError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
