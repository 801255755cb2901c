"""Named image-text checkpoints (`ImageTextModel.from_checkpoint("google/siglip-base-patch16-224")`):
their files through `huggingface_hub.snapshot_download` (replaced here: no network), a folder put
by hand at `names.local_folder(name)` read without it, offline one line naming that folder."""

import os
import shutil

import numpy as np
import pytest

import keras_vit
from keras_vit.cli import main
from keras_vit.text import names
from keras_vit.weights.download import DownloadError, sha256_of
from tests.support.text import open_clip_siglip_folder, siglip_folder

huggingface_hub = pytest.importorskip("huggingface_hub")
pytest.importorskip("transformers")
NAME = "google/siglip-base-patch16-224"
TEXTS = ["a photo of a cat", "a dog"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("siglip"))
    siglip_folder(path)
    return path, keras_vit.ImageTextModel.from_checkpoint(path).encode_text(TEXTS)


def test_a_name_reads_the_hub_snapshot(folder, monkeypatch):
    path, expected = folder
    calls = []

    def snapshot_download(**kwargs):
        calls.append(kwargs)
        return path

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    model = keras_vit.ImageTextModel.from_checkpoint(NAME)
    np.testing.assert_array_equal(model.encode_text(TEXTS), expected)
    assert [call["repo_id"] for call in calls] == [NAME]
    assert {"config.json", "model.safetensors", "spiece.model", "tokenizer.json"} <= set(calls[0]["allow_patterns"])


@pytest.mark.backend_independent
def test_offline_names_the_folder_to_fill_and_reads_it(folder, monkeypatch, capsys, tmp_path):
    path, expected = folder

    def offline(**kwargs):
        raise OSError("no network\nmore lines")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    target = names.local_folder(NAME)
    assert target.startswith(os.environ["KERAS_VIT_HOME"]) and target.endswith("google--siglip-base-patch16-224")
    with pytest.raises(DownloadError, match=f"no network\\). .*put its .* in {target};") as error:
        keras_vit.ImageTextModel.from_checkpoint(NAME)
    assert "\n" not in str(error.value)
    out = str(tmp_path / "x.keras")
    assert main(["zero-shot", "--weights", NAME, "--labels", "a cat", "--save-classifier", out]) == 2
    assert target in capsys.readouterr().err and not os.path.exists(out)
    shutil.copytree(path, target)  # put there by hand: read without the hub
    np.testing.assert_array_equal(keras_vit.ImageTextModel.from_checkpoint(NAME).encode_text(TEXTS), expected)


@pytest.mark.backend_independent
def test_unknown_names_are_refused_in_one_line(capsys, tmp_path):
    with pytest.raises(FileNotFoundError, match="nor a named image-text checkpoint"):
        keras_vit.ImageTextModel.from_checkpoint("google/siglip-tiny-patch1")
    with pytest.raises(ValueError, match="not a named image-text checkpoint"):
        names.fetch("nobody/nothing")
    out = str(tmp_path / "y.keras")
    assert main(["zero-shot", "--weights", "nobody/nothing", "--labels", "a", "--save-classifier", out]) == 2
    assert "nor a named checkpoint" in capsys.readouterr().err


@pytest.mark.backend_independent
def test_an_open_clip_name_fetches_its_files_and_reads_a_folder_put_by_hand(monkeypatch, tmp_path):
    """EVA-CLIP / PE-core names: OpenCLIP's config, the one weights file and the tokenizer's files."""
    from tests.support.text import timm_clip_folder

    name = "timm/PE-Core-B-16"
    assert names.NAMES[name] == "apache-2.0" and names.NAMES["timm/eva02_base_patch16_clip_224.merged2b_s8b_b131k"] == "mit"
    calls = []

    def offline(**kwargs):
        calls.append(kwargs)
        raise OSError("no network")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(DownloadError, match="put its open_clip_config.json, open_clip_model.safetensors and tokenizer"):
        keras_vit.ImageTextModel.from_checkpoint(name)
    assert set(calls[0]["allow_patterns"]) >= {"open_clip_config.json", "open_clip_model.safetensors", "vocab.json"}
    assert "open_clip_pytorch_model.bin" not in calls[0]["allow_patterns"]
    timm_clip_folder(names.local_folder(name), np.random.default_rng(0), "pe")
    assert keras_vit.ImageTextModel.from_checkpoint(name).encode_text(TEXTS).shape == (2, 24)


@pytest.mark.backend_independent
def test_pinned_files_are_checked_and_weights_recorded(folder, monkeypatch, tmp_path):
    """A wrong sha256 pin is refused in one line; the right one reads, and the weights' check is
    recorded, so a weights file changed afterwards is refused until fetched again."""
    path, expected = folder
    snapshot = str(tmp_path / "snapshot")
    shutil.copytree(path, snapshot)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kwargs: snapshot)
    weights = os.path.join(snapshot, "model.safetensors")
    monkeypatch.setitem(names.SHA256, NAME, {"model.safetensors": "0" * 64})
    with pytest.raises(ValueError, match=r"model.safetensors: sha256 [0-9a-f]{64} does not match the expected 0{64}") \
            as error:
        keras_vit.ImageTextModel.from_checkpoint(NAME)
    assert "\n" not in str(error.value) and "force_download=True" in str(error.value)
    monkeypatch.setitem(names.SHA256, NAME, {"model.safetensors": sha256_of(weights), "config.json": "1" * 64})
    with pytest.raises(ValueError, match=r"config.json: sha256 .* does not match the expected 1{64}"):
        keras_vit.ImageTextModel.from_checkpoint(NAME)
    monkeypatch.setitem(names.SHA256, NAME, {"model.safetensors": sha256_of(weights)})
    np.testing.assert_array_equal(keras_vit.ImageTextModel.from_checkpoint(NAME).encode_text(TEXTS), expected)
    assert os.path.isfile(os.path.join(names.local_folder(NAME), "model.safetensors.sha256.json"))
    with open(weights, "ab") as handle:  # the cached copy changes after its check
        handle.write(b" ")
    with pytest.raises(ValueError, match="is not the file checked when it was first downloaded"):
        names.fetch(NAME)


@pytest.mark.backend_independent
def test_an_open_clip_siglip_name_reads_its_snapshot(monkeypatch, tmp_path):
    """OpenCLIP's hub copies (`timm/ViT-B-16-SigLIP`): its OpenCLIP files asked for, read, recorded."""
    folder = str(tmp_path / "open_clip")
    open_clip_siglip_folder(folder)
    calls = []
    monkeypatch.setattr(huggingface_hub, "snapshot_download", lambda **kwargs: calls.append(kwargs) or folder)
    model = keras_vit.ImageTextModel.from_checkpoint("timm/ViT-B-16-SigLIP")
    np.testing.assert_array_equal(model.tokenizer(TEXTS), keras_vit.ImageTextModel.from_checkpoint(folder).tokenizer(TEXTS))
    assert model.family == "siglip" and names.NAMES["timm/ViT-B-16-SigLIP"] == "apache-2.0"
    assert {"open_clip_config.json", "open_clip_model.safetensors", "tokenizer.json"} <= set(calls[0]["allow_patterns"])
    record = os.path.join(names.local_folder("timm/ViT-B-16-SigLIP"), "open_clip_model.safetensors.sha256.json")
    assert os.path.isfile(record)
