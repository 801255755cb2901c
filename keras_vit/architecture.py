"""The Vision Transformer's architecture as data, and the functional model built from it.

`VARIANTS` (from `keras_vit.variants`) are the named architectures; `ViTConfig` is the typed, frozen configuration shared by the builders
(`keras_vit.applications`) and the weights loader (`keras_vit.weights`), which both build
through `build_model`. Nothing here imports `applications` or `weights`.
"""

import dataclasses
import math
import numbers
from typing import Any, Optional

import keras

from keras_vit import interpolation as interpolations, matmul_precision
from keras_vit.guard import VisionTransformerModel
from keras_vit.torch_compile import compile_once
from keras_vit.layers import ClassToken, Encoder, PatchEmbedding, PositionEmbedding, TokenPooling
from keras_vit.layers.learned_tokens import LearnedTokens
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.sincos_position_embedding import SinCosPositionEmbedding
from keras_vit.preprocessing import DEFAULT as DEFAULT_PREPROCESSING, check_name
from keras_vit.variants import ARCHITECTURE_KEYS, VARIANTS, variant  # noqa: F401  (part of this module's interface)

DEFAULT_SIZE = 224
POOLINGS = ("token", "avg", "map")
POSITION_EMBEDDINGS = {"learned": PositionEmbedding, "sincos2d": SinCosPositionEmbedding}

@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Everything `build_model` needs (the arguments of `VisionTransformer` except the
    input and the weights). `approximate_gelu` / `layer_norm_epsilon` None mean "the
    checkpoint's own" until the loader (or the builder, without weights) resolves them.

    The options of the families beyond the paper (SPEC section 7): `class_token` (False: the
    class-token-free models, pooled by "avg" or "map"), `distillation_token` (DeiT's, after the
    class token) with `distillation_head` (a second head on it; the logits are the mean of
    both heads), `num_registers` (DINOv2's register tokens, after those, with no position
    embedding), `position_embedding` ("learned" or the fixed "sincos2d"),
    `layer_scale_init` (LayerScale in every block, None: none), `mlp` ("gelu", "swiglu") and
    `fc_norm` (the final LayerNorm on the pooled features instead of the tokens: timm's).
    `preprocessing`: what the model's inputs are scaled by (a name of
    `keras_vit.preprocessing.PREPROCESSING`; None: its weights', else the paper's).
    `interpolation`: how the learned position embeddings are resized to another patch grid
    (a name of `keras_vit.interpolation.INTERPOLATIONS`; None: its weights' library's,
    else the paper's "bilinear")."""

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
    class_token: bool = True
    distillation_token: bool = False
    distillation_head: bool = False
    num_registers: int = 0
    position_embedding: str = "learned"
    layer_scale_init: Optional[float] = None
    mlp: str = "gelu"
    fc_norm: bool = False
    preprocessing: Optional[str] = None
    interpolation: Optional[str] = None

    @property
    def stride(self):
        """Input pixels per token along each side: the patch size times the stem's stride."""
        return self.patch_size * (self.stem.stride if self.stem is not None else 1)

    def __post_init__(self):
        problem = None
        epsilon = self.layer_norm_epsilon  # a builder argument, or a checkpoint's once resolved
        if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real)
                                    or not 0 < epsilon < math.inf):
            problem = f"layer_norm_epsilon={epsilon!r} must be a positive finite number (e.g. 1e-6)."
        elif self.pooling is not None and self.pooling not in POOLINGS:
            problem = f"Unknown pooling={self.pooling!r}; expected one of {POOLINGS} or None."
        elif self.position_embedding not in POSITION_EMBEDDINGS:
            problem = f"Unknown position_embedding={self.position_embedding!r}; expected one of {tuple(POSITION_EMBEDDINGS)}."
        elif self.pooling == "token" and not self.class_token:
            problem = "pooling='token' reads the class token; with class_token=False use 'avg' or 'map'."
        elif self.distillation_token and not self.class_token:
            problem = "distillation_token=True needs the class token before it (class_token=True)."
        elif self.distillation_head and not self.distillation_token:
            problem = "distillation_head=True needs distillation_token=True."
        elif self.fc_norm and self.head_pooling == "map":
            problem = "fc_norm=True normalises the pooled features; the MAP head has its own LayerNorm: use 'avg' or 'token'."
        elif self.distillation_head and self.head_pooling != "token":
            problem = "distillation_head=True averages the class token's head with the distillation token's; use pooling='token'."
        elif isinstance(self.num_registers, bool) or not isinstance(self.num_registers, int) or self.num_registers < 0:
            problem = f"num_registers={self.num_registers!r} must be a non-negative integer."
        if problem:
            raise ValueError(problem)
        if self.preprocessing is not None:
            check_name(self.preprocessing)
        if self.interpolation is not None:
            interpolations.check(self.interpolation)

    @property
    def position_prefix(self):
        """Tokens before the patches that get a position embedding: class, distillation."""
        return int(self.class_token) + int(self.distillation_token)

    @property
    def num_prefix_tokens(self):
        """Tokens before the patches: class, distillation and register tokens."""
        return self.position_prefix + self.num_registers

    @property
    def head_pooling(self):
        """What the head (or `pooling=None` with a head) reads: the class token if any, else the mean."""
        return self.pooling or ("token" if self.class_token else "avg")

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


def _pool(config, tokens):
    """The `(batch, hidden_dim)` features the head reads (`config.head_pooling`)."""
    if config.head_pooling == "map":
        return MAPHead(
            config.num_heads,
            config.mlp_dim,
            approximate_gelu=config.approximate_gelu,
            layer_norm_epsilon=config.layer_norm_epsilon,
            name="map_head",
        )(tokens)
    return TokenPooling(config.head_pooling, config.num_prefix_tokens, name="pooling")(tokens)


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
    if config.class_token:
        tokens = ClassToken(name="class_token")(tokens)
    if config.distillation_token:
        tokens = LearnedTokens(1, offset=1, name="dist_token")(tokens)
    position = POSITION_EMBEDDINGS[config.position_embedding]
    resize = {"interpolation": config.interpolation or interpolations.DEFAULT} if position is PositionEmbedding else {}
    tokens = position(grid, num_prefix_tokens=config.position_prefix, name="posembed_input", **resize)(tokens, patches)
    if config.num_registers:
        tokens = LearnedTokens(config.num_registers, offset=config.position_prefix, name="registers")(tokens)
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
        mlp=config.mlp,
        layer_scale_init=config.layer_scale_init,
        final_norm=not config.fc_norm,
        name="encoder",
    )(tokens)
    outputs = tokens
    if config.include_top or config.pooling is not None:
        outputs = _pool(config, tokens)
        if config.fc_norm:
            outputs = keras.layers.LayerNormalization(
                epsilon=config.layer_norm_epsilon, name="fc_norm")(outputs)
    if config.include_top:
        if config.representation_size:
            outputs = keras.layers.Dense(config.representation_size, activation="tanh", name="pre_logits")(outputs)
        outputs = keras.layers.Dense(config.classes, kernel_initializer="zeros", name="head")(outputs)
        if config.distillation_head:
            dist = TokenPooling("distillation", name="dist_pooling")(tokens)
            dist = keras.layers.Dense(config.classes, kernel_initializer="zeros", name="head_dist")(dist)
            outputs = keras.layers.Average(name="head_average")([outputs, dist])
        outputs = keras.layers.Activation(
            config.classifier_activation or "linear", dtype="float32", name="predictions"
        )(outputs)
    inputs = keras.utils.get_source_inputs(images) if input_tensor is not None else images
    model = VisionTransformerModel(inputs, outputs, name=config.name)
    model.preprocessing = config.preprocessing or DEFAULT_PREPROCESSING
    return compile_once(model)
