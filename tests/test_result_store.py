"""lab.result_store: every kind of committed result file is refused in one line naming the file when malformed, by
a read and by a merge alike (a merge never overwrites a file it cannot read)."""
from __future__ import annotations

import pytest

from eagle_infer.errors import EagleError
from lab.ablation_file import ABLATION, COLUMNS
from lab.result_store import merge, read
from lab.training_curves import CURVES

CURVE = {"steps": 1, "eval": [], "cls_loss": []}


@pytest.mark.parametrize("kind, text, message", [
    (ABLATION, "row,tau\nx,1.5\n", r"columns \['row', 'tau'\]; expected columns \['row'"),
    (ABLATION, ",".join(COLUMNS) + "\nx,many" + "," * (len(COLUMNS) - 2) + "\n", "could not convert string to float"),
    (CURVES, '{"a": {"steps": 2, "eval": []}}', "missing field 'cls_loss'"),
    (CURVES, '{"a": {"steps": "2", "eval": [], "cls_loss": []}}', "field 'steps' is '2'; expected int"),
    (CURVES, '[1]', "holds list; expected a JSON object"),
    (CURVES, '{"a": ', "Expecting value"),
])
def test_a_malformed_file_is_one_line_naming_it(tmp_path, kind, text, message):
    path = tmp_path / "file"
    path.write_text(text)
    with pytest.raises(EagleError, match=message) as err:
        read(kind, path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(EagleError, match=message):
        merge(kind, path, {})
    assert path.read_text() == text


def test_a_bad_record_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "c.json"
    with pytest.raises(EagleError, match="missing field 'eval'"):
        merge(CURVES, path, {"a": {"steps": 1, "cls_loss": []}})
    assert not path.exists()
    assert merge(CURVES, path, {"a": CURVE}) and read(CURVES, path) == {"a": CURVE}
