"""The Vision Transformer builder, `named_builder` (the one generator of the named builders:
variants, families, hybrid) and the paper's variants, with the `keras.applications` signature.

As `keras.applications`, a named builder defaults to its published ImageNet weights
(`default_weights`); `VisionTransformer` itself to None (random weights)."""

import dataclasses
import inspect
import textwrap

import keras

from keras_vit.model.architecture import build_model, image_shape
from keras_vit.config.vit_config import INPUTS, SIGNATURE, ViTConfig, arguments_doc
from keras_vit.variants import LAYER_NORM_EPSILON, VARIANTS
from keras_vit.weights import build_with_weights, registry


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


def VisionTransformer(*args, **kwargs):
    config_args = SIGNATURE.bind(*args, **kwargs).arguments
    weights, input_tensor, input_shape = (config_args.pop(name, None) for name, _ in INPUTS)
    config = ViTConfig(**config_args)
    if config.include_top:
        _validate_activation(config.classifier_activation)
    if weights is None:
        config = dataclasses.replace(
            config,
            approximate_gelu=True if config.approximate_gelu is None else config.approximate_gelu,
            quick_gelu=bool(config.quick_gelu),
            layer_norm_epsilon=LAYER_NORM_EPSILON if config.layer_norm_epsilon is None else config.layer_norm_epsilon,
            num_registers=config.num_registers or 0,
        )
        shape = image_shape(input_shape, input_tensor, config.stride, need_rgb=False)
        return build_model(config, shape, input_tensor)
    if input_shape is not None or input_tensor is not None:
        image_shape(input_shape, input_tensor, config.stride, need_rgb=True)
    return build_with_weights(config, weights, input_shape, input_tensor)


VisionTransformer.__signature__ = SIGNATURE
VisionTransformer.__doc__ = (
    "Builds a Vision Transformer (Dosovitskiy et al., 2021) as a functional `keras.Model`.\n\n"
    + textwrap.indent(arguments_doc(), "    ")
)


def default_weights(model):
    """The `weights` the named builder `model` defaults to: its ImageNet-1k classifier. That is
    "imagenet" where the registry names one (the entry `keras-vit list-weights` marks
    weights='imagenet'), else the name of its first ImageNet-1k (1000-class) entry (RoPE-ViT,
    EVA-02); None (random weights) for the models published without an ImageNet-1k classifier:
    ViT-H/14 (ImageNet-21k files only) and the self-supervised and image-text towers (DINOv2,
    DINOv3, SigLIP, AIMv2, CLIP), whose weights are named explicitly (`list_weights(model)`)."""
    try:
        registry.find("imagenet", model)
    except ValueError:
        return next((e.name for e in registry.entries(model) if e.classes == 1000), None)
    return "imagenet"


# The arguments of every named builder, in the order of `keras.applications`.
APPLICATION_ARGS = ("include_top", "weights", "input_tensor", "input_shape", "pooling", "classes",
                    "classifier_activation")


def named_builder(name, defaults, doc, module, input_size=None, prepare=None):
    """The builder `name` of the `VisionTransformer` with `defaults` (architecture, options,
    model name) for the `keras.applications` arguments it does not get; any other
    `VisionTransformer` argument overrides the defaults; `weights` defaults to
    `default_weights(name)`. Without weights and input, the input is `input_size` square (None:
    224). `prepare(args)` completes the arguments (the hybrid's stem); `doc` and `module` are the
    builder's docstring and module."""
    own = {parameter.name: parameter.default for parameter in SIGNATURE.parameters.values()}
    defaults = {"weights": default_weights(name), **defaults}
    weights_doc = (f"`weights` defaults to {defaults['weights']!r}, its published ImageNet-1k classifier "
                   "(downloaded once into the cache); weights=None builds it with random weights."
                   if defaults["weights"] else
                   f"`weights` defaults to None (random weights): {name} has no ImageNet-1k classifier; its "
                   f"published weights are named explicitly (keras_vit.list_weights({name!r})).")
    signature = inspect.Signature(
        [inspect.Parameter(arg, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=defaults.get(arg, own[arg]))
         for arg in APPLICATION_ARGS]
        + [inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]
    )

    def builder(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        given = bound.arguments
        args = {**defaults, **{arg: given[arg] for arg in APPLICATION_ARGS}, **given["kwargs"]}
        if input_size and args["input_shape"] is None and args["input_tensor"] is None and args["weights"] is None:
            args["input_shape"] = (input_size, input_size, 3)
        return VisionTransformer(**(prepare(args) if prepare else args))

    builder.__name__ = builder.__qualname__ = name
    builder.__signature__, builder.__module__ = signature, module
    builder.__doc__ = f"{inspect.cleandoc(doc)}\n\n{weights_doc}"
    return builder


def _variant(variant_name, model_name):
    arch = VARIANTS[variant_name]
    doc = (f"ViT-{variant_name[3:-2]}/{arch['patch_size']}: width {arch['hidden_dim']}, depth {arch['depth']}, "
           f"{arch['num_heads']} heads, MLP {arch['mlp_dim']}.\n\n"
           "Takes the arguments of `VisionTransformer` except the architecture.")
    return named_builder(variant_name, {**arch, "name": model_name}, doc, __name__)


ViTTi16 = _variant("ViTTi16", "vit_ti16")
ViTS16 = _variant("ViTS16", "vit_s16")
ViTS32 = _variant("ViTS32", "vit_s32")
ViTB16 = _variant("ViTB16", "vit_b16")
ViTB32 = _variant("ViTB32", "vit_b32")
ViTL16 = _variant("ViTL16", "vit_l16")
ViTL32 = _variant("ViTL32", "vit_l32")
ViTH14 = _variant("ViTH14", "vit_h14")
