"""Masked patch prediction (paper 4.6, App. B.1.2): self-supervised pre-training of a ViT encoder.

A fraction `rate` (paper: 50 %) of the patch embeddings is corrupted; of those, `split[0]`
(80 %) become a learnable `[mask]` embedding, `split[1]` (10 %) the embedding of a random
other patch of the same image and `split[2]` (10 %) stay unchanged. From the encoder's output
token at each corrupted position a head predicts the patch's mean colour quantised to `bits`
bits per channel (`target="color"`, 3 bits = 512 classes, the paper's choice) or regresses
its pixels (`target="pixels"`, L2); the loss covers the corrupted patches only.

The corruption is sampled on the host, in `tf.data`, like the augmentation: random ops inside
a JAX model are slow on CPU, the model stays deterministic (the same numbers on every backend
for the same batch), and the draw of each batch is keyed by `(seed, batch index)`, so a
resumed run continues with exactly the corruption it would have seen. The random "other
patch" is taken from the same image, which keeps every example self-contained when a batch is
split over devices. The model receives `{"images", "kind", "source"}`: `kind` says per patch
KEEP (not corrupted), MASK, RANDOM or SAME (corrupted, unchanged); `source` is the patch whose
embedding a RANDOM position takes.
"""

import keras
import tensorflow as tf
from keras import ops

from keras_vit.utils.torch_compile import compile_once

KEEP, MASK, RANDOM, SAME = 0, 1, 2, 3
_AUTOTUNE = tf.data.AUTOTUNE


def sample_corruption(batch, patches, key, rate=0.5, split=(0.8, 0.1, 0.1)):
    """`(kind, source)`, two int32 `(batch, patches)` tensors drawn from the `(2,)` seed `key`.

    Each patch is corrupted with probability `rate`, then is MASK, RANDOM or SAME with the
    probabilities `split` (normalised). `source` is the position itself except for RANDOM,
    where it is another position of the same image drawn uniformly.
    """
    total = float(sum(split))
    mask_p, random_p = split[0] / total, split[1] / total
    draws = tf.random.stateless_uniform([batch, patches, 3], key)
    corrupted = draws[..., 0] < rate
    how = draws[..., 1]
    kind = tf.where(how < mask_p, MASK, tf.where(how < mask_p + random_p, RANDOM, SAME))
    kind = tf.where(corrupted, kind, KEEP)
    position = tf.broadcast_to(tf.range(patches), [batch, patches])
    offset = 1 + tf.minimum(tf.cast(draws[..., 2] * tf.cast(patches - 1, tf.float32), tf.int32), tf.maximum(patches - 2, 0))
    source = tf.where(kind == RANDOM, (position + offset) % patches, position)
    return tf.cast(kind, tf.int32), tf.cast(source, tf.int32)


def _patch_grid(images, patch_size):
    """`(batch, H, W, 3)` -> `(batch, rows * cols, patch_size, patch_size, 3)` in token order."""
    shape = tf.shape(images)
    rows, cols = shape[1] // patch_size, shape[2] // patch_size
    grid = tf.reshape(images, [shape[0], rows, patch_size, cols, patch_size, 3])
    grid = tf.transpose(grid, [0, 1, 3, 2, 4, 5])
    return tf.reshape(grid, [shape[0], rows * cols, patch_size, patch_size, 3])


def mean_color_targets(images, patch_size, bits=3):
    """The class of each patch's mean colour: int32 `(batch, patches)` in `[0, 2**(3 * bits))`.

    `images` are in [-1, 1]. Each channel's mean over the patch, as a fraction `m` of the full
    range, is quantised to `min(floor(m * 2**bits), 2**bits - 1)`; the class is
    `(r << 2 * bits) | (g << bits) | b` (3 bits: 8 levels per channel, 512 colours).
    """
    mean = tf.reduce_mean(_patch_grid(images, patch_size), axis=[2, 3])
    levels = 2**bits
    level = tf.clip_by_value(tf.floor((mean + 1.0) / 2.0 * levels), 0, levels - 1)
    level = tf.cast(level, tf.int32)
    return (level[..., 0] * levels + level[..., 1]) * levels + level[..., 2]


def patch_pixels(images, patch_size):
    """Each patch's pixels, float32 `(batch, patches, patch_size**2 * 3)` (row-major, RGB last)."""
    grid = _patch_grid(images, patch_size)
    return tf.reshape(grid, [tf.shape(grid)[0], tf.shape(grid)[1], patch_size * patch_size * 3])


def corrupt_batches(batches, patch_size, *, rate=0.5, split=(0.8, 0.1, 0.1), target="color", bits=3,
                    seed=0, salt=0, start=0):
    """`(images, labels[, weights])` batches -> `(inputs, targets, weights)` for masked patch
    prediction; the labels are dropped. Batch `i` (counting from `start`) draws its corruption
    from `(seed, salt, i)`. `weights` (batch, patches) is 1 on corrupted patches, 0 elsewhere
    (and 0 on the padding examples of a padded evaluation batch)."""
    base = tf.constant([seed, salt], tf.int64)

    def corrupt(index, batch):
        images = batch[0]
        shape = tf.shape(images)
        patches = (shape[1] // patch_size) * (shape[2] // patch_size)
        key = tf.random.experimental.stateless_fold_in(base, index)
        kind, source = sample_corruption(shape[0], patches, key, rate, split)
        if target == "color":
            targets = mean_color_targets(images, patch_size, bits)
        else:
            targets = patch_pixels(images, patch_size)
        weights = tf.cast(kind != KEEP, tf.float32)
        if len(batch) == 3:
            weights *= batch[2][:, None]
        return {"images": images, "kind": kind, "source": source}, targets, weights

    return batches.enumerate(start=start).map(corrupt, num_parallel_calls=_AUTOTUNE).prefetch(_AUTOTUNE)


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchCorruption(keras.layers.Layer):
    """Applies a sampled corruption to patch embeddings `(batch, patches, width)`.

    Call with `(tokens, kind, source)`: MASK positions take the learnable `mask_token`, RANDOM
    positions the embedding of patch `source` of the same image, the others are unchanged.
    """

    def build(self, tokens_shape, kind_shape=None, source_shape=None):
        self.mask_token = self.add_weight(
            shape=(tokens_shape[-1],),
            initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            name="mask_token",
        )

    def call(self, tokens, kind, source):
        width = tokens.shape[-1]
        other = ops.take_along_axis(tokens, ops.repeat(ops.expand_dims(source, -1), width, axis=-1), axis=1)
        kind = ops.expand_dims(kind, -1)
        out = ops.where(kind == MASK, ops.cast(self.mask_token, tokens.dtype), tokens)
        return ops.where(kind == RANDOM, other, out)

    def compute_output_shape(self, tokens_shape, kind_shape=None, source_shape=None):
        return tokens_shape


def build_pretraining_model(encoder, target="color", bits=3, name="masked_patch_prediction"):
    """The masked-patch-prediction model around `encoder`, a keras_vit ViT built with
    `include_top=False, pooling=None` (its layers, and so its weights, are shared).

    Inputs `{"images", "kind", "source"}`; output float32 `(batch, patches, outputs)`: logits
    over `2**(3 * bits)` colours, or the predicted pixels of each patch.
    """
    names = {layer.name for layer in encoder.layers}
    if "encoder" not in names or len(encoder.outputs[0].shape) != 3:
        raise ValueError(
            "Masked patch prediction needs a keras_vit Vision Transformer built with "
            "include_top=False and pooling=None (the whole token sequence)."
        )
    if "registers" in names or "rope_input" in names or (
            type(encoder.get_layer("posembed_input")).__name__ == "RopePositionEmbedding"):
        raise ValueError("Masked patch prediction runs the paper's token layout: no register tokens, no "
                         "position_embedding='rope' (DINOv3).")
    images = keras.Input(shape=encoder.inputs[0].shape[1:], name="images")
    kind = keras.Input(shape=(None,), dtype="int32", name="kind")
    source = keras.Input(shape=(None,), dtype="int32", name="source")
    features = encoder.get_layer("stem")(images) if "stem" in names else images
    patches = encoder.get_layer("embedding")(features)
    tokens = encoder.get_layer("flatten")(patches)
    tokens = PatchCorruption(name="corruption")(tokens, kind, source)
    tokens = encoder.get_layer("class_token")(tokens)
    tokens = encoder.get_layer("posembed_input")(tokens, patches)
    tokens = encoder.get_layer("dropout")(tokens)
    if "pre_norm" in names:
        tokens = encoder.get_layer("pre_norm")(tokens)
    tokens = encoder.get_layer("encoder")(tokens)
    if target == "color":
        outputs = 2 ** (3 * bits)
    else:
        stride = images.shape[1] // patches.shape[1]
        outputs = stride * stride * 3
    prediction = keras.layers.Dense(outputs, name="prediction_head")(tokens[:, 1:])
    prediction = keras.layers.Activation("linear", dtype="float32", name="prediction")(prediction)
    return compile_once(keras.Model({"images": images, "kind": kind, "source": source}, prediction, name=name))


def loss_and_metrics(target):
    """The loss (mean over the corrupted patches, i.e. over the sample weights) and metrics."""
    if target == "color":
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight")
        return loss, [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    return keras.losses.MeanSquaredError(reduction="mean_with_sample_weight"), []
