"""A tiny ViT's compiled training steps and predictions, written to OUT.npz (for
tests/test_suite_settings.py, which compares them between XLA settings).

Usage: python tests/support/compiled_step.py OUT.npz   (KERAS_BACKEND=jax; XLA_FLAGS as the caller sets them)
"""

import sys

import keras
import numpy as np

import keras_vit


def trained():
    """{name: array}: the weights after four AdamW steps of `jit_compile=True` `fit` (forward pass,
    gradients and update in one program), and the compiled predictions of the trained model."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(patch_size=8, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64,
                                        input_shape=(32, 32, 3), classes=10, classifier_activation=None)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    images = np.random.default_rng(0).normal(size=(16, 32, 32, 3)).astype("float32")
    model.fit(images, np.arange(16) % 10, batch_size=8, epochs=2, shuffle=False, verbose=0)
    return {"logits": model.predict(images, verbose=0), **{v.path: np.asarray(v) for v in model.weights}}


if __name__ == "__main__":
    np.savez(sys.argv[1], **trained())
