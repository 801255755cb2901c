"""EoMT, *Your ViT is Secretly an Image Segmentation Model* (Kerssies et al., CVPR 2025), on a
keras_vit backbone, as transformers' `EomtForUniversalSegmentation` runs it at inference.

The backbone's first `depth - num_blocks` blocks run on its tokens (class, registers, patches);
then `num_queries` learned queries are put before them for the last `num_blocks` blocks. The final
LayerNorm of the backbone, then the head (`EoMTHead`), read the tokens before each of those blocks
that masks its attention, and at the end: class logits `(batch, queries, classes + 1)` (the last: "no object") from the
queries, mask logits `(batch, queries, 4h, 4w)` (two upscaling blocks) as the dot product of the
queries' MLP with the upscaled patch tokens. Before each of the last blocks whose masked attention
is on (transformers' `attn_mask_probs` 1), the queries attend only to the patches where that
block's mask logits, resized to the patch grid, are positive (and to every query, class and
register token); a block whose masked attention is off keeps the last mask computed (None before
the first), as transformers does. For training, `eomt_training_model` adds EoMT's mask annealing
(`EoMTMaskAnnealing`: each query's mask dropped at random, more and more often, block after block,
until no block masks) and the predictions made before each block, for the loss
(`keras_vit.dense.eomt_loss`).
"""

import numbers

import keras
import numpy as np
from keras import ops

from keras_vit.model.vision_transformer_model import VisionTransformerModel
from keras_vit.inspect.model_parts import embedding_layer, encoder_inputs, encoder_layer, is_naflex, prefix_tokens
from keras_vit.layers.learned_tokens import LearnedTokens
from keras_vit.weights.building import assign
from keras_vit.weights.variables import EOMT_TABLE

OUTPUTS = ("class_queries_logits", "masks_queries_logits")  # transformers' names of the two outputs
ANNEALING_POWER = 0.9  # the EoMT repository's `poly_power` of the mask annealing
MASK_MLP_LAYERS = 3
LAYER_NORM_2D_EPSILON = 1e-6  # transformers' EomtLayerNorm2d, whatever the blocks' epsilon


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTHead(keras.layers.Layer):
    """transformers' `EomtForUniversalSegmentation.predict`: `layer(tokens, patch_grid)` with the
    normalised `(batch, queries + prefix + h*w, width)` tokens and the patch embedding's
    `(batch, h, w, width)` output (for its shape) -> `(mask_logits (batch, queries, 2^u h, 2^u w),
    class_logits (batch, queries, num_classes + 1))`.

    `class_head`: Linear. `mask_head`: three Linear layers with GELU between. `upscale_{j}`
    (`num_upscale_blocks` of them, `EomtScaleLayer`): a 2x2 stride-2 transposed convolution, GELU,
    a 3x3 depthwise convolution without bias and a LayerNorm over the channels. GELU:
    `approximate_gelu` (tanh) or exact, as the backbone's. `masked_attention`: per block that sees
    the queries, whether it attends through the masks predicted before it (`eomt_model` builds the
    blocks so; the exporter reads it)."""

    def __init__(self, num_queries, num_prefix_tokens, num_classes, num_upscale_blocks=2, approximate_gelu=False,
                 masked_attention=(True,), **kwargs):
        super().__init__(**kwargs)
        self.masked_attention = tuple(bool(m) for m in masked_attention)
        self.num_queries = int(num_queries)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.num_classes = int(num_classes)
        self.num_upscale_blocks = int(num_upscale_blocks)
        self.approximate_gelu = bool(approximate_gelu)

    def build(self, tokens_shape, patch_grid_shape=None):
        width = tokens_shape[-1]
        policy = self.dtype_policy
        self.class_head = keras.layers.Dense(self.num_classes + 1, name="class_head", dtype=policy)
        self.mask_head = [keras.layers.Dense(width, name=f"mask_head_{j}", dtype=policy) for j in range(MASK_MLP_LAYERS)]
        self.upscale = [
            (keras.layers.Conv2DTranspose(width, 2, strides=2, name=f"upscale_{j}_conv_transpose", dtype=policy),
             keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False, name=f"upscale_{j}_depthwise", dtype=policy),
             keras.layers.LayerNormalization(epsilon=LAYER_NORM_2D_EPSILON, name=f"upscale_{j}_norm", dtype=policy))
            for j in range(self.num_upscale_blocks)
        ]
        vector, grid = (None, None, width), (None, None, None, width)
        for layer in (self.class_head, *self.mask_head):
            layer.build(vector)
        for layers in self.upscale:
            for layer in layers:
                layer.build(grid)

    def _gelu(self, x):
        return ops.gelu(x, approximate=self.approximate_gelu)

    def call(self, tokens, patch_grid):
        queries = tokens[:, : self.num_queries]
        classes = self.class_head(queries)
        for j, dense in enumerate(self.mask_head):
            queries = dense(queries) if j == MASK_MLP_LAYERS - 1 else self._gelu(dense(queries))
        shape = ops.shape(patch_grid)
        patches = ops.reshape(tokens[:, self.num_queries + self.num_prefix_tokens:],
                              (-1, shape[1], shape[2], ops.shape(tokens)[-1]))
        for conv_transpose, depthwise, norm in self.upscale:
            patches = norm(depthwise(self._gelu(conv_transpose(patches))))
        return ops.einsum("bqc,bhwc->bqhw", queries, patches), classes

    def compute_output_shape(self, tokens_shape, patch_grid_shape):
        scale = 2**self.num_upscale_blocks
        side = [None if s is None else s * scale for s in patch_grid_shape[1:3]]
        return (tokens_shape[0], self.num_queries, *side), (tokens_shape[0], self.num_queries, self.num_classes + 1)

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries, "num_prefix_tokens": self.num_prefix_tokens,
                "num_classes": self.num_classes, "num_upscale_blocks": self.num_upscale_blocks,
                "approximate_gelu": self.approximate_gelu, "masked_attention": self.masked_attention}


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTAttentionMask(keras.layers.Layer):
    """`layer(mask_logits, patch_grid)` -> the boolean `(batch, n, n)` pairs a block attends over
    (`n = queries + prefix + h*w`): everything, except that query `q` sees patch `p` only where its
    mask logits, resized to the `h x w` patch grid, are positive. The masks are `scale` times the grid
    (an integer), and torch's bilinear `interpolate` to the grid (half-pixel, not antialiased) samples
    the centre of each `scale x scale` block: the mean of its one or two middle rows and columns."""

    def __init__(self, num_queries, num_prefix_tokens, scale=4, **kwargs):
        super().__init__(**kwargs)
        self.num_queries = int(num_queries)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.scale = int(scale)

    def call(self, mask_logits, patch_grid):
        shape, s = ops.shape(patch_grid), self.scale
        batch, patches = ops.shape(mask_logits)[0], shape[1] * shape[2]
        blocks = ops.reshape(ops.cast(mask_logits, "float32"), (batch, self.num_queries, shape[1], s, shape[2], s))
        middle = slice((s - 1) // 2, s // 2 + 1)
        logits = ops.mean(blocks[:, :, :, middle, :, middle], axis=(3, 5))
        seen = ops.reshape(logits > 0, (batch, self.num_queries, patches))
        leading = self.num_queries + self.num_prefix_tokens
        tokens = leading + patches
        queries = ops.concatenate([ops.ones((batch, self.num_queries, leading), "bool"), seen], axis=-1)
        return ops.concatenate([queries, ops.ones((batch, tokens - self.num_queries, tokens), "bool")], axis=1)

    def compute_output_shape(self, mask_logits_shape, patch_grid_shape):
        rows, cols = patch_grid_shape[1:3]
        tokens = None if rows is None or cols is None else self.num_queries + self.num_prefix_tokens + rows * cols
        return (mask_logits_shape[0], tokens, tokens)

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries, "num_prefix_tokens": self.num_prefix_tokens,
                "scale": self.scale}


@keras.saving.register_keras_serializable(package="keras_vit")
class EoMTMaskAnnealing(keras.layers.Layer):
    """EoMT's mask annealing of one block: `layer(valid)` with `EoMTAttentionMask`'s `(batch, n, n)`
    pairs. The probability of keeping the masks, `(1 - (step - start) / (end - start)) ** power`
    clipped to [0, 1] (the EoMT repository's `mask_annealing`), falls from 1 at `start` to 0 at
    `end`; `step` counts the calls in training (the fit steps; saved with the model, so a resumed run
    goes on where it stopped). In training each query's mask is dropped (it sees every patch) with the
    probability 1 - that, as transformers' `_disable_attention_mask`; at inference the masks are kept
    while it is above 0 and dropped after (transformers drops at random there too)."""

    def __init__(self, num_queries, start, end, power=ANNEALING_POWER, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.num_queries, self.start, self.end = int(num_queries), int(start), int(end)
        self.power, self.seed = float(power), seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.step = self.add_weight(name="step", shape=(), initializer="zeros", trainable=False, autocast=False)

    def probability(self):
        """The probability that a query's mask is kept at the current step."""
        progress = (self.step - float(self.start)) / float(max(self.end - self.start, 1))
        return ops.power(1.0 - ops.clip(progress, 0.0, 1.0), self.power)

    def call(self, valid, training=False):
        keep, batch = self.probability(), ops.shape(valid)[0]
        if training:
            dropped = keras.random.uniform((batch, self.num_queries), seed=self.seed_generator) >= keep
            self.step.assign_add(1.0)
        else:
            dropped = ops.broadcast_to(keep <= 0.0, (batch, self.num_queries))
        queries = ops.logical_or(valid[:, : self.num_queries], dropped[:, :, None])
        return ops.concatenate([queries, valid[:, self.num_queries:]], axis=1)

    def compute_output_shape(self, valid_shape):
        return valid_shape

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries, "start": self.start, "end": self.end,
                "power": self.power, "seed": self.seed}


def annealing_steps(total_steps, num_blocks):
    """`[(start, end)]` of each query block's mask annealing over a run of `total_steps`: the run in
    `num_blocks + 2` equal parts, block i annealed over part i + 1, as the EoMT repository's
    configurations (COCO, 4 blocks, 88692 steps: 14782-29564, 29564-44346, ..., 59128-73910)."""
    part = total_steps / (num_blocks + 2)
    return [(round((i + 1) * part), round((i + 2) * part)) for i in range(num_blocks)]


def _count(value, name, low=1):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < low:
        raise ValueError(f"{name}={value!r}: expected a whole number >= {low}.")
    return int(value)


def _masked(masked_attention, num_blocks):
    if isinstance(masked_attention, (bool, np.bool_)):
        return (bool(masked_attention),) * num_blocks
    if (not isinstance(masked_attention, (list, tuple)) or len(masked_attention) != num_blocks
            or not all(isinstance(m, (bool, np.bool_)) for m in masked_attention)):
        raise ValueError(f"masked_attention={masked_attention!r}: expected True, False or {num_blocks} of them "
                         "(one per block that sees the queries).")
    return tuple(bool(m) for m in masked_attention)


def eomt_model(backbone, num_classes, num_queries=100, num_blocks=4, num_upscale_blocks=2, masked_attention=True,
               annealing=None, name=None):
    """The EoMT segmentation model on `backbone` (a keras_vit ViT with its final LayerNorm on the
    tokens and a fixed or open input size; its layers and weights are shared, not copied).

    Args:
        backbone: e.g. `keras_vit.DINOv2L14(input_shape=(640, 640, 3), weights=...)`.
        num_classes: classes of the class head (it predicts one more: "no object").
        num_queries: learned queries, one mask and one class prediction each.
        num_blocks: the last blocks that see the queries.
        num_upscale_blocks: 2x upscaling blocks of the patch tokens (the masks are `2**num_upscale_blocks`
            times the patch grid).
        masked_attention: True: each of the last blocks attends through the masks predicted before it
            (transformers' `attn_mask_probs` 1); False: none (0, a fully annealed model); or one bool per block.
        annealing: None, or one `(start, end)` step pair per block (`annealing_steps`): the masks of
            each block annealed in training (`EoMTMaskAnnealing`); with `masked_attention=True`.
        name: the model's name (default: the backbone's + "_eomt").

    Returns a model from images to `{"class_queries_logits": (batch, queries, num_classes + 1),
    "masks_queries_logits": (batch, queries, h, w)}` (transformers' names);
    `post_process_semantic_segmentation` turns them into class maps.
    """
    outputs, _ = _eomt_graph(backbone, num_classes, num_queries, num_blocks, num_upscale_blocks, masked_attention,
                             annealing)
    return _model(backbone, outputs, name)


def eomt_training_model(backbone, num_classes, total_steps, **options):
    """`(model, training model)`: `eomt_model(backbone, num_classes, annealing=annealing_steps(total_steps,
    num_blocks), **options)` and, on the same layers, the model from images to every prediction (those made
    before each block of the queries, then the final one) packed in one tensor
    (`keras_vit.dense.eomt_loss.pack`) for `EoMTLoss`."""
    from keras_vit.dense.eomt_loss import pack

    if options.get("masked_attention", True) is not True or options.get("annealing") is not None:
        raise ValueError("eomt_training_model anneals the masks of every query block: leave masked_attention and "
                         "annealing out.")
    num_blocks = options.pop("num_blocks", 4)
    name = options.pop("name", None)
    annealing = annealing_steps(_count(total_steps, "total_steps"), _count(num_blocks, "num_blocks"))
    outputs, predictions = _eomt_graph(backbone, num_classes, num_blocks=num_blocks, annealing=annealing, **options)
    model = _model(backbone, outputs, name)
    training = keras.Model(model.inputs, pack([*predictions, (outputs[OUTPUTS[0]], outputs[OUTPUTS[1]])]),
                           name=f"{model.name}_training")
    return model, training


def _model(backbone, outputs, name):
    model = VisionTransformerModel(backbone.input, outputs, name=name or f"{backbone.name}_eomt")
    model.preprocessing = getattr(backbone, "preprocessing", model.preprocessing)
    return model


def _eomt_graph(backbone, num_classes, num_queries=100, num_blocks=4, num_upscale_blocks=2, masked_attention=True,
                annealing=None):
    """`(outputs, predictions)`: the model's output dict and the `(class, mask)` logits predicted before
    each masked block."""
    encoder = encoder_layer(backbone)
    num_classes, num_queries = _count(num_classes, "num_classes"), _count(num_queries, "num_queries")
    num_blocks = _count(num_blocks, "num_blocks")
    num_upscale_blocks = _count(num_upscale_blocks, "num_upscale_blocks", low=0)
    if num_blocks > encoder.depth:
        raise ValueError(f"num_blocks={num_blocks}: the backbone has {encoder.depth} blocks; expected 1..{encoder.depth}.")
    if is_naflex(backbone) or encoder.encoder_norm is None:
        raise ValueError(f"{backbone.name}: EoMT needs a backbone with the final LayerNorm on its tokens and one patch "
                         "grid per batch (not fc_norm, not NaFlex).")
    masked = _masked(masked_attention, num_blocks)
    annealers = _annealers(annealing, masked, num_queries)
    prefix, start = prefix_tokens(backbone), encoder.depth - num_blocks
    grid = embedding_layer(backbone).output
    head = EoMTHead(num_queries, prefix, num_classes, num_upscale_blocks, encoder.approximate_gelu, masked,
                    name="eomt_head")
    attention_mask = EoMTAttentionMask(num_queries, prefix, 2**num_upscale_blocks, name="eomt_attention_mask")
    (x, rope), mask, predictions = encoder_inputs(backbone), None, []
    for i, block in enumerate(encoder.blocks):
        if i == start:
            queries = LearnedTokens(num_queries, name="eomt_queries")
            x = queries(x)
            queries.tokens.assign(keras.random.normal(queries.tokens.shape))  # N(0, 1) as nn.Embedding: distinct queries
        if i >= start and masked[i - start]:
            masks, classes = head(encoder.encoder_norm(x), grid)
            predictions.append((classes, masks))
            mask = attention_mask(masks, grid)
            if annealers:
                mask = annealers[i - start](mask)
        x = block(x, **rope) if mask is None else block(x, valid=mask, **rope)
    masks, classes = head(encoder.encoder_norm(x), grid)
    return dict(zip(OUTPUTS, (classes, masks))), predictions


def _annealers(annealing, masked, num_queries):
    if annealing is None:
        return []
    if (not all(masked) or not isinstance(annealing, (list, tuple)) or len(annealing) != len(masked)
            or not all(isinstance(a, (list, tuple)) and len(a) == 2 and 0 <= a[0] <= a[1] for a in annealing)):
        raise ValueError(f"annealing={annealing!r}: expected one (start, end) step pair per query block "
                         f"({len(masked)}), 0 <= start <= end, with masked_attention=True.")
    return [EoMTMaskAnnealing(num_queries, begin, end, name=f"eomt_annealing_{j}")
            for j, (begin, end) in enumerate(annealing)]


def eomt_of_checkpoint(backbone, ckpt, head):
    """The EoMT model of a checkpoint's `head` (`keras_vit.weights.formats.eomt.Head`) on `backbone`,
    which holds the rest of `ckpt`'s weights; `keras_vit.from_checkpoint` builds it."""
    model = eomt_model(backbone, **head.options)
    shared = {v.path for v in backbone.weights}
    assign(model, ckpt, head.tensors, new=shared, table=EOMT_TABLE)
    return model
