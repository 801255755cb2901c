"""The Vision Transformer's builder arguments, each declared once.

Every field of `ViTConfig` is declared with `keras_vit.config.fields.option`: its default, meaning,
accepted values and, for those a layer takes, the layer it is relayed to (`to="encoder"`).
`INPUTS` declares the three arguments that are not configuration (weights and input). From
these declarations come the signature and docstring of `VisionTransformer` (`SIGNATURE`,
`arguments_doc`), the validation (`ViTConfig(...)` checks every field, then the combinations)
and the relay into the layers (`config.relayed("encoder")`). A new option is one declaration
here and a parameter of the layer that uses it.

Plain Python, no Keras: the command line reads the accepted values before importing it.
"""

import dataclasses
import inspect
import math
import numbers
from typing import Any, Optional

from keras_vit.config import fields, interpolation
from keras_vit.config.fields import option
from keras_vit.utils.limits import MAX_DEPTH, MAX_DIMENSION
from keras_vit.preprocessing import check_name
from keras_vit.variants import ARCHITECTURE_KEYS, LAYER_NORM_EPSILON

POOLINGS = ("token", "avg", "map")
POSITION_EMBEDDINGS = ("learned", "sincos2d", "rope")
MLPS = ("gelu", "swiglu")
SIZES, DEPTHS = f"[1, {MAX_DIMENSION}]", f"[1, {MAX_DEPTH}]"  # bounded (`keras_vit.utils.limits`)
NORMS = ("layernorm", "rmsnorm")
ROPE_FORMS = ("dinov3", "axial", "mixed")  # the 2-D rotary forms (`keras_vit.layers.rope`)
ROPE_THETA = 100.0  # the rotary period unless a model or its checkpoint says otherwise (DINOv3's, RoPE-ViT axial's)
SINCOS_FORMS = ("big_vision", "mae")  # the sincos2d frequencies (`keras_vit.layers.sincos_position_embedding`)
MAP_HEADS = ("big_vision", "aimv2")  # the MAP heads (`keras_vit.layers.map_head`)
ROPE_INDEXINGS = ("xy", "ij")  # the axial form's grid order (timm's `rope_grid_indexing`)
ENCODER = "encoder"  # `to=` of the options relayed to `keras_vit.layers.Encoder` (and by it to every block)

ARCHITECTURE, HEAD, REGULARISATION, NUMERICS, TOKENS, MODEL = (
    "architecture", "head", "regularisation", "numerics", "tokens and position", "model")


def _epsilon(value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
        raise ValueError(f"layer_norm_epsilon={value!r} must be a positive finite number (e.g. 1e-6).")
    return value


def _preprocessing(value):
    check_name(value)
    return value


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Everything `build_model` needs: the arguments of `VisionTransformer` except the input
    and the weights. `approximate_gelu` / `quick_gelu` / `layer_norm_epsilon` / `num_registers` /
    `interpolation` None mean "the checkpoint's own" until the loader (or the builder, without
    weights) resolves them."""

    patch_size: int = option(16, "side of the square patches in pixels (paper Table 1)", group=ARCHITECTURE,
                             interval=SIZES)
    hidden_dim: int = option(768, "width D of every token", group=ARCHITECTURE, interval=SIZES)
    depth: int = option(12, "number of encoder blocks", group=ARCHITECTURE, interval=DEPTHS)
    num_heads: int = option(12, "attention heads of every block", group=ARCHITECTURE, interval=SIZES)
    mlp_dim: int = option(3072, "hidden width of every block's MLP", group=ARCHITECTURE, interval=SIZES)
    include_top: bool = option(
        True, "add the classification head (`pre_logits` if `representation_size`, then a linear `head`)",
        group=HEAD)
    pooling: Optional[str] = option(
        None, "'token' (class token), 'avg' (mean of the patch tokens), 'map' (multi-head attention pooling) "
        "or None: with include_top=False None returns the whole (batch, prefix + patches, hidden_dim) sequence; "
        "with include_top=True it picks the head's input (default: the class token if any, else the mean)",
        group=HEAD, choices=POOLINGS)
    projection_dim: Optional[int] = option(
        None, "width of a bias-free Dense on the pooled features, before any head (CLIP's image projection: "
        "transformers' `visual_projection`, OpenCLIP's `visual.proj`, the `head` of timm's CLIP towers); applied only "
        "to pooled features (include_top or pooling); None: none", group=HEAD, interval=SIZES)
    projection_bias: bool = option(
        False, "a bias on that projection (EVA-CLIP: timm's `head`, trained with a bias); needs projection_dim",
        group=HEAD)
    unit_features: bool = option(
        False, "scale the pooled features (after any projection) to unit length before the head: a zero-shot head "
        "on an image-text model's normalised image features (`ImageTextModel.classifier`); needs include_top",
        group=HEAD)
    classes: int = option(1000, "number of classes of the head", group=HEAD, interval=SIZES)
    classifier_activation: Any = option(
        "softmax", "activation of the head's output (a Keras activation name or a callable); None returns logits",
        group=HEAD)
    representation_size: Optional[int] = option(
        None, "width of the tanh `pre_logits` layer of pre-training, or None", group=HEAD, interval=SIZES)
    dropout_rate: float = option(0.0, "dropout after the embeddings, attention and MLP", group=REGULARISATION,
                                 interval="[0, 1)", to=ENCODER)
    attention_dropout_rate: float = option(0.0, "dropout of the attention weights", group=REGULARISATION,
                                           interval="[0, 1)", to=ENCODER)
    drop_path_rate: float = option(
        0.0, "stochastic depth of the last block (rising linearly from 0 in the first)", group=REGULARISATION,
        interval="[0, 1)", to=ENCODER)
    patch_drop_rate: float = option(
        0.0, "share of the patch tokens dropped at random per image while training (timm's `patch_drop_rate`; the "
        "class, distillation and register tokens are kept); none at inference", group=REGULARISATION, interval="[0, 1)")
    seed: Optional[int] = option(None, "seed of the dropout layers", group=REGULARISATION, to=ENCODER)
    remat: bool = option(
        False, "recompute each encoder block's activations in the backward pass instead of storing them "
        "(larger batches for about 1/3 more compute; same numbers)", group=REGULARISATION, to=ENCODER)
    approximate_gelu: Optional[bool] = option(
        None, "tanh-approximate GELU (the original JAX code) if True, exact erf GELU (timm, transformers) if "
        "False; None: the checkpoint's own, else True", group=NUMERICS, to=ENCODER)
    layer_norm_epsilon: Optional[float] = option(
        None, "epsilon of every LayerNorm; None: the checkpoint's own (a Hugging Face config's `layer_norm_eps`), "
        "else 1e-6", group=NUMERICS, check=_epsilon, to=ENCODER)
    quick_gelu: Optional[bool] = option(
        None, "quick GELU x * sigmoid(1.702 x) in every MLP instead of GELU (OpenAI CLIP; transformers' "
        "`hidden_act='quick_gelu'`, OpenCLIP's `quick_gelu`, timm's `act_layer='quick_gelu'`; `approximate_gelu` is then "
        "unused); None: the checkpoint's own, else False", group=NUMERICS, to=ENCODER)
    class_token: bool = option(
        True, "prepend the learned class token (False: the class-token-free models of the paper's App. D.3, "
        "big_vision and SigLIP)", group=TOKENS)
    distillation_token: bool = option(False, "DeiT's distillation token after the class token", group=TOKENS)
    distillation_head: Optional[bool] = option(
        None, "a second head on the distillation token, the logits being the mean of both heads (DeiT "
        "distilled); None: the same as `distillation_token`", group=TOKENS)
    num_registers: Optional[int] = option(
        None, "register tokens (DINOv2) after those, without position embedding; None: the checkpoint's own "
        "(DINOv2's `reg4` files: 4), else 0", group=TOKENS, interval=f"[0, {MAX_DIMENSION}]")
    position_embedding: str = option(
        "learned", "'learned', the fixed 2-D 'sincos2d' (big_vision) or DINOv3's 2-D rotary 'rope' of the patch "
        "tokens' queries and keys", group=TOKENS, choices=POSITION_EMBEDDINGS)
    rope_theta: float = option(
        ROPE_THETA, "period of the rotary embeddings' lowest frequency (DINOv3 and Naver's RoPE-ViT axial: 100; the mixed "
        "form's initial frequencies: 10)", group=TOKENS, interval="(0, inf)", to=ENCODER)
    rope_form: str = option(
        "dinov3", "the 2-D rotary form: 'dinov3' (normalised patch centres, pairs (i, i + head_dim/2)), 'axial' "
        "(Naver's RoPE-ViT / timm `RotaryEmbeddingCat`: integer indices, adjacent pairs) or 'mixed' (RoPE-Mixed: "
        "learned frequencies per block and head, adjacent pairs)", group=TOKENS, choices=ROPE_FORMS, to=ENCODER)
    rope_reference_grid: Optional[tuple] = option(
        None, "the axial form's reference patch grid (rows, columns): at another grid the indices are scaled to it "
        "(timm's `ref_feat_shape`, EVA-02); None: unscaled", group=TOKENS, metavar="ROWS,COLUMNS",
        check=fields.numbers_tuple("rope_reference_grid", 2, "the reference grid's rows and columns"))
    rope_shift: Optional[float] = option(
        None, "training-time shift of the rope coordinates by a uniform draw in [-shift, shift] per axis; None: off",
        group=TOKENS, interval="(0, inf)")
    rope_jitter: Optional[float] = option(
        None, "training-time scaling of each rope axis by a log-uniform draw in [1/jitter, jitter]; None: off",
        group=TOKENS, interval="[1, inf)")
    rope_rescale: Optional[float] = option(
        None, "training-time scaling of both rope axes by a log-uniform draw in [1/rescale, rescale] (DINOv3 "
        "trained with 2); None: off", group=TOKENS, interval="[1, inf)")
    # EVA-02 (timm `eva.py`): a learned table beside the rotations, the axial grid row-first, the MLP's inner norm.
    rope_absolute: bool = option(
        False, "add a learned absolute position table (its first row the class token's, timm's Eva `pos_embed`) to the "
        "tokens besides the rotations (EVA-02)", group=TOKENS)
    rope_indexing: str = option(
        "xy", "the axial form's grid order: 'xy' (RoPE-ViT: the first half of the pairs along the columns) or 'ij' "
        "(EVA-02: along the rows; timm's `rope_grid_indexing`)", group=TOKENS, choices=ROPE_INDEXINGS)
    rope_offset: float = option(
        0.0, "the axial form's index offset: the grid indices start at it, before any reference-grid scaling (timm's "
        "`rope_grid_offset`; Perception Encoder: 1)", group=TOKENS, interval="[0, inf)")
    mlp_norm: bool = option(
        False, "a norm of every MLP's hidden features before its output layer (EVA-02's `scale_mlp`)", group=MODEL,
        to=ENCODER)
    attention_norm: bool = option(
        False, "a norm of every attention's joined head outputs before its output projection (EVA-CLIP's sub-LN, timm "
        "Eva's `scale_attn_inner`)", group=MODEL, to=ENCODER)
    interpolation: Optional[str] = option(
        None, "how the position embeddings are resized to another image size, at load time and at run time: a "
        "name of `keras_vit.config.interpolation.INTERPOLATIONS` ('bilinear': the original code's, 'bicubic_antialias': "
        "timm's, 'bicubic': transformers', 'bilinear_antialias': big_vision FlexiViT's); None: the checkpoint's own "
        "library's, else 'bilinear'", group=TOKENS, check=interpolation.check)
    naflex: bool = option(
        False, "NaFlex input (SigLIP 2): instead of images, `{'patches', 'spatial_shapes', 'mask'}` of images at their "
        "own aspect ratio under one patch budget (`keras_vit.naflex_inputs`), the position table resized per image, "
        "the padding masked out of attention and pooling; input_shape's height and width size the table",
        group=TOKENS)
    layer_scale_init: Optional[float] = option(
        None, "initial LayerScale of every residual branch (DeiT III, DINOv2); None: no LayerScale",
        group=MODEL, to=ENCODER)
    key_bias: bool = option(True, "a bias on the attention keys (False: DINOv3, whose key bias is zero)",
                            group=MODEL, to=ENCODER)
    qkv_bias: bool = option(True, "biases on the query, key and value projections (timm's `qkv_bias`)",
                            group=MODEL, to=ENCODER)
    proj_bias: bool = option(True, "a bias on the attention's output projection (timm's `proj_bias`)", group=MODEL,
                             to=ENCODER)
    mlp_bias: bool = option(True, "biases on both layers of every MLP (transformers' `mlp_bias`)", group=MODEL,
                            to=ENCODER)
    qk_norm: bool = option(
        False, "normalise each head's queries and keys (a `norm` over the head's channels, shared by the heads: timm's "
        "`qk_norm`)", group=MODEL, to=ENCODER)
    norm: str = option("layernorm", "every normalisation layer of the encoder and `fc_norm`: 'layernorm' or "
                       "'rmsnorm' (scale only, as torch.nn.RMSNorm)", group=MODEL, choices=NORMS, to=ENCODER)
    mlp: str = option("gelu", "'gelu' (the paper's MLP) or 'swiglu' (DINOv2 g/14)", group=MODEL, choices=MLPS,
                      to=ENCODER)
    fc_norm: bool = option(
        False, "the final LayerNorm on the pooled features instead of on the tokens (timm's `fc_norm`, e.g. its "
        "global_pool='avg' models); needs pooling", group=MODEL)
    # CLIP's image tower (transformers `CLIPVisionModel`, OpenCLIP `VisionTransformer`, timm `*_clip_*`).
    pre_norm: bool = option(
        False, "a `norm` of the embedded tokens before the first block (CLIP: transformers' `pre_layrnorm`, timm's "
        "`norm_pre`, OpenCLIP's `ln_pre`)", group=MODEL)
    patch_bias: bool = option(True, "a bias on the patch embedding (False: CLIP)", group=MODEL)
    stem: Any = option(
        None, "a layer mapping images to the feature map that is patch-embedded instead of the pixels "
        "(the hybrid architecture)", group=MODEL)
    preprocessing: Optional[str] = option(
        None, "how the inputs are scaled (`model.preprocessing`, read by `preprocess_input(x, model)`, `predict` "
        "and the exports): a name of `keras_vit.preprocessing.PREPROCESSING`; None: the named weights' or the "
        "checkpoint's, else 'vit' ([-1, 1])", group=MODEL, check=_preprocessing)
    # AIMv2 (Aimv2VisionModel): the norm of the patch embeddings, MAE's sin-cos frequencies, the probe-query head.
    patch_norm: bool = option(
        False, "a `norm` of the patch embeddings before the position embeddings are added (AIMv2)", group=MODEL)
    sincos_form: str = option(
        "big_vision", "the 'sincos2d' frequencies temperature ** -(i / n) of each axis' n = width / 4: 'big_vision' "
        "(i / (n - 1)) or 'mae' (i / n: MAE's, AIMv2's native-resolution models)", group=TOKENS, choices=SINCOS_FORMS)
    map_heads: Optional[int] = option(
        None, "attention heads of the 'map' pooling head; None: num_heads (Perception Encoder: 8)", group=HEAD,
        interval=SIZES)
    map_head: str = option(
        "big_vision", "the 'map' pooling head: 'big_vision' (a query projection of the probe, then y + MLP(LayerNorm(y)): "
        "SigLIP) or 'aimv2' (the probe is the query itself; no LayerNorm, no MLP)", group=HEAD, choices=MAP_HEADS)
    name: str = option("vision_transformer", "model name", group=MODEL)

    def __post_init__(self):
        fields.validate(self)
        if self.distillation_head is None:
            object.__setattr__(self, "distillation_head", self.distillation_token)
        problem = None
        if self.pooling == "token" and not self.class_token:
            problem = "pooling='token' reads the class token; with class_token=False use 'avg' or 'map'."
        elif self.distillation_token and not self.class_token:
            problem = "distillation_token=True needs the class token before it (class_token=True)."
        elif self.distillation_head and not self.distillation_token:
            problem = "distillation_head=True needs distillation_token=True."
        elif self.fc_norm and self.head_pooling == "map":
            problem = "fc_norm=True normalises the pooled features; the MAP head has its own LayerNorm: use 'avg' or 'token'."
        elif (self.rope_form != "dinov3" or self.rope_reference_grid) and self.position_embedding != "rope":
            problem = "rope_form / rope_reference_grid need position_embedding='rope'."
        elif self.rope_absolute and self.position_embedding != "rope":
            problem = "rope_absolute adds a learned table to the rotary embeddings; use position_embedding='rope' (or 'learned' alone)."
        elif self.rope_indexing != "xy" and (self.position_embedding != "rope" or self.rope_form != "axial"):
            problem = "rope_indexing orders the axial form's grid; use position_embedding='rope', rope_form='axial'."
        elif self.rope_offset and (self.position_embedding != "rope" or self.rope_form != "axial"):
            problem = "rope_offset shifts the axial form's indices; use position_embedding='rope', rope_form='axial'."
        elif self.rope_reference_grid and self.rope_form != "axial":
            problem = "rope_reference_grid scales the axial form's indices; use rope_form='axial' or None."
        elif self.patch_drop_rate and self.position_embedding == "rope":
            problem = "patch_drop_rate with position_embedding='rope' is not supported (the rotations would need the kept patches' coordinates); use 0."
        elif self.distillation_head and self.head_pooling != "token":
            problem = "distillation_head=True averages the class token's head with the distillation token's; use pooling='token'."
        elif self.naflex and (self.class_token or self.position_embedding != "learned" or self.stem is not None
                              or self.num_registers or self.patch_drop_rate):
            problem = ("naflex=True takes patch tokens only, with learned position embeddings: use class_token=False, "
                       "position_embedding='learned', no registers, no stem and patch_drop_rate=0.")
        elif self.sincos_form != "big_vision" and self.position_embedding != "sincos2d":
            problem = "sincos_form chooses the sin-cos frequencies; it needs position_embedding='sincos2d'."
        elif self.unit_features and not self.include_top:
            problem = "unit_features=True scales the features the head reads; it needs include_top=True."
        elif self.projection_bias and not self.projection_dim:
            problem = "projection_bias=True is the bias of the image projection; it needs projection_dim."
        elif self.quick_gelu and self.mlp != "gelu":
            problem = "quick_gelu=True replaces the GELU of mlp='gelu'; the SwiGLU MLP is SiLU-gated: use quick_gelu=False."
        if problem:
            raise ValueError(problem)

    def relayed(self, to):
        """The options declared `to=to`, by name (e.g. the `Encoder`'s)."""
        return fields.relayed(self, to)

    @property
    def stride(self):
        """Input pixels per token along each side: the patch size times the stem's stride."""
        return self.patch_size * (self.stem.stride if self.stem is not None else 1)

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


# The fields whose None means "the checkpoint's own": the value without one.
OWN_DEFAULTS = {"approximate_gelu": True, "quick_gelu": False, "layer_norm_epsilon": LAYER_NORM_EPSILON,
                "num_registers": 0}
# What a checkpoint records that makes another model: a builder given other values refuses it.
RECORDED_ARCHITECTURE = ("rope_theta", "rope_form", "rope_indexing", "rope_reference_grid", "rope_offset", "key_bias", "naflex",
                         "sincos_form")


def resolve_own(config, recorded=None, source="the checkpoint"):
    """`config` with "the checkpoint's own" resolved, the one place it is: each field left None
    takes the value `recorded` (the checkpoint's `options`, ViTConfig field -> value) gives, else
    its `OWN_DEFAULTS` one; a field of `RECORDED_ARCHITECTURE` set otherwise than `recorded` is
    refused in one line naming both values (ValueError)."""
    recorded = {k: v for k, v in (recorded or {}).items() if v is not None}
    for name in RECORDED_ARCHITECTURE:
        if name in recorded and _differ(getattr(config, name), recorded[name]):
            raise ValueError(f"{source} records {name}={recorded[name]!r}; the model has {name}={getattr(config, name)!r} "
                             f"(build it with {name}={recorded[name]!r}, or leave it out).")
    own = {name: recorded.get(name, default) for name, default in
           {**OWN_DEFAULTS, "preprocessing": None, "interpolation": None}.items() if getattr(config, name) is None}
    return dataclasses.replace(config, **own)


def _differ(value, recorded):
    if isinstance(recorded, (tuple, list)):
        return value is None or tuple(value) != tuple(recorded)
    return value != recorded


# The builder arguments that are not configuration: `(name, meaning)`, all defaulting to None.
INPUTS = (
    ("weights", "None (random), a named pretrained checkpoint (`keras_vit.list_weights()`), a Hugging Face "
                "repo id of one, or a path to a checkpoint file or folder"),
    ("input_tensor", "optional tensor to use as the image input"),
    ("input_shape", "(height, width, channels), default (224, 224, 3); height and width must be multiples of "
                    "the patch size, or None for any size (the position embeddings are then resized at run time)"),
)


def _signature():
    """`VisionTransformer(patch_size, ..., mlp_dim, *, include_top, weights, ..., name)`."""
    declared = dataclasses.fields(ViTConfig)
    positional = [inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=f.default)
                  for f in declared if f.name in ARCHITECTURE_KEYS]
    keyword = [inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=f.default)
               for f in declared if f.name not in ARCHITECTURE_KEYS]
    inputs = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None) for name, _ in INPUTS]
    return inspect.Signature(positional + keyword[:1] + inputs + keyword[1:])


SIGNATURE = _signature()


def arguments_doc(skip=()):
    """The `Args:` section of a builder's docstring, from the declarations (less `skip`)."""
    meanings = {f.name: f.metadata["help"] for f in dataclasses.fields(ViTConfig)}
    meanings.update(INPUTS)
    lines = ["Args:"]
    for name in SIGNATURE.parameters:
        if name not in skip:
            lines.append(f"    {name}: {meanings[name]}.")
    return "\n".join(lines)
