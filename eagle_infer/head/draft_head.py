"""The EAGLE draft head: [embedding of a token ; target feature] -> fc (2h->h) -> decoder layer(s) -> feature.

The predicted feature goes through the target's frozen LM head. The head shares the target's embedding and LM head
(neither is saved with it) and reuses the target's own decoder-layer class, so Llama, Mistral and Qwen2 targets get
a head of their own architecture. As in EAGLE, the first layer has no input norm (the fc output feeds attention
directly); `layers` > 1 stacks more decoder layers (with their input norms) for a head of more capacity.

Block "eagle3" is EAGLE-3's published draft model instead (what `load_head` builds from an EAGLE-3 checkpoint):
no fc; one decoder layer whose attention reads [input_layernorm(embedding) ; hidden_norm(feature)] (2h wide) with
the feature as its residual; its own final norm and LM head over the draft vocabulary (d2t). Its predicted
feature is the layer's pre-norm output, fed back as is. Training builds the same module (head.block=eagle3), so a
head trained here and a published EAGLE-3 checkpoint draft through one implementation.

Features: "last" heads read the target's post-norm last hidden state [.., H]. Fused (EAGLE-3) heads read the
outputs of `feature_layers` side by side [.., k*H] and first project them to H (`fuse`, k*H -> H, no bias).
Either way a head fed its own predicted feature [.., H] (drafting, training-time test) takes it as it is: the
input width tells the two apart.

Pairing convention (training and inference alike): the pair at head position i is (feature f_i, token x_{i+1}) and
its output approximates f_{i+1}, whose LM-head logits predict x_{i+2}. `input_mode` selects the EAGLE paper's
input ablations: "feature+shifted_token" (default), "feature+token" (x_i instead of x_{i+1}), "token", "feature";
a missing half is fed as zeros.

Draft vocabulary: a head may draft from a subset of the target's vocabulary (`draft_vocab`, the ids most frequent in
its training data, as in EAGLE-3). Its LM-head product then costs Vd/V of the full one, which on a CPU is most of
the drafting time; tokens outside the subset are never drafted, and verification keeps the output exact anyway.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from safetensors.torch import save_file
from torch import nn

from . import chain_attention
from ..errors import EagleError
from ..models.lean_layer import cast
from ..models.masks import causal_mask

INPUT_MODES = ("feature+shifted_token", "feature+token", "token", "feature")
BLOCKS = ("eagle", "eagle3", "dflash")
# A DFlash block's attention inside the block (speculators' options): bidirectional; or causal, which speculators
# offers on sliding-window layers only (its full-attention layers are bidirectional)
BLOCK_ATTENTION = ("bidirectional", "causal")
# The target families a DFlash drafter builds (dflash_head: speculators' DFlash layers, of Llama's form with
# per-head q/k norms); Qwen2's biases (q/k/v, not o) have no place in them
DFLASH_FAMILIES = ("llama", "mistral", "qwen3")


def eagle3_layers(num_layers: int) -> tuple[int, int, int]:
    """EAGLE-3's low, middle and high feature layers (0-based decoder layers whose outputs are fused): 1, L/2 - 1 and
    L - 4, the choice of SpecForge and vLLM (their 'inputs of layers 2, L/2 and L - 3')."""
    if num_layers < 5:
        raise EagleError(f"a fused head needs a target of at least 5 layers, not {num_layers}")
    return 1, num_layers // 2 - 1, num_layers - 4


CONFIG_FILE, WEIGHTS_FILE = "config.json", "model.safetensors"


@dataclass
class DraftHeadConfig:
    """What a saved head records: the target it belongs to and how it was built."""

    target: str
    architecture: str
    hidden_size: int
    vocab_size: int
    input_mode: str = "feature+shifted_token"
    fc_bias: bool = True
    draft_vocab_size: int = 0  # 0 = the full vocabulary
    layers: int = 1  # decoder layers (EAGLE: 1)
    feature_layers: list = field(default_factory=list)  # target decoder layers fused as input ([] = last hidden)
    target_layers: int = 0  # the target's decoder layers (0 = not recorded, heads saved before it was)
    fc_norm: bool = False  # eagle3 (EAGLE-3.1): an RMSNorm of each fused layer's output before the fusion
    norm_output: bool = False  # eagle3 (EAGLE-3.1): the predicted feature is the final norm's output (fed back as is)
    block: str = "eagle"  # "eagle": fc + the target's decoder layer(s); "eagle3": EAGLE-3's midlayer + own LM head;
    # "dflash": a block drafter (dflash_head), whose fields follow
    block_size: int = 0  # dflash: B, the block's tokens (the bonus token, then B - 1 mask tokens)
    mask_token_id: int = -1  # dflash: the token id at the block's masked positions
    sliding_window: int = 0  # dflash: context positions each layer attends before the block (0 = all)
    block_attention: str = "bidirectional"  # dflash: inside the block, BLOCK_ATTENTION

    @property
    def fused(self) -> bool:
        return bool(self.feature_layers)

    def check(self) -> None:
        if self.layers < 1:
            raise EagleError(f"head.layers {self.layers} is invalid: expected >= 1")
        if self.block not in BLOCKS:
            raise EagleError(f"unknown draft head block {self.block!r}: expected one of {', '.join(BLOCKS)}")
        if self.block == "eagle3" and self.layers != 1:
            raise EagleError(f"an eagle3 draft head has one decoder layer, not {self.layers}")
        if (self.fc_norm or self.norm_output) and self.block != "eagle3":
            raise EagleError(f"head.fc_norm and head.norm_output are EAGLE-3.1's, on the eagle3 block: expected them "
                             f"false for head.block={self.block}")
        if self.block == "dflash":
            self.check_dflash()

    def check_dflash(self) -> None:
        """A DFlash drafter's settings: one line naming the first bad value."""
        if self.architecture not in DFLASH_FAMILIES:
            raise EagleError(f"head.block=dflash builds drafters for {', '.join(DFLASH_FAMILIES)} targets, not a "
                             f"{self.architecture!r} one")
        if not self.fused:
            raise EagleError("head.block=dflash reads fused target layers: expected head.features=fused")
        if self.block_size < 2:
            raise EagleError(f"head.block_size {self.block_size} is invalid: a DFlash block holds the bonus token and "
                             "at least one mask token (expected >= 2)")
        if not 0 <= self.mask_token_id < self.vocab_size:
            raise EagleError(f"head.mask_token_id {self.mask_token_id} is invalid: expected a token id below "
                             f"{self.vocab_size}")
        if self.block_attention not in BLOCK_ATTENTION:
            raise EagleError(f"unknown head.block_attention {self.block_attention!r}: expected one of "
                             f"{', '.join(BLOCK_ATTENTION)}")
        if self.sliding_window < 0 or (self.block_attention == "causal" and not self.sliding_window):
            raise EagleError(f"head.sliding_window {self.sliding_window} with head.block_attention="
                             f"{self.block_attention}: expected a window >= 0, and > 0 for causal blocks (as "
                             "speculators, whose full-attention layers are bidirectional)")

    @property
    def token_shift(self) -> int:
        """1 when the pair at position i carries x_{i+1}, 0 when it carries x_i."""
        return 0 if self.input_mode == "feature+token" else 1

    @classmethod
    def of_target(cls, target, input_mode: str = "feature+shifted_token") -> "DraftHeadConfig":
        if input_mode not in INPUT_MODES:
            raise EagleError(f"unknown draft input mode {input_mode!r}: expected one of {', '.join(INPUT_MODES)}")
        return cls(target.name, target.config.model_type, target.hidden_size, target.vocab_size, input_mode,
                   target_layers=target.config.num_hidden_layers)

    def check_matches(self, target, where: str) -> None:
        """Refuse a head built for another target, naming both values."""
        n = target.config.num_hidden_layers
        if self.fused and (self.target_layers not in (0, n) or any(not 0 <= i < n for i in self.feature_layers)):
            raise EagleError(
                f"draft head {where} fuses layers {list(self.feature_layers)} of a {self.target_layers}-layer target, "
                f"but the target has {n} layers"
            )
        for field, mine, theirs in (
            ("hidden size", self.hidden_size, target.hidden_size),
            ("vocabulary size", self.vocab_size, target.vocab_size),
            ("architecture", self.architecture, target.config.model_type),
            ("target", self.target, target.name),
        ):
            if mine != theirs:
                raise EagleError(f"draft head {where} was trained for {field} {mine!r}, but the target has {theirs!r}")


class Eagle3Layer(nn.Module):
    """EAGLE-3's decoder layer, built from the target's own layer class with q/k/v projections widened to 2h:
    attention reads [input_layernorm(embeds) ; hidden_norm(hidden)], and `hidden` is the residual."""

    def __init__(self, layer: nn.Module, hidden_size: int, eps: float):
        super().__init__()
        attn = layer.self_attn
        for name in ("q_proj", "k_proj", "v_proj"):
            old = getattr(attn, name)
            setattr(attn, name, nn.Linear(2 * hidden_size, old.out_features, bias=old.bias is not None))
        self.self_attn, self.mlp = attn, layer.mlp
        self.input_layernorm, self.post_attention_layernorm = layer.input_layernorm, layer.post_attention_layernorm
        self.hidden_norm = type(layer.input_layernorm)(hidden_size, eps=eps)

    def forward(self, embeds: torch.Tensor, hidden: torch.Tensor, **attention) -> torch.Tensor:
        """embeds, hidden [B, T, H] -> [B, T, H]; `attention` goes to the target's attention module as is."""
        both = torch.cat((self.input_layernorm(embeds), self.hidden_norm(hidden)), dim=-1)
        hidden = hidden + self.self_attn(both, **attention)[0]
        return hidden + self.mlp(self.post_attention_layernorm(hidden))


class SavedHead(nn.Module):
    """What every drafter module saves: its own weights (not the borrowed embedding and LM head, nor the rotary
    tables) and its DraftHeadConfig."""

    config: DraftHeadConfig

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("rotary.")}

    def save(self, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
        """Write config.json + model.safetensors (bfloat16 by default: half the size, drafting is unaffected in
        any way that matters, and verification keeps the output exact whatever the head)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
            for k, v in self.trainable_state_dict().items()
        }
        save_file(state, str(directory / WEIGHTS_FILE))
        (directory / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n")


class DraftHead(SavedHead):
    """[fuse +] fc + decoder layer(s) of the target's class; embedding and LM head are borrowed from the target
    (block "eagle3": fuse + EAGLE-3's layer, with a norm and LM head of its own). The trainable module: training and
    checkpoints use it as it is; drafting runs it through a head_runner.HeadRunner built for the target."""

    def __init__(self, config: DraftHeadConfig, target):
        super().__init__()
        config.check()
        self.config = config
        layer_config = target.config.__class__.from_dict(target.config.to_dict())
        layer_config.num_hidden_layers = config.layers
        layer_config._attn_implementation = chain_attention.NAME  # SDPA, and the training-time test's chain steps
        h = config.hidden_size
        # Creation order fixes which random weights a seeded head gets (random_head): fuse, fc, layers.
        self.fuse = nn.Linear(len(config.feature_layers) * h, h, bias=False) if config.fused else None
        self.fc = nn.Linear(2 * h, h, bias=config.fc_bias) if config.block == "eagle" else None
        layer_class = type(target.model.model.layers[0])
        self.layers = nn.ModuleList(layer_class(layer_config, layer_idx=i) for i in range(config.layers))
        if config.block == "eagle3":
            eps = getattr(target.config, "rms_norm_eps", 1e-6)
            self.layers[0] = Eagle3Layer(self.layers[0], h, eps)
            self.norm = type(target.model.model.norm)(h, eps=eps)
            self.lm_head = nn.Linear(h, config.draft_vocab_size or config.vocab_size, bias=False)
        else:
            self.layers[0].input_layernorm = nn.Identity()
            self.norm = self.lm_head = None
        self.rotary = type(target.model.model.rotary_emb)(config=layer_config)
        eps = getattr(target.config, "rms_norm_eps", 1e-6)
        norm = type(target.model.model.norm)
        self.fc_norm = nn.ModuleList(norm(h, eps=eps) for _ in config.feature_layers) if config.fc_norm else None
        self._target = (target,)  # a tuple keeps the target's modules out of this module's parameters
        vd = config.draft_vocab_size
        self.register_buffer("draft_vocab", torch.arange(vd, dtype=torch.long) if vd else None)
        self.to(device=target.device, dtype=target.dtype)

    def set_draft_vocab(self, token_ids: torch.Tensor) -> None:
        """Draft from these token ids only ([Vd] long, distinct); Vd must equal config.draft_vocab_size."""
        if token_ids.numel() != self.config.draft_vocab_size:
            raise EagleError(f"draft vocabulary has {token_ids.numel()} ids, expected {self.config.draft_vocab_size}")
        self.draft_vocab = token_ids.to(self.weight.device)

    def use_full_vocabulary(self) -> None:
        """Draft from the target's whole vocabulary instead of draft_vocab (infer.draft_vocab=full): the head predicts
        features and borrows the target's LM head, so any of its rows can score them. An eagle3 head's own LM head
        covers its draft vocabulary only, so it is refused in one line."""
        if self.lm_head is not None:
            raise EagleError(f"infer.draft_vocab=full: an eagle3 head drafts with its own LM head over its "
                             f"{self.config.draft_vocab_size or self.config.vocab_size}-id draft vocabulary; expected "
                             "infer.draft_vocab=head")
        self.draft_vocab = None
        self.config.draft_vocab_size = 0

    @torch.no_grad()
    def start_from_target(self) -> None:
        """An eagle3 head's own norm and LM head start as the target's final norm and its LM-head rows of the draft
        vocabulary (EAGLE-3's reference starts both at random; this is the same function class, a better start)."""
        if self.lm_head is None:
            raise EagleError("only an eagle3 draft head has an LM head of its own")
        rows = self.target.lm_head.weight if self.draft_vocab is None else self.target.lm_head.weight[self.draft_vocab]
        self.lm_head.weight.copy_(rows)
        self.norm.weight.copy_(self.target.model.model.norm.weight)

    @property
    def weight(self) -> torch.Tensor:
        """A weight of the head's own (its device and dtype are the head's)."""
        return self.layers[0].mlp.down_proj.weight

    @property
    def target(self):
        return self._target[0]

    def forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, cache=None,
                mask: torch.Tensor | None = None, chain_step: int | None = None,
                segments: tuple[int, ...] | None = None) -> torch.Tensor:
        """features [B, T, H] (or [B, T, k*H] target features of a fused head), tokens [B, T], positions [B, T]
        -> predicted features [B, T, H], through transformers' decoder layers: training's path.

        cache: None or a transformers Cache (the training-time test's DynamicCache), the T new keys/values written
        after what it holds; mask additive [B or 1, 1, T, held + T], or None for causal.
        chain_step=k: step k of the training-time test over a cache holding steps 0..k-1 of the same T positions,
        attending in its pattern (eagle_infer.head.chain_attention; mask unused). segments: lengths of sequences packed
        end to end along T, each attending within itself only (B = 1, the cache holding these T positions' steps
        only; mask unused)."""
        if mask is None and cache is None and segments is None:
            mask = causal_mask(0, features.shape[1], features.dtype, features.device)
        return self.layers_forward(features, tokens, positions, mask, cache, chain_step, segments)

    def layers_forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                       mask: torch.Tensor | None, past, chain_step: int | None = None,
                       segments: tuple[int, ...] | None = None) -> torch.Tensor:
        """`forward` over a transformers Cache `past` (or None), the mask as given -> [B, T, H]. Inference runs the
        same function as lean steps (head_runner.head_step)."""
        features, embeds = head_inputs(INPUT_HALVES[self.config.input_mode], self.config.hidden_size, features, tokens,
                                       self.target.embed_tokens, self.fuse, self.fc_norm)
        attention = {"attention_mask": mask, "position_ids": positions, "past_key_values": past,
                     "position_embeddings": self.rotary(features, positions)}
        if chain_step is not None:
            attention["chain_step"] = chain_step
        if segments is not None:
            attention["segments"] = tuple(segments)
        if self.fc is None:  # eagle3 (EAGLE-3.1's norm_output: the normalised state is the prediction)
            out = self.layers[0](embeds, features, **attention)
            return self.norm(out) if self.config.norm_output else out
        hidden = self.fc(torch.cat((embeds, features), dim=-1))
        for layer in self.layers:
            hidden = layer(hidden, **attention)
        return hidden

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., Vd] over the draft vocabulary (the target's frozen LM
        head restricted to draft_vocab, or an eagle3 head's own norm and LM head)."""
        if self.lm_head is not None:
            return self.lm_head(predicted if self.config.norm_output else self.norm(predicted)).float()
        return self.target_draft_logits(predicted)

    def target_draft_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [..., H] -> float32 logits [..., Vd]: the target's frozen LM head restricted to
        draft_vocab (the whole head when there is no subset); training's target distribution."""
        weight = self.target.lm_head.weight
        if self.draft_vocab is not None:
            weight = weight.detach()[self.draft_vocab]
        return torch.nn.functional.linear(features, weight.to(features.dtype)).float()

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., V]; -inf outside the draft vocabulary."""
        return full_vocabulary(self.draft_logits(predicted), self.draft_vocab, self.config.vocab_size)

def _both(features: torch.Tensor, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return features, embeds


def _token_only(features: torch.Tensor, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.zeros_like(features), embeds


def _feature_only(features: torch.Tensor, embeds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return features, torch.zeros_like(embeds)


# (features, embeddings) -> the halves an input mode feeds, a missing half as zeros; chosen once per head
INPUT_HALVES = {"feature+shifted_token": _both, "feature+token": _both, "token": _token_only, "feature": _feature_only}


def head_inputs(halves, hidden_size: int, features: torch.Tensor, tokens: torch.Tensor, embed: nn.Module,
                fuse: nn.Module | None, fc_norm: nn.ModuleList | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A head's two inputs, training's and inference's alike: (features [B, T, H], token embeddings [B, T, H]), fused
    target features [B, T, k*H] projected by `fuse` (each layer's H first normalised by its fc_norm, EAGLE-3.1's);
    halves: INPUT_HALVES of the head's input mode."""
    if features.shape[-1] != hidden_size:
        if fuse is None:
            raise EagleError(
                f"draft head takes features of width {hidden_size}, got {features.shape[-1]}: "
                "a fused head needs fused target features"
            )
        if fc_norm is not None:
            features = torch.cat([n(x) for n, x in zip(fc_norm, features.chunk(len(fc_norm), dim=-1))], dim=-1)
        features = fuse(features)
    return halves(features, cast(embed(tokens), features.dtype))


def full_vocabulary(sub: torch.Tensor, draft_vocab: torch.Tensor | None, vocab_size: int) -> torch.Tensor:
    """Logits [..., Vd] over a draft vocabulary (target ids draft_vocab [Vd], None = all) -> [..., V], -inf
    elsewhere."""
    if draft_vocab is None:
        return sub
    full = sub.new_full((*sub.shape[:-1], vocab_size), float("-inf"))
    return full.index_copy_(-1, draft_vocab, sub)


def vocab_order(draft_vocab: torch.Tensor | None, vocab_size: int) -> torch.Tensor | None:
    """[V]: the draft vocabulary's target ids ([Vd], draft_vocab), then every other id, what maps a top-k over the
    draft vocabulary to target ids (expansion.top_tokens); None: the whole vocabulary, in order."""
    if draft_vocab is None:
        return None
    outside = torch.ones(vocab_size, dtype=torch.bool, device=draft_vocab.device)
    outside[draft_vocab] = False
    return torch.cat([draft_vocab, outside.nonzero()[:, 0]])


def random_head(target, seed: int = 0, input_mode: str = "feature+shifted_token", layers: int = 1,
                feature_layers: list[int] | None = None, draft_vocab: torch.Tensor | None = None,
                block: str = "eagle", fc_norm: bool = False, norm_output: bool = False) -> DraftHead:
    """An untrained head (deterministic for a seed): low acceptance, same output; lets the engine run before training.
    `draft_vocab` ([Vd] distinct target ids) restricts its drafts; block "eagle3" builds EAGLE-3's block, fused over
    `feature_layers` (default: eagle3_layers of the target), its own norm and LM head starting from the target's."""
    config = DraftHeadConfig.of_target(target, input_mode)
    if block == "eagle3" and feature_layers is None:
        feature_layers = list(eagle3_layers(target.config.num_hidden_layers))
    config.layers, config.feature_layers, config.block = layers, list(feature_layers or []), block
    config.fc_norm, config.norm_output = fc_norm, norm_output
    config.draft_vocab_size = 0 if draft_vocab is None else draft_vocab.numel()
    config.check()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = DraftHead(config, target).eval()
    if draft_vocab is not None:
        head.set_draft_vocab(draft_vocab)
    if block == "eagle3":
        head.start_from_target()
    return head
