"""Headline result files and the docs generated from them: the committed docs are what the committed files give,
byte for byte; every figure in the README's block comes from a file; a malformed file is refused in one line."""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
import subprocess
from dataclasses import asdict
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from eagle_infer.errors import EagleError
from eval.cli import EvalRunConf
from lab.headline import begin, headline_result, method_results
from lab.result_file import (DATA_DIR, HeadlineResult, MethodResult, RunSettings, platform_slug, read_all,
                              read_result, result_path, write_result)
from lab.ablation_file import ABLATION, ablation_path, full_lines
from lab.result_store import merge
from lab.reproduction_doc import COMMITTED_BEGIN, COMMITTED_END
from lab.results_docs import (BEGIN, END, FORMATS, PAGES_DIR, README, REPRODUCTION, TRAINING, cell, rendered, stale,
                               write_docs)

ROOT = Path(__file__).resolve().parent.parent
FIGURE = re.compile(r"(?<![\w.-])\d+(?:\.\d+)?")


def unsourced_figures(block: str, results: list[HeadlineResult]) -> list[str]:
    """Numbers in `block` that are neither in a result file's text nor one of its figures as the tables print it."""
    sources = set()
    for result in results:
        sources.update(FIGURE.findall(json.dumps(asdict(result), ensure_ascii=False)))
        sources.update(f for m in result.methods for name in FORMATS for f in FIGURE.findall(cell(m, name)))
    return [figure for figure in FIGURE.findall(block) if figure not in sources]


def readme_block(readme: str) -> str:
    return readme[readme.index(BEGIN) + len(BEGIN):readme.index(END)]


def sample_result(machine: str = "Some CPU AVX2") -> HeadlineResult:
    methods = [MethodResult("vanilla", 10, 1280, 33.54, 1.0, 1.0, None),
               MethodResult("hf_generate", 10, 1280, 30.0, 0.894, None, 1.0),
               MethodResult("eagle2", 10, 1275, 47.25, 1.409, 2.476, 0.3)]
    settings = RunSettings("smollm2-135m", "shipped", ["mt_bench"], 10, 1, 128, 0.0, "auto", 8, "auto", "auto", False)
    return HeadlineResult(1, machine, "cpu", 2, "bfloat16", "2.13.0", "abc1234", False, "make headline", "2026-11-24",
                          1.5, settings, methods)


def checkout_copy(tmp_path: Path, results: list[HeadlineResult]) -> Path:
    """A checkout root holding the real README and the given result files, its docs generated."""
    root = tmp_path / "checkout"
    root.mkdir()
    shutil.copy(ROOT / README, root / README)
    (root / TRAINING).parent.mkdir(parents=True)
    shutil.copy(ROOT / TRAINING, root / TRAINING)
    for result in results:
        write_result(result, result_path(root, result.machine))
    write_docs(root)
    return root


def test_committed_docs_are_what_the_committed_result_files_give():
    assert read_all(ROOT), "no result file under docs/results/data: run make headline"
    assert stale(ROOT) == [], "run make results-docs and commit what it changes"


def test_every_figure_in_the_readme_block_comes_from_a_result_file():
    block = readme_block((ROOT / README).read_text(encoding="utf-8"))
    results = read_all(ROOT)
    assert FIGURE.findall(block)
    assert unsourced_figures(block, results) == []
    for result in results:
        assert f"| {result.commit} |" in block and f"`{result.command}`" in block and result.machine in block


def test_a_typed_in_figure_is_unsourced(tmp_path):
    result = sample_result()
    block = readme_block((checkout_copy(tmp_path, [result]) / README).read_text(encoding="utf-8"))
    assert unsourced_figures(block, [result]) == []
    assert unsourced_figures(block.replace("33.5", "39.9"), [result]) == ["39.9"]


def test_hand_edits_and_orphan_pages_are_stale_until_regenerated(tmp_path):
    result = sample_result()
    root = checkout_copy(tmp_path, [result])
    page = root / PAGES_DIR / f"{platform_slug(result.machine)}.md"
    assert stale(root) == [] and "| eagle2 | 10 | 1275 | 47.2 | 1.41x | 2.48 | 30% |" in page.read_text()
    page.write_text(page.read_text().replace("47.2", "49.9"))
    readme = root / README
    readme.write_text(readme.read_text().replace("| 1.41x |", "| 1.51x |"))
    orphan = root / PAGES_DIR / "gone.md"
    orphan.write_text("# an old page\n")
    assert stale(root) == [readme, page, orphan]
    write_docs(root)
    assert stale(root) == [] and not orphan.exists()


def test_one_row_per_platform_in_platform_order(tmp_path):
    zeta = dataclasses.replace(sample_result("Zeta GPU"), dtype="float32")
    root = checkout_copy(tmp_path, [zeta, sample_result("Alpha CPU AMX")])
    block = readme_block((root / README).read_text())
    assert block.count("| hardware | model | dtype |") == 1
    assert block.index("| [Alpha CPU AMX](docs/results/alpha-cpu-amx.md), 2 threads |") < block.index("| [Zeta GPU]")
    assert "| 33.5 | 1.41x | — | 2.48 | abc1234 |" in block  # vanilla tok/s, EAGLE-2, no eagle2+lookup run, τ
    # a bfloat16 row says why an answer can differ from vanilla's; float32 alone needs no such line
    assert block.count("near-tied argmaxes can flip") == 1
    (tmp_path / "f32").mkdir()
    only_float32 = readme_block((checkout_copy(tmp_path / "f32", [zeta]) / README).read_text())
    assert "near-tied" not in only_float32
    assert sorted(p.name for p in (root / PAGES_DIR).glob("*.md")) == ["alpha-cpu-amx.md", "zeta-gpu.md"]


def test_readme_names_the_shipped_head_and_an_earlier_one_without_row_names(tmp_path):
    """The README says "the shipped head" for a result measured with the head the card now names, "an earlier head"
    with its commit otherwise; the platform page keeps the row, as of its commit."""
    now = dataclasses.replace(sample_result("Alpha CPU"), settings=dataclasses.replace(
        sample_result().settings, head="shipped (row-now)"))
    old = dataclasses.replace(sample_result("Beta CPU"), commit="def5678", settings=dataclasses.replace(
        sample_result().settings, head="shipped (row-old)"))
    root = checkout_copy(tmp_path, [])
    (root / "eagle_infer" / "shipped_heads" / "smollm2-135m").mkdir(parents=True)
    (root / "eagle_infer" / "shipped_heads" / "smollm2-135m" / "card.json").write_text(json.dumps({"ablation_row": "row-now"}))
    for result in (now, old):
        write_result(result, result_path(root, result.machine))
    write_docs(root)
    block = readme_block((root / README).read_text())
    assert "| smollm2-135m, the shipped head |" in block and "| smollm2-135m, an earlier head (def5678) |" in block
    assert "row-" not in block
    assert "| setting: head | row-old (the shipped head as of def5678) |" in (root / PAGES_DIR / "beta-cpu.md").read_text()


def test_reproduction_pages_eagle3_section_follows_the_committed_ablation_file(tmp_path):
    """make reproduce writes docs/reproduction.md once per pass; its EAGLE-3 section reads make ablate-head's
    committed rows only, so a row merged since is stale there until make results-docs rewrites the block."""
    root = checkout_copy(tmp_path, [sample_result()])
    page = root / REPRODUCTION
    page.write_text(f"# A pass's page\n\n{COMMITTED_BEGIN}\n{COMMITTED_END}\n\n## Commands\n")
    claim = "EAGLE-3's block (fused features, 7-step training-time test) beats the EAGLE-1 block at equal data and "
    merge(ABLATION, ablation_path(root, "smollm2-135m"), full_lines([{"row": "all-cosine-300k", "tau": 1.6}]))
    assert page in stale(root)  # beside docs/training.md's ablation table
    write_docs(root)
    assert stale(root) == []
    text = page.read_text()
    assert text.startswith("# A pass's page") and text.endswith("## Commands\n")  # the pass's sections are kept
    assert f"| EAGLE-3 | {claim}epochs (300k tokens, 5 epochs) | τ 4.05 → 6.13 (+51%) | — | **pending** |" in text
    merge(ABLATION, ablation_path(root, "smollm2-135m"), full_lines([{"row": "eagle3-block-k7-300k", "tau": 1.5}]))
    assert page in stale(root)
    write_docs(root)
    assert f"| {claim}epochs (300k tokens, 5 epochs) | τ 4.05 → 6.13 (+51%) | τ 1.60 → 1.50 (-6%) | **does not hold" \
        in page.read_text()
    page.write_text("# A page without its block\n")
    with pytest.raises(EagleError, match="no single generated block"):
        rendered(root)


def test_readme_without_its_block_is_refused(tmp_path):
    root = tmp_path / "checkout"
    (root / DATA_DIR).mkdir(parents=True)
    (root / README).write_text("# A README\n" + BEGIN + "\n")
    with pytest.raises(EagleError, match="no single generated block"):
        rendered(root)


def test_result_file_round_trip(tmp_path):
    result = sample_result()
    path = write_result(result, result_path(tmp_path, result.machine))
    assert path == tmp_path / DATA_DIR / "some-cpu-avx2" / "headline.json"
    assert read_result(path) == result


def _broken(tmp_path, edit) -> Path:
    data = asdict(sample_result())
    edit(data)
    path = tmp_path / "headline.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("commit"), r"missing field 'commit'"),
    (lambda d: d["methods"][1].pop("tok_s"), r"missing field 'methods\[1\]\.tok_s'"),
    (lambda d: d["settings"].pop("max_new_tokens"), r"missing field 'settings\.max_new_tokens'"),
    (lambda d: d.update(speed=1), r"unknown field 'speed'"),
    (lambda d: d.update(threads="two"), r"field 'threads' is 'two'; expected int"),
    (lambda d: d.update(threads=True), r"field 'threads' is True; expected int"),
    (lambda d: d["methods"][0].update(tau="high"), r"field 'methods\[0\]\.tau' is 'high'; expected float \| None"),
    (lambda d: d["settings"].update(depth=None), r"field 'settings\.depth' is None; expected int \| str"),
    (lambda d: d.update(uncommitted_changes=None), r"field 'uncommitted_changes' is None; expected bool"),
    (lambda d: d.update(settings=[]), r"field 'settings' is \[\]; expected RunSettings"),
    (lambda d: d.update(format=2), r"format 2; expected 1"),
    (lambda d: d.update(methods=[]), r"field 'methods' is empty"),
])
def test_a_malformed_file_is_one_line_naming_file_and_field(tmp_path, edit, message):
    path = _broken(tmp_path, edit)
    with pytest.raises(EagleError, match=message) as err:
        read_result(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


def test_a_file_in_another_platforms_folder_is_refused(tmp_path):
    write_result(sample_result("Some CPU AVX2"), tmp_path / DATA_DIR / "other-cpu" / "headline.json")
    with pytest.raises(EagleError, match="belongs in folder 'some-cpu-avx2', not 'other-cpu'"):
        read_all(tmp_path)


def record(method, qid, new_tokens, wall_s, tokens, accepted=()):
    cycles = [{"accepted": a, "tree_depth": 2, "tree_size": 4, "draft_s": 0.0, "verify_s": 0.0,
               "tested_conf": [], "tested_hit": []} for a in accepted]
    return {"benchmark": "mt_bench", "method": method, "question_id": qid, "turns": ["x"], "new_tokens": new_tokens,
            "wall_s": wall_s, "cycles": cycles, "temperature": 0.0, "tokens": tokens}


RECORDS = [record("vanilla", "1", 10, 2.0, [1, 2], accepted=[0]), record("vanilla", "2", 10, 2.0, [3], accepted=[0]),
           record("eagle2", "1", 10, 1.0, [1, 2], accepted=[1, 2]), record("eagle2", "2", 10, 1.0, [4], accepted=[0])]


def test_method_results_over_all_questions():
    vanilla, eagle2 = method_results(RECORDS)
    assert vanilla == MethodResult("vanilla", 2, 20, 5.0, 1.0, 1.0, None)
    assert eagle2 == MethodResult("eagle2", 2, 20, 10.0, 2.0, 2.0, 0.5)  # τ = mean(2, 3, 1); 1 of 2 answers identical


def test_method_results_need_vanilla():
    with pytest.raises(EagleError, match="no vanilla records"):
        method_results(RECORDS[2:])


def test_headline_result_stamps_the_run_and_the_checkout_it_began_in(tmp_path):
    conf = OmegaConf.structured(EvalRunConf)
    conf.bench.names, conf.bench.limit, conf.bench.max_turns = ["mt_bench"], 2, 1
    conf.methods, conf.model.dtype, conf.model.device, conf.threads = ["vanilla", "eagle2"], "float32", "cpu", 3
    begin(tmp_path, ROOT)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(conf))
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    result = headline_result(tmp_path, "make headline")
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, check=True).stdout.strip()
    assert (result.commit, result.command, result.device, result.dtype, result.threads) == (
        commit, "make headline", "cpu", "float32", 3)
    assert result.settings.benchmarks == ["mt_bench"] and result.settings.questions_per_benchmark == 2
    assert [m.method for m in result.methods] == ["vanilla", "eagle2"]
    assert read_result(write_result(result, tmp_path / "out.json")) == result


def test_headline_names_the_ablation_row_of_the_shipped_head(tmp_path, monkeypatch):
    """A table stays tied to the head it measured: "shipped" is recorded with the row its card names."""
    import lab.headline as headline

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "card.json").write_text(json.dumps({"ablation_row": "row-a"}))
    monkeypatch.setattr(headline, "SHIPPED_HEADS_DIR", tmp_path)
    assert headline.head_label("m", "shipped") == "shipped (row-a)"
    assert headline.head_label("m", "random") == "random"
    assert headline.head_label("other", "shipped") == "shipped"  # no card: nothing to name


def test_headline_result_needs_begin_and_a_run_directory(tmp_path):
    with pytest.raises(EagleError, match="checkout.json does not exist; expected `python -m lab.headline step=begin"):
        headline_result(tmp_path, "make headline")
    begin(tmp_path, ROOT)
    with pytest.raises(EagleError, match="config.yaml does not exist"):
        headline_result(tmp_path, "make headline")
