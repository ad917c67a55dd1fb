"""Where the toolkit's files live: conf/ and recipes/ in the source tree (a checkout, an editable install), or where a
wheel installs them (pyproject's data-files: <prefix>/share/eagle-toolkit), so every command runs from any directory.
Training, evaluation and the command lines read them here."""
from __future__ import annotations

import sys
from pathlib import Path

SOURCE = Path(__file__).resolve().parents[1]
REPO = SOURCE if (SOURCE / "conf").is_dir() else Path(sys.prefix) / "share" / "eagle-toolkit"
CONF_DIR = str(REPO / "conf")
RECIPES_DIR = REPO / "recipes"
