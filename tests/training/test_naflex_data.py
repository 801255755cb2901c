"""Training a NaFlex model on native aspect ratios (`keras_vit.data.naflex`, `naflex_seq_lens`):
every example equal to `keras_vit.naflex_inputs` of its image under its batch's budget (shapes
and mask exactly, pixels within resize round-off), the budgets and batch sizes of timm's loader,
resumption at any batch, and `fit` of a tiny NaFlex model through `train`."""

import numpy as np
import pytest

import keras_vit
from keras_vit.data import naflex as naflex_data
from keras_vit.data.pipeline import Augmentation
from keras_vit.training import recipe, train
from keras_vit.training.config import TrainConfig
from tests.support.commands import fails
from tests.support.naflex import BATCH, PATCH, SEQ_LENS, TINY, mixed_images, mixed_source

WHOLE_IMAGE = Augmentation(16, crop_area=(1.0, 1.0), flip=False)  # the crop is the whole image


def _check_against_reference(images, inputs, labels, seq_len):
    reference = keras_vit.naflex_inputs([images[i] for i in labels], max_num_patches=int(seq_len),
                                        patch_size=PATCH, preprocessing="vit")
    np.testing.assert_array_equal(inputs["spatial_shapes"], reference["spatial_shapes"])
    np.testing.assert_array_equal(inputs["mask"], reference["mask"])
    np.testing.assert_allclose(inputs["patches"], reference["patches"], atol=2e-5)


def test_evaluation_batches_equal_naflex_inputs():
    images = mixed_images()
    inputs, labels = next(iter(naflex_data.eval_dataset(mixed_source(images), 7, PATCH, 16)))
    assert inputs["patches"].shape == (7, 16, PATCH * PATCH * 3)
    _check_against_reference(images, {k: v.numpy() for k, v in inputs.items()}, labels.numpy(), 16)


def test_training_batches_draw_a_budget_and_keep_the_tokens():
    images = mixed_images()
    stream = naflex_data.train_dataset(mixed_source(images), WHOLE_IMAGE, BATCH, PATCH, seq_lens=SEQ_LENS, seed=3)
    seen = set()
    for inputs, labels in stream.take(12):
        inputs, labels = {k: v.numpy() for k, v in inputs.items()}, labels.numpy()
        examples, seq_len = inputs["mask"].shape
        assert seq_len in SEQ_LENS and examples == BATCH * max(SEQ_LENS) // seq_len
        assert (inputs["spatial_shapes"].prod(axis=1) == inputs["mask"].sum(axis=1)).all()
        assert (inputs["mask"].sum(axis=1) <= seq_len).all()
        _check_against_reference(images, inputs, labels, seq_len)
        seen.add(seq_len)
    assert seen == set(SEQ_LENS)


def test_the_plan_is_a_function_of_the_batch_and_a_stream_resumes_at_any_batch():
    images = mixed_images()
    source = mixed_source(images)

    def batches(start, count):
        stream = naflex_data.train_dataset(source, Augmentation(16), BATCH, PATCH, seq_lens=SEQ_LENS, seed=5,
                                           start_batch=start, shuffle_buffer=4)
        return [(x["patches"].numpy(), y.numpy()) for x, y in stream.take(count)]

    whole, resumed = batches(0, 6), batches(4, 2)
    for (patches, labels), (again, labels_again) in zip(whole[4:], resumed):
        np.testing.assert_array_equal(labels, labels_again)
        np.testing.assert_array_equal(patches, again)
    sizes = [len(labels) for _, labels in whole[:4]]
    assert naflex_data.examples_before(4, SEQ_LENS, BATCH, 5) == sum(sizes)


def test_seq_lens_are_checked_in_one_line():
    for bad in ((), (0, 4), ("a",), (2.5,), (float("inf"),), "64"):
        with pytest.raises(ValueError, match="naflex_seq_lens=.* must be patch budgets"):
            TrainConfig(naflex_seq_lens=bad, class_token=False, pooling="avg")
    assert TrainConfig(naflex_seq_lens=(16.0, 4), class_token=False, pooling="avg").naflex_seq_lens == (4, 16)
    with pytest.raises(ValueError, match="trains a NaFlex model, which takes no class_token, pooling=token"):
        TrainConfig(naflex_seq_lens=(4, 16))


def test_train_fits_a_naflex_model_on_native_aspect_ratios(tmp_path):
    result = train(recipe("digits", **TINY, output_dir=str(tmp_path / "run")))
    assert sorted(result.model.input) == ["mask", "patches", "spatial_shapes"]
    assert np.isfinite(result.val_loss) and result.steps == 3
    images = [np.full((8, 12, 3), 200, np.uint8), np.zeros((6, 6, 3), np.uint8)]
    probabilities = result.model.predict(keras_vit.naflex_inputs(images, result.model, max_num_patches=16), verbose=0)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_a_square_model_with_naflex_seq_lens_is_refused_in_one_line(tmp_path):
    model = keras_vit.VisionTransformer(patch_size=2, hidden_dim=16, depth=1, num_heads=2, mlp_dim=32,
                                        input_shape=(8, 8, 3), classes=10, class_token=False, pooling="avg")
    with pytest.raises(ValueError, match="naflex_seq_lens needs a NaFlex model"):
        train(recipe("digits", **TINY, output_dir=str(tmp_path / "run")), model=model)


def test_the_command_line_refuses_naflex_with_the_class_token(tmp_path, capsys):
    fails(["train", "--output-dir", tmp_path / "run", "--set", "naflex_seq_lens=4,16"], capsys,
          "naflex_seq_lens trains a NaFlex model")


def test_pretraining_with_naflex_seq_lens_is_refused_in_one_line(tmp_path, capsys):
    fails(["pretrain", "--output-dir", tmp_path / "run", "--set", "naflex_seq_lens=4,16", "--set", "class_token=false",
           "--set", "pooling=avg"], capsys, "naflex_seq_lens trains a NaFlex classifier (keras-vit train)")
