"""Linear projection of flattened patches (paper eq. 1), as a strided convolution."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Cuts images into `patch_size` x `patch_size` patches and projects each to `hidden_dim`.

    Input `(batch, height, width, channels)`; output the patch grid
    `(batch, height // patch_size, width // patch_size, hidden_dim)`. The kernel has the
    original HWIO layout `(patch_size, patch_size, channels, hidden_dim)`; `use_bias=False`: no
    bias (CLIP).
    """

    def __init__(self, patch_size, hidden_dim, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.use_bias = bool(use_bias)
        self.patch_size = int(patch_size)
        self.hidden_dim = int(hidden_dim)

    def build(self, input_shape):
        height, width, channels = input_shape[1:]
        if channels is None:
            raise ValueError("PatchEmbedding needs a known number of input channels.")
        for name, size in (("height", height), ("width", width)):
            if size is not None and size % self.patch_size:
                raise ValueError(
                    f"Image {name} {size} is not divisible by the patch size "
                    f"{self.patch_size}; use a multiple of {self.patch_size}."
                )
        p = self.patch_size
        self.kernel = self.add_weight(
            name="kernel",
            shape=(p, p, channels, self.hidden_dim),
            initializer=keras.initializers.LecunNormal(),
        )
        self.bias = self.add_weight(name="bias", shape=(self.hidden_dim,), initializer="zeros") if self.use_bias else None

    def call(self, images):
        p = self.patch_size
        x = ops.conv(images, self.kernel, strides=p, padding="valid", data_format="channels_last")
        return x if self.bias is None else x + self.bias

    def compute_output_shape(self, input_shape):
        p = self.patch_size
        grid = [None if s is None else s // p for s in input_shape[1:3]]
        return (input_shape[0], *grid, self.hidden_dim)

    def get_config(self):
        return {**super().get_config(), "patch_size": self.patch_size, "hidden_dim": self.hidden_dim,
                "use_bias": self.use_bias}
