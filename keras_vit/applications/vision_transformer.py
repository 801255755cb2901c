"""The Vision Transformer builder, `named_builder` (the one generator of the named builders:
variants, families, hybrid) and the paper's variants, with the `keras.applications` signature.

As `keras.applications`, a named builder defaults to its published ImageNet weights
(`default_weights`); `VisionTransformer` itself to None (random weights)."""

import inspect
import textwrap

import keras

from keras_vit.model.architecture import build_model, image_shape
from keras_vit.config.vit_config import INPUTS, SIGNATURE, ViTConfig, arguments_doc, resolve_own
from keras_vit.variants import VARIANTS
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
        config = resolve_own(config)
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


def weights_doc(model):
    """The docstring paragraph naming the named weights of the model `model` (its family file's entries)."""
    names = [entry.name for entry in registry.entries(model)]
    if not names:
        return "No named weights: `weights=` takes a checkpoint path."
    return "Named weights (`keras_vit.list_weights(%r)`): %s." % (model, ", ".join(names))


def _variant(variant_name):
    arch = VARIANTS[variant_name]
    doc = (f"ViT-{variant_name[3:-2]}/{arch['patch_size']}: width {arch['hidden_dim']}, depth {arch['depth']}, "
           f"{arch['num_heads']} heads, MLP {arch['mlp_dim']}.\n\n{weights_doc(variant_name)}\n\n"
           "Takes the arguments of `VisionTransformer` except the architecture.")
    return named_builder(variant_name, {**arch, "name": "vit_" + variant_name[3:].lower()}, doc, __name__)


# The paper's variants (`families.vit.MODELS`): ViTTi16, ViTS16, ViTS32, ViTB16, ViTB32, ViTL16, ViTL32, ViTH14.
globals().update({name: _variant(name) for name in VARIANTS})
