"""Training on packed NaFlex batches (`naflex_pack`, `keras_vit.data.naflex.packed`): one SGD
step on a packed batch gives the loss and the weights of the same step on the unpacked batch
(within 1e-5, empty places weighing nothing), the packed stream resumes at any batch, `train`
fits with it and saves the plain NaFlex model, and the option is refused without NaFlex."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit.model.packed import packed_model
from keras_vit.data import naflex as naflex_data
from keras_vit.data.pipeline import Augmentation
from keras_vit.model.logits import logits_output
from keras_vit.training import recipe, train
from keras_vit.training.config import TrainConfig
from keras_vit.training.trainer import loss_and_metrics
from tests.support.commands import fails
from tests.support.naflex import BATCH, PATCH, SEQ_LENS, TINY, budget_batch, mixed_images, mixed_source

SEQ_LEN, CLASSES = 16, 5
BUDGETS = (4, 6, 9, 16, 3, 7, 2, 5)  # most images fill fewer than SEQ_LEN patches


def _unpacked_batch(one_hot):
    labels = np.random.default_rng(1).integers(0, CLASSES, len(BUDGETS)).astype(np.int32)
    return budget_batch(BUDGETS, SEQ_LEN), np.eye(CLASSES, dtype=np.float32)[labels] if one_hot else labels


def _model(pooling):
    keras.utils.set_random_seed(1)
    model = keras_vit.VisionTransformer(patch_size=PATCH, hidden_dim=16, depth=2, num_heads=2, mlp_dim=32,
                                        class_token=False, naflex=True, input_shape=(16, 16, 3), classes=CLASSES,
                                        pooling=pooling, classifier_activation="softmax")
    head = model.get_layer("head")  # non-zero, so every weight gets a gradient
    head.kernel.assign(np.random.default_rng(2).normal(size=head.kernel.shape).astype("float32"))
    return model


def _one_step(train_model, one_hot, *batch):
    loss, _ = loss_and_metrics(CLASSES, one_hot, True, 0.1 if one_hot else 0.0)
    train_model.compile(optimizer=keras.optimizers.SGD(learning_rate=1.0), loss=loss)
    value = train_model.train_on_batch(*batch)
    return float(np.asarray(value).ravel()[0]), [keras.ops.convert_to_numpy(w) for w in train_model.trainable_weights]


@pytest.mark.parametrize("pooling,one_hot", [("map", False), ("avg", True)])
def test_a_packed_step_equals_the_unpacked_step(pooling, one_hot):
    inputs, labels = _unpacked_batch(one_hot)
    dataset = tf.data.Dataset.from_tensors((inputs, labels))
    packed, packed_labels, weights = next(iter(naflex_data.packed(dataset).as_numpy_iterator()))
    assert len(packed["patches"]) < len(BUDGETS) and weights.min() == 0  # shared rows, empty places
    assert weights.sum() == len(BUDGETS)

    plain = _model(pooling)
    expected_loss, expected = _one_step(keras.Model(plain.input, logits_output(plain)[0]), one_hot, inputs, labels)
    model = _model(pooling)
    loss, weights_after = _one_step(packed_model(model, logits=True), one_hot, packed, packed_labels, weights)
    assert abs(loss - expected_loss) < 1e-5
    assert len(weights_after) == len(expected)
    for after, reference in zip(weights_after, expected):
        np.testing.assert_allclose(after, reference, atol=1e-5, rtol=1e-5)


def test_a_resumed_packed_stream_equals_the_whole_one():
    source = mixed_source(mixed_images())

    def batches(start, count):
        stream = naflex_data.packed(naflex_data.train_dataset(
            source, Augmentation(16), BATCH, PATCH, seq_lens=SEQ_LENS, seed=5, start_batch=start, shuffle_buffer=4))
        return [(x["patches"].numpy(), x["segment_ids"].numpy(), y.numpy(), w.numpy()) for x, y, w in stream.take(count)]

    whole, resumed = batches(0, 6), batches(4, 2)
    for batch, again in zip(whole[4:], resumed):
        for array, array_again in zip(batch, again):
            np.testing.assert_array_equal(array, array_again)
    assert sum(int(w.sum()) for *_, w in whole[:4]) == naflex_data.examples_before(4, SEQ_LENS, BATCH, 5)


def test_train_fits_on_packed_batches_and_saves_the_plain_naflex_model(tmp_path):
    result = train(recipe("digits", **TINY, naflex_pack=True, label_smoothing=0.1, output_dir=str(tmp_path / "run")))
    assert np.isfinite(result.val_loss) and result.steps == 3 and 0 <= result.top1 <= 1
    saved = keras.saving.load_model(result.final_path)
    assert sorted(saved.input) == ["mask", "patches", "spatial_shapes"]
    images = [np.full((8, 12, 3), 200, np.uint8), np.zeros((6, 6, 3), np.uint8)]
    inputs = keras_vit.naflex_inputs(images, saved, max_num_patches=16)
    np.testing.assert_allclose(saved.predict(inputs, verbose=0), result.model.predict(inputs, verbose=0), atol=1e-6)


def test_naflex_pack_without_naflex_is_refused_in_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="naflex_pack=true packs NaFlex batches: it needs naflex_seq_lens"):
        TrainConfig(naflex_pack=True)
    fails(["train", "--output-dir", tmp_path / "run", "--set", "naflex_pack=true"], capsys,
          "naflex_pack=true packs NaFlex batches: it needs naflex_seq_lens")
