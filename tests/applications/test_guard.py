"""The input-range guard: one warning with the fix when a model's first batch is clearly
not preprocessed as its weights expect ([-1, 1] RGB)."""

import warnings

import numpy as np
import pytest

import keras
import keras_vit
from keras_vit.model.vision_transformer_model import InputRangeWarning, diagnose

RNG = np.random.default_rng(0)
# Photo-like RGB pixels: red brighter than blue on average, as in ImageNet.
PIXELS = np.clip(RNG.normal([124, 116, 104], 60, (16, 16, 16, 3)), 0, 255).astype("float32")
GOOD = keras_vit.preprocess_input(PIXELS)


@pytest.mark.parametrize("images, expected", [
    (PIXELS, "like 0-255 pixels; apply keras_vit.preprocess_input"),
    (PIXELS / 255, "like [0, 1] intensities; give images * 2 - 1"),
    ((PIXELS / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225], "like ImageNet mean / std normalisation"),
    (keras_vit.preprocess_input(GOOD), "scaled by keras_vit.preprocess_input a second time; apply it once"),
    (GOOD[..., ::-1], "like BGR images; give RGB"),
    (PIXELS[..., ::-1] - [103.9, 116.8, 123.7], "far outside [-1, 1]"),  # Caffe-style BGR, mean subtracted
])
def test_diagnose_names_the_range_and_the_fix(images, expected):
    assert expected in diagnose(images)


def test_right_images_pass():
    assert diagnose(GOOD) is None and diagnose(GOOD[:4, ..., ::-1]) is None  # too few images to judge colours


def test_predict_fit_evaluate_warn_once_and_the_flag_turns_it_off(tmp_path, monkeypatch):
    model = keras_vit.VisionTransformer(patch_size=4, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        input_shape=(16, 16, 3), classes=3)
    with pytest.warns(InputRangeWarning, match="expects RGB in \\[-1, 1\\].*0-255 pixels.*check_inputs = False") as caught:
        model.predict(PIXELS, verbose=0)
        model.predict(PIXELS, verbose=0)
    assert len([w for w in caught if w.category is InputRangeWarning]) == 1
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    loaded.compile(loss="sparse_categorical_crossentropy")
    with pytest.warns(InputRangeWarning, match="\\[0, 1\\] intensities"):
        loaded.evaluate(PIXELS / 255, np.zeros(16), verbose=0)
    for switch_off in ("attribute", "environment"):
        fresh = keras.saving.load_model(tmp_path / "model.keras")
        fresh.compile(loss="sparse_categorical_crossentropy", optimizer="sgd")
        if switch_off == "attribute":
            fresh.check_inputs = False
        else:
            monkeypatch.setenv("KERAS_VIT_CHECK_INPUTS", "0")
        with warnings.catch_warnings():
            warnings.simplefilter("error", InputRangeWarning)
            fresh.fit(PIXELS, np.zeros(16), epochs=1, verbose=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InputRangeWarning)
        keras.saving.load_model(tmp_path / "model.keras").predict(GOOD, verbose=0)
