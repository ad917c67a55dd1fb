"""The EAGLE draft head: [embedding of a token ; target feature] -> fc (2h->h) -> decoder layer(s) -> feature.

The predicted feature goes through the target's frozen LM head. The head shares the target's embedding and LM head
(neither is saved with it) and reuses the target's own decoder-layer class, so Llama, Mistral and Qwen2 targets get
a head of their own architecture. As in EAGLE, the first layer has no input norm (the fc output feeds attention
directly); `layers` > 1 stacks more decoder layers (with their input norms) for a head of more capacity.

Block "eagle3" is EAGLE-3's published draft model instead (what `load_head` builds from an EAGLE-3 checkpoint):
no fc; one decoder layer whose attention reads [input_layernorm(embedding) ; hidden_norm(feature)] (2h wide) with
the feature as its residual; its own final norm and LM head over the draft vocabulary (d2t). Its predicted
feature is the layer's pre-norm output, fed back as is. This toolkit trains the "eagle" block only.

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
from torch import nn

from .errors import EagleError
from .kv_cache import KVCache
from .lean_layer import RopeTable, lean_layer
from .lean_layer import run as lean_run
from .tree import causal_mask

INPUT_MODES = ("feature+shifted_token", "feature+token", "token", "feature")
BLOCKS = ("eagle", "eagle3")
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
    block: str = "eagle"  # "eagle": fc + the target's decoder layer(s); "eagle3": EAGLE-3's midlayer + own LM head

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

    @property
    def token_shift(self) -> int:
        """1 when the pair at position i carries x_{i+1}, 0 when it carries x_i."""
        return 0 if self.input_mode == "feature+token" else 1

    @classmethod
    def for_target(cls, target, input_mode: str = "feature+shifted_token") -> "DraftHeadConfig":
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


class DraftHead(nn.Module):
    """[fuse +] fc + decoder layer(s) of the target's class; embedding and LM head are borrowed from the target
    (block "eagle3": fuse + EAGLE-3's layer, with a norm and LM head of its own)."""

    def __init__(self, config: DraftHeadConfig, target):
        super().__init__()
        config.check()
        self.config = config
        layer_config = target.config.__class__.from_dict(target.config.to_dict())
        layer_config.num_hidden_layers = config.layers
        layer_config._attn_implementation = target.config._attn_implementation
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
        self._target = (target,)  # a tuple keeps the target's modules out of this module's parameters
        vd = config.draft_vocab_size
        self.register_buffer("draft_vocab", torch.arange(vd, dtype=torch.long) if vd else None)
        self.to(device=target.device, dtype=target.dtype)
        self.packed = False  # see pack()
        self._sub_weight = self._sub_packed = None
        self._lean, self._lean_weights, self._lean_key = [], [], None  # see _lean_layers
        self._rope = RopeTable(self.rotary)
        # The drafting step compiled (compile_head: a target compiled on a GPU), over static caches; None: eager.
        self.compiled = None

    def set_draft_vocab(self, token_ids: torch.Tensor) -> None:
        """Draft from these token ids only ([Vd] long, distinct); Vd must equal config.draft_vocab_size."""
        if token_ids.numel() != self.config.draft_vocab_size:
            raise EagleError(f"draft vocabulary has {token_ids.numel()} ids, expected {self.config.draft_vocab_size}")
        self.draft_vocab = token_ids.to(self._weight.device)
        self._sub_weight = self._sub_packed = None

    def pack(self) -> None:
        """Pack the head's linear weights, and its draft-vocabulary rows of the target's LM head, for inference on a
        packed target (eagle_infer.packed); training never packs."""
        from .packed import pack_linears

        pack_linears(self)
        self.packed, self._sub_weight, self._sub_packed, self._lean_key = True, None, None, None

    def _lean_layers(self) -> list:
        """The layers fused for drafting (eagle_infer.lean_layer); [] when a layer has another form (then drafting
        runs transformers' layers). The fused weights are copies, rebuilt whenever a weight was updated in place
        (training's held-out checks), moved, or packed."""
        if self._lean_key is None or self._lean_key != [(w.data_ptr(), w._version) for w in self._lean_weights]:
            config = self.target.config
            lean = [None] if self.config.block != "eagle" else [lean_layer(x, config, self.packed) for x in self.layers]
            self._lean = [] if None in lean else lean
            self._lean_weights = list(self.layers.parameters())
            self._lean_key = [(w.data_ptr(), w._version) for w in self._lean_weights]
        return self._lean

    @property
    def _weight(self) -> torch.Tensor:
        """A weight of the head's own (its device and dtype are the head's)."""
        return self.layers[0].mlp.down_proj.weight

    @property
    def target(self):
        return self._target[0]

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """A cache of at least max_len positions: static and rounded up (compiled.static_length) when the step is
        compiled."""
        from .compiled import static_length

        static = self.compiled is not None
        return KVCache(self.config.layers, *self.target.kv_shape(batch)[1:],
                       static_length(max_len) if static else max_len, self._weight.dtype, self._weight.device, static)

    def forward(
        self,
        features: torch.Tensor,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        cache: KVCache | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """features [B, T, H] (or [B, T, k*H] target features of a fused head), tokens [B, T], positions [B, T]
        -> predicted features [B, T, H].

        With a cache (a KVCache, or any transformers Cache such as the training-time test's DynamicCache), the T
        new keys/values are written after what it holds; mask is additive [B or 1, 1, T, held + T]. Without a cache
        (training), mask is [B or 1, 1, T, T] or None for causal. Drafting (a KVCache, no gradients) runs the
        layers' lean step (eagle_infer.lean_layer), the same function in fewer ops; over a static cache (a compiled
        step, compile_head) the compiled `layers_forward` under the mask widened to every slot.
        """
        if isinstance(cache, KVCache) and cache.static:
            mask = cache.static_mask(mask, tokens.shape[1], features.dtype)
            if self.compiled is None:
                return self.layers_forward(features, tokens, positions, mask, cache.hf)
            from .compiled import mark_dynamic_step

            mark_dynamic_step(mask, features, tokens, positions)
            return self.compiled(features, tokens, positions, mask, cache.hf)
        if mask is None and cache is None:
            mask = causal_mask(0, features.shape[1], features.dtype, features.device)
        if isinstance(cache, KVCache) and not torch.is_grad_enabled() and self._lean_layers():
            features, embeds = self._inputs(features, tokens)
            return lean_run(self._lean, self._rope, self.fc(torch.cat((embeds, features), dim=-1)), positions,
                            cache.hf.layers, mask)[0]
        return self.layers_forward(features, tokens, positions, mask, getattr(cache, "hf", cache))

    def _inputs(self, features: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(features [B, T, H], token embeddings [B, T, H]): a fused head's inputs projected, input_mode applied."""
        if features.shape[-1] != self.config.hidden_size:
            if self.fuse is None:
                raise EagleError(
                    f"draft head takes features of width {self.config.hidden_size}, got {features.shape[-1]}: "
                    "a fused head needs fused target features"
                )
            features = self.fuse(features)
        embeds = self.target.embed_tokens(tokens).to(features.dtype)
        mode = self.config.input_mode
        if mode == "token":
            features = torch.zeros_like(features)
        elif mode == "feature":
            embeds = torch.zeros_like(embeds)
        return features, embeds

    def layers_forward(self, features: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor,
                       mask: torch.Tensor | None, past) -> torch.Tensor:
        """`forward` through transformers' decoder layers over a transformers Cache `past` (or None), the mask as
        given -> [B, T, H]: training's path, and what compile_head compiles."""
        features, embeds = self._inputs(features, tokens)
        cos_sin = self.rotary(features, positions)
        if self.fc is None:  # eagle3
            return self.layers[0](embeds, features, attention_mask=mask, position_ids=positions,
                                  past_key_values=past, position_embeddings=cos_sin)
        hidden = self.fc(torch.cat((embeds, features), dim=-1))
        for layer in self.layers:
            hidden = layer(hidden, attention_mask=mask, position_ids=positions, past_key_values=past,
                           position_embeddings=cos_sin)
        return hidden

    def draft_logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., Vd] over the draft vocabulary (the target's frozen LM
        head restricted to draft_vocab, or an eagle3 head's own norm and LM head)."""
        if self.lm_head is not None:
            return self.lm_head(self.norm(predicted)).float()
        return self.target_draft_logits(predicted)

    def target_draft_logits(self, features: torch.Tensor) -> torch.Tensor:
        """Target features [..., H] -> float32 logits [..., Vd]: the target's frozen LM head restricted to
        draft_vocab (the whole head when there is no subset); training's target distribution."""
        if self.draft_vocab is None:
            return self.target.lm_head(features).float()
        if self._sub_weight is None or self._sub_weight.device != features.device:
            from .packed import PackedLinear

            self._sub_weight = self.target.lm_head.weight.detach()[self.draft_vocab]
            self._sub_packed = PackedLinear(self._sub_weight) if self.packed else None
        if self._sub_packed is not None and features.dtype == self._sub_weight.dtype:
            return self._sub_packed(features).float()
        return torch.nn.functional.linear(features, self._sub_weight.to(features.dtype)).float()

    def logits(self, predicted: torch.Tensor) -> torch.Tensor:
        """Predicted features [..., H] -> float32 logits [..., V]; -inf outside the draft vocabulary."""
        sub = self.draft_logits(predicted)
        if self.draft_vocab is None:
            return sub
        full = sub.new_full((*sub.shape[:-1], self.config.vocab_size), float("-inf"))
        return full.index_copy_(-1, self.draft_vocab, sub)

    def trainable_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.state_dict().items() if not k.startswith("rotary.")}

    def save(self, directory: str | Path, dtype: torch.dtype = torch.bfloat16) -> None:
        """Write config.json + model.safetensors (bfloat16 by default: half the size, drafting is unaffected in
        any way that matters, and verification keeps the output exact whatever the head)."""
        from safetensors.torch import save_file

        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {
            k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
            for k, v in self.trainable_state_dict().items()
        }
        save_file(state, str(directory / WEIGHTS_FILE))
        (directory / CONFIG_FILE).write_text(json.dumps(asdict(self.config), indent=2) + "\n")


def random_head(target, seed: int = 0, input_mode: str = "feature+shifted_token", layers: int = 1,
                feature_layers: list[int] | None = None) -> DraftHead:
    """An untrained head (deterministic for a seed): low acceptance, same output; lets the engine run before training."""
    config = DraftHeadConfig.for_target(target, input_mode)
    config.layers, config.feature_layers = layers, list(feature_layers or [])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return for_target(DraftHead(config, target).eval(), target)


# Key names of the published EAGLE-1/EAGLE-2 heads (pytorch_model.bin or model.safetensors + a LlamaConfig-style
# config.json): fc.weight, fc.bias, layers.N.self_attn.*, layers.N.mlp.*, layers.N.post_attention_layernorm.weight,
# and often embed_tokens.weight (ignored: the target's embedding is used).
def _from_eagle_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if k.startswith(("fc.", "layers."))}


# Key names of the published EAGLE-3 heads (SafeAILab EAGLE-3, SpecForge): midlayer.{self_attn,mlp}.*,
# midlayer.{input_layernorm,hidden_norm,post_attention_layernorm}.weight, fc.weight (k*h -> h over the fused target
# layers), norm.weight, lm_head.weight [Vd, h], d2t [Vd] (target id = draft id + d2t), t2d [V] (bool), and
# sometimes embed_tokens.weight (ignored).
def _is_eagle3(state: dict[str, torch.Tensor]) -> bool:
    return any(k.startswith("midlayer.") for k in state)


def _d2t_ids(state: dict[str, torch.Tensor]) -> torch.Tensor:
    """EAGLE-3's d2t offsets [Vd] -> the target ids of the draft tokens [Vd]."""
    return torch.arange(state["d2t"].numel()) + state["d2t"].long()


def _from_eagle3_keys(state: dict[str, torch.Tensor], subset: bool) -> dict[str, torch.Tensor]:
    """EAGLE-3 names -> this head's: midlayer.* -> layers.0.*, fc -> fuse, d2t -> draft_vocab (target ids) when the
    head drafts a subset of the vocabulary (a full-vocabulary head's d2t is all zeros)."""
    out = {"layers.0." + k[len("midlayer."):]: v for k, v in state.items() if k.startswith("midlayer.")}
    out.update({k: state[k] for k in ("norm.weight", "lm_head.weight") if k in state})
    if "fc.weight" in state:
        out["fuse.weight"] = state["fc.weight"]
    if subset:
        out["draft_vocab"] = _d2t_ids(state)
    return out


def _published_config(raw: dict, state: dict[str, torch.Tensor], target, where: str) -> DraftHeadConfig:
    """The DraftHeadConfig of a published EAGLE-1/2/3 head (whose config.json is a LlamaConfig-style dict)."""
    from .target import eagle3_layers

    config = DraftHeadConfig(target.name, target.config.model_type, int(raw.get("hidden_size", -1)),
                             int(raw.get("vocab_size", -1)), target_layers=target.config.num_hidden_layers)
    checks = [("hidden size", config.hidden_size, target.hidden_size), ("vocabulary size", config.vocab_size, target.vocab_size)]
    if "target_hidden_size" in raw:
        checks.append(("target hidden size", int(raw["target_hidden_size"]), target.hidden_size))
    if not _is_eagle3(state):
        config.fc_bias, config.layers = "fc.bias" in state, _layer_count(state)
    else:
        config.block = "eagle3"
        fc = state.get("fc.weight")
        if fc is not None and fc.shape[1] != target.hidden_size:
            config.feature_layers = list(eagle3_layers(target.config.num_hidden_layers))
            checks.append(("fused feature width", fc.shape[1], len(config.feature_layers) * target.hidden_size))
        lm_head = state.get("lm_head.weight")  # absent: reported as missing when the weights are loaded
        draft = lm_head.shape[0] if lm_head is not None else config.vocab_size
        config.draft_vocab_size = draft if draft != config.vocab_size else 0
        if config.draft_vocab_size and "d2t" not in state:
            raise EagleError(f"EAGLE-3 head {where} drafts {draft} of {config.vocab_size} tokens but has no d2t map")
        if "d2t" in state:
            ids = _d2t_ids(state)
            if int(ids.min()) < 0 or int(ids.max()) >= config.vocab_size:
                raise EagleError(f"EAGLE-3 head {where} maps draft tokens outside the target's {config.vocab_size} ids")
    for field, value, expected in checks:
        if value != expected:
            raise EagleError(f"EAGLE head {where} has {field} {value}, but the target has {expected}")
    return config


def _upgrade_keys(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Heads saved before `layers` existed named their one layer `layer.*`."""
    return {("layers.0." + k[len("layer."):] if k.startswith("layer.") else k): v for k, v in state.items()}


def _layer_count(state: dict[str, torch.Tensor]) -> int:
    return 1 + max((int(k.split(".")[1]) for k in state if k.startswith("layers.")), default=0)


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    if (directory / WEIGHTS_FILE).exists():
        from safetensors.torch import load_file

        return load_file(str(directory / WEIGHTS_FILE))
    if (directory / "pytorch_model.bin").exists():
        return torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
    raise EagleError(f"draft head directory {str(directory)!r} has neither {WEIGHTS_FILE} nor pytorch_model.bin")


def load_head(directory: str | Path, target) -> DraftHead:
    """Load a head saved by this toolkit, or a published EAGLE-1/2 or EAGLE-3 checkpoint directory, for `target`."""
    directory = Path(directory)
    where = repr(str(directory))
    if not directory.is_dir():
        raise EagleError(f"draft head directory {where} does not exist")
    if not (directory / CONFIG_FILE).exists():
        raise EagleError(f"draft head directory {where} has no {CONFIG_FILE}")
    raw = json.loads((directory / CONFIG_FILE).read_text())
    state = _upgrade_keys(_read_weights(directory))
    if "target" in raw:  # this toolkit's format
        known = set(DraftHeadConfig.__dataclass_fields__)
        config = DraftHeadConfig(**{k: v for k, v in raw.items() if k in known})
        config.check()
        config.check_matches(target, str(directory))
    else:  # published EAGLE head: its config is the target's LlamaConfig
        config = _published_config(raw, state, target, where)
        state = (_from_eagle3_keys(state, config.draft_vocab_size > 0) if config.block == "eagle3"
                 else _from_eagle_keys(state))
    head = DraftHead(config, target)
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("rotary.")]
    if missing or unexpected:
        raise EagleError(
            f"draft head {where} does not fit the target's layer: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    if target.packed:
        head.pack()
    return for_target(head.eval(), target)


def for_target(head: DraftHead, target) -> DraftHead:
    """The head as it drafts for `target`: its step compiled (CUDA graphs) when the target's forward is compiled on
    a GPU, where a level's hundreds of kernel launches cost more than its products; eager on a CPU, where
    compiling the step did not pay (README, "Compiled forward")."""
    if target.compiled is not None and target.device.type == "cuda":
        from .compiled import compile_head

        compile_head(head)
    return head
