"""EoMT's training loss and metrics for semantic segmentation from class-id masks (any backend).

Each class present in an image is one target mask (Mask2Former / EoMT's semantic targets; the
ignore label belongs to no mask). Each prediction (the model's final one and those made before each
block of the queries, `keras_vit.dense.eomt.eomt_training_model`) is matched to the targets by the
Hungarian algorithm (`keras_vit.dense.matching`) on the cost `class_weight * -p(class) +
mask_weight * BCE + dice_weight * dice`, and scored as transformers' `EomtLoss`: cross-entropy of
the class logits (unmatched queries: "no object", weighted `no_object_weight`), the matched masks'
sigmoid BCE and dice, each over the number of targets of the batch; the predictions' losses summed.
The masks are compared at their own resolution at every pixel: the targets resized there
bilinearly (torch's half-pixel `interpolate`, which equals transformers' `point_sample` of the
target at the mask pixels' centres), where transformers samples 12544 random and uncertain points.

The training model packs its predictions in one tensor `(batch, predictions, queries, classes + 1 +
h * w)` (`pack`) for Keras' single loss; the metrics read the last prediction's semantic scores.
"""

import keras
from keras import ops

from keras_vit.dense.labels import IGNORE
from keras_vit.dense.losses import PixelAccuracy
from keras_vit.dense.matching import assign
from keras_vit.dense.resize import resize

# transformers' `EomtConfig` defaults (the EoMT repository's)
CLASS_WEIGHT, MASK_WEIGHT, DICE_WEIGHT, NO_OBJECT_WEIGHT = 2.0, 5.0, 5.0, 0.1


def pack(predictions):
    """`[(class_logits (b, q, c + 1), mask_logits (b, q, h, w)), ...]` -> `(b, len, q, c + 1 + h * w)`."""
    packed = []
    for classes, masks in predictions:
        shape = ops.shape(masks)
        flat = ops.reshape(masks, (-1, shape[1], shape[2] * shape[3]))
        packed.append(ops.concatenate([ops.cast(classes, "float32"), ops.cast(flat, "float32")], axis=-1))
    return ops.stack(packed, axis=1)


def unpack(packed, num_classes):
    """The `(class_logits, mask_logits (b, q, h * w))` of each prediction `pack` joined."""
    return [(packed[:, i, :, : num_classes + 1], packed[:, i, :, num_classes + 1:]) for i in range(packed.shape[1])]


def target_masks(labels, num_classes, mask_size):
    """`(masks (b, classes, h * w) float32, present (b, classes) bool)` of `(b, H, W)` class ids: each
    class's 0/1 mask resized to `mask_size` (bilinear), whether the class is in the image."""
    labels = ops.cast(labels, "int32")
    valid = ops.not_equal(labels, IGNORE)
    onehot = ops.one_hot(ops.where(valid, labels, 0), num_classes, dtype="float32") * ops.cast(valid, "float32")[..., None]
    present = ops.sum(onehot, axis=(1, 2)) > 0
    small = resize(onehot, mask_size, align_corners=False)
    return ops.reshape(ops.transpose(small, (0, 3, 1, 2)), (-1, num_classes, mask_size[0] * mask_size[1])), present


def pair_costs(class_logits, mask_logits, targets):
    """`(class, bce, dice)`, each `(b, queries, classes)`: minus the class probability, the mean sigmoid
    cross-entropy of each query's mask against each target, the dice loss of the pair."""
    num_classes = ops.shape(targets)[1]
    pixels = ops.cast(ops.shape(mask_logits)[-1], "float32")
    cost_class = -ops.softmax(class_logits, axis=-1)[..., :num_classes]
    bce = (ops.sum(ops.softplus(mask_logits), axis=-1)[..., None]
           - ops.einsum("bqp,bkp->bqk", mask_logits, targets)) / pixels
    probs = ops.sigmoid(mask_logits)
    numerator = 2.0 * ops.einsum("bqp,bkp->bqk", probs, targets)
    denominator = ops.sum(probs, axis=-1)[..., None] + ops.sum(targets, axis=-1)[:, None, :]
    return cost_class, bce, 1.0 - (numerator + 1.0) / (denominator + 1.0)


def prediction_losses(class_logits, mask_logits, targets, present, weights=(CLASS_WEIGHT, MASK_WEIGHT, DICE_WEIGHT),
                      no_object_weight=NO_OBJECT_WEIGHT):
    """`{"cross_entropy", "mask", "dice"}` of one prediction (unweighted) and the matching `(b, q, classes)`."""
    class_weight, mask_weight, dice_weight = weights
    cost_class, bce, dice = pair_costs(class_logits, mask_logits, targets)
    matched = assign(class_weight * cost_class + mask_weight * bce + dice_weight * dice, present)
    num_masks = ops.maximum(ops.sum(ops.cast(present, "float32")), 1.0)
    unmatched = 1.0 - ops.sum(matched, axis=-1, keepdims=True)
    target_classes = ops.concatenate([matched, unmatched], axis=-1)
    weight = ops.sum(matched, axis=-1) + no_object_weight * unmatched[..., 0]
    nll = -ops.sum(target_classes * ops.log_softmax(class_logits, axis=-1), axis=-1)
    losses = {"cross_entropy": ops.sum(weight * nll) / ops.sum(weight),
              "mask": ops.sum(matched * bce) / num_masks, "dice": ops.sum(matched * dice) / num_masks}
    return losses, matched


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTLoss(keras.losses.Loss):
    """EoMT's loss of `(b, H, W)` class ids against the training model's packed predictions (module
    docstring): summed over the predictions, `class_weight * CE + mask_weight * BCE + dice_weight * dice`."""

    def __init__(self, num_classes, mask_size, class_weight=CLASS_WEIGHT, mask_weight=MASK_WEIGHT,
                 dice_weight=DICE_WEIGHT, no_object_weight=NO_OBJECT_WEIGHT, name="eomt_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes, self.mask_size = int(num_classes), tuple(int(s) for s in mask_size)
        self.weights = (float(class_weight), float(mask_weight), float(dice_weight))
        self.no_object_weight = float(no_object_weight)

    def call(self, y_true, y_pred):
        targets, present = target_masks(y_true, self.num_classes, self.mask_size)
        total = 0.0
        for class_logits, mask_logits in unpack(ops.cast(y_pred, "float32"), self.num_classes):
            losses, _ = prediction_losses(class_logits, mask_logits, targets, present, self.weights,
                                          self.no_object_weight)
            total = total + sum(w * losses[k] for w, k in zip(self.weights, ("cross_entropy", "mask", "dice")))
        return total

    def get_config(self):
        class_weight, mask_weight, dice_weight = self.weights
        return {**super().get_config(), "num_classes": self.num_classes, "mask_size": self.mask_size,
                "class_weight": class_weight, "mask_weight": mask_weight, "dice_weight": dice_weight,
                "no_object_weight": self.no_object_weight}


def semantic_logits(packed, num_classes, mask_size, size):
    """The last prediction's `(b, H, W, classes)` class scores at `size` (the labels'), as
    `keras_vit.dense.eomt_postprocess.semantic_scores` (softmax, "no object" left out, times the sigmoid of
    the mask logits resized to `size`)."""
    class_logits, mask_logits = unpack(ops.cast(packed, "float32"), num_classes)[-1]
    masks = ops.transpose(ops.reshape(mask_logits, (-1, mask_logits.shape[1], *mask_size)), (0, 2, 3, 1))
    masks = ops.sigmoid(resize(masks, size, align_corners=False))  # the logits resized, as transformers'
    return ops.einsum("bqc,bhwq->bhwc", ops.softmax(class_logits, axis=-1)[..., :num_classes], masks)


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTPixelAccuracy(PixelAccuracy):
    """Pixel accuracy of the packed predictions' semantic map (`semantic_logits`)."""

    def __init__(self, num_classes, mask_size, name="accuracy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes, self.mask_size = int(num_classes), tuple(int(s) for s in mask_size)

    def judge(self, y_true, y_pred):
        size = ops.shape(y_true)[1:3]
        return super().judge(y_true, semantic_logits(y_pred, self.num_classes, self.mask_size, size))

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "mask_size": self.mask_size}


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTMeanIoU(keras.metrics.MeanIoU):
    """mIoU of the packed predictions' semantic map (`semantic_logits`), the ignore label left out."""

    def __init__(self, num_classes, mask_size, name="miou", **kwargs):
        kwargs.pop("ignore_class", None), kwargs.pop("sparse_y_pred", None)
        super().__init__(num_classes, ignore_class=IGNORE, sparse_y_pred=False, name=name, **kwargs)
        self.mask_size = tuple(int(s) for s in mask_size)

    def update_state(self, y_true, y_pred, sample_weight=None):
        size = ops.shape(y_true)[1:3]
        return super().update_state(y_true, semantic_logits(y_pred, self.num_classes, self.mask_size, size),
                                    sample_weight)

    def get_config(self):
        return {**super().get_config(), "mask_size": self.mask_size}


def eomt_loss_and_metrics(num_classes, mask_size):
    """`(EoMTLoss, [pixel accuracy as "accuracy", "miou"])` of a semantic EoMT run."""
    return EoMTLoss(num_classes, mask_size), [EoMTPixelAccuracy(num_classes, mask_size),
                                              EoMTMeanIoU(num_classes, mask_size)]
