"""Configs and weight files a careful user or a hostile one might hand over: sizes checked against the weights'
header before anything is built, pickles refused as not plain tensor files (and never run), a model directory
without weights, an offline hub id failing at once. Each is one line naming the file and the field."""
from __future__ import annotations

import json
import shutil
import socket
import time
from functools import lru_cache
from pathlib import Path

import pytest
import torch

from eagle_infer.models.config_limits import layer_count, safetensors_shapes
from eagle_infer.head.draft_head import random_head
from eagle_infer.head.head_checkpoint import load_config, load_head
from eagle_infer.models.target import load_target
from tests.test_engine_errors import one_line_error
from tests.tiny import tiny_target


@lru_cache(maxsize=None)
def target():
    return tiny_target()


class Payload:
    """Unpickling this would create a file: proof that a loader ran code from a pickle."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def hostile_pickle(path: Path, marker: Path) -> None:
    torch.save({"fc.weight": Payload(marker)}, path)


@pytest.fixture
def saved_head(tmp_path) -> Path:
    directory = tmp_path / "head"
    random_head(target(), seed=0).save(directory)
    return directory


def edit_json(path: Path, **changes) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("changes, needles", [
    (dict(layers=1000000), ['"layers": 1000000', "expected 0..64"]),
    (dict(layers=3), ['"layers": 3', "weights hold 1 (decoder layers)"]),
    (dict(layers="many"), ['"layers": \'many\'', "expected an integer"]),
    (dict(draft_vocab_size=10**12), ['"draft_vocab_size": 1000000000000', "expected 0.."]),
])
def test_head_config_sizes_checked_before_building(saved_head, changes, needles):
    edit_json(saved_head / "config.json", **changes)
    one_line_error(lambda: load_head(saved_head, target()), str(saved_head / "config.json"), *needles)
    if changes.get("layers") == 1000000:
        one_line_error(lambda: load_config(saved_head), '"layers": 1000000')


def test_pickled_head_weights_and_token_map_are_refused_and_never_run(tmp_path, saved_head):
    marker = tmp_path / "code-ran"
    published = tmp_path / "published"
    published.mkdir()
    shutil.copy(saved_head / "config.json", published / "config.json")
    hostile_pickle(published / "pytorch_model.bin", marker)
    one_line_error(lambda: load_head(published, target()), str(published / "pytorch_model.bin"),
                   "is not a plain tensor file: expected safetensors or a weights-only torch file")
    torch.save({"fc.weight": 3, "note": "not a tensor"}, published / "pytorch_model.bin")  # weights-only, no tensors
    one_line_error(lambda: load_head(published, target()), "is not a plain tensor file")
    # a published EAGLE-1/2 head (LlamaConfig-style config) with a hostile token_map.pt
    eagle = tmp_path / "eagle"
    eagle.mkdir()
    cfg = target().config
    (eagle / "config.json").write_text(json.dumps({"hidden_size": cfg.hidden_size, "vocab_size": cfg.vocab_size}))
    state = {k: v for k, v in random_head(target(), seed=0).state_dict().items() if k.startswith(("fc.", "layers."))}
    torch.save(state, eagle / "pytorch_model.bin")
    hostile_pickle(eagle / "token_map.pt", marker)
    one_line_error(lambda: load_head(eagle, target()), str(eagle / "token_map.pt"), "is not a plain tensor file")
    assert not marker.exists()


@pytest.fixture
def model_dir(tmp_path, tiny_smol) -> Path:
    path = tmp_path / "model"
    tiny_smol.model.save_pretrained(path)
    tiny_smol.tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("changes, needles", [
    (dict(num_hidden_layers=1000000), ['"num_hidden_layers": 1000000', "expected 0..1024"]),
    (dict(num_hidden_layers=40), ['"num_hidden_layers": 40', "weights hold 2 (decoder layers)"]),
    (dict(hidden_size=128), ['"hidden_size": 128', "weights hold 64 (the embedding width)"]),
    (dict(intermediate_size=10**9), ['"intermediate_size": 1000000000', "expected 0.."]),
    (dict(vocab_size=1000), ['"vocab_size": 1000', "(embedding rows)"]),
])
def test_model_config_sizes_checked_before_building(model_dir, changes, needles):
    edit_json(model_dir / "config.json", **changes)
    start = time.perf_counter()
    one_line_error(lambda: load_target(str(model_dir), "float32", "cpu"), repr(f"{model_dir}/config.json"), *needles)
    assert time.perf_counter() - start < 10


def test_header_shapes_without_reading_tensors(model_dir):
    shapes = safetensors_shapes(model_dir / "model.safetensors")
    assert layer_count(shapes, "model.layers.") == 2 and shapes["model.embed_tokens.weight"][1] == 64
    (model_dir / "model.safetensors").write_bytes((10**12).to_bytes(8, "little") + b"{}")
    one_line_error(lambda: load_target(str(model_dir), "float32", "cpu"), "model.safetensors",
                   "not a readable safetensors file")


def test_model_directory_without_weights_or_with_a_pickle(tmp_path, model_dir):
    (model_dir / "model.safetensors").unlink()
    one_line_error(lambda: load_target(str(model_dir), "float32", "cpu"), f"model directory {str(model_dir)!r}",
                   "has no weights", "model.safetensors")
    marker = tmp_path / "code-ran"
    hostile_pickle(model_dir / "pytorch_model.bin", marker)
    one_line_error(lambda: load_target(str(model_dir), "float32", "cpu"), repr(str(model_dir / "pytorch_model.bin")),
                   "is not a plain tensor file: expected safetensors or a weights-only torch file")
    assert not marker.exists()


def test_offline_hub_id_fails_at_once(monkeypatch):
    """Not cached and the hub unreachable: one connection attempt, then the line naming the local alternative."""
    attempts = []

    def refuse(address, timeout=None):
        attempts.append(address)
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for proxy in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(proxy, raising=False)
    start = time.perf_counter()
    message = one_line_error(lambda: load_target("someone/not-cached-model", "float32", "cpu"),
                             "'someone/not-cached-model'", "hub is unreachable", "Network is unreachable",
                             "model.name=<its local directory>")
    assert len(attempts) == 1 and time.perf_counter() - start < 5, message
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    one_line_error(lambda: load_head("someone/not-cached-head", target()), "HF_HUB_OFFLINE is set",
                   "infer.head=<its local directory>")
    assert len(attempts) == 1
