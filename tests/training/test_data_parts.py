"""`pipeline.train_dataset(part=...)`: each process of a multi-worker run reads only its part
of every global batch, and the parts together are the batch one process reads."""

import numpy as np

from keras_vit.training import data, pipeline

AUG = pipeline.Augmentation(16, crop_area=(0.5, 1.0), flip=True)


def _batches(ds, count):
    return [(x.numpy(), y.numpy()) for x, y in ds.take(count)]


def test_parts_of_each_global_batch_make_up_one_process_batch():
    source = data.load_source("digits")
    start = 40 * 32  # a resumed stream, across the end of the first pass (1438 examples)
    whole = _batches(pipeline.train_dataset(source, AUG, 32, seed=3, start=start, deterministic=True), 6)
    parts = [
        _batches(pipeline.train_dataset(source, AUG, 16, seed=3, start=start, part=(2, i), deterministic=True), 6)
        for i in (0, 1)
    ]
    for (x, y), (x0, y0), (x1, y1) in zip(whole, *parts):
        np.testing.assert_array_equal(np.concatenate([x0, x1]), x)  # same examples, same augmentation
        np.testing.assert_array_equal(np.concatenate([y0, y1]), y)
        assert x0.shape[0] == x1.shape[0] == 16
