"""The benchmarked work, shared by every framework: the variants' architectures, the head size,
the optimizer settings and the random batch (no keras_vit import: reference workers use it too)."""

import numpy as np

NUM_CLASSES = 1000
LEARNING_RATE = 1e-4
WEIGHT_DECAY = 0.05

# The architecture of each variant (as keras_vit.variants, written out so that the reference
# workers never import keras_vit).
ARCHITECTURES = {
    "ViTTi16": (16, 192, 12, 3, 768),
    "ViTS16": (16, 384, 12, 6, 1536),
    "ViTS32": (32, 384, 12, 6, 1536),
    "ViTB16": (16, 768, 12, 12, 3072),
    "ViTB32": (32, 768, 12, 12, 3072),
    "ViTL16": (16, 1024, 24, 16, 4096),
    "ViTL32": (32, 1024, 24, 16, 4096),
    "ViTH14": (14, 1280, 32, 16, 5120),
}
TIMM_NAMES = {
    "ViTTi16": "vit_tiny_patch16_224",
    "ViTS16": "vit_small_patch16_224",
    "ViTS32": "vit_small_patch32_224",
    "ViTB16": "vit_base_patch16_224",
    "ViTB32": "vit_base_patch32_224",
    "ViTL16": "vit_large_patch16_224",
    "ViTL32": "vit_large_patch32_224",
    "ViTH14": "vit_huge_patch14_224",
}


def batch(cfg):
    """The random images in [-1, 1] and labels every framework trains and infers on."""
    rng = np.random.default_rng(0)
    size = cfg["resolution"]
    images = rng.uniform(-1.0, 1.0, (cfg["batch"], size, size, 3)).astype("float32")
    labels = rng.integers(0, NUM_CLASSES, (cfg["batch"],)).astype("int32")
    return images, labels


def weights_like_a_trained_vit(model, seed=0):
    """Keeps the Glorot encoder, gives the embeddings and the (zero-initialised) head values."""
    rng = np.random.default_rng(seed)
    values = []
    for v, value in zip(model.weights, model.get_weights()):
        if v.path.startswith(("class_token", "posembed_input")):
            value = 0.02 * rng.standard_normal(value.shape)
        elif v.path == "head/kernel":
            value = rng.standard_normal(value.shape) / np.sqrt(value.shape[0])
        values.append(np.asarray(value, np.float32))
    model.set_weights(values)
