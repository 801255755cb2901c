"""Bad checkpoints and the head rules: clear errors, safe unpickling, log lines."""

import logging
import pickle

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.weights import export
from tests.support.checkpoints import TINY, original_npz_params

POSEMB = "Transformer/posembed_input/pos_embedding"


@pytest.fixture
def params(rng):
    return original_npz_params(rng, **TINY, classes=5)


def _save(tmp_path, params, name="ckpt.npz"):
    np.savez(tmp_path / name, **params)
    return str(tmp_path / name)


def test_missing_key_is_named(params, tmp_path):
    del params["Transformer/encoderblock_1/LayerNorm_2/scale"]
    with pytest.raises(ValueError, match=r"missing keys: 'Transformer/encoderblock_1/LayerNorm_2/scale'"):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=_save(tmp_path, params))


def test_wrong_shape_names_key_and_shapes(params, tmp_path):
    params["Transformer/encoderblock_0/MlpBlock_3/Dense_1/bias"] = np.zeros(33, np.float32)
    with pytest.raises(ValueError, match=r"Dense_1/bias.*has shape \(33,\).*needs \(32,\)"):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=_save(tmp_path, params))


def test_architecture_mismatch_names_keys_and_shapes(params, tmp_path):
    path = _save(tmp_path, params)
    wider = dict(TINY, hidden_dim=64, depth=3, mlp_dim=128)
    with pytest.raises(ValueError) as info:
        keras_vit.VisionTransformer(**wider, classes=5, weights=path)
    message = str(info.value)
    assert "embedding/kernel" in message and "(8, 8, 3, 32)" in message and "(8, 8, None, 64)" in message
    assert "2 encoder blocks" in message and "the model has 3" in message
    assert "MlpBlock_3/Dense_0/kernel" in message and "(64, 128)" in message


def test_timm_keys_keras_vit_cannot_use_are_named(params, tmp_path):
    from safetensors.numpy import load_file, save_file

    model = keras_vit.VisionTransformer(**TINY, classes=5, weights=_save(tmp_path, params))
    export(model, tmp_path / "timm.safetensors", format="timm")
    state = load_file(tmp_path / "timm.safetensors")
    state["blocks.0.mlp.norm.weight"] = np.ones(8, np.float32)  # timm's `scale_mlp_norm`, which keras_vit has not
    save_file(state, tmp_path / "mlp_norm.safetensors")
    with pytest.raises(ValueError, match=r"keys keras_vit cannot map: 'blocks.0.mlp.norm.weight'"):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=str(tmp_path / "mlp_norm.safetensors"))


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):  # unpickling would create the marker file
        return (open, (self.marker, "w"))


def test_malicious_pickle_runs_no_code(tmp_path):
    torch = pytest.importorskip("torch")
    marker = tmp_path / "pwned"
    torch.save({"cls_token": torch.zeros(1), "evil": _Payload(str(marker))}, tmp_path / "evil.pth")
    (tmp_path / "legacy.pth").write_bytes(pickle.dumps({"evil": _Payload(str(marker))}, protocol=2))
    for name in ("evil.pth", "legacy.pth"):
        with pytest.raises(ValueError, match=r"refused to load.*could run code.*weights_only=True"):
            keras_vit.VisionTransformer(**TINY, weights=str(tmp_path / name))
    assert not marker.exists()


def test_npy_with_python_objects_is_refused(params, tmp_path):
    params["cls"] = np.array([{"a": 1}], dtype=object)
    np.savez(tmp_path / "objects.npz", **params)
    with pytest.raises(ValueError, match=r"'cls'.*Python objects; refusing"):
        keras_vit.VisionTransformer(**TINY, weights=str(tmp_path / "objects.npz"))


def test_head_rules(params, tmp_path, caplog):
    path = _save(tmp_path, params)
    with caplog.at_level(logging.WARNING, logger="keras_vit.weights"):
        same = keras_vit.VisionTransformer(**TINY, classes=5, weights=path)
    assert not caplog.records
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(same.get_layer("head").kernel), params["head/kernel"])
    with caplog.at_level(logging.WARNING, logger="keras_vit.weights"):
        other = keras_vit.VisionTransformer(**TINY, classes=10, weights=path)
    assert "New zero-initialised head with 10 classes" in caplog.text and "has 5 classes" in caplog.text
    assert not np.any(keras.ops.convert_to_numpy(other.get_layer("head").kernel))
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(other.get_layer("class_token").token), params["cls"]
    )
    headless = keras_vit.VisionTransformer(**TINY, include_top=False, pooling="token", weights=path)
    assert "head" not in [layer.name for layer in headless.layers]


def test_pre_logits_kept_only_when_asked_for(rng, tmp_path, caplog):
    params = original_npz_params(rng, **TINY, classes=5, representation_size=24)
    path = _save(tmp_path, params)
    with caplog.at_level(logging.WARNING, logger="keras_vit.weights"):
        dropped = keras_vit.VisionTransformer(**TINY, classes=5, weights=path)
    assert "pre_logits" not in [layer.name for layer in dropped.layers]
    assert "sits on its pre_logits layer" in caplog.text  # its head no longer fits
    kept = keras_vit.VisionTransformer(**TINY, classes=5, representation_size=24, weights=path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kept.get_layer("head").bias), params["head/bias"])
    with pytest.raises(ValueError, match=r"pre_logits/kernel: checkpoint shape None, the model expects \(32, 24\)"):
        keras_vit.VisionTransformer(**TINY, classes=5, representation_size=24,
                                    weights=_save(tmp_path, original_npz_params(rng, **TINY), "plain.npz"))


def test_hybrid_checkpoint_needs_a_stem(params, tmp_path, monkeypatch):
    from keras_vit.weights import stems

    class FakeStem:
        pass

    monkeypatch.setattr(stems, "_STEMS", list(stems._STEMS))  # the registration is undone after
    stems.register_stem(stems.StemLayout("test_resnet", FakeStem, ("test_root/", "test_block/"), {}))
    params["test_root/kernel"] = np.zeros((7, 7, 3, 8), np.float32)
    with pytest.raises(ValueError, match=r"checkpoint has a test_resnet stem \(test_root/, test_block/\)"):
        keras_vit.VisionTransformer(**TINY, classes=5, weights=_save(tmp_path, params))


def test_bad_weights_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="No checkpoint file or folder at .*nothing.npz"):
        keras_vit.VisionTransformer(**TINY, weights=str(tmp_path / "nothing.npz"))
    with pytest.raises(ValueError, match=r"Unknown weights 'imagenet' for this architecture"):
        keras_vit.VisionTransformer(**TINY, weights="imagenet")
    with pytest.raises(ValueError, match=r"expected None, a checkpoint name, a path"):
        keras_vit.VisionTransformer(**TINY, weights=3)
    with pytest.raises(ValueError, match=r"Unknown weights 'imagenet' for ViTH14.*orig_in21k"):
        keras_vit.ViTH14(weights="imagenet")
