"""Reading draft-head checkpoints: this toolkit's own (config.json + model.safetensors) and the published EAGLE
layouts (EAGLE-1/2: `fc`, `layers.N.*` beside a LlamaConfig-style config.json; EAGLE-3: `midlayer.*`, `fc` over
fused layers, `norm`, `lm_head`, `d2t`/`t2d`), converted to one DraftHead. A head for another target, or a
directory whose files cannot be read, is a one-line error naming the directory.
"""
from __future__ import annotations

import json
import pickle
from pathlib import Path

import huggingface_hub
import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from ..models.config_limits import HEAD_LIMITS, check_head_config, check_numbers, not_plain_tensors
from .blocks import build_head
from .draft_head import CONFIG_FILE, WEIGHTS_FILE, DraftHeadConfig, SavedHead, eagle3_layers
from ..errors import EagleError
from ..models.hub import unreachable_reason
from ..models.registry import is_hub_id

TOKEN_MAP_FILE = "token_map.pt"  # SGLang's hot-token file: the draft vocabulary's target ids, of an EAGLE-1/2 head


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
    out.update({k: v for k, v in state.items() if k in ("norm.weight", "lm_head.weight") or k.startswith("fc_norm.")})
    if "fc.weight" in state:
        out["fuse.weight"] = state["fc.weight"]
    if subset:
        out["draft_vocab"] = _d2t_ids(state)
    return out


def _from_speculators(raw: dict, state: dict[str, torch.Tensor], where: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """vLLM's speculators layout of an EAGLE-3 head (speculators_model_type eagle3: the decoder layer's config in
    transformer_layer_config, its weights as layers.0.*) -> the published EAGLE-3 config and names."""
    variants = [k for k in ("norm_before_residual", "norm_before_fc") if raw.get(k)]
    if variants:
        raise EagleError(f"EAGLE-3 head {where} sets {', '.join(variants)}: this toolkit's EAGLE-3 layer has neither "
                         "variant (expected them false; EAGLE-3.1's fc_norm and norm_output it has)")
    layer = raw.get("transformer_layer_config") or {}
    config = {**layer, **{k: raw[k] for k in ("draft_vocab_size", "target_hidden_size", "fc_norm", "norm_output")
                          if k in raw},
              "eagle_config": {"eagle_aux_hidden_state_layer_ids": raw.get("eagle_aux_hidden_state_layer_ids")}}
    return config, {("midlayer." + k[len("layers.0."):] if k.startswith("layers.0.") else k): v for k, v in state.items()}


def _published_config(raw: dict, state: dict[str, torch.Tensor], target, where: str) -> DraftHeadConfig:
    """The DraftHeadConfig of a published EAGLE-1/2/3 head (whose config.json is a LlamaConfig-style dict)."""
    config = DraftHeadConfig(target.name, target.config.model_type, int(raw.get("hidden_size", -1)),
                             int(raw.get("vocab_size", -1)), target_layers=target.config.num_hidden_layers)
    checks = [("hidden size", config.hidden_size, target.hidden_size), ("vocabulary size", config.vocab_size, target.vocab_size)]
    if "target_hidden_size" in raw:
        checks.append(("target hidden size", int(raw["target_hidden_size"]), target.hidden_size))
    if not _is_eagle3(state):
        config.fc_bias, config.layers = "fc.bias" in state, _layer_count(state)
    else:
        config.block = "eagle3"
        config.fc_norm, config.norm_output = bool(raw.get("fc_norm")), bool(raw.get("norm_output"))
        fc = state.get("fc.weight")
        if fc is not None and fc.shape[1] != target.hidden_size:
            aux = (raw.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
            # vLLM's aux ids count the embedding as 0: the outputs of decoder layers id - 1
            config.feature_layers = [i - 1 for i in aux] if aux else list(eagle3_layers(target.config.num_hidden_layers))
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
    """The state dict in model.safetensors (or a published head's pytorch_model.bin); one line naming the file when
    it cannot be read (truncated, not a weights file)."""
    path = directory / WEIGHTS_FILE
    if not path.exists():
        path = directory / "pytorch_model.bin"
        if not path.exists():
            raise EagleError(f"draft head directory {str(directory)!r} has neither {WEIGHTS_FILE} nor pytorch_model.bin")
    try:
        state = load_file(str(path)) if path.suffix == ".safetensors" else torch.load(path, map_location="cpu",
                                                                                   weights_only=True)
    except pickle.UnpicklingError:
        raise not_plain_tensors(path) from None
    except (SafetensorError, OSError, RuntimeError, EOFError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EagleError(f"draft head weights {str(path)!r} cannot be read ({reason}): expected a complete "
                         f"{path.name}; copy or save the head again") from None
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise not_plain_tensors(path)
    return state


def _read_config(directory: Path) -> dict:
    """config.json as a dict; one line naming the file when it is not a JSON object."""
    path = directory / CONFIG_FILE
    try:
        raw = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:
        raise EagleError(f"draft head config {str(path)!r} is not valid JSON ({err}): expected the config.json "
                         "the head was saved with") from None
    if not isinstance(raw, dict):
        raise EagleError(f"draft head config {str(path)!r} holds a {type(raw).__name__}: expected a JSON object")
    return raw


def _toolkit_config(raw: dict) -> DraftHeadConfig:
    config = DraftHeadConfig(**{k: v for k, v in raw.items() if k in set(DraftHeadConfig.__dataclass_fields__)})
    config.check()
    return config


def load_config(directory: str | Path) -> DraftHeadConfig:
    """The DraftHeadConfig of a head this toolkit saved in `directory` (no target needed)."""
    raw, where = _read_config(Path(directory)), repr(str(Path(directory) / CONFIG_FILE))
    if "target" not in raw:
        raise EagleError(f"{where} is not this toolkit's head config (no 'target')")
    check_numbers(raw, HEAD_LIMITS, f"draft head config {where}")
    return _toolkit_config(raw)


def head_directory(name: str | Path) -> Path:
    """A head's local directory: `name` itself, or for a hub id ("owner/name") its snapshot, downloaded on first use
    into the Hugging Face cache; offline or unknown, a one-line error naming the id and the local alternative."""
    if not is_hub_id(str(name)):
        return Path(name)
    offline = unreachable_reason()  # offline: the cached snapshot only, no retries
    try:
        return Path(huggingface_hub.snapshot_download(str(name), allow_patterns=["*.json", "*.safetensors", "*.bin",
                                                                                 "*.md", "*.pt"],
                                                      local_files_only=offline is not None))
    except Exception as err:  # noqa: BLE001 (the hub client raises many types: offline, unknown id, gated, ...)
        why = f", not cached and the hub is unreachable: {offline}" if offline else ""
        raise EagleError(f"draft head {str(name)!r} could not be fetched from the Hugging Face hub "
                         f"({type(err).__name__}{why}): download it where the hub is reachable and give "
                         "infer.head=<its local directory>") from None


def _token_map(path: Path, vocab_size: int) -> torch.Tensor:
    """The target ids [Vd] of a token-map file (a saved tensor or list of distinct ids below vocab_size)."""
    try:
        ids = torch.as_tensor(torch.load(path, map_location="cpu", weights_only=True), dtype=torch.long).flatten()
    except pickle.UnpicklingError:
        raise not_plain_tensors(path) from None
    except (OSError, RuntimeError, EOFError, ValueError, TypeError) as err:
        raise EagleError(f"token map {str(path)!r} cannot be read ({type(err).__name__}): expected a saved tensor "
                         "of target token ids") from None
    if ids.numel() == 0 or int(ids.min()) < 0 or int(ids.max()) >= vocab_size or ids.unique().numel() != ids.numel():
        raise EagleError(f"token map {str(path)!r} is invalid: expected distinct token ids below {vocab_size}")
    return ids


def load_head(directory: str | Path, target) -> SavedHead:
    """Load a head saved by this toolkit, or a published EAGLE-1/2 or EAGLE-3 checkpoint directory, for `target`
    (the trainable module, in eval mode; the engine drafts with it through a HeadRunner). A hub id ("owner/name")
    is downloaded on first use."""
    directory = head_directory(directory)
    where = repr(str(directory))
    if not directory.is_dir():
        raise EagleError(f"draft head directory {where} does not exist")
    if not (directory / CONFIG_FILE).exists():
        raise EagleError(f"draft head directory {where} has no {CONFIG_FILE}")
    raw = _read_config(directory)
    state = _upgrade_keys(_read_weights(directory))
    if "target" in raw:  # this toolkit's format
        shapes = {k: tuple(v.shape) for k, v in state.items()}
        check_head_config(raw, shapes, f"draft head config {str(directory / CONFIG_FILE)!r}")
        config = _toolkit_config(raw)
        config.check_matches(target, str(directory))
    else:  # published EAGLE head: its config is the target's LlamaConfig (or vLLM's speculators config)
        if raw.get("speculators_model_type") == "eagle3":
            raw, state = _from_speculators(raw, state, where)
        config = _published_config(raw, state, target, where)
        state = (_from_eagle3_keys(state, config.draft_vocab_size > 0) if config.block == "eagle3"
                 else _from_eagle_keys(state))
        if config.block == "eagle" and (directory / TOKEN_MAP_FILE).exists():  # a reduced draft vocabulary
            state["draft_vocab"] = _token_map(directory / TOKEN_MAP_FILE, config.vocab_size)
            config.draft_vocab_size = state["draft_vocab"].numel()
    head = build_head(config, target)
    missing, unexpected = head.load_state_dict(state, strict=False)
    missing = [k for k in missing if not k.startswith("rotary.")]
    if missing or unexpected:
        raise EagleError(
            f"draft head {where} does not fit the target's layer: missing {missing[:3]}, unexpected {unexpected[:3]}"
        )
    return head.eval()
