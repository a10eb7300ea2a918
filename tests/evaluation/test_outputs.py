"""Where a command line writes (evaluation/outputs.py): a path that cannot take the result is named with
what is wrong before the work, and the check makes nothing."""

import pytest

from evaluation.outputs import check_writable, unwritable, write_json


def test_a_path_that_can_be_written_is_fine_and_nothing_is_made(tmp_path):
    assert unwritable(tmp_path / "new" / "deeper" / "rows.json") == ""
    assert unwritable(tmp_path / "new" / "folder", folder=True) == ""
    assert unwritable(tmp_path, folder=True) == ""  # a folder there already
    assert not (tmp_path / "new").exists()


def test_a_path_that_cannot_be_written_says_why(tmp_path):
    (tmp_path / "file").write_text("")
    assert unwritable("") == "name a file" and unwritable("  ", folder=True) == "name a folder"
    assert unwritable(tmp_path) == f"{tmp_path} is a folder, not a file"
    assert unwritable(tmp_path / "file", folder=True) == f"{tmp_path / 'file'} is a file, not a folder"
    assert unwritable(tmp_path / "file" / "rows.json") == f"{tmp_path / 'file'} is a file"
    assert unwritable(tmp_path / "file" / "a" / "b", folder=True) == f"{tmp_path / 'file'} is a file"
    with pytest.raises(ValueError, match=f"^--out '{tmp_path}': {tmp_path} is a folder, not a file$"):
        check_writable(str(tmp_path), "--out")


def test_json_is_written_with_its_folders(tmp_path):
    write_json(tmp_path / "a" / "rows.json", [{"x": 1}])
    assert (tmp_path / "a" / "rows.json").read_text() == '[\n {\n  "x": 1\n }\n]\n'
