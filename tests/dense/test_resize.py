"""`keras_vit.dense.resize`: torch's bilinear `F.interpolate`, both `align_corners`, up and down."""

import keras
import numpy as np
import pytest

from keras_vit.dense.resize import resize

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size, new", [((4, 5), (9, 7)), ((9, 7), (4, 5)), ((1, 3), (3, 2)), ((6, 6), (6, 6))])
def test_resize_is_torch_bilinear(size, new, align_corners):
    x = np.random.default_rng(0).standard_normal((2, *size, 3)).astype("float32")
    want = torch.nn.functional.interpolate(torch.from_numpy(x).permute(0, 3, 1, 2), size=new, mode="bilinear",
                                           align_corners=align_corners).permute(0, 2, 3, 1).numpy()
    got = keras.ops.convert_to_numpy(resize(keras.ops.convert_to_tensor(x), new, align_corners))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
