"""Exporting a head to the layouts the EAGLE servers load (`python -m eagle_train.cli stage=export export.head=DIR
export.format=speculators|vllm|sglang|eagle export.out=DIR`, `make export`).

- `speculators` (EAGLE-3 block; the recommended vLLM format): vLLM's speculators layout, which `vllm serve <this
  directory>` runs as is: `speculators_model_type` eagle3, `speculators_config` (algorithm, the proposal method and its
  speculative tokens, the verifier's hub id or path and architectures), a `transformer_layer_config` of the head's
  decoder layer, `draft_vocab_size`, `target_hidden_size`, `norm_before_residual` (false: the feature itself is the
  residual), the aux layer ids; weights `layers.0.*`, `fc`, `norm`, `lm_head`, `embed_tokens`, and with a reduced
  draft vocabulary `d2t`, `t2d` (none for the whole vocabulary: vLLM has no parameter for them then).
  speculators (0.9.0) has no EAGLE-1 model, so an EAGLE-1-block head has no route here: format=vllm serves it.
- EAGLE-3 block, `vllm|sglang|eagle`: the LlamaForCausalLMEagle3 layout SafeAILab published: `midlayer.*`, `fc`
  (3H -> H), `norm`, `lm_head` [Vd, H], `d2t` (draft id -> target id offsets), `t2d` (bool [V]), `embed_tokens`; a
  config with `draft_vocab_size`, `target_hidden_size` and `eagle_aux_hidden_state_layer_ids` (vLLM's ids count the
  embedding as 0: our 0-based layer outputs + 1) at the top level and in `eagle_config`. `speculators convert`
  turns it into the speculators layout.
- DFlash block drafter (eagle_infer.head.dflash_head), `speculators`: speculators' DFlashSpeculatorConfig
  (`speculators_model_type` dflash; `block_size`, `mask_token_id`, `aux_hidden_state_layer_ids` = our 0-based layer
  outputs + 1, `sliding_window_non_causal`, the block's B - 1 speculative tokens), which vLLM serves (method dflash:
  its speculators reader maps the aux ids back to DFlash's target_layer_ids); weights with speculators' names
  (`layers.N.*` with q_norm/k_norm, `fc`, `hidden_norm`, `norm`; with a draft vocabulary `lm_head` [Vd, H] of the
  target's rows, `d2t`, `t2d`). `sglang`: z-lab's DFlashDraftModel layout that SGLang's DFLASH reads (`block_size`,
  `num_target_layers`, `dflash_config` {mask_token_id, target_layer_ids}; the same weights, no LM head: SGLang
  scores with the target's, so a drafter with a draft vocabulary or a context window is refused for it).
- EAGLE-1 block (fc over [token embedding ; feature] + decoder layers, the target's LM head): a config of the head's
  shape (the target's, `num_hidden_layers` = the head's layers) and `fc.*`, `layers.N.*` (layer 0 without an input
  norm), `embed_tokens`. `eagle` is SafeAILab's layout (architectures LlamaForCausalLM, `bias` says whether fc has
  one); `vllm` its EagleLlamaForCausalLM reads the same (its fc has no bias: train with head.fc_bias=false);
  `sglang` names LlamaForCausalLMEagle (its fc has a bias: zeros when the head has none). A reduced draft
  vocabulary is the token map SGLang takes (`token_map.pt`: `--speculative-token-map`); vLLM's EAGLE-1 drafter has
  none, so such a head is refused for vllm.

Every config carries `rope_theta` (and `rope_scaling` when the target scales) at the top level beside
`rope_parameters`, and `torch_dtype` = `dtype` = the weights' dtype; draft-vocabulary ids are written ascending
(the LM-head rows permuted alike). Which target families each server's drafter builds is FAMILIES; what each
loader reads is written down in tests/fixtures/serving_loaders.json (sources and commits named there), and
`make check-export` (scripts/check_export.py) loads every export speculators reads with speculators' own classes.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub
import torch
from safetensors.torch import save_file

from eagle_infer.head.dflash_head import DFlashHead
from eagle_infer.head.draft_head import INPUT_MODES, DraftHead, SavedHead
from eagle_infer.errors import EagleError
from eagle_infer.head.head_card import CARD_FILE, serve_section
from eagle_infer.head.head_checkpoint import TOKEN_MAP_FILE
from eagle_infer.models.registry import is_hub_id, lookup

FORMATS = ("speculators", "vllm", "sglang", "eagle")
SERVERS = {"speculators": "vLLM (speculators format)", "vllm": "vLLM", "sglang": "SGLang",
           "eagle": "the EAGLE reference code"}
# Target families whose head layers each (block, format)'s drafter builds: Llama layers serve Llama and Mistral
# (attending the whole context, as the head does here), and Qwen2 as a Llama with attention biases (o_proj's written as zeros); vLLM has a
# Qwen3 EAGLE-3 drafter (q/k norms). speculators 0.9.0 has no EAGLE-1 model.
FAMILIES = {
    ("eagle", "vllm"): ("llama", "mistral"), ("eagle", "sglang"): ("llama", "mistral"),
    ("eagle", "eagle"): ("llama", "mistral"), ("eagle", "speculators"): (),
    ("eagle3", "speculators"): ("llama", "mistral", "qwen2", "qwen3"),
    ("eagle3", "vllm"): ("llama", "mistral", "qwen2", "qwen3"),
    ("eagle3", "sglang"): ("llama", "mistral"), ("eagle3", "eagle"): ("llama", "mistral"),
    # DFlash: vLLM reads speculators' layout, SGLang z-lab's; both build the same layers (per-head q/k norms) from a
    # Llama or Qwen3 config
    ("dflash", "speculators"): ("llama", "mistral", "qwen3"), ("dflash", "sglang"): ("llama", "mistral", "qwen3"),
    ("dflash", "vllm"): (), ("dflash", "eagle"): (),
}
BLOCK_NAMES = {"eagle": "EAGLE-1", "eagle3": "EAGLE-3", "dflash": "DFlash"}
ARCHITECTURES = {"eagle": "LlamaForCausalLM", "vllm": "LlamaForCausalLM", "sglang": "LlamaForCausalLMEagle"}
EAGLE3_ARCHITECTURES = {"llama": "LlamaForCausalLMEagle3", "qwen3": "Eagle3Qwen3ForCausalLM"}
SPECULATIVE_TOKENS = 3  # speculators' default proposal length
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# Target-config keys a one-layer head config must not carry over (per-layer lists, sliding windows, quantization)
DROPPED_KEYS = ("quantization_config", "auto_map", "layer_types", "sliding_window", "use_sliding_window",
                "max_window_layers", "rope_scaling", "torch_dtype", "dtype", "architectures")
EXPORT_FILES = ("config.json", "model.safetensors", TOKEN_MAP_FILE, CARD_FILE)


@dataclass
class ExportSettings:
    """What an export writes besides the head: its verifier (the target's hub id or path; default: the registry's
    hub id, or the target's name when it is one), the proposal length, the weights' dtype (the embedding is the
    target's, rounded to it), and whether a non-empty `out` is replaced."""

    verifier: str | None = None
    speculative_tokens: int = SPECULATIVE_TOKENS
    overwrite: bool = False
    dtype: str = "bfloat16"


def layer_type(head: DraftHead) -> str:
    """The decoder-layer model_type the servers build for the head's layers: "qwen3" for Qwen3 targets, else
    "llama" (Llama, Mistral, Qwen2 with attention biases)."""
    return "qwen3" if head.config.architecture == "qwen3" else "llama"


def check_servable(head: SavedHead, fmt: str) -> None:
    """A one-line error naming the server and what to do instead when `fmt`'s server cannot run `head` as it drafts
    here."""
    c = head.config
    if fmt not in FORMATS:
        raise EagleError(f"unknown export format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if c.input_mode != INPUT_MODES[0]:
        raise EagleError(f"a head with input_mode {c.input_mode!r} runs on no server: they feed (feature, next token); "
                         f"train with train.input_mode={INPUT_MODES[0]}")
    if c.block == "eagle" and c.fused:
        raise EagleError("fused features on the EAGLE-1 block run on no server: train with last-layer features "
                         "(head.features=last), or an EAGLE-3-block head")
    if c.block == "eagle3" and not c.fused:
        raise EagleError("the servers' EAGLE-3 drafters fuse target layers and this EAGLE-3-block head reads the last "
                         "hidden state: train with head.features=fused")
    if c.block == "dflash" and fmt not in ("speculators", "sglang"):
        raise EagleError(f"the {fmt!r} layout cannot hold a DFlash drafter ({SERVERS[fmt]} reads EAGLE heads from it): "
                         "export format=speculators (vLLM, method dflash) or sglang (SGLang, DFLASH)")
    if c.block == "dflash" and fmt == "sglang" and (c.draft_vocab_size or c.sliding_window):
        raise EagleError(f"SGLang's DFlash drafter scores with the target's whole LM head and attends the whole context; "
                         f"this drafter drafts {c.draft_vocab_size or c.vocab_size} of {c.vocab_size} tokens with "
                         f"context window {c.sliding_window or 'none'}: export format=speculators, or train with "
                         "train.draft_vocab_size=0 head.sliding_window=0")
    if (c.fc_norm or c.norm_output) and fmt != "speculators":
        raise EagleError(f"SafeAILab's EAGLE-3 layout ({fmt}) has no fc_norm or norm_output, and this EAGLE-3.1 head "
                         "sets them: export format=speculators (vLLM)")
    if c.block == "eagle" and fmt == "speculators":
        raise EagleError("speculators (0.9.0) has no EAGLE-1 model, so vLLM's speculators format cannot hold an "
                         "EAGLE-1-block head: export format=vllm (trained with head.fc_bias=false), sglang or eagle")
    families = FAMILIES[(c.block, fmt)]
    if c.architecture not in families:
        where = [f for (block, f), fams in FAMILIES.items() if block == c.block and c.architecture in fams]
        raise EagleError(f"{SERVERS[fmt]} has no {BLOCK_NAMES[c.block]} drafter for a "
                         f"{c.architecture!r} target (it drafts for {', '.join(families)}): "
                         + (f"export format={' or '.join(where)}" if where else "no server drafts for it"))
    if c.block == "eagle" and fmt == "vllm":
        if head.fc.bias is not None and bool(head.fc.bias.detach().any()):
            raise EagleError("vLLM's EAGLE-1 drafter has no fc bias and this head has one: train with "
                             "head.fc_bias=false, or export format=sglang or eagle")
        if c.draft_vocab_size:
            raise EagleError(f"vLLM's EAGLE-1 drafter has no draft-vocabulary map and this head drafts "
                             f"{c.draft_vocab_size} of {c.vocab_size} tokens: export format=sglang (its token map) "
                             "or train with train.draft_vocab_size=0")


def verifier_of(head: DraftHead, given: str | None) -> str:
    """The hub id or path the speculators config names as the verifier; a one-line error when there is none."""
    name = head.target.name
    spec = lookup(name)
    verifier = given or (spec.hf_id if spec is not None else None) or (
        name if is_hub_id(name) or Path(name).is_dir() else None)
    if not verifier:
        raise EagleError(f"a speculators export names its verifier (the target) by hub id or path, and target "
                         f"{name!r} is neither: give export.verifier=<hub id or directory of the target>")
    return verifier


def rope_keys(target_config) -> dict:
    """rope_theta (and rope_scaling when the target scales) at the top level, beside transformers 5's
    rope_parameters: loaders on transformers 4 read only the former and fall back to 10,000 silently."""
    params = dict(getattr(target_config, "rope_parameters", None) or {})
    theta = params.get("rope_theta", getattr(target_config, "rope_theta", None))
    if theta is None:
        raise EagleError(f"target config {type(target_config).__name__} has no rope_theta: expected a RoPE model")
    out = {"rope_theta": float(theta), "rope_parameters": {**params, "rope_theta": float(theta)}}
    if params.get("rope_type", "default") != "default":
        out["rope_scaling"] = {k: v for k, v in params.items() if k != "rope_theta"}
    return out


def layer_config(head: DraftHead, dtype: str) -> dict:
    """The target's config with the head's shape: its decoder-layer model_type, `num_hidden_layers` the head's,
    the rope keys, `torch_dtype` = `dtype` = the weights'; a Qwen2 target's layers as a Llama's with attention
    biases."""
    target_config = head.target.config
    raw = target_config.to_dict()
    keep = {k: v for k, v in raw.items() if not k.startswith("_") and k not in DROPPED_KEYS}
    config = {**keep, "model_type": layer_type(head), "num_hidden_layers": head.config.layers,
              "tie_word_embeddings": False, **rope_keys(target_config), "torch_dtype": dtype, "dtype": dtype}
    config["attention_bias"] = head.config.architecture == "qwen2" or bool(keep.get("attention_bias", False))
    return config


def dflash_layer_config(head: DFlashHead, dtype: str) -> dict:
    """A DFlash drafter's transformer_layer_config: layer_config, and with a sliding window every layer's type
    `sliding_attention` over it (speculators' window; its full-attention layers see the whole context)."""
    config, c = layer_config(head, dtype), head.config
    if c.sliding_window:
        config.update(sliding_window=c.sliding_window, layer_types=["sliding_attention"] * c.layers)
    return config


def draft_order(head: DraftHead) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(the draft tokens' target ids ascending [Vd], the permutation of the head's LM-head rows that matches them,
    or None when the head drafts the whole vocabulary)."""
    if head.draft_vocab is None:
        return torch.arange(head.config.vocab_size), None
    ids, order = head.draft_vocab.cpu().long().sort()
    return ids, order


def vocab_maps(head: DraftHead | DFlashHead) -> dict[str, torch.Tensor]:
    """`d2t` (each draft id's offset to its target id [Vd]) and `t2d` (bool [V]: the target ids drafted) for a head
    drafting a reduced vocabulary; none for one drafting the whole vocabulary, which vLLM's EAGLE-3 and DFlash
    drafters hold no `draft_id_to_target_id` for (loading one fails: "no module or parameter named
    'draft_id_to_target_id'") and speculators treats as the identity."""
    ids = draft_order(head)[0]
    if ids.numel() == head.config.vocab_size:
        return {}
    t2d = torch.zeros(head.config.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    return {"d2t": ids - torch.arange(ids.numel()), "t2d": t2d}


def _eagle3_state(head: DraftHead, layer_prefix: str) -> dict[str, torch.Tensor]:
    """An EAGLE-3-block head's weights, its decoder layer under `layer_prefix` ("midlayer." or "layers.0.")."""
    c = head.config
    state = {layer_prefix + k[len("layers.0."):]: v for k, v in head.state_dict().items() if k.startswith("layers.0.")}
    if c.architecture == "qwen2":  # Llama layers with attention_bias carry an o_proj bias; Qwen2's is zero
        state[layer_prefix + "self_attn.o_proj.bias"] = torch.zeros(c.hidden_size)
    ids, order = draft_order(head)
    lm_head = head.lm_head.weight if order is None else head.lm_head.weight[order.to(head.lm_head.weight.device)]
    state.update({"norm.weight": head.norm.weight, "lm_head.weight": lm_head, "fc.weight": head.fuse.weight,
                  "embed_tokens.weight": head.target.embed_tokens.weight})
    for i, norm in enumerate(head.fc_norm or ()):
        state[f"fc_norm.{i}.weight"] = norm.weight
    return {**state, **vocab_maps(head)}


def _eagle_state(head: DraftHead, fmt: str) -> dict[str, torch.Tensor]:
    state = {k: v for k, v in head.state_dict().items() if k.startswith(("fc.", "layers."))}
    state["embed_tokens.weight"] = head.target.embed_tokens.weight
    if fmt == "sglang" and "fc.bias" not in state:
        state["fc.bias"] = torch.zeros(head.config.hidden_size)
    if fmt == "vllm":
        state.pop("fc.bias", None)  # absent or all zeros (check_servable): vLLM's fc has none
    return state


def eagle3_extra(head: DraftHead) -> dict:
    """The EAGLE-3 keys every layout writes at the top level: vocabulary sizes, the fused layers (vLLM's ids:
    our 0-based layer outputs + 1), the residual convention."""
    c = head.config
    aux = [i + 1 for i in c.feature_layers]
    return {"draft_vocab_size": c.draft_vocab_size or c.vocab_size, "target_hidden_size": c.hidden_size,
            "eagle_aux_hidden_state_layer_ids": aux, "norm_before_residual": False}


def speculators_config(head: DraftHead, settings: ExportSettings) -> dict:
    """vLLM's speculators config of an EAGLE-3-block head (the keys speculators' Eagle3SpeculatorConfig saves)."""
    layer = layer_config(head, settings.dtype)
    architectures = list(getattr(head.target.config, "architectures", None) or [type(head.target.model).__name__])
    proposal = {"proposal_type": "greedy", "speculative_tokens": settings.speculative_tokens, "verifier_accept_k": 1,
                "accept_tolerance": 0.0}
    return {
        "architectures": ["Eagle3Speculator"], "speculators_model_type": "eagle3",
        "speculators_config": {"algorithm": "eagle3", "proposal_methods": [proposal],
                               "default_proposal_method": "greedy",
                               "verifier": {"name_or_path": verifier_of(head, settings.verifier),
                                            "architectures": architectures}},
        "transformer_layer_config": layer, **eagle3_extra(head), "norm_before_fc": False,
        "fc_norm": head.config.fc_norm, "norm_output": head.config.norm_output, "embed_requires_grad": False, "tie_word_embeddings": False,
        "torch_dtype": layer["torch_dtype"], "dtype": layer["dtype"],
    }


def dflash_speculators_config(head: DFlashHead, settings: ExportSettings) -> dict:
    """speculators' DFlashSpeculatorConfig of a DFlash drafter: its layer config, block, mask token, aux layer ids
    (speculators' ids: our 0-based layer outputs + 1), the block's B - 1 speculative tokens."""
    c = head.config
    layer = dflash_layer_config(head, settings.dtype)
    architectures = list(getattr(head.target.config, "architectures", None) or [type(head.target.model).__name__])
    proposal = {"proposal_type": "greedy", "speculative_tokens": c.block_size - 1, "verifier_accept_k": 1,
                "accept_tolerance": 0.0}
    return {
        "architectures": ["DFlashSpeculator"], "speculators_model_type": "dflash",
        "speculators_config": {"algorithm": "dflash", "proposal_methods": [proposal], "default_proposal_method": "greedy",
                               "verifier": {"name_or_path": verifier_of(head, settings.verifier),
                                            "architectures": architectures}},
        "transformer_layer_config": layer, "draft_vocab_size": c.draft_vocab_size or c.vocab_size,
        "block_size": c.block_size, "target_hidden_size": c.hidden_size,
        "aux_hidden_state_layer_ids": [i + 1 for i in c.feature_layers], "mask_token_id": c.mask_token_id,
        "sliding_window_non_causal": c.block_attention == "bidirectional", "sample_from_anchor": False,
        "torch_dtype": layer["torch_dtype"], "dtype": layer["dtype"],
    }


def dflash_zlab_config(head: DFlashHead, dtype: str) -> dict:
    """z-lab's DFlashDraftModel config, which SGLang reads (python/sglang/srt/speculative/dflash_utils.py): the layer
    config, block_size, num_target_layers and dflash_config {mask_token_id, target_layer_ids (0-based outputs)}."""
    c = head.config
    return {**dflash_layer_config(head, dtype), "architectures": ["DFlashDraftModel"], "block_size": c.block_size,
            "num_target_layers": head.target.config.num_hidden_layers,
            "dflash_config": {"mask_token_id": c.mask_token_id, "target_layer_ids": list(c.feature_layers)}}


def _dflash_state(head: DFlashHead) -> dict[str, torch.Tensor]:
    """A DFlash drafter's weights as speculators and z-lab name them (the same names as ours); with a draft
    vocabulary, speculators' LM head of the target's rows over it (ascending), d2t offsets and the t2d mask."""
    state = {k: v for k, v in head.trainable_state_dict().items() if k != "draft_vocab"}
    if head.draft_vocab is not None:
        ids = draft_order(head)[0]
        state["lm_head.weight"] = head.target.lm_head.weight[ids.to(head.target.lm_head.weight.device)]
    return {**state, **vocab_maps(head)}


def _prepare(out: Path, overwrite: bool) -> None:
    """A new or empty `out`; with overwrite, an earlier export's files in it are removed first."""
    if out.exists() and not out.is_dir():
        raise EagleError(f"export directory {str(out)!r} is a file: expected a directory")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise EagleError(f"export directory {str(out)!r} exists and is not empty: expected a new or empty "
                             "directory, or export.overwrite=true")
        for name in EXPORT_FILES:
            (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)


def export(head: SavedHead, fmt: str, out: str | Path, settings: ExportSettings | None = None) -> list[Path]:
    """Write `head` in `fmt`'s layout into `out` (config.json, model.safetensors, and a token map where needed);
    returns the files written."""
    settings = settings or ExportSettings()
    check_servable(head, fmt)
    if settings.speculative_tokens < 1:
        raise EagleError(f"export.speculative_tokens {settings.speculative_tokens} is invalid: expected >= 1")
    if settings.dtype not in DTYPES:
        raise EagleError(f"unknown export.dtype {settings.dtype!r}: expected one of {', '.join(DTYPES)}")
    dtype = DTYPES[settings.dtype]
    c, out = head.config, Path(out)
    if c.block == "dflash":
        config = (dflash_speculators_config(head, settings) if fmt == "speculators"
                  else dflash_zlab_config(head, settings.dtype))
        state = _dflash_state(head)
    elif fmt == "speculators":
        config, state = speculators_config(head, settings), _eagle3_state(head, "layers.0.")
    elif c.block == "eagle3":
        architecture = EAGLE3_ARCHITECTURES["qwen3" if layer_type(head) == "qwen3" else "llama"]
        extra = eagle3_extra(head)
        config = {**layer_config(head, settings.dtype), "architectures": [architecture], **extra,
                  "eagle_config": {"use_aux_hidden_state": True,
                                   "eagle_aux_hidden_state_layer_ids": extra["eagle_aux_hidden_state_layer_ids"]}}
        state = _eagle3_state(head, "midlayer.")
    else:
        config = {**layer_config(head, settings.dtype), "architectures": [ARCHITECTURES[fmt]],
                  "bias": head.fc.bias is not None and fmt != "vllm"}
        state = _eagle_state(head, fmt)
    _prepare(out, settings.overwrite)
    weights = {k: v.detach().to("cpu", dtype if v.is_floating_point() else v.dtype).contiguous()
               for k, v in state.items()}
    save_file(weights, str(out / "model.safetensors"))
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    written = [out / "config.json", out / "model.safetensors"]
    if c.block == "eagle" and c.draft_vocab_size:
        torch.save(draft_order(head)[0], out / TOKEN_MAP_FILE)
        written.append(out / TOKEN_MAP_FILE)
    return written


def write_card(source: str | Path, out: str | Path, head: SavedHead, fmt: str,
               settings: ExportSettings | None = None) -> Path:
    """The export's model card: the source head's card (when it has one) and how `fmt`'s server runs the export."""
    settings = settings or ExportSettings()
    card = Path(source) / CARD_FILE
    text = card.read_text() if card.exists() else f"# EAGLE draft head for {head.config.target}\n"
    target_id = verifier_of(head, settings.verifier) if fmt == "speculators" else (
        settings.verifier or getattr(lookup(head.target.name), "hf_id", None) or head.target.name)
    path = Path(out) / CARD_FILE
    path.write_text(text.rstrip("\n") + "\n\n" + serve_section(head.config, fmt, target_id,
                                                               settings.speculative_tokens, str(Path(out))))
    return path


def push(directory: str | Path, repo_id: str, private: bool = False) -> str:
    """Upload an exported head (its config, weights, token map and card) to the Hugging Face hub as model repo
    `repo_id`, created when missing; returns the repository's URL. One line when the hub cannot be reached."""
    directory = Path(directory)
    if not (directory / "config.json").exists() or not (directory / "model.safetensors").exists():
        raise EagleError(f"{str(directory)!r} holds no exported head: expected config.json and model.safetensors "
                         "(stage=export writes them)")
    if not (directory / "README.md").exists():
        raise EagleError(f"{str(directory)!r} has no model card (README.md): export a head that has one")
    api = huggingface_hub.HfApi()
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(directory), repo_id=repo_id, repo_type="model",
                          commit_message="Upload an EAGLE draft head (eagle-toolkit export)")
    except Exception as err:  # noqa: BLE001 (the hub client raises many types: offline, no token, no rights, ...)
        raise EagleError(f"pushing {str(directory)!r} to {repo_id!r} failed ({type(err).__name__}): check the network "
                         "and `huggingface-cli login`") from None
    return str(url)
