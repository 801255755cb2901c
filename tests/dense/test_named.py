"""The named dense checkpoints (Depth Anything V2, EoMT; DINOv2's head files: test_dinov2_heads.py):
listed with their licences and hub files, loaded by name (or hub id) from the cache folder where
their files were put, and offline one line naming that folder."""

import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.weights import registry

transformers = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")


@pytest.mark.backend_independent  # the table
def test_listed_with_licences_and_hub_urls(capsys):
    assert main(["list-weights", "DINOv2S14"]) == 0
    out = capsys.readouterr().out
    assert "depth_anything_v2_small" in out and "depth-anything/Depth-Anything-V2-Small-hf" in out
    licences = {e.name: e.license for e in registry.DENSE}
    assert licences["depth_anything_v2_small"] == "apache-2.0" and licences["depth_anything_v2_large"] == "cc-by-nc-4.0"
    assert licences["ade20k_semantic_eomt_large_512"] == "mit"
    assert all(registry.hub_repo_id(e) for e in registry.DENSE if e.name not in registry.DENSE_BACKBONES)


@pytest.fixture
def offline(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_VIT_HOME", str(tmp_path / "home"))

    def refuse(**kwargs):
        raise OSError("We have no connection (offline)\nsecond line")

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", refuse)
    return tmp_path / "home"


@pytest.mark.backend_independent  # refused before any model is built
def test_offline_is_one_line_naming_the_cache_folder(offline, capsys):
    entry = registry.find("depth_anything_v2_small")
    folder = str(offline / entry.variant / entry.name)
    with pytest.raises(OSError) as error:
        keras_vit.from_checkpoint("depth-anything/Depth-Anything-V2-Small-hf")
    assert "\n" not in str(error.value) and folder in str(error.value) and "config.json" in str(error.value)
    assert main(["predict", __file__, "--model", "depth_anything_v2_small"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and folder in err


def test_loaded_by_name_from_the_files_put_in_the_cache_folder(offline, tmp_path):
    from tests.support.dense import depth_anything, predicted_depth, randomize_dense

    reference = randomize_dense(depth_anything(transformers))
    reference.save_pretrained(tmp_path / "da")
    entry = registry.find("depth_anything_v2_small")
    shutil.copytree(tmp_path / "da", offline / entry.variant / entry.name)
    model = keras_vit.from_checkpoint("depth_anything_v2_small")
    x = np.random.default_rng(0).standard_normal((1, 32, 40, 3)).astype("float32")
    want = predicted_depth(reference, x)
    np.testing.assert_allclose(model.predict(x, verbose=0), want, rtol=0, atol=1e-4 * np.abs(want).max())
