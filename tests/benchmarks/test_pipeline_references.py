"""benchmarks/pipeline_throughput.py: its two references, the decode limit and the plain
per-image (Pillow + NumPy) pipeline."""

import numpy as np

from tests.support.benchmarks import BENCHMARKS  # noqa: F401  (puts benchmarks/ on sys.path)

import pipeline_throughput  # noqa: E402


def test_references_decode_and_crop_the_same_files():
    source = pipeline_throughput.jpeg_source(3)
    images, _ = next(iter(pipeline_throughput.decode_limit(source, 2)))
    assert tuple(images.shape) == (2, 375, 500, 3) and images.dtype.name == "uint8"
    batches, shape = pipeline_throughput.plain_per_image(source, 4, 2, 32)
    first, _ = next(batches)
    assert first.shape == shape == (4, 3, 32, 32) and first.dtype == np.float32
    assert -1.0 <= first.min() and first.max() <= 1.0 and first.std() > 0.05
    second, _ = next(batches)
    assert not np.array_equal(first, second)  # new crops for the next batch (the 4th image repeats a file)
