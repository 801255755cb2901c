"""`files.write_json`: the one JSON writer of run folders and exported checkpoints."""

import json
import os

import pytest

from keras_vit.utils import files

pytestmark = pytest.mark.backend_independent  # file writing: runs under one backend (tests/conftest.py)


def test_json_written_atomically_and_read_back(tmp_path):
    path = tmp_path / "sub" / "config.json"
    files.write_json(path, {"a": [1, 2.5], "name": "ViT-B/16 ü"})
    assert json.loads(path.read_text(encoding="utf-8")) == {"a": [1, 2.5], "name": "ViT-B/16 ü"}
    files.write_json(path, {"b": None})  # replaced whole
    assert json.loads(path.read_text(encoding="utf-8")) == {"b": None}
    assert os.listdir(path.parent) == ["config.json"]


def test_unserialisable_payload_leaves_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    files.write_json(path, {"step": 1})
    with pytest.raises(TypeError):
        files.write_json(path, {"step": object()})
    assert json.loads(path.read_text()) == {"step": 1} and os.listdir(tmp_path) == ["state.json"]
