"""lab.blocks_result: an eval run of block drafters beside EAGLE heads becomes a result file whose page holds each
benchmark's table, the heads' cards and the per-question table with the default method beside its parts."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from eagle_infer.errors import EagleError
from eval.cli import EvalRunConf
from eval.metrics import ALL
from lab.blocks_result import FILE_NAME, blocks_page, blocks_result, read_blocks, rendered_pages
from lab.headline import HeadlineSettings, begin
from lab.result_file import platform_slug
from lab.result_store import DATA_DIR

ROOT = Path(__file__).resolve().parent.parent


def record(benchmark, method, qid, wall_s, tokens, accepted=()):
    cycles = [{"accepted": a, "tree_depth": 3, "tree_size": 3, "draft_s": 0.0, "verify_s": 0.0,
               "tested_conf": [], "tested_hit": []} for a in accepted]
    return {"benchmark": benchmark, "method": method, "question_id": qid, "turns": ["x"],
            "new_tokens": len(tokens), "wall_s": wall_s, "cycles": cycles, "temperature": 0.0, "tokens": tokens}


METHODS = ["vanilla", "eagle2", "lookup", "eagle2+lookup", "dflash:d"]
RECORDS = [record(b, m, q, wall, [1, 2, 3, 4], accepted)
           for b in ("mt_bench", "gsm8k") for q in ("1", "2")
           for m, wall, accepted in [("vanilla", 4.0, [0] * 4), ("eagle2", 2.0, [1, 1]), ("lookup", 3.0, [0, 1, 0]),
                                     ("eagle2+lookup", 2.5 if q == "1" else 1.0, [3]), ("dflash:d", 1.0, [3])]]


def run_dir(tmp_path: Path) -> Path:
    head = tmp_path / "head"
    head.mkdir()
    (head / "config.json").write_text(json.dumps({"block": "dflash", "layers": 2}))
    (head / "card.json").write_text(json.dumps({"steps": 700, "train_s": 3000.0, "machine": "Some CPU, 1 thread",
                                                "heldout/acceptance": 1.8, "heldout/top1_1": 0.5}))
    conf = OmegaConf.structured(EvalRunConf)
    conf.bench.names, conf.bench.limit, conf.bench.max_turns = ["mt_bench", "gsm8k"], 2, 1
    conf.methods, conf.model.dtype, conf.model.device, conf.threads = METHODS, "float32", "cpu", 2
    conf.heads = {"d": str(head)}
    run = tmp_path / "run"
    begin(run, ROOT)
    (run / "config.yaml").write_text(OmegaConf.to_yaml(conf))
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    return run


def test_a_run_becomes_a_file_and_its_page(tmp_path):
    data = blocks_result(run_dir(tmp_path), "make compare-blocks")
    assert data["heads"]["d"]["block"] == "dflash" and data["heads"]["d"]["heldout/acceptance"] == 1.8
    rows = {(m["benchmark"], m["method"]): m for m in data["methods"]}
    assert rows[("mt_bench", "dflash:d")]["speedup"] == 4.0 and rows[("mt_bench", "dflash:d")]["tau"] == 4.0
    assert rows[(ALL, "eagle2")]["speedup"] == 2.0 and rows[(ALL, "eagle2")]["identical"] == 1.0
    first = next(q for q in data["questions"] if q["benchmark"] == "mt_bench" and q["question"] == "1")
    assert first["methods"]["eagle2+lookup"]["speedup"] == 1.6 and first["methods"]["lookup"]["tau"] == 1.33
    path = tmp_path / DATA_DIR / platform_slug(data["machine"]) / FILE_NAME
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    (page, text), = rendered_pages(tmp_path, Path("docs/results")).items()
    assert page.name == f"{platform_slug(data['machine'])}-blocks.md"
    # question 1: the default (1.60x) is slower than eagle2 alone (2.00x); question 2: 4.00x over 2.00x
    assert "| mt_bench | 1 |" in text and "| 0.80x |" in text and "| 2.00x |" in text
    assert "## gsm8k" in text and "## All benchmarks" in text and "simulated acceptance" in text
    assert "eagle2+lookup / best of eagle2 and lookup" in text


def test_a_malformed_file_is_one_line(tmp_path):
    data = blocks_result(run_dir(tmp_path), "make compare-blocks")
    del data["heads"]
    bad = tmp_path / "blocks.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(EagleError, match=r"fields missing \['heads'\]"):
        read_blocks(bad)
    bad.write_text("{")
    with pytest.raises(EagleError, match="is not JSON"):
        read_blocks(bad)


def test_the_page_states_the_machine_and_command():
    data = {"machine": "Some CPU AVX2", "device": "cpu", "threads": 2, "dtype": "float32", "torch": "2.13.0",
            "commit": "abc1234", "uncommitted_changes": False, "command": "make compare-blocks", "date": "2026-12-06",
            "load_average": 1.0, "heads": {}, "methods": [], "questions": [],
            "settings": {"model": "m", "head": "shipped", "benchmarks": [], "questions_per_benchmark": 10,
                         "max_turns": 1, "max_new_tokens": 128, "temperature": 0.0, "depth": "auto",
                         "total_tokens": "auto", "compile": False, "methods": ["vanilla"]}}
    text = blocks_page(data, "data/x/blocks.json")
    assert "Some CPU AVX2 (cpu), 2 threads, float32" in text and "`make compare-blocks`" in text


def test_the_default_timed_twice_sets_the_noise_band():
    """With the default timed again (label `again`, the same head), the page says which of its losses to its best
    part are beyond twice the root mean square spread of the two timings."""
    from lab.blocks_result import AGAIN, noise_band

    assert noise_band([]) is None and noise_band([1.0, 1.0]) == 1.0
    assert noise_band([1.05, 1 / 1.05]) == pytest.approx(1.05 ** 2)
    # one disturbed timing among steady ones widens the root mean square band, not the median-based one
    steady = [1.01, 1 / 1.01, 1.01, 1 / 1.01, 1.5]
    assert noise_band(steady) > 1.3 and noise_band(steady, robust=True) == pytest.approx(1.01 ** (2 * 1.4826))
    default, again = "eagle2+lookup", f"eagle2+lookup:{AGAIN}"
    questions = []
    for q, (first, second, best) in enumerate([(1.00, 1.02, 1.00), (1.00, 0.98, 1.02), (1.00, 1.01, 1.30)]):
        questions.append({"benchmark": "mt_bench", "question": str(q), "methods": {
            "eagle2": {"speedup": best, "tau": 1.5}, "lookup": {"speedup": 0.9, "tau": 1.1},
            default: {"speedup": first, "tau": 1.6}, again: {"speedup": second, "tau": 1.6}}})
    data = {"machine": "Some CPU AVX2", "device": "cpu", "threads": 2, "dtype": "float32", "torch": "2.13.0",
            "commit": "abc1234", "uncommitted_changes": False, "command": "make compare-blocks", "date": "2026-12-06",
            "load_average": 1.0, "heads": {}, "methods": [], "questions": questions,
            "settings": {"model": "m", "head": "shipped", "benchmarks": [], "questions_per_benchmark": 3,
                         "max_turns": 1, "max_new_tokens": 128, "temperature": 0.0, "depth": "auto",
                         "total_tokens": "auto", "compile": False,
                         "methods": ["vanilla", "eagle2", "lookup", default, again]}}
    text = blocks_page(data, "data/x/blocks.json")
    # A question where the default decoded another text than vanilla (bfloat16) is shown, marked, and not judged.
    other = json.loads(json.dumps(questions[2]))
    other["question"], other["methods"][default]["speedup"], other["methods"][default]["identical"] = "3", 0.5, False
    marked = blocks_page({**data, "questions": questions + [other]}, "data/x/blocks.json")
    assert "| 0.50x (τ 1.60) ≠ |" in marked and "| 0.38x ≠ |" in marked
    assert "(on 1 question: the two decoded different texts)" in marked and "on 1 of 3 questions" in marked
    band = noise_band([1.02, 0.98, 1.01])
    assert 1 / 1.02 > 1 / band > 1 / 1.30
    assert f"root mean square, below {1 / band:.2f}x, on 1 of 3 questions (at worst 0.77x)" in text
    robust = noise_band([1.02, 0.98, 1.01], robust=True)
    assert f"median-based spread (1.4826 median absolute log, unmoved by a few disturbed timings), below " \
           f"{1 / robust:.2f}x, on" in text
    assert f"| {again} / {default} |" in text and "| 0.98x |" in text


def test_another_dtype_gets_a_file_and_page_of_its_own(tmp_path):
    """A bfloat16 run sits beside the float32 one of the same machine: blocks-bfloat16.json, -blocks-bfloat16.md."""
    from lab.blocks_result import blocks_files, file_name, page_name

    assert file_name("float32") == FILE_NAME and file_name("bfloat16") == "blocks-bfloat16.json"
    data = blocks_result(run_dir(tmp_path), "make compare-blocks")
    folder = tmp_path / DATA_DIR / platform_slug(data["machine"])
    folder.mkdir(parents=True)
    for dtype in ("float32", "bfloat16"):
        (folder / file_name(dtype)).write_text(json.dumps({**data, "dtype": dtype}))
    assert len(blocks_files(tmp_path)) == 2
    names = sorted(page.name for page in rendered_pages(tmp_path, Path("docs/results")))
    slug = platform_slug(data["machine"])
    assert names == [f"{slug}-blocks-bfloat16.md", f"{slug}-blocks.md"] and page_name(data) == f"{slug}-blocks.md"


def test_compare_blocks_loads_only_the_heads_its_methods_name():
    """make compare-blocks BLOCKS_METHODS=... (a subset) passes only the named heads to the eval and records the
    subset in the page's command, as a setting its last step parses, with a dtype or a head's directory given on the
    command line; the default run names all three heads."""
    import shlex
    import shutil
    import subprocess

    from eagle_train.plumbing.command_line import command_settings

    if shutil.which("make") is None:
        pytest.skip("make is not installed")

    def planned(*args: str) -> tuple[str, str]:
        """The eval's command line and the command the last step records."""
        lines = subprocess.run(["make", "-n", "compare-blocks", "STAMP=", *args], cwd=ROOT, check=True,
                               capture_output=True, text=True).stdout.splitlines()
        end = shlex.split(next(line for line in lines if "step=end" in line))
        settings = command_settings("blocks_result", HeadlineSettings, end[end.index("lab.blocks_result") + 1:])
        return next(line for line in lines if "eval.cli" in line), settings.command

    subset, command = planned("BLOCKS_METHODS=vanilla,dflash:dflash,eagle2+lookup:again")
    assert "+heads.dflash=" in subset and "+heads.again=" in subset and "+heads.eagle3" not in subset
    assert command == "make compare-blocks BLOCKS_METHODS=vanilla,dflash:dflash,eagle2+lookup:again"
    whole, command = planned()
    assert all(f"+heads.{label}=" in whole for label in ("eagle3", "dflash", "again"))
    assert command == "make compare-blocks"
    other, command = planned("BLOCKS_DFLASH=runs/d/head", "BLOCKS_DTYPE=bfloat16", "BLOCKS_METHODS=vanilla,dflash:dflash")
    assert "+heads.dflash=runs/d/head" in other and "model.dtype=bfloat16" in other
    assert command == ("make compare-blocks BLOCKS_DTYPE=bfloat16 BLOCKS_DFLASH=runs/d/head "
                       "BLOCKS_METHODS=vanilla,dflash:dflash")
