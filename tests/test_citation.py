"""LICENSE and CITATION.cff: the licence is Apache-2.0 in both, and the citation names this toolkit and the three
EAGLE papers it implements (by arXiv id)."""
from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def test_citation_names_the_toolkit_and_the_eagle_papers():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["title"] and cff["authors"] and cff["message"]
    assert cff["license"] == "Apache-2.0" and "Apache License" in (ROOT / "LICENSE").read_text()[:200]
    papers = {i["value"] for ref in cff["references"] for i in ref["identifiers"]}
    assert papers == {"arXiv:2401.15077", "arXiv:2406.16858", "arXiv:2503.01840"}  # EAGLE, EAGLE-2, EAGLE-3
    titles = ("EAGLE:", "EAGLE-2:", "EAGLE-3:")
    assert all(ref["title"].startswith(titles) and ref["authors"] for ref in cff["references"])


def test_one_version_in_pyproject_citation_and_changelog():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert str(yaml.safe_load((ROOT / "CITATION.cff").read_text())["version"]) == version
    releases = [line for line in (ROOT / "CHANGELOG.md").read_text().splitlines() if line.startswith("## ")]
    assert releases[:2] == ["## Unreleased", releases[1]] and releases[1].startswith(f"## {version} (")
