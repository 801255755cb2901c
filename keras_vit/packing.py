"""Packing NaFlex images: several images in one sequence, so less of each batch is padding.

A packed batch is `{"patches" (rows, seq_len, p*p*3), "spatial_shapes" (rows, images, 2),
"segment_ids" (rows, seq_len)}`: each row holds up to `images` images one after the other
(each image's patches in row-major order), `segment_ids` says whose each token is (1 for the
row's first image, 0 for padding) and `spatial_shapes` gives each image's patch rows and
columns ((0, 0) for an unused place). `packed_model(model)` runs a NaFlex model's own layers
on it: each token attends only to its own image's tokens (a block-diagonal mask) and the
pooling (MAP or average) gives one vector per image, `(rows, images, ...)`; `unpack` puts them
back in the order of the images. Images are placed by first fit in the order given.
"""

import keras
import numpy as np

from keras_vit.heads import ends_with_softmax
from keras_vit.layers.naflex import segment_membership
from keras_vit.naflex import check_batch, check_count

PACKED_LAYERS = ("fc_norm", "projection", "pre_logits", "head", "predictions")  # after the pooling, where the model has them


def first_fit(counts, seq_len, max_images=None):
    """The rows of a packing of images of `counts` patches into sequences of `seq_len`: a
    list of lists of image indices, each image in the first row it fits (at most
    `max_images` images a row)."""
    rows, free = [], []
    for i, count in enumerate(counts):
        if not 0 < count <= seq_len:
            raise ValueError(f"Image {i} has {count} patches; a packed sequence holds 1 to {seq_len}.")
        place = next((r for r, room in enumerate(free)
                      if room >= count and (max_images is None or len(rows[r]) < max_images)), None)
        if place is None:
            rows.append([]), free.append(seq_len)
            place = len(rows) - 1
        rows[place].append(i)
        free[place] -= count
    return rows


def pack(inputs, seq_len=None, max_images=None):
    """`(packed batch, index)` of a NaFlex batch `inputs` (`keras_vit.naflex_inputs`'s dict of
    NumPy arrays): its images packed by `first_fit` into rows of `seq_len` tokens (default:
    the batch's); `index` `(rows, images)` is the image in each place (-1: unused)."""
    patches, shapes, mask = check_batch(inputs)
    counts = (mask != 0).sum(axis=1).astype(int)
    seq_len = patches.shape[1] if seq_len is None else check_count("seq_len", seq_len)
    if max_images is not None:
        max_images = check_count("max_images", max_images)
    rows = first_fit(counts, seq_len, max_images)
    images = max(len(row) for row in rows)
    packed = np.zeros((len(rows), seq_len, patches.shape[-1]), patches.dtype)
    packed_shapes = np.zeros((len(rows), images, 2), np.int32)
    segment_ids = np.zeros((len(rows), seq_len), np.int32)
    index = np.full((len(rows), images), -1, np.int64)
    for r, row in enumerate(rows):
        start = 0
        for s, i in enumerate(row):
            end = start + counts[i]
            packed[r, start:end], segment_ids[r, start:end] = patches[i, : counts[i]], s + 1
            packed_shapes[r, s], index[r, s] = shapes[i], i
            start = end
    return {"patches": packed, "spatial_shapes": packed_shapes, "segment_ids": segment_ids}, index


def unpack(outputs, index):
    """The per-image `outputs` `(rows, images, ...)` of a packed batch, in the images' order."""
    outputs, index = keras.ops.convert_to_numpy(outputs), np.asarray(index)
    used = index >= 0
    if (index.ndim != 2 or tuple(outputs.shape[:2]) != index.shape or index.dtype.kind not in "iu"
            or not np.array_equal(np.sort(index[used]), np.arange(used.sum()))):
        raise ValueError(f"unpack: index {index.shape} is not the index pack returned with these outputs "
                         f"{tuple(outputs.shape[:2])}: each image once, -1 for an unused place.")
    result = np.empty((int(used.sum()), *outputs.shape[2:]), outputs.dtype)
    result[index[used]] = outputs[used]
    return result


def packed_model(model, logits=False):
    """A model on packed batches (see the module docstring) sharing every layer and weight of
    the NaFlex `model` (`naflex=True`); its outputs are `(rows, images, ...)`. With `logits`,
    a final softmax is left out and the outputs are float32 (a training loss from logits)."""
    if not (isinstance(model.input, dict) and "spatial_shapes" in model.input):
        raise ValueError(f"packed_model needs a NaFlex model (naflex=True); {model.name!r} takes images.")
    names = {layer.name for layer in model.layers}
    patch_dim = model.input["patches"].shape[-1]
    inputs = {
        "patches": keras.Input(shape=(None, patch_dim), name="patches"),
        "spatial_shapes": keras.Input(shape=(None, 2), dtype="int32", name="spatial_shapes"),
        "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
    }
    ids = inputs["segment_ids"]
    tokens = model.get_layer("embedding")(inputs["patches"], ids)  # padding (id 0) selected out
    tokens = model.get_layer("posembed_input")(tokens, inputs["spatial_shapes"], segment_ids=ids)
    tokens = model.get_layer("dropout")(tokens)
    if "pre_norm" in names:
        tokens = model.get_layer("pre_norm")(tokens)
    outputs = model.get_layer("encoder")(tokens, segment_ids=ids)
    pooling = "map_head" if "map_head" in names else "pooling" if "pooling" in names else None
    if pooling is not None:
        members = keras.layers.Lambda(
            lambda pair: segment_membership(pair[1], keras.ops.shape(pair[0])[1]), name="segments",
        )([inputs["spatial_shapes"], ids])
        outputs = model.get_layer(pooling)(outputs, segments=members)
        for name in PACKED_LAYERS:
            if name in names and not (logits and name == model.layers[-1].name and ends_with_softmax(model)):
                outputs = model.get_layer(name)(outputs)
    if logits:
        outputs = keras.layers.Activation("linear", dtype="float32", name="logits")(outputs)
    return keras.Model(inputs, outputs, name=f"{model.name}_packed")
