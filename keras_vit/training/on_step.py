"""The end of the training input pipeline, run on the accelerator inside the compiled step.

The host sends uint8 images and, for MixUp / CutMix, a small per-example table of the mix it
drew (`augment.mix_table`); the training step casts and scales the images as the model's
preprocessing says (`keras_vit.preprocess_input`: [-1, 1], or its mean / std), mixes each image and label with those of the batch reversed,
and trains on the result. Evaluation and prediction take float images as before. No
TensorFlow here: the step runs on every backend.

Mix table columns, per example: a box (top, left, bottom, right, in pixels: rows `top <= y <
bottom`, columns `left <= x < right`), the weight of the example's own pixels inside the box
and outside it, and the weight of its own label (MixUp: no box, the Beta weight everywhere;
CutMix: the partner's pixels inside the box, the label weighted by the area outside it).
"""

import keras
from keras import ops

MIX_COLUMNS = ("top", "left", "bottom", "right", "inside", "outside", "label")


def normalise(images, offset=(127.5,) * 3, scale=(127.5,) * 3):
    """uint8 (or float) pixels in [0, 255] -> float32 `(x - offset) / scale` per channel (default
    [-1, 1]; a `Preprocessing`'s `offset` / `scale`)."""
    return (ops.cast(images, "float32") - ops.convert_to_tensor(offset, "float32")) / ops.convert_to_tensor(scale, "float32")


def mix(images, labels, table):
    """`(images, labels)` of a batch mixed as the `(batch, 7)` mix `table` says, each with the
    batch reversed (example `i` with example `batch - 1 - i`)."""
    top, left, bottom, right, inside, outside, own_label = (table[:, k] for k in range(len(MIX_COLUMNS)))
    height, width = images.shape[1], images.shape[2]
    rows = ops.arange(height, dtype="float32")[None, :, None]
    cols = ops.arange(width, dtype="float32")[None, None, :]

    def per_example(v):
        return v[:, None, None]

    in_box = (rows >= per_example(top)) & (rows < per_example(bottom))
    in_box = in_box & (cols >= per_example(left)) & (cols < per_example(right))
    weight = ops.where(in_box, per_example(inside), per_example(outside))[..., None]
    images = weight * images + (1.0 - weight) * ops.flip(images, axis=0)
    own_label = own_label[:, None]
    return images, own_label * labels + (1.0 - own_label) * ops.flip(labels, axis=0)


def finish(data, scaling=None):
    """A training batch from the host -> the batch the model trains on: `x` is uint8 images,
    or `(images, mix table)`; the images come out scaled by `scaling` (a `Preprocessing`;
    None: [-1, 1]), mixed with their labels."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
    scale = (lambda images: normalise(images)) if scaling is None else (
        lambda images: normalise(images, scaling.offset, scaling.scale))
    if isinstance(x, (tuple, list)):
        images, table = x
        x, y = mix(scale(images), ops.cast(y, "float32"), ops.cast(table, "float32"))
    else:
        x = scale(x)
    return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)


class TrainingModel(keras.Model):
    """A functional model (`TrainingModel(inputs, outputs)`) whose training step first
    `finish`es the host's batch, scaled by `scaling` (a `Preprocessing` set after it is made;
    None: [-1, 1]); evaluation and prediction are those of the plain model."""

    scaling = None

    def train_step(self, *args):
        *state, data = args  # JAX: (state, data); TensorFlow, PyTorch: (data,)
        return super().train_step(*state, finish(data, self.scaling))

    def _symbolic_build(self, iterator=None, data_batch=None):
        # Keras builds the metrics from a batch as the dataset gives it, before the training
        # step (JAX, PyTorch: the first of `iterator`; TensorFlow under a distribution
        # strategy: `data_batch`): give it a finished one.
        if data_batch is not None:
            data_batch = finish(data_batch, self.scaling)
        return super()._symbolic_build(iterator=iterator and _finishing(iterator, self.scaling), data_batch=data_batch)


def _finishing(iterator, scaling):
    """An epoch iterator's `(step, index, batches)` with the batches `finish`ed as they are taken."""
    for step, index, batches in iterator:
        if isinstance(batches, (list, tuple)):
            yield step, index, [finish(batches[0], scaling), *batches[1:]]
        else:
            yield step, index, (finish(batch, scaling) for batch in batches)
