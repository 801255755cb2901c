"""The Vision Transformer builder with the `keras.applications` signature."""

import dataclasses
import numbers

import keras

from keras_vit.architecture import VARIANTS, ViTConfig, build_model, image_shape, variant
from keras_vit.layers.transformer_block import LAYER_NORM_EPSILON
from keras_vit.weights import build_with_weights


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


def _check_architecture(**sizes):
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name}={value!r} must be a positive integer.")


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
    layer_norm_epsilon=None,
    stem=None,
    seed=None,
    remat=False,
    name="vision_transformer",
    class_token=True,
    distillation_token=False,
    distillation_head=None,
    num_registers=0,
    position_embedding="learned",
    layer_scale_init=None,
    mlp="gelu",
    fc_norm=False,
    preprocessing=None,
    interpolation=None,
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
        pooling: `"token"` (class token), `"avg"` (mean of the patch tokens), `"map"`
            (multi-head attention pooling) or None. With `include_top=False`, None returns
            the whole `(batch, prefix + patches, hidden_dim)` token sequence. With
            `include_top=True` it picks the head's input (default: the class token if the
            model has one, else the mean).
        classes: number of classes of the head.
        classifier_activation: activation of the head's output; None returns logits.
        dropout_rate, attention_dropout_rate, drop_path_rate: regularisation.
        representation_size: width of the tanh `pre_logits` layer of pre-training, or None.
        approximate_gelu: tanh-approximate GELU (the original JAX code) if True, exact erf
            GELU (timm, transformers) if False; None means the checkpoint's own, else True.
        layer_norm_epsilon: epsilon of every LayerNorm; None means the checkpoint's own
            (a Hugging Face config's `layer_norm_eps`), else 1e-6.
        stem: optional layer mapping images to a feature map that is patch-embedded instead
            of the pixels (the hybrid architecture).
        seed: seed for the dropout layers.
        remat: recompute each encoder block's activations in the backward pass instead of
            storing them (activation checkpointing: larger batches for about 1/3 more
            compute; same numbers).
        name: model name.
        class_token: prepend the learned class token (False: the class-token-free models
            of the paper's App. D.3, big_vision and SigLIP).
        distillation_token: DeiT's distillation token after the class token.
        distillation_head: a second head on the distillation token, the logits being the
            mean of both heads (DeiT distilled); None: the same as `distillation_token`.
        num_registers: register tokens (DINOv2) after those, without position embedding.
        position_embedding: `"learned"` or the fixed 2-D `"sincos2d"` (big_vision).
        layer_scale_init: initial LayerScale of every residual branch (DeiT III, DINOv2);
            None: no LayerScale.
        mlp: `"gelu"` (the paper's) or `"swiglu"` (DINOv2 g/14).
        fc_norm: the final LayerNorm on the pooled features instead of on the tokens
            (timm's `fc_norm`, e.g. its `global_pool="avg"` models); needs pooling.
        preprocessing: how the inputs are scaled (`model.preprocessing`, read by
            `preprocess_input(x, model)`, `predict` and the exports): a name of
            `keras_vit.preprocessing.PREPROCESSING`; None: the named weights' or the
            checkpoint's, else "vit" ([-1, 1]).
        interpolation: how the position embeddings are resized to another image size, at
            load time and at run time: a name of `keras_vit.interpolation.INTERPOLATIONS`
            ("bilinear": the original code's, "bicubic_antialias": timm's, "bicubic":
            transformers', "bilinear_antialias": big_vision FlexiViT's); None: the
            checkpoint's own library's, else "bilinear".
    """
    _check_architecture(
        patch_size=patch_size, hidden_dim=hidden_dim, depth=depth, num_heads=num_heads, mlp_dim=mlp_dim
    )
    if include_top:
        _validate_activation(classifier_activation)
        if not isinstance(classes, int) or classes < 1:
            raise ValueError(f"classes={classes!r} must be a positive integer.")
    config = ViTConfig(
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
        layer_norm_epsilon=layer_norm_epsilon,
        stem=stem,
        seed=seed,
        remat=remat,
        name=name,
        class_token=class_token,
        distillation_token=distillation_token,
        distillation_head=distillation_token if distillation_head is None else distillation_head,
        num_registers=num_registers,
        position_embedding=position_embedding,
        layer_scale_init=layer_scale_init,
        mlp=mlp,
        fc_norm=fc_norm,
        preprocessing=preprocessing,
        interpolation=interpolation,
    )
    if weights is None:
        config = dataclasses.replace(
            config,
            approximate_gelu=True if approximate_gelu is None else approximate_gelu,
            layer_norm_epsilon=LAYER_NORM_EPSILON if layer_norm_epsilon is None else layer_norm_epsilon,
        )
        shape = image_shape(input_shape, input_tensor, config.stride, need_rgb=False)
        return build_model(config, shape, input_tensor)
    if input_shape is not None or input_tensor is not None:
        image_shape(input_shape, input_tensor, config.stride, need_rgb=True)
    return build_with_weights(config, weights, input_shape, input_tensor)


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
