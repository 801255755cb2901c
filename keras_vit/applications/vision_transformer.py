"""The Vision Transformer builder with the `keras.applications` signature."""

import keras

from keras_vit import matmul_precision
from keras_vit.applications.configs import VARIANTS, variant
from keras_vit.layers import ClassToken, Encoder, PatchEmbedding, PositionEmbedding, TokenPooling
from keras_vit.layers.pooling import POOLINGS

DEFAULT_SIZE = 224


def _validate_activation(classifier_activation):
    if classifier_activation is None or callable(classifier_activation):
        return
    try:
        keras.activations.get(classifier_activation)
    except (ValueError, TypeError):
        raise ValueError(
            f"Unknown classifier_activation={classifier_activation!r}; expected None (logits), "
            "a Keras activation name such as 'softmax' or 'sigmoid', or a callable."
        ) from None


def _image_shape(input_shape, input_tensor, patch_size, need_rgb):
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
        if size is not None and (size < patch_size or size % patch_size):
            raise ValueError(
                f"input_shape={input_shape}: height and width must be multiples of the patch "
                f"size {patch_size} (or None for any size), got {size}."
            )
    return input_shape


def VisionTransformer(
    patch_size=16,
    hidden_dim=768,
    depth=12,
    num_heads=12,
    mlp_dim=3072,
    *,
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classes=1000,
    classifier_activation="softmax",
    dropout_rate=0.0,
    attention_dropout_rate=0.0,
    drop_path_rate=0.0,
    representation_size=None,
    approximate_gelu=None,
    stem=None,
    seed=None,
    remat=False,
    name="vision_transformer",
):
    """Builds a Vision Transformer (Dosovitskiy et al., 2021) as a functional `keras.Model`.

    Args:
        patch_size, hidden_dim, depth, num_heads, mlp_dim: the architecture (paper Table 1).
        include_top: add the classification head (`pre_logits` if `representation_size`,
            then a linear `head`).
        weights: None (random), a named pretrained checkpoint, or a path to a checkpoint file.
        input_tensor: optional tensor to use as the image input.
        input_shape: `(height, width, channels)`, default `(224, 224, 3)`; height and width
            must be multiples of the patch size, or None for any size (the position
            embeddings are then interpolated at run time).
        pooling: `"token"` (class token), `"avg"` (mean of the patch tokens) or None. With
            `include_top=False`, None returns the whole `(batch, 1 + patches, hidden_dim)`
            token sequence. With `include_top=True` it picks the head's input (default token).
        classes: number of classes of the head.
        classifier_activation: activation of the head's output; None returns logits.
        dropout_rate, attention_dropout_rate, drop_path_rate: regularisation.
        representation_size: width of the tanh `pre_logits` layer of pre-training, or None.
        approximate_gelu: tanh-approximate GELU (the original JAX code) if True, exact erf
            GELU (timm, transformers) if False; None means the checkpoint's own, else True.
        stem: optional layer mapping images to a feature map that is patch-embedded instead
            of the pixels (the hybrid architecture).
        seed: seed for the dropout layers.
        remat: recompute each encoder block's activations in the backward pass instead of
            storing them (activation checkpointing: larger batches for about 1/3 more
            compute; same numbers).
        name: model name.
    """
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(f"Unknown pooling={pooling!r}; expected one of {POOLINGS} or None.")
    if include_top:
        _validate_activation(classifier_activation)
        if not isinstance(classes, int) or classes < 1:
            raise ValueError(f"classes={classes!r} must be a positive integer.")
    config = dict(
        patch_size=patch_size,
        hidden_dim=hidden_dim,
        depth=depth,
        num_heads=num_heads,
        mlp_dim=mlp_dim,
        include_top=include_top,
        pooling=pooling,
        classes=classes,
        classifier_activation=classifier_activation,
        dropout_rate=dropout_rate,
        attention_dropout_rate=attention_dropout_rate,
        drop_path_rate=drop_path_rate,
        representation_size=representation_size,
        approximate_gelu=approximate_gelu,
        stem=stem,
        seed=seed,
        remat=remat,
        name=name,
    )
    stride = patch_size * (stem.stride if stem is not None else 1)
    if weights is None:
        config["approximate_gelu"] = True if approximate_gelu is None else approximate_gelu
        shape = _image_shape(input_shape, input_tensor, stride, need_rgb=False)
        return build_model(config, shape, input_tensor)
    if input_shape is not None or input_tensor is not None:
        _image_shape(input_shape, input_tensor, stride, need_rgb=True)
    from keras_vit.weights import build_with_weights

    return build_with_weights(config, weights, input_shape, input_tensor)


def build_model(config, input_shape, input_tensor=None):
    """Builds the functional model for a resolved `config` (see `VisionTransformer`).

    An optional `config["default_size"]` `(height, width)` (default 224 x 224) sizes the
    position-embedding table where `input_shape` leaves the image size open (None).
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
    features = images if config["stem"] is None else config["stem"](images)
    patches = PatchEmbedding(config["patch_size"], config["hidden_dim"], name="embedding")(features)
    stride = config["patch_size"] * (config["stem"].stride if config["stem"] is not None else 1)
    default_size = config.get("default_size", (DEFAULT_SIZE, DEFAULT_SIZE))
    grid = tuple((s or d) // stride for s, d in zip(input_shape[:2], default_size))
    tokens = keras.layers.Reshape((-1, config["hidden_dim"]), name="flatten")(patches)
    tokens = ClassToken(name="class_token")(tokens)
    tokens = PositionEmbedding(grid, name="posembed_input")(tokens, patches)
    tokens = keras.layers.Dropout(config["dropout_rate"], seed=config["seed"], name="dropout", dtype="float32")(tokens)
    tokens = Encoder(
        config["depth"],
        config["num_heads"],
        config["mlp_dim"],
        dropout_rate=config["dropout_rate"],
        attention_dropout_rate=config["attention_dropout_rate"],
        drop_path_rate=config["drop_path_rate"],
        approximate_gelu=config["approximate_gelu"],
        seed=config["seed"],
        remat=config.get("remat", False),
        name="encoder",
    )(tokens)
    outputs = tokens
    if config["include_top"] or config["pooling"] is not None:
        outputs = TokenPooling(config["pooling"] or "token", name="pooling")(tokens)
    if config["include_top"]:
        if config["representation_size"]:
            outputs = keras.layers.Dense(config["representation_size"], activation="tanh", name="pre_logits")(outputs)
        outputs = keras.layers.Dense(config["classes"], kernel_initializer="zeros", name="head")(outputs)
        outputs = keras.layers.Activation(
            config["classifier_activation"] or "linear", dtype="float32", name="predictions"
        )(outputs)
    inputs = keras.utils.get_source_inputs(images) if input_tensor is not None else images
    return keras.Model(inputs, outputs, name=config["name"])


def _variant_builder(variant_name, model_name):
    def builder(
        include_top=True,
        weights=None,
        input_tensor=None,
        input_shape=None,
        pooling=None,
        classes=1000,
        classifier_activation="softmax",
        **kwargs,
    ):
        return VisionTransformer(
            **variant(variant_name),
            include_top=include_top,
            weights=weights,
            input_tensor=input_tensor,
            input_shape=input_shape,
            pooling=pooling,
            classes=classes,
            classifier_activation=classifier_activation,
            name=kwargs.pop("name", model_name),
            **kwargs,
        )

    arch = VARIANTS[variant_name]
    builder.__name__ = builder.__qualname__ = variant_name
    builder.__doc__ = (
        f"ViT-{variant_name[3:-2]}/{arch['patch_size']}: width {arch['hidden_dim']}, depth "
        f"{arch['depth']}, {arch['num_heads']} heads, MLP {arch['mlp_dim']}.\n\n"
        "Takes the arguments of `VisionTransformer` except the architecture."
    )
    return builder


ViTTi16 = _variant_builder("ViTTi16", "vit_ti16")
ViTS16 = _variant_builder("ViTS16", "vit_s16")
ViTS32 = _variant_builder("ViTS32", "vit_s32")
ViTB16 = _variant_builder("ViTB16", "vit_b16")
ViTB32 = _variant_builder("ViTB32", "vit_b32")
ViTL16 = _variant_builder("ViTL16", "vit_l16")
ViTL32 = _variant_builder("ViTL32", "vit_l32")
ViTH14 = _variant_builder("ViTH14", "vit_h14")
