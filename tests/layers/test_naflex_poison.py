"""NaFlex and packing cannot be poisoned or mis-fed (issue 42, class 3): padding and the other
images of a packed row are left out by selection, so NaN or infinity there changes nothing; a
batch whose parts disagree, bad arguments and unbounded budgets are refused in one line; the
input-range guard looks at NaFlex batches too."""

import json
import warnings

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.model import vision_transformer_model
from keras_vit.data import packing
from keras_vit.model.packed import packed_model
from keras_vit.evaluation.classification import naflex_budget
from keras_vit.utils.limits import MAX_DIMENSION
from keras_vit.training.config import TrainConfig
from tests.support.naflex import budget_batch

PATCH, SEQ_LEN = 4, 16
BUDGETS = (4, 6, 9, 16, 3, 7, 2, 5)
HEADS = {
    "map": dict(include_top=False, pooling="map"),
    "avg head": dict(classes=5, pooling="avg"),
    "map head": dict(classes=5, pooling="map"),
    "avg projection": dict(include_top=False, pooling="avg", pre_norm=True, projection_dim=8),
}


@pytest.fixture(scope="module")
def models():
    found = {}
    for name, head in HEADS.items():
        keras.utils.set_random_seed(1)
        found[name] = keras_vit.VisionTransformer(patch_size=PATCH, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32,
                                                  class_token=False, naflex=True, input_shape=(16, 16, 3), **head)
    return found


@pytest.fixture(scope="module")
def clean(models):
    batch = budget_batch(BUDGETS, SEQ_LEN, PATCH)
    return batch, {name: keras.ops.convert_to_numpy(model(batch)) for name, model in models.items()}


def _packed(model, batch):
    packed, index = packing.pack(batch)
    return packing.unpack(packed_model(model)(packed), index), packed, index


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("head", HEADS)
def test_non_finite_padding_changes_nothing_packed_or_not(models, clean, head, value):
    batch, expected = clean
    poisoned = {**batch, "patches": np.where(batch["mask"][..., None] > 0, batch["patches"], value).astype("float32")}
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(models[head](poisoned)), expected[head])
    packed, index = packing.pack(batch)
    packed["patches"] = np.where(packed["segment_ids"][..., None] > 0, packed["patches"], value).astype("float32")
    outputs = packing.unpack(packed_model(models[head])(packed), index)
    np.testing.assert_allclose(outputs, expected[head], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("head", HEADS)
def test_a_poisoned_neighbour_in_a_packed_row_changes_no_other_image(models, clean, head, value):
    batch, expected = clean
    packed, index = packing.pack(batch)
    row = next(r for r in range(len(index)) if (index[r] >= 0).sum() > 1)  # a row of several images
    victim = index[row][0]
    packed["patches"][row][packed["segment_ids"][row] == 1] = value
    outputs = packing.unpack(packed_model(models[head])(packed), index)
    others = np.arange(len(BUDGETS)) != victim
    np.testing.assert_allclose(outputs[others], expected[head][others], atol=1e-5, rtol=1e-5)
    assert not np.isfinite(outputs[victim]).any()  # its own features show it, as unpacked


def _bad(batch, case):
    b = {key: np.array(value) for key, value in batch.items()}
    if case == "shapes disagree with the mask":
        b["spatial_shapes"][0] = (b["spatial_shapes"][0][0] + 1, b["spatial_shapes"][0][1])
    elif case == "zero shapes":
        b["spatial_shapes"][1] = (0, 0)
        b["mask"][1] = 0
    elif case == "all-zero mask":
        b["mask"][2] = 0
    elif case == "mask shorter than the patches":
        b["mask"] = b["mask"][:, :-2]
    elif case == "a key missing":
        del b["spatial_shapes"]
    elif case == "mask not patches-first":
        b["mask"][0] = b["mask"][0][::-1]
    elif case == "more patches than places":
        b["spatial_shapes"][0] = (SEQ_LEN, 2)
    elif case == "empty batch":
        b = {key: value[:0] for key, value in b.items()}
    return b


BAD_BATCHES = ["shapes disagree with the mask", "zero shapes", "all-zero mask", "mask shorter than the patches",
               "a key missing", "mask not patches-first", "more patches than places", "empty batch"]


@pytest.mark.parametrize("case", BAD_BATCHES)
def test_a_batch_whose_parts_disagree_is_refused_in_one_line(models, clean, case):
    bad = _bad(clean[0], case)
    for call in (lambda: models["map"].predict(bad, verbose=0), lambda: packing.pack(bad)):
        with pytest.raises(ValueError) as refused:
            call()
        assert "\n" not in str(refused.value) and "NaFlex" in str(refused.value), str(refused.value)


IMAGE = np.random.default_rng(0).uniform(0, 255, (20, 28, 3))
BAD_ARGUMENTS = {
    "no images": (lambda: keras_vit.naflex_inputs([], patch_size=4), "non-empty list"),
    "patch size negative": (lambda: keras_vit.naflex_inputs([IMAGE], patch_size=-4), "patch_size=-4"),
    "patch size a float": (lambda: keras_vit.naflex_inputs([IMAGE], patch_size=4.5), "patch_size=4.5"),
    "patch size zero": (lambda: keras_vit.naflex_inputs([IMAGE], patch_size=0), "patch_size=0"),
    "budget past the token bound": (
        lambda: keras_vit.naflex_inputs([IMAGE], patch_size=4, max_num_patches=2**40), "max_num_patches="),
    "seq_len zero": (lambda: packing.pack(budget_batch((4, 6), 8, PATCH), seq_len=0), "seq_len=0"),
    "max_images zero": (lambda: packing.pack(budget_batch((4, 6), 8, PATCH), max_images=0), "max_images=0"),
    "index of another batch": (
        lambda: packing.unpack(np.zeros((2, 3, 4)), np.array([[0, 1], [2, -1]])), "not the index pack returned"),
    "index with a repeat": (lambda: packing.unpack(np.zeros((1, 2, 4)), np.array([[0, 0]])), "each image once"),
    "seq_lens past the token bound": (lambda: TrainConfig(naflex_seq_lens=(16, 2**30), class_token=False,
                                                          pooling="avg"), f"[1, {MAX_DIMENSION}]"),
}


@pytest.mark.backend_independent
@pytest.mark.parametrize("case", BAD_ARGUMENTS)
def test_bad_arguments_are_refused_in_one_line(case):
    call, said = BAD_ARGUMENTS[case]
    with pytest.raises(ValueError) as refused:
        call()
    assert "\n" not in str(refused.value) and said in str(refused.value), str(refused.value)


@pytest.mark.backend_independent
def test_numpy_integers_are_whole_numbers():
    plain = keras_vit.naflex_inputs([IMAGE], patch_size=4, max_num_patches=16)
    numpy = keras_vit.naflex_inputs([IMAGE], patch_size=np.int64(4), max_num_patches=np.int32(16))
    for key in plain:
        np.testing.assert_array_equal(numpy[key], plain[key])
    batch = budget_batch((4, 6, 9), 16, PATCH)
    packed, index = packing.pack(batch, seq_len=np.int64(16), max_images=np.int32(2))
    assert packed["patches"].shape[1] == 16 and (index >= 0).sum(axis=1).max() <= 2
    assert TrainConfig(naflex_seq_lens=(np.int64(4), 16), class_token=False, pooling="avg").naflex_seq_lens == (4, 16)


def test_a_run_config_budget_past_the_token_bound_is_refused(models, tmp_path):
    model_path = tmp_path / "best.keras"
    model_path.write_bytes(b"")
    (tmp_path / "config.json").write_text(json.dumps({"naflex_seq_lens": [16, 10**12]}))
    with pytest.raises(ValueError, match=r"naflex_seq_lens=.*whole numbers in \[1, "):
        naflex_budget(models["map"], str(model_path))


def test_the_input_range_guard_covers_naflex_batches(models, clean):
    batch = clean[0]
    pixels = {**batch, "patches": (batch["patches"] * 127.5 + 127.5).astype("float32")}  # 0-255, not scaled
    model = keras_vit.VisionTransformer(patch_size=PATCH, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        class_token=False, naflex=True, input_shape=(16, 16, 3), include_top=False,
                                        pooling="avg")
    with pytest.warns(vision_transformer_model.InputRangeWarning, match="like 0-255 pixels"):
        model.predict(pixels, verbose=0)
    model = keras_vit.VisionTransformer(patch_size=PATCH, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        class_token=False, naflex=True, input_shape=(16, 16, 3), include_top=False,
                                        pooling="avg")
    with warnings.catch_warnings():
        warnings.simplefilter("error", vision_transformer_model.InputRangeWarning)
        model.predict(batch, verbose=0)  # scaled as expected: no warning
