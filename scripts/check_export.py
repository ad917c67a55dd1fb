"""Exports checked by the serving stack's own library (make check-export).

For each head kind x target family x export format, the head is exported (eagle_train.export), the layouts
speculators reads are turned into its format by `speculators convert` (its convert_model entry point, validated on
the CPU), and the result is loaded with speculators' own classes (SpeculatorModel.from_pretrained, the class
`vllm serve` configs name). Both the toolkit's head and speculators' model then draft on the same fused target
states, tokens and positions; a row passes when the draft logits differ by at most 1e-4 (float32) and the top-1
token agrees at every position.

Heads: the shipped head (eagle_infer/shipped_heads/smollm2-135m, an EAGLE-1-block head: speculators has no EAGLE-1 model,
so its row says so), and random EAGLE-3-block heads (every weight perturbed so each one matters; a draft vocabulary
of random, unordered ids) on SmolLM2-135M (--smollm2, the real target) and on tiny random targets of each family
(llama, llama with Llama 3 rope scaling, mistral, qwen2, qwen3; rope_theta 50,000 so a dropped rope_theta shows).
Formats a server refuses for a family print the refusal.

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

from eagle_infer.head.draft_head import DraftHead, random_head  # noqa: E402
from eagle_infer.errors import EagleError  # noqa: E402
from eagle_train.export import FORMATS, ExportSettings, check_servable, export, layer_type  # noqa: E402

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

    @property
    def loaded(self) -> bool:
        return self.positions > 0

    @property
    def ok(self) -> bool:
        return not self.loaded or (self.max_diff <= TOLERANCE and self.top1 == self.positions)

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


def eagle3_head(target, seed: int = 7) -> DraftHead:
    """A random EAGLE-3-block head drafting a third of the vocabulary, its ids in random order, weights stored as
    an export stores them (bfloat16)."""
    gen = torch.Generator().manual_seed(seed)
    vocab = torch.randperm(target.vocab_size, generator=gen)[: target.vocab_size // 3]
    head = perturbed(random_head(target, block="eagle3", draft_vocab=vocab), seed)
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
    """The toolkit's draft logits [T, V] (-inf outside the draft vocabulary)."""
    with torch.no_grad():
        return head.logits(head(features.to(head.weight.dtype), tokens, positions))[0].float()


def speculators_logits(directory: Path, features, tokens, positions) -> tuple[torch.Tensor, torch.Tensor]:
    """speculators' draft logits [T, Vd] for the checkpoint in `directory` (loaded by SpeculatorModel, float32,
    one drafting step of its forward: the LM head's output captured) and the target ids of its Vd columns."""
    from speculators import SpeculatorModel

    model = SpeculatorModel.from_pretrained(str(directory)).float().eval()
    captured = []
    hook = model.lm_head.register_forward_hook(lambda module, args, out: captured.append(out))
    with torch.no_grad():
        model(hidden_states=features, input_ids=tokens, document_ids=torch.zeros_like(tokens),
              position_ids=positions, ttt_steps=1)
    hook.remove()
    vd = captured[0].shape[-1]
    ids = torch.arange(vd) + (model.d2t.long() if model.d2t is not None else 0)
    return captured[0][0].float(), ids


def compare(head: DraftHead, directory: Path, positions: int) -> tuple[float, int]:
    """(max abs difference of the draft logits, positions whose top-1 target token agrees)."""
    features, tokens, pos = inputs(head, positions)
    ours = toolkit_logits(head, features, tokens, pos)
    theirs, ids = speculators_logits(directory, features, tokens, pos)
    if int(torch.isfinite(ours[0]).sum()) != ids.numel() or not bool(torch.isfinite(ours[:, ids]).all()):
        return float("inf"), 0  # the two draft different vocabularies
    diff = float((ours[:, ids] - theirs).abs().max())
    top1 = int((ours.argmax(-1) == ids[theirs.argmax(-1)]).sum())
    return diff, top1


def convert(export_dir: Path, out: Path, verifier: str, aux: list[int]) -> None:
    """`speculators convert EXPORT --algorithm eagle3 --verifier V --validate-device cpu --algorithm-kwargs
    '{"eagle_aux_hidden_state_layer_ids": aux}'`, through the function that command calls."""
    from speculators.convert import convert_model

    convert_model(model=str(export_dir), verifier=verifier, output_path=str(out), validate_device="cpu",
                  algorithm="eagle3", eagle_aux_hidden_state_layer_ids=aux)


def check_head(head: DraftHead, kind: str, family: str, verifier: str, work: Path, positions: int) -> list[Row]:
    """One row per format for `head` (its target saved at `verifier`)."""
    rows = []
    for fmt in FORMATS:
        try:
            check_servable(head, fmt)
        except EagleError as err:
            rows.append(Row(kind, family, fmt, f"refused: {err}"))
            print(rows[-1].line(), flush=True)
            continue
        directory = work / f"{kind}-{family}-{fmt}"
        export(head, fmt, directory, ExportSettings(verifier=verifier, overwrite=True, dtype="float32"))
        if fmt != "speculators":
            if layer_type(head) != "llama":
                rows.append(Row(kind, family, fmt, "not read: speculators convert builds Llama layers only"))
                print(rows[-1].line(), flush=True)
                continue
            converted = directory.with_name(directory.name + "-converted")
            convert(directory, converted, verifier, [i + 1 for i in head.config.feature_layers])
            directory, route = converted, "speculators convert -> SpeculatorModel.from_pretrained"
        else:
            route = "SpeculatorModel.from_pretrained"
        diff, top1 = compare(head, directory, positions)
        rows.append(Row(kind, family, fmt, route, diff, top1, positions))
        print(rows[-1].line(), flush=True)
    return rows


def tiny_rows(families, work: Path, positions: int) -> list[Row]:
    rows = []
    for family in families:
        target = tiny_family_target(family)
        verifier = work / f"verifier-{family}"
        target.model.save_pretrained(str(verifier))
        rows += check_head(eagle3_head(target), "eagle3 (random)", family, str(verifier), work, positions)
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
        rows.append(Row("eagle1 (shipped)", "smollm2", fmt, route))
        print(rows[-1].line(), flush=True)
    return rows + check_head(eagle3_head(target), "eagle3 (random)", "smollm2", verifier, work, positions)


def run(families=FAMILIES, smollm2: bool = False, positions: int = 19, work: Path | None = None) -> list[Row]:
    """Every row, printed as it is done."""
    from importlib.metadata import version

    print(f"speculators {version('speculators')}; bound: max|diff| <= {TOLERANCE} (float32), top-1 equal everywhere")
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
