"""The chat command takes any text: its prompt read before Hydra (eagle_infer.entry.chat_input), and its interactive mode
driven through a pseudo-terminal."""
from __future__ import annotations

import io
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eagle_infer.entry.api import Eagle
from eagle_infer.models.chat import Message
from eagle_infer.entry.chat_input import split_arguments
from eagle_infer.config import InferConf
from eagle_infer.errors import EagleError

REPO = Path(__file__).resolve().parent.parent
ENGLISH, CJK = "What's the capital of France, and why?", "请用一句话介绍你自己 😀"


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("argv, text, raw, rest", [
    ([ENGLISH, "infer.temperature=0.7"], ENGLISH, False, ["infer.temperature=0.7"]),
    (["model.name=x", CJK], CJK, False, ["model.name=x"]),
    (["What's", "up,", "[doc]?"], "What's up, [doc]?", False, []),
    ([f"chat={ENGLISH}"], ENGLISH, False, []),
    (["chat='Hi, you'", "output=json"], "Hi, you", False, ["output=json"]),
    (["prompt=Once upon a time, <|im_start|>"], "Once upon a time, <|im_start|>", True, []),
    (["Hi"], "Hi", False, []),
    (["2+2=?", "--cfg", "job", "+x=1", "~y"], "2+2=?", False, ["--cfg", "job", "+x=1", "~y"]),
])
def test_prompt_is_any_text(argv, text, raw, rest):
    request, overrides = split_arguments(argv, Terminal())
    assert (request.text, request.raw, overrides) == (text, raw, rest)


def test_prompt_from_stdin_and_file(tmp_path):
    assert split_arguments(["-", "infer.seed=1"], Pipe(CJK + "\n"))[0].text == CJK + "\n"
    assert split_arguments([], Pipe(ENGLISH))[0].text == ENGLISH  # piped in without "-"
    path = tmp_path / "q.txt"
    path.write_text(f"{ENGLISH}\n{CJK}\n", encoding="utf-8")
    for argv in (["--file", str(path)], [f"--file={path}"]):
        assert split_arguments(argv, Terminal())[0].text == f"{ENGLISH}\n{CJK}\n"
    assert split_arguments([], Terminal())[0].text is None  # a terminal and no prompt: interactive


@pytest.mark.parametrize("argv, stdin, needle", [
    (["Hi", "chat=Hello"], "", "given 2 times"),
    (["chat="], "", "chat='' is empty"),
    (["-"], " \n", "standard input is empty"),
    (["--file", "/no/such/file"], "", "'/no/such/file' does not exist"),
    (["--file"], "", "--file needs a path"),
])
def test_prompt_errors(argv, stdin, needle):
    with pytest.raises(EagleError, match=needle):
        split_arguments(argv, Pipe(stdin))


def test_file_not_utf8(tmp_path):
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(EagleError, match="cannot be read .*UnicodeDecodeError.*UTF-8"):
        split_arguments(["--file", str(tmp_path / "bin")], Terminal())


class Pty:
    """A command on a pseudo-terminal: read until some text appears, type lines."""

    def __init__(self, argv: list[str], env: dict):
        self.fd, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, cwd=REPO, env=env, close_fds=True)
        os.close(slave)
        self.seen, self.pos = b"", 0

    def expect(self, text: str, timeout: float = 120) -> str:
        """What the terminal showed since the last expectation, through `text`."""
        deadline = time.monotonic() + timeout
        while text.encode() not in self.seen[self.pos:]:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"waited {timeout} s for {text!r}; the terminal shows:\n{self.text()[-3000:]}")
            try:
                self.seen += os.read(self.fd, 65536)
            except OSError:  # the command exited
                raise AssertionError(f"exited before {text!r}:\n{self.text()[-3000:]}") from None
        start, self.pos = self.pos, self.seen.index(text.encode(), self.pos) + len(text.encode())
        return self.seen[start:self.pos].decode(errors="replace").replace("\r\n", "\n")

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def text(self) -> str:
        return self.seen.decode(errors="replace").replace("\r\n", "\n")

    def close(self) -> int:
        rc = self.proc.wait(timeout=30)
        os.close(self.fd)
        return rc


def test_interactive_chat_on_a_terminal(tiny_smol, tmp_path):
    """Two turns typed on a terminal: each answer streamed and followed by its τ and tokens/s line, the second
    answered in the conversation so far (the same tokens as the API's answer to the whole chat); /exit ends."""
    model = tmp_path / "model"
    tiny_smol.model.save_pretrained(model)
    tiny_smol.tokenizer.save_pretrained(model)
    greedy = Eagle(tiny_smol, InferConf(method="vanilla", max_new_tokens=6))
    first = greedy.generate(ENGLISH).text
    second = greedy.generate([Message("user", ENGLISH), Message("assistant", first), Message("user", CJK)]).text
    assert second != greedy.generate(CJK).text  # the test tells a kept conversation from a forgotten one
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "EAGLE_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(REPO)}
    term = Pty([sys.executable, "-m", "eagle_infer.entry.cli", f"model.name={model}", "model.dtype=float32",
                "infer.head=random", "infer.budget=fixed", "infer.max_new_tokens=6"], env)
    try:
        term.expect("/exit or Ctrl-D ends.")
        term.expect("> ")
        for turn, (message, answer) in enumerate([(ENGLISH, first), (CJK, second)], 1):
            term.type(message)
            shown = term.expect("tokens/s", timeout=60)
            after = shown[shown.rindex(message) + len(message):]
            assert answer.strip() in after, after
            assert re.search(r"\[eagle2\+lookup \| \d+ tokens \| tau [\d.]+ \| [\d.]+ tokens/s", after), after
            term.expect("> ")
        term.type("/exit")
        assert term.close() == 0
    finally:
        term.proc.kill()
