"""Packing NaFlex images: several images in one sequence, so less of each batch is padding.

A packed batch is `{"patches" (rows, seq_len, p*p*3), "spatial_shapes" (rows, images, 2),
"segment_ids" (rows, seq_len)}`: each row holds up to `images` images one after the other
(each image's patches in row-major order), `segment_ids` says whose each token is (1 for the
row's first image, 0 for padding) and `spatial_shapes` gives each image's patch rows and
columns ((0, 0) for an unused place). Images are placed by first fit in the order given.
`keras_vit.model.packed.packed_model(model)` runs a NaFlex model on such a batch, one output
per image `(rows, images, ...)`; `unpack` puts them back in the order of the images. NumPy
(Keras only to read the outputs back).
"""

import numpy as np

from keras_vit.data.naflex_inputs import check_batch, check_count


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
    import keras

    outputs, index = keras.ops.convert_to_numpy(outputs), np.asarray(index)
    used = index >= 0
    if (index.ndim != 2 or tuple(outputs.shape[:2]) != index.shape or index.dtype.kind not in "iu"
            or not np.array_equal(np.sort(index[used]), np.arange(used.sum()))):
        raise ValueError(f"unpack: index {index.shape} is not the index pack returned with these outputs "
                         f"{tuple(outputs.shape[:2])}: each image once, -1 for an unused place.")
    result = np.empty((int(used.sum()), *outputs.shape[2:]), outputs.dtype)
    result[index[used]] = outputs[used]
    return result
