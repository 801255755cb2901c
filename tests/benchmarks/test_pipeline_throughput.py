"""benchmarks/pipeline_throughput.py: the JPEG source it measures the pipelines on."""

from tests.support.benchmarks import BENCHMARKS  # noqa: F401  (puts benchmarks/ on sys.path)

import pipeline_throughput  # noqa: E402


def test_jpeg_source_decodes_to_imagenet_sized_rgb():
    source = pipeline_throughput.jpeg_source(3)
    assert source.train_size == 3 and source.num_classes == 1000
    encoded, label = next(iter(source.train))
    assert bytes(encoded.numpy()[:2]) == b"\xff\xd8"  # a JPEG
    image, _ = source.decode(encoded, label)
    assert tuple(image.shape) == (375, 500, 3) and image.dtype.name == "uint8"
