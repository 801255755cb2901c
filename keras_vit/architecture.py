"""The Vision Transformer's architecture as data, and the functional model built from it.

`VARIANTS` (from `keras_vit.variants`) are the named architectures; `ViTConfig` is the typed, frozen configuration shared by the builders
(`keras_vit.applications`) and the weights loader (`keras_vit.weights`), which both build
through `build_model`. Nothing here imports `applications` or `weights`.
"""

import dataclasses
from typing import Any, Optional

import keras

from keras_vit import matmul_precision
from keras_vit.guard import VisionTransformerModel
from keras_vit.layers import ClassToken, Encoder, PatchEmbedding, PositionEmbedding, TokenPooling
from keras_vit.variants import VARIANTS, variant  # noqa: F401  (part of this module's interface)

DEFAULT_SIZE = 224
ARCHITECTURE_KEYS = ("patch_size", "hidden_dim", "depth", "num_heads", "mlp_dim")

@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Everything `build_model` needs (the arguments of `VisionTransformer` except the
    input and the weights). `approximate_gelu` / `layer_norm_epsilon` None mean "the
    checkpoint's own" until the loader (or the builder, without weights) resolves them."""

    patch_size: int = 16
    hidden_dim: int = 768
    depth: int = 12
    num_heads: int = 12
    mlp_dim: int = 3072
    include_top: bool = True
    pooling: Optional[str] = None
    classes: int = 1000
    classifier_activation: Any = "softmax"
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    representation_size: Optional[int] = None
    approximate_gelu: Optional[bool] = None
    layer_norm_epsilon: Optional[float] = None
    stem: Any = None
    seed: Optional[int] = None
    remat: bool = False
    name: str = "vision_transformer"

    @property
    def stride(self):
        """Input pixels per token along each side: the patch size times the stem's stride."""
        return self.patch_size * (self.stem.stride if self.stem is not None else 1)

    @property
    def architecture(self):
        """The five numbers of `VARIANTS` entries."""
        return {key: getattr(self, key) for key in ARCHITECTURE_KEYS}


def image_shape(input_shape, input_tensor, stride, need_rgb):
    """The validated `(height, width, channels)` of the input (default 224 x 224 x 3)."""
    if input_shape is None:
        if input_tensor is not None:
            input_shape = tuple(input_tensor.shape[1:])
        else:
            input_shape = (DEFAULT_SIZE, DEFAULT_SIZE, 3)
    input_shape = tuple(input_shape)
    if len(input_shape) != 3:
        raise ValueError(f"input_shape={input_shape} must be (height, width, channels).")
    height, width, channels = input_shape
    if need_rgb and channels != 3:
        raise ValueError(
            f"input_shape={input_shape} has {channels} channels; pretrained weights need 3 (RGB)."
        )
    for size in (height, width):
        if size is not None and (size < stride or size % stride):
            raise ValueError(
                f"input_shape={input_shape}: height and width must be multiples of the patch "
                f"size {stride} (or None for any size), got {size}."
            )
    return input_shape


def build_model(config, input_shape, input_tensor=None, default_size=(DEFAULT_SIZE, DEFAULT_SIZE)):
    """The functional model of a resolved `ViTConfig` for a validated `input_shape`.

    `default_size` `(height, width)` sizes the position-embedding table where `input_shape`
    leaves the image size open (None); the loader passes the checkpoint's resolution.
    A float32 model makes the backend compute float32 products exactly (no TF32; see
    `keras_vit.matmul_precision`).
    """
    matmul_precision.exact_float32_for(keras.config.dtype_policy())
    if input_tensor is None:
        images = keras.Input(shape=input_shape, name="images")
    elif keras.backend.is_keras_tensor(input_tensor):
        images = input_tensor
    else:
        images = keras.Input(tensor=input_tensor, shape=input_shape, name="images")
    features = images if config.stem is None else config.stem(images)
    patches = PatchEmbedding(config.patch_size, config.hidden_dim, name="embedding")(features)
    grid = tuple((s or d) // config.stride for s, d in zip(input_shape[:2], default_size))
    tokens = keras.layers.Reshape((-1, config.hidden_dim), name="flatten")(patches)
    tokens = ClassToken(name="class_token")(tokens)
    tokens = PositionEmbedding(grid, name="posembed_input")(tokens, patches)
    tokens = keras.layers.Dropout(config.dropout_rate, seed=config.seed, name="dropout", dtype="float32")(tokens)
    tokens = Encoder(
        config.depth,
        config.num_heads,
        config.mlp_dim,
        dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        drop_path_rate=config.drop_path_rate,
        approximate_gelu=config.approximate_gelu,
        layer_norm_epsilon=config.layer_norm_epsilon,
        seed=config.seed,
        remat=config.remat,
        name="encoder",
    )(tokens)
    outputs = tokens
    if config.include_top or config.pooling is not None:
        outputs = TokenPooling(config.pooling or "token", name="pooling")(tokens)
    if config.include_top:
        if config.representation_size:
            outputs = keras.layers.Dense(config.representation_size, activation="tanh", name="pre_logits")(outputs)
        outputs = keras.layers.Dense(config.classes, kernel_initializer="zeros", name="head")(outputs)
        outputs = keras.layers.Activation(
            config.classifier_activation or "linear", dtype="float32", name="predictions"
        )(outputs)
    inputs = keras.utils.get_source_inputs(images) if input_tensor is not None else images
    return VisionTransformerModel(inputs, outputs, name=config.name)
