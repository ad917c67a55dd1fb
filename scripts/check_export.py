"""Exports checked by the serving stack's own library (make check-export).

For each head kind x target family x export format, the head is exported (eagle_train.export.formats), the layouts
speculators reads are turned into its format by `speculators convert` (its convert_model entry point, validated on
the CPU), and the result is loaded with speculators' own classes (SpeculatorModel.from_pretrained, the class
`vllm serve` configs name). Both the toolkit's head and speculators' model then draft on the same fused target
states, tokens and positions; a row passes when the draft logits differ by at most 1e-4 (float32) and the top-1
token agrees at every position.

Heads: the shipped head (eagle_infer/shipped_heads/smollm2-135m, an EAGLE-1-block head: speculators has no EAGLE-1 model,
so its row says so), and random EAGLE-3-block heads, plain and EAGLE-3.1 (fc_norm, norm_output; every weight
perturbed so each one matters; a draft vocabulary of random, unordered ids), compared over two drafting steps (the
second fed the first's predicted feature) on SmolLM2-135M (--smollm2, the real target) and on tiny random targets of each family
(llama, llama with Llama 3 rope scaling, mistral, qwen2, qwen3; rope_theta 50,000 so a dropped rope_theta shows).
Formats a server refuses for a family print the refusal.

DFlash drafters (random, perturbed, a third of the vocabulary; 2 layers and blocks of 4 on the tiny targets, 1 layer
and blocks of 8 on SmolLM2-135M): first every block of a `--positions`-token context against speculators'
DFlashDraftModel built from its config class with the drafter's weights (bound 1e-5), then the speculators export
loaded by SpeculatorModel.from_pretrained drafting from the target's own states, which each side picks by its own
layer convention (ours: decoder-layer outputs; speculators: transformers' hidden_states at its aux ids), so the
export's aux ids (our layers + 1) are checked by the load (bound 1e-4).

usage: python scripts/check_export.py [--smollm2] [--families llama,qwen3,...] [--positions 19] [--work DIR]
Prints one row per (head kind x target family x format) and exits 1 when a loaded row is outside the bound.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from eagle_infer.head.dflash_head import DFlashHead, block_mask, random_dflash_head  # noqa: E402
from eagle_infer.head.mask_token import default_mask_token  # noqa: E402
from eagle_infer.head.draft_head import DraftHead, random_head  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_train.training.objective import ttt_outputs  # noqa: E402
from eagle_train.export.formats import (FORMATS, ExportSettings, check_servable, dflash_layer_config, export,  # noqa: E402
                                        layer_type)

TOLERANCE = 1e-4
FAMILIES = ("llama", "llama3", "mistral", "qwen2", "qwen3")
ROPE_THETA = 50000.0  # not any family's default: a loader that drops it falls back to 10,000 visibly


@dataclass
class Row:
    """One (head kind, target family, format) check: how speculators got the export, and the comparison."""

    head: str
    family: str
    fmt: str
    route: str
    max_diff: float = float("nan")
    top1: int = 0
    positions: int = 0
    bound: float = TOLERANCE

    @property
    def loaded(self) -> bool:
        return self.positions > 0

    @property
    def ok(self) -> bool:
        return not self.loaded or (self.max_diff <= self.bound and self.top1 == self.positions)

    def line(self) -> str:
        result = (f"max|diff| {self.max_diff:.2e}  top-1 {self.top1}/{self.positions}  "
                  f"{'ok' if self.ok else 'FAIL'}") if self.loaded else "-"
        return f"{self.head:<26} {self.family:<8} {self.fmt:<12} {self.route:<60} {result}"


def unavailable() -> str | None:
    """Why speculators cannot be used here (None when it imports)."""
    try:
        import speculators  # noqa: F401
    except Exception as err:  # noqa: BLE001 (any import failure of an optional package is reported as is)
        return f"speculators does not import ({type(err).__name__}: {err})"
    return None


def perturbed(head: DraftHead, seed: int = 7) -> DraftHead:
    """The head with every weight drawn anew (norms near 1), so that each one shows in the drafts."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in head.parameters():
            noise = torch.randn(p.shape, generator=gen) * 0.05
            p.copy_((noise + (1.0 if p.dim() == 1 else 0.0)).to(p.dtype))
    return head


def eagle3_head(target, seed: int = 7, eagle31: bool = False) -> DraftHead:
    """A random EAGLE-3-block head (eagle31: with EAGLE-3.1's fc_norm and norm_output) drafting a third of the
    vocabulary, its ids in random order, weights stored as an export stores them (bfloat16)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = torch.randperm(target.vocab_size, generator=gen)[: target.vocab_size // 3]
    head = perturbed(random_head(target, block="eagle3", draft_vocab=vocab, fc_norm=eagle31, norm_output=eagle31), seed)
    with torch.no_grad():
        for p in head.parameters():
            p.copy_(p.to(torch.bfloat16).to(p.dtype))
    return head


def tiny_family_target(family: str, vocab: int = 300):
    """A tiny random target of `family` (8 layers: distinct fused layers), rope_theta ROPE_THETA."""
    from tests.tiny import tiny_target

    return tiny_target(vocab=vocab, hidden=64, layers=8, arch=family, name=f"tiny-{family}", rope_theta=ROPE_THETA)


def inputs(head: DraftHead, positions: int, seed: int = 3):
    """(fused target states [1, T, k*H], tokens [1, T], positions [1, T]) in float32."""
    gen = torch.Generator().manual_seed(seed)
    width = head.config.hidden_size * max(1, len(head.config.feature_layers))
    features = torch.randn(1, positions, width, generator=gen)
    tokens = torch.randint(0, head.config.vocab_size, (1, positions), generator=gen)
    return features, tokens, torch.arange(positions)[None]


def toolkit_logits(head: DraftHead, features, tokens, positions) -> torch.Tensor:
    """The toolkit's draft logits [2T - 1, V] (-inf outside the draft vocabulary) of two drafting steps: the first at
    every position, then the second of the chains started at positions 0..T-2 (the head fed its own first
    prediction: the training-time test's step 1)."""
    with torch.no_grad():
        first, second = ttt_outputs(head, features.to(head.weight.dtype), tokens, positions, 1)
        return head.logits(torch.cat((first[0], second[0, 1:]))).float()


def load_speculators(directory: Path):
    """SpeculatorModel.from_pretrained of an export, float32, in eval mode, attending with SDPA over speculators' dense
    masks (its training option draft_attn_impl; its default flex-attention masks are padded to 128 positions, which
    a second drafting step over fewer positions refuses on a CPU)."""
    from speculators import SpeculatorModel, SpeculatorModelConfig

    config = SpeculatorModelConfig.from_pretrained(str(directory))
    config.transformer_layer_config._attn_implementation = "sdpa"
    return SpeculatorModel.from_pretrained(str(directory), config=config).float().eval()


def speculators_logits(directory: Path, features, tokens, positions) -> tuple[torch.Tensor, torch.Tensor]:
    """speculators' draft logits [2T - 1, Vd] for the checkpoint in `directory` (loaded by SpeculatorModel, float32,
    two steps of its forward, the LM head's outputs captured: the first at every position, the second of the chains
    started at 0..T-2, fed the data's next tokens as toolkit_logits is) and the target ids of its Vd columns."""
    model = load_speculators(directory)
    captured = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: captured.append(out))
    with torch.no_grad():
        model(hidden_states=features, input_ids=tokens, document_ids=torch.zeros_like(tokens),
              position_ids=positions, ttt_steps=2)
    hook.remove()
    vd = captured[0].shape[-1]
    ids = torch.arange(vd) + (model.d2t.long() if model.d2t is not None else 0)
    return torch.cat((captured[0][0], captured[1][0, :-1])).float(), ids


def compare(head: DraftHead, directory: Path, positions: int) -> tuple[float, int]:
    """(max abs difference of the draft logits, positions whose top-1 target token agrees) over two drafting
    steps (2 x positions - 1 rows)."""
    features, tokens, pos = inputs(head, positions)
    ours = toolkit_logits(head, features, tokens, pos)
    theirs, ids = speculators_logits(directory, features, tokens, pos)
    if int(torch.isfinite(ours[0]).sum()) != ids.numel() or not bool(torch.isfinite(ours[:, ids]).all()):
        return float("inf"), 0  # the two draft different vocabularies
    diff = float((ours[:, ids] - theirs).abs().max())
    top1 = int((ours.argmax(-1) == ids[theirs.argmax(-1)]).sum())
    return diff, top1


def speculators_dflash(head: DFlashHead):
    """speculators' DFlashDraftModel built from its config class with `head`'s shape and weights (float32; SDPA
    attention over the dense masks speculators builds for it; the target's embedding and LM-head rows of the draft
    vocabulary, ascending, and its final norm, as speculators loads them from a verifier)."""
    from speculators.config import SpeculatorsConfig, VerifierConfig
    from speculators.models.dflash import DFlashDraftModel, DFlashSpeculatorConfig
    from speculators.proposals.greedy import GreedyTokenProposalConfig

    c = head.config
    layer = dflash_layer_config(head, "float32")
    verifier = VerifierConfig(name_or_path=None, architectures=[type(head.target.model).__name__])
    config = DFlashSpeculatorConfig(
        transformer_layer_config=layer, draft_vocab_size=c.draft_vocab_size or c.vocab_size, block_size=c.block_size,
        aux_hidden_state_layer_ids=[i + 1 for i in c.feature_layers], mask_token_id=c.mask_token_id,
        sliding_window_non_causal=c.block_attention == "bidirectional",
        speculators_config=SpeculatorsConfig(algorithm="dflash", default_proposal_method="greedy", verifier=verifier,
                                             proposal_methods=[GreedyTokenProposalConfig(
                                                 speculative_tokens=c.block_size - 1)]))
    config.transformer_layer_config._attn_implementation = "sdpa"
    model = DFlashDraftModel(config).float().eval()
    ids = torch.arange(c.vocab_size) if head.draft_vocab is None else head.draft_vocab.cpu().sort().values
    state = {k: v.float() for k, v in head.trainable_state_dict().items() if k != "draft_vocab"}
    state["embed_tokens.weight"] = head.target.embed_tokens.weight.float()
    state["lm_head.weight"] = state["verifier_lm_head.weight"] = head.target.lm_head.weight.float()[ids]
    state["verifier_norm.weight"] = head.target.model.model.norm.weight.float()
    if head.draft_vocab is not None:
        t2d = torch.zeros(c.vocab_size, dtype=torch.bool)
        t2d[ids] = True
        state.update(t2d=t2d, d2t=ids - torch.arange(ids.numel()))
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.startswith("rotary_emb")]:
        raise EagleError(f"speculators' DFlash model does not take this head's weights: missing {missing[:3]}, "
                         f"unexpected {unexpected[:3]}")
    return model


def dflash_inputs(head: DFlashHead, length: int, seed: int = 3):
    """(fused target states [1, T, k*H], token ids [1, T]) in float32."""
    gen = torch.Generator().manual_seed(seed)
    features = torch.randn(1, length, head.config.hidden_size * len(head.config.feature_layers), generator=gen)
    return features, torch.randint(0, head.config.vocab_size, (1, length), generator=gen)


def toolkit_blocks(head: DFlashHead, features, tokens, anchors) -> torch.Tensor:
    """The toolkit's DFlash logits [A*B, V] (-inf outside the draft vocabulary) of one block at each anchor [A]."""
    c = head.config
    with torch.no_grad():
        context = head.context_kv(features.to(head.weight.dtype), torch.arange(tokens.shape[1])[None])
        ids, positions = head.block_inputs(tokens[:, anchors], anchors[None])
        mask = block_mask(anchors[None], tokens.shape[1], c.block_size, c.block_attention == "causal",
                          c.sliding_window)
        return head.logits(head(ids, positions, context, mask))[0]


def speculators_blocks(model, features, tokens) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """speculators' DFlash logits [A*B, Vd] of one block at every position it anchors (all T - B of them: the loss
    mask all ones, as many anchors), the anchors [A], and the target ids of the Vd columns."""
    length, block = tokens.shape[1], model.block_size
    with torch.no_grad():
        _, logits, _, _, indices = model._backbone_forward(
            features, tokens, torch.ones_like(tokens), torch.zeros(*tokens.shape, model.hidden_size),
            torch.zeros_like(tokens), max_anchors=length - block)
    ids = torch.arange(logits.shape[-1]) + (model.d2t.long() if model.d2t is not None else 0)
    return logits[0].float(), indices[::block], ids


def target_states(head: DFlashHead, model, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    """The target's fused states of `tokens` [1, T] as each side reads them: ours, the outputs of decoder layers
    feature_layers (Target.features); speculators', transformers' hidden_states[i] for its aux ids i (index 0: the
    embeddings). They agree only when the aux ids are our layers + 1."""
    with torch.no_grad():
        ours = head.target.features(tokens, torch.ones_like(tokens), tuple(head.config.feature_layers))[1]
        hidden = head.target.model.model(input_ids=tokens, output_hidden_states=True).hidden_states
    return ours.float(), torch.cat([hidden[i] for i in model.target_layer_ids], dim=-1).float()


def compare_dflash(head: DFlashHead, model, length: int, states: str = "random") -> tuple[float, int, int]:
    """(max abs difference of the block logits, positions whose top-1 target token agrees, positions) between the
    toolkit's drafter and speculators' `model` on the same tokens and context states: random ones, or the target's
    (states="target": each side picks its layers by its own convention, target_states)."""
    features, tokens = dflash_inputs(head, length)
    theirs_features = features
    if states == "target":
        features, theirs_features = target_states(head, model, tokens)
    theirs, anchors, ids = speculators_blocks(model, theirs_features, tokens)
    ours = toolkit_blocks(head, features, tokens, anchors)[:, ids]
    return float((ours - theirs).abs().max()), int((ours.argmax(-1) == theirs.argmax(-1)).sum()), ours.shape[0]


def convert(export_dir: Path, out: Path, verifier: str, aux: list[int]) -> None:
    """`speculators convert EXPORT --algorithm eagle3 --verifier V --validate-device cpu --algorithm-kwargs
    '{"eagle_aux_hidden_state_layer_ids": aux}'`, through the function that command calls."""
    from speculators.convert import convert_model

    convert_model(model=str(export_dir), verifier=verifier, output_path=str(out), validate_device="cpu",
                  algorithm="eagle3", eagle_aux_hidden_state_layer_ids=aux)


def emit(rows: list[Row], row: Row) -> None:
    """Append `row` and print it."""
    rows.append(row)
    print(row.line(), flush=True)


def refusal(head, kind: str, family: str, fmt: str) -> Row | None:
    """The row of a format whose server refuses `head` (check_servable's line), or None."""
    try:
        check_servable(head, fmt)
    except EagleError as err:
        return Row(kind, family, fmt, f"refused: {err}")
    return None


def check_head(head: DraftHead, kind: str, family: str, verifier: str, work: Path, positions: int) -> list[Row]:
    """One row per format for `head` (its target saved at `verifier`)."""
    rows = []
    for fmt in FORMATS:
        refused = refusal(head, kind, family, fmt)
        if refused is not None:
            emit(rows, refused)
            continue
        directory = work / f"{kind}-{family}-{fmt}"
        export(head, fmt, directory, ExportSettings(verifier=verifier, overwrite=True, dtype="float32"))
        if fmt != "speculators":
            if layer_type(head) != "llama":
                emit(rows, Row(kind, family, fmt, "not read: speculators convert builds Llama layers only"))
                continue
            converted = directory.with_name(directory.name + "-converted")
            convert(directory, converted, verifier, [i + 1 for i in head.config.feature_layers])
            directory, route = converted, "speculators convert -> SpeculatorModel.from_pretrained"
        else:
            route = "SpeculatorModel.from_pretrained"
        diff, top1 = compare(head, directory, positions)
        emit(rows, Row(kind, family, fmt, route, diff, top1, 2 * positions - 1))
    return rows


FORWARD_BOUND = 1e-5  # the drafter against speculators' DFlashDraftModel built with its weights (float32)


def dflash_head(target, mask_token_id: int, layers: int, block_size: int, seed: int = 7) -> DFlashHead:
    """A random DFlash drafter drafting a third of the vocabulary, its ids in random order, every weight perturbed."""
    gen = torch.Generator().manual_seed(seed)
    vocab = torch.randperm(target.vocab_size, generator=gen)[: target.vocab_size // 3]
    return perturbed(random_dflash_head(target, mask_token_id, layers=layers, block_size=block_size, draft_vocab=vocab),
                     seed)


def check_dflash(head: DFlashHead, family: str, verifier: str, work: Path, positions: int) -> list[Row]:
    """A DFlash drafter's rows: its block logits against DFlashDraftModel built from speculators' config class with
    its weights (random context states, <= FORWARD_BOUND), then per format the export speculators loads
    (SpeculatorModel.from_pretrained, drafting from the target's own states picked by the export's aux ids)."""
    kind = "dflash (random)"
    diff, top1, n = compare_dflash(head, speculators_dflash(head), positions)
    rows: list[Row] = []
    emit(rows, Row(kind, family, "forward", "DFlashDraftModel(its config class) with these weights", diff, top1, n,
                   FORWARD_BOUND))
    for fmt in FORMATS:
        refused = refusal(head, kind, family, fmt)
        if refused is not None or fmt != "speculators":
            emit(rows, refused or Row(kind, family, fmt, "written, not read: speculators reads its own layout only"))
            continue
        directory = work / f"dflash-{family}-{fmt}"
        export(head, fmt, directory, ExportSettings(verifier=verifier, overwrite=True, dtype="float32"))
        diff, top1, n = compare_dflash(head, load_speculators(directory), positions, states="target")
        emit(rows, Row(kind, family, fmt, "SpeculatorModel.from_pretrained, states by its aux ids", diff, top1, n))
    return rows


def tiny_rows(families, work: Path, positions: int) -> list[Row]:
    rows = []
    for family in families:
        target = tiny_family_target(family)
        verifier = work / f"verifier-{family}"
        target.model.save_pretrained(str(verifier))
        rows += check_head(eagle3_head(target), "eagle3 (random)", family, str(verifier), work, positions)
        rows += check_head(eagle3_head(target, eagle31=True), "eagle3.1 (random)", family, str(verifier), work,
                           positions)
        try:
            head = dflash_head(target, target.vocab_size - 1, layers=2, block_size=4)
        except EagleError as err:
            emit(rows, Row("dflash (random)", family, "-", f"refused: {err}"))
            continue
        rows += check_dflash(head, family, str(verifier), work, positions)
    return rows


def smollm2_rows(work: Path, positions: int) -> list[Row]:
    """The shipped head's row and a random EAGLE-3-block head's on the real SmolLM2-135M."""
    from eagle_infer.decoding.build import SHIPPED_HEADS_DIR
    from eagle_infer.head.head_checkpoint import load_head
    from eagle_infer.models.target import converted_gguf_dir, load_target
    from tests.conftest import SMOL

    target = load_target("smollm2-135m", "float32", "cpu")
    verifier = str(converted_gguf_dir(*SMOL))
    shipped = load_head(SHIPPED_HEADS_DIR / "smollm2-135m", target)
    rows = []
    for fmt in FORMATS:
        try:
            check_servable(shipped, fmt)
            route = "not read: speculators 0.9.0 has no EAGLE-1 model"
        except EagleError as err:
            route = f"refused: {err}"
        emit(rows, Row("eagle1 (shipped)", "smollm2", fmt, route))
    rows += check_head(eagle3_head(target), "eagle3 (random)", "smollm2", verifier, work, positions)
    rows += check_head(eagle3_head(target, eagle31=True), "eagle3.1 (random)", "smollm2", verifier, work, positions)
    return rows + check_dflash(dflash_head(target, default_mask_token(target), layers=1, block_size=8), "smollm2",
                               verifier, work, positions)


def run(families=FAMILIES, smollm2: bool = False, positions: int = 19, work: Path | None = None) -> list[Row]:
    """Every row, printed as it is done."""
    from importlib.metadata import version

    print(f"speculators {version('speculators')}; bound: max|diff| <= {TOLERANCE} after export, {FORWARD_BOUND} for a "
          "drafter's forward (float32), top-1 equal everywhere")
    print(f"{'head':<26} {'target':<8} {'format':<12} {'how speculators read it':<60} result")
    with tempfile.TemporaryDirectory() as scratch:
        work = work or Path(scratch)
        rows = smollm2_rows(work, positions) if smollm2 else []
        rows += tiny_rows(families, work, positions)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smollm2", action="store_true", help="add the shipped head and SmolLM2-135M's rows")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--positions", type=int, default=19)
    parser.add_argument("--work", type=Path, default=None, help="keep the exports here (default: a temporary one)")
    args = parser.parse_args(argv)
    reason = unavailable()
    if reason:
        print(f"check-export: {reason}: pip install --no-deps speculators (see the README)")
        return 2
    import warnings

    import transformers
    from loguru import logger

    logger.remove()  # speculators' converter logs every step
    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")  # speculators' masks
    rows = run(args.families.split(","), args.smollm2, args.positions, args.work)
    bad = [r for r in rows if not r.ok]
    print(f"{sum(r.loaded for r in rows)} rows loaded by speculators, {len(bad)} outside the bound")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
