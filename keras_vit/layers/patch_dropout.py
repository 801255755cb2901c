"""Patch dropout (timm's `PatchDropout`, `patch_drop_rate`): training on a random subset of patches."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchDropout(keras.layers.Layer):
    """While training, keeps `max(1, int(patches * (1 - rate)))` of the patch tokens of each
    image, drawn at random (in random order, as timm's default `ordered=False`), and the
    `num_prefix_tokens` tokens before them (class, distillation, registers); the identity at
    inference and with `rate=0`."""

    def __init__(self, rate, num_prefix_tokens=0, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0 <= rate < 1:
            raise ValueError(f"patch_drop_rate={rate!r} must be in [0, 1).")
        self.rate = float(rate)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, tokens, training=None):
        if not training or self.rate == 0:
            return tokens
        prefix, patches = tokens[:, : self.num_prefix_tokens], tokens[:, self.num_prefix_tokens:]
        count = patches.shape[1]
        keep = max(1, int(count * (1 - self.rate)))
        noise = keras.random.uniform(ops.shape(patches)[:2], seed=self.seed_generator)
        order = ops.argsort(noise, axis=-1)[:, :keep]
        kept = ops.take_along_axis(patches, ops.expand_dims(order, -1), axis=1)
        return ops.concatenate([prefix, kept], axis=1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "rate": self.rate, "num_prefix_tokens": self.num_prefix_tokens,
                "seed": self.seed}
