"""The losses and training metrics of dense training, as Keras objects (any backend).

The heads of `DenseModel` up-sample their logits bilinearly to the input size, so the loss compares
them with the labels at the labels' own resolution (DINOv2's linear evaluation, through mmseg's
decode head, resizes the logits to the label size the same way; the labels are never down-sampled).
"""

import keras
from keras import ops

from keras_vit.dense.labels import IGNORE

SILOG_LAMBDA = 0.5  # Depth Anything's `SiLogLoss(lambd=0.5)` (BTS: 0.85, times 10)
EPSILON = 1e-6  # the smallest depth the log sees (a ReLU head outputs 0)


@keras.saving.register_keras_serializable(package="keras_vit")
class MaskedCrossEntropy(keras.losses.Loss):
    """Cross-entropy of `(batch, H, W, classes)` logits against `(batch, H, W)` class ids, averaged
    over the batch's labelled pixels (those not `ignore_class`), as torch's
    `F.cross_entropy(..., ignore_index=255, label_smoothing=label_smoothing)`; 0 for a batch without any."""

    def __init__(self, ignore_class=IGNORE, label_smoothing=0.0, name="masked_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_class, self.label_smoothing = int(ignore_class), float(label_smoothing)

    def call(self, y_true, y_pred):
        logits = ops.cast(y_pred, "float32")
        labels = ops.cast(y_true, "int32")
        valid = ops.not_equal(labels, self.ignore_class)
        classes = ops.shape(logits)[-1]
        picked = ops.one_hot(ops.where(valid, labels, 0), classes, dtype="float32")
        target = picked * (1.0 - self.label_smoothing) + self.label_smoothing / ops.cast(classes, "float32")
        nll = -ops.sum(target * ops.log_softmax(logits, axis=-1), axis=-1)
        weight = ops.cast(valid, "float32")
        return ops.sum(nll * weight) / ops.maximum(ops.sum(weight), 1.0)

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class, "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_vit")
class ScaleInvariantLogLoss(keras.losses.Loss):
    """The scale-invariant log loss (Eigen et al., 2014) over the batch's measured pixels (depth > 0):
    with `d = log(target) - log(prediction)`, `sqrt(mean(d**2) - lambda_ * mean(d)**2)`, as
    Depth Anything's `SiLogLoss` (lambda 0.5). Predictions below 1e-6 are taken as 1e-6."""

    def __init__(self, lambda_=SILOG_LAMBDA, name="silog", **kwargs):
        super().__init__(name=name, **kwargs)
        self.lambda_ = float(lambda_)

    def call(self, y_true, y_pred):
        target, prediction = ops.cast(y_true, "float32"), ops.cast(y_pred, "float32")
        valid = ops.greater(target, 0.0)
        weight = ops.cast(valid, "float32")
        d = (ops.log(ops.where(valid, target, 1.0)) - ops.log(ops.maximum(prediction, EPSILON))) * weight
        count = ops.maximum(ops.sum(weight), 1.0)
        mean, square = ops.sum(d) / count, ops.sum(d * d) / count
        return ops.sqrt(ops.maximum(square - self.lambda_ * mean * mean, 0.0) + 1e-12)

    def get_config(self):
        return {**super().get_config(), "lambda_": self.lambda_}


class PixelFraction(keras.metrics.Metric):
    """The fraction of the pixels that count (`counted`) which are right (`right`), over all batches."""

    def __init__(self, name, **kwargs):
        super().__init__(name=name, **kwargs)
        self.right = self.add_variable(shape=(), initializer="zeros", name="right")
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        right, counted = self.judge(y_true, y_pred)
        counted = ops.cast(counted, "float32")
        self.right.assign_add(ops.sum(ops.cast(right, "float32") * counted))
        self.total.assign_add(ops.sum(counted))

    def result(self):
        return self.right / ops.maximum(self.total, 1.0)


@keras.saving.register_keras_serializable(package="keras_vit")
class PixelAccuracy(PixelFraction):
    """The fraction of the labelled pixels whose largest logit is their class."""

    def __init__(self, ignore_class=IGNORE, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.ignore_class = ignore_class

    def judge(self, y_true, y_pred):
        labels = ops.cast(y_true, "int32")
        return ops.equal(ops.cast(ops.argmax(y_pred, axis=-1), "int32"), labels), ops.not_equal(labels, self.ignore_class)

    def get_config(self):
        return {**super().get_config(), "ignore_class": self.ignore_class}


@keras.saving.register_keras_serializable(package="keras_vit")
class Delta1(PixelFraction):
    """δ1: the fraction of the measured pixels (depth > 0) predicted within a factor 1.25."""

    def __init__(self, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)

    def judge(self, y_true, y_pred):
        target, prediction = ops.cast(y_true, "float32"), ops.maximum(ops.cast(y_pred, "float32"), EPSILON)
        valid = ops.greater(target, 0.0)
        safe = ops.where(valid, target, 1.0)
        return ops.less(ops.maximum(safe / prediction, prediction / safe), 1.25), valid


def loss_and_metrics(task, num_classes=None, label_smoothing=0.0):
    """`(loss, metrics)` of a dense task: "semantic" (masked cross-entropy; pixel accuracy as
    `accuracy`, `miou`) or "depth" (SILog; δ1 as `accuracy`)."""
    if task == "depth":
        return ScaleInvariantLogLoss(), [Delta1()]
    miou = keras.metrics.MeanIoU(num_classes, ignore_class=IGNORE, sparse_y_pred=False, name="miou")
    return MaskedCrossEntropy(label_smoothing=label_smoothing), [PixelAccuracy(), miou]
