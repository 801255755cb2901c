"""The functional Vision Transformer built from its configuration.

`VARIANTS` (from `keras_vit.variants`) are the named architectures; `ViTConfig` (from
`keras_vit.config.vit_config`, where every builder argument is declared) is the typed, frozen
configuration shared by the builders (`keras_vit.applications`) and the weights loader
(`keras_vit.weights`), which both build through `build_model`. Nothing here imports
`applications` or `weights`.
"""

import math

import keras

from keras_vit.config import interpolation as interpolations
from keras_vit.utils import limits, matmul_precision
from keras_vit.model.vision_transformer_model import VisionTransformerModel
from keras_vit.utils.torch_compile import compile_once
from keras_vit.layers import ClassToken, Encoder, PatchEmbedding, PositionEmbedding, TokenPooling
from keras_vit.layers.learned_tokens import LearnedTokens
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.naflex import NaFlexPatchEmbedding, NaFlexPositionEmbedding
from keras_vit.layers.norms import normalization
from keras_vit.layers.patch_dropout import PatchDropout
from keras_vit.layers.rope import RopePositionEmbedding
from keras_vit.layers.sincos_position_embedding import SinCosPositionEmbedding
from keras_vit.config.vit_config import ENCODER, ViTConfig  # noqa: F401  (part of this module's interface)
from keras_vit.preprocessing import DEFAULT as DEFAULT_PREPROCESSING
from keras_vit.variants import ARCHITECTURE_KEYS, VARIANTS, variant  # noqa: F401  (part of this module's interface)

DEFAULT_SIZE = 224
# The layer of each `position_embedding` choice (`vit_config.POSITION_EMBEDDINGS`).
POSITION_EMBEDDING_LAYERS = {"learned": PositionEmbedding, "sincos2d": SinCosPositionEmbedding,
                             "rope": RopePositionEmbedding}

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


def _pool(config, tokens, valid=None):
    """The `(batch, hidden_dim)` features the head reads (`config.head_pooling`), of the tokens
    `valid` marks (NaFlex) or all."""
    masked = {} if valid is None else {"valid": valid}
    if config.head_pooling == "map":
        return MAPHead(
            config.map_heads or config.num_heads,
            config.mlp_dim,
            approximate_gelu=config.approximate_gelu,
            layer_norm_epsilon=config.layer_norm_epsilon,
            form=config.map_head,
            name="map_head",
        )(tokens, **masked)
    return TokenPooling(config.head_pooling, config.num_prefix_tokens, name="pooling")(tokens, **masked)


def _patch_norm(config, tokens):
    """`tokens` normalised by the `norm` of `patch_norm=True` (AIMv2), else as they are."""
    return normalization(config.norm, config.layer_norm_epsilon, "embedding_norm")(tokens) if config.patch_norm else tokens


def _naflex_tokens(config, input_shape, grid):
    """The NaFlex inputs (`keras_vit.layers.naflex`) and their position-embedded tokens."""
    p, channels = config.patch_size, input_shape[-1]
    inputs = {
        "patches": keras.Input(shape=(None, p * p * channels), name="patches"),
        "spatial_shapes": keras.Input(shape=(2,), dtype="int32", name="spatial_shapes"),
        "mask": keras.Input(shape=(None,), dtype="int32", name="mask"),
    }
    embedding = NaFlexPatchEmbedding(p, config.hidden_dim, channels, name="embedding")
    tokens = _patch_norm(config, embedding(inputs["patches"], inputs["mask"]))
    tokens = NaFlexPositionEmbedding(grid, name="posembed_input")(tokens, inputs["spatial_shapes"])
    return inputs, tokens


def build_model(config, input_shape, input_tensor=None, default_size=(DEFAULT_SIZE, DEFAULT_SIZE)):
    """The functional model of a resolved `ViTConfig` for a validated `input_shape`.

    `default_size` `(height, width)` sizes the position-embedding table where `input_shape`
    leaves the image size open (None); the loader passes the checkpoint's resolution.
    A float32 model makes the backend compute float32 products exactly (no TF32; see
    `keras_vit.utils.matmul_precision`).
    """
    grid = tuple((s or d) // config.stride for s, d in zip(input_shape[:2], default_size))
    limits.check_model_size(
        f"model {config.name!r}", width=config.hidden_dim, depth=config.depth, mlp_dim=config.mlp_dim,
        tokens=grid[0] * grid[1] + config.num_prefix_tokens, classes=config.classes if config.include_top else 0,
        pixels=math.prod(s or d for s, d in zip(input_shape[:2], default_size)),
    )
    matmul_precision.exact_float32_for(keras.config.dtype_policy())
    grid = tuple((s or d) // config.stride for s, d in zip(input_shape[:2], default_size))
    if config.naflex:
        return _naflex_model(config, input_shape, grid)
    if input_tensor is None:
        images = keras.Input(shape=input_shape, name="images")
    elif keras.backend.is_keras_tensor(input_tensor):
        images = input_tensor
    else:
        images = keras.Input(tensor=input_tensor, shape=input_shape, name="images")
    features = images if config.stem is None else config.stem(images)
    patches = PatchEmbedding(config.patch_size, config.hidden_dim, use_bias=config.patch_bias, name="embedding")(features)
    tokens = _patch_norm(config, keras.layers.Reshape((-1, config.hidden_dim), name="flatten")(patches))
    if config.class_token:
        tokens = ClassToken(name="class_token")(tokens)
    if config.distillation_token:
        tokens = LearnedTokens(1, offset=1, name="dist_token")(tokens)
    position = POSITION_EMBEDDING_LAYERS[config.position_embedding]
    rope = {}
    if config.position_embedding == "rope":  # the encoder rotates queries and keys by the patches' coordinates
        rope["rope"] = position(grid, num_prefix_tokens=config.position_prefix, shift=config.rope_shift,
                                jitter=config.rope_jitter, rescale=config.rope_rescale, seed=config.seed,
                                form=config.rope_form, reference_grid=config.rope_reference_grid,
                                indexing=config.rope_indexing, index_offset=config.rope_offset,
                                name="rope_input" if config.rope_absolute else "posembed_input")(tokens, patches)
        position = PositionEmbedding if config.rope_absolute else None  # EVA-02: a learned table as well
    if position is not None:
        resize = ({"interpolation": config.interpolation or interpolations.DEFAULT} if position is PositionEmbedding
                  else {"form": config.sincos_form})
        tokens = position(grid, num_prefix_tokens=config.position_prefix, name="posembed_input", **resize)(tokens, patches)
    if config.num_registers:
        tokens = LearnedTokens(config.num_registers, offset=config.position_prefix, name="registers")(tokens)
    if config.patch_drop_rate:
        tokens = PatchDropout(config.patch_drop_rate, config.num_prefix_tokens, seed=config.seed,
                              name="patch_dropout")(tokens)
    inputs = keras.utils.get_source_inputs(images) if input_tensor is not None else images
    return _finish(config, inputs, tokens, rope)


def _naflex_model(config, input_shape, grid):
    inputs, tokens = _naflex_tokens(config, input_shape, grid)
    return _finish(config, inputs, tokens, {"valid": inputs["mask"]})


def _finish(config, inputs, tokens, encoder_inputs):
    """The model from the embedded `tokens` on: the norm before the blocks (`pre_norm`), encoder
    (given `encoder_inputs`: rope coordinates or the NaFlex mask), pooling, projection and head."""
    tokens = keras.layers.Dropout(config.dropout_rate, seed=config.seed, name="dropout", dtype="float32")(tokens)
    if config.pre_norm:
        tokens = normalization(config.norm, config.layer_norm_epsilon, "pre_norm")(tokens)
    tokens = Encoder(
        config.depth, config.num_heads, config.mlp_dim, **config.relayed(ENCODER), final_norm=not config.fc_norm,
        name="encoder",
    )(tokens, **encoder_inputs)
    outputs = tokens
    if config.include_top or config.pooling is not None:
        outputs = _pool(config, tokens, encoder_inputs.get("valid"))
        if config.fc_norm:
            outputs = normalization(config.norm, config.layer_norm_epsilon, "fc_norm")(outputs)
        if config.projection_dim:
            outputs = keras.layers.Dense(config.projection_dim, use_bias=config.projection_bias,
                                         name="projection")(outputs)
    if config.include_top:
        if config.unit_features:
            outputs = keras.layers.UnitNormalization(name="unit_features")(outputs)
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
    model = VisionTransformerModel(inputs, outputs, name=config.name)
    model.preprocessing = config.preprocessing or DEFAULT_PREPROCESSING
    return compile_once(model)
