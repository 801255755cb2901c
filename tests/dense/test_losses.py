"""Dense losses, training metrics and evaluation scores against NumPy written here."""

import keras
import numpy as np
import pytest

from keras_vit.dense import losses, scores
from keras_vit.dense.labels import IGNORE


@pytest.fixture(scope="module")
def semantic():
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, (2, 6, 5, 4)).astype("float32")
    labels = rng.integers(0, 4, (2, 6, 5))
    labels[0, :2] = IGNORE
    labels[1, :, :1] = IGNORE
    return logits, labels


@pytest.fixture(scope="module")
def depth():
    rng = np.random.default_rng(1)
    target = rng.uniform(0.5, 10, (2, 6, 5)).astype("float32")
    target[0, 0] = 0  # not measured
    prediction = target * rng.uniform(0.6, 1.6, target.shape).astype("float32")
    prediction[1, 1, 1] = 0.0  # a ReLU's zero
    return target, prediction


def numpy_cross_entropy(logits, labels, smoothing=0.0):
    logits = logits.astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    valid = labels != IGNORE
    nll = -np.take_along_axis(logp, np.where(valid, labels, 0)[..., None], -1)[..., 0]
    return np.mean(((1 - smoothing) * nll - smoothing * logp.mean(-1))[valid])


def numpy_silog(target, prediction, lam=0.5):
    valid = target > 0
    d = np.log(target[valid].astype(np.float64)) - np.log(np.maximum(prediction[valid], 1e-6).astype(np.float64))
    return np.sqrt(np.mean(d**2) - lam * np.mean(d) ** 2)


def test_cross_entropy_skips_the_ignore_label(semantic):
    logits, labels = semantic
    loss = float(losses.MaskedCrossEntropy()(labels, logits))
    np.testing.assert_allclose(loss, numpy_cross_entropy(logits, labels), rtol=1e-5)
    assert abs(loss - float(losses.MaskedCrossEntropy(ignore_class=-1)(np.where(labels == IGNORE, 0, labels), logits))) > 1e-3
    assert float(losses.MaskedCrossEntropy()(np.full_like(labels, IGNORE), logits)) == 0.0
    smoothed = float(losses.MaskedCrossEntropy(label_smoothing=0.1)(labels, logits))
    np.testing.assert_allclose(smoothed, numpy_cross_entropy(logits, labels, 0.1), rtol=1e-5)


def test_scale_invariant_log_loss(depth):
    target, prediction = depth
    np.testing.assert_allclose(float(losses.ScaleInvariantLogLoss()(target, prediction)), numpy_silog(target, prediction),
                               rtol=1e-5)
    # invariant to a global scale with lambda 1, not with 0.5
    one, prediction = losses.ScaleInvariantLogLoss(lambda_=1.0), np.maximum(prediction, 0.1)
    np.testing.assert_allclose(float(one(target, 3 * prediction)), float(one(target, prediction)), rtol=1e-4)
    assert float(losses.ScaleInvariantLogLoss()(target, 3 * prediction)) > float(losses.ScaleInvariantLogLoss()(target, prediction))


def test_training_metrics_match_the_scores(semantic, depth):
    logits, labels = semantic
    _, metrics = losses.loss_and_metrics("semantic", 4)
    for metric in metrics:  # two batches accumulate
        metric.update_state(labels[:1], logits[:1])
        metric.update_state(labels[1:], logits[1:])
    reference = scores.segmentation_scores(scores.confusion_matrix(labels, logits.argmax(-1), 4))
    np.testing.assert_allclose([float(m.result()) for m in metrics], [reference["pixel_accuracy"], reference["miou"]],
                               rtol=1e-5)
    target, prediction = depth
    (delta,) = losses.loss_and_metrics("depth")[1]
    delta.update_state(target, prediction)
    valid = target > 0
    t, p = target[valid], np.maximum(prediction[valid], 1e-6)
    ratio = np.maximum(t / p, p / t)
    np.testing.assert_allclose(float(delta.result()), np.mean(ratio < 1.25), rtol=1e-6)


def test_losses_round_trip_in_a_config():
    loss = keras.losses.deserialize(keras.losses.serialize(losses.ScaleInvariantLogLoss(lambda_=0.85)))
    assert loss.lambda_ == 0.85


@pytest.mark.backend_independent
def test_confusion_matrix_and_scores_against_a_loop():
    rng = np.random.default_rng(2)
    labels, predictions = rng.integers(0, 5, (3, 7, 9)), rng.integers(0, 5, (3, 7, 9))
    labels[0, 0] = IGNORE
    labels[labels == 4] = 2  # class 4 never labelled, only predicted: IoU 0
    predictions[predictions == 3] = 0
    predictions[labels == 3] = 3  # class 3 always right, and only there
    reference = np.zeros((5, 5), np.int64)
    for t, p in zip(labels.reshape(-1), predictions.reshape(-1)):
        if t != IGNORE:
            reference[t, p] += 1
    confusion = scores.confusion_matrix(labels, predictions, 5)
    np.testing.assert_array_equal(confusion, reference)
    result = scores.segmentation_scores(confusion)
    ious = [reference[c, c] / (reference[c].sum() + reference[:, c].sum() - reference[c, c]) for c in range(5)]
    np.testing.assert_allclose(result["iou"], ious)
    assert result["iou"][3] == 1.0 and result["iou"][4] == 0.0
    np.testing.assert_allclose(result["miou"], np.mean(ious))
    np.testing.assert_allclose(result["pixel_accuracy"], np.trace(reference) / reference.sum())
    # a class neither labelled nor predicted has no IoU and leaves the mean
    absent = scores.segmentation_scores(scores.confusion_matrix([0, 1], [0, 0], 3))
    assert absent["iou"] == [0.5, 0.0, None] and absent["miou"] == 0.25


@pytest.mark.backend_independent
def test_depth_errors_against_numpy(depth):
    target, prediction = depth
    errors = [scores.depth_errors(t, p) for t, p in zip(target, prediction)]
    valid = target[1] > 0
    t, p = target[1][valid], np.maximum(prediction[1][valid], 1e-6)
    np.testing.assert_allclose([errors[1][k] for k in ("abs_rel", "rmse")],
                               [np.mean(np.abs(t - p) / t), np.sqrt(np.mean((t - p) ** 2))], rtol=1e-6)
    mean = scores.mean_depth_errors(errors + [scores.depth_errors(np.zeros((2, 2)), np.ones((2, 2)))])
    np.testing.assert_allclose(mean["delta1"], np.mean([e["delta1"] for e in errors]))
