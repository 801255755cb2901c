"""The dense-prediction heads, as Keras layers on a Vision Transformer's intermediate tokens.

Each head is called as `head(tokens, patch_grid, images)`: `tokens` a list of `(batch, prefix +
h*w, width)` sequences (the outputs of chosen encoder blocks), `patch_grid` the patch embedding's
`(batch, h, w, width)` output and `images` the model's input, both used only for their shapes (so
one model serves any image size). Semantic heads give `(batch, H, W, num_classes)` logits, depth
heads `(batch, H, W)` depth."""

import keras
from keras import ops

from keras_vit.dense import writing  # noqa: F401  (registers the Depth Anything writer with keras_vit.weights.export)
from keras_vit.dense.resize import resize

TASKS = ("semantic", "depth")
READOUTS = ("ignore", "add", "project")  # DPT's use of the class token
FUSION_RESIZES = ("next", "double")  # Depth Anything: to the next map's size; DPT: twice the size
HEAD_UPSAMPLES = ("input", "double")  # Depth Anything: to the input size; DPT: twice the size
DEPTH_ACTIVATIONS = ("relu", "sigmoid")  # relative depth; metric depth (times max_depth)
# PyTorch's BatchNorm2d, whose running statistics the heads of the checkpoints hold.
BATCH_NORM = dict(epsilon=1e-5, momentum=0.9)


def _choice(value, choices, what):
    if value not in choices:
        raise ValueError(f"Unknown {what} {value!r}; expected one of {choices}.")
    return value


def _conv(filters, kernel, name, use_bias=True, dtype=None):
    return keras.layers.Conv2D(filters, kernel, padding="same", use_bias=use_bias, name=name, dtype=dtype)


class _TokenHead(keras.layers.Layer):
    """What the heads share: the task, and the token sequences laid out as grids."""

    def __init__(self, task="depth", num_classes=None, num_prefix_tokens=1, class_token=True, **kwargs):
        super().__init__(**kwargs)
        self.task = _choice(task, TASKS, "task")
        if task == "semantic" and (isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1):
            raise ValueError(f"num_classes={num_classes!r}: a semantic head needs a whole number of classes >= 1.")
        self.num_classes = num_classes if task == "semantic" else None
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.class_token = bool(class_token)

    def grid(self, tokens, patch_grid):
        shape = ops.shape(patch_grid)
        return ops.reshape(tokens[:, self.num_prefix_tokens:], (-1, shape[1], shape[2], ops.shape(tokens)[-1]))

    @staticmethod
    def class_map(tokens):
        """The class token as a `(batch, 1, 1, width)` map (a reshape: LiteRT's and OpenVINO's
        converters take no strided slice that adds axes)."""
        return ops.reshape(tokens[:, 0], (-1, 1, 1, ops.shape(tokens)[-1]))

    def compute_output_shape(self, tokens_shape, patch_grid_shape, images_shape):
        batch, height, width = images_shape[:3]
        return (batch, height, width, self.num_classes) if self.task == "semantic" else (batch, height, width)

    def get_config(self):
        return {**super().get_config(), "task": self.task, "num_classes": self.num_classes,
                "num_prefix_tokens": self.num_prefix_tokens, "class_token": self.class_token}


@keras.saving.register_keras_serializable(package="keras_vit")
class LinearHead(_TokenHead):
    """The linear head of DINOv2 / DINOv3 linear evaluation (DINOv2's `BNHead`): the patch tokens of
    each given block (`linear`: the last; `linear4` / `ms`: the last four), each followed by its class
    token where `class_token` (the order of DINOv2's `resize_concat` of `(patches, class token)`
    pairs), concatenated over channels, then BatchNorm and a 1x1 convolution, bilinearly resized to
    the input size (`align_corners=False`). Depth: one channel through a ReLU."""

    def __init__(self, task="semantic", num_classes=None, num_prefix_tokens=1, class_token=False, **kwargs):
        super().__init__(task, num_classes, num_prefix_tokens, class_token, **kwargs)
        policy = self.dtype_policy
        self.bn = keras.layers.BatchNormalization(**BATCH_NORM, name="bn", dtype=policy)
        self.conv = keras.layers.Conv2D(self.num_classes or 1, 1, name="conv", dtype=policy)

    def build(self, tokens_shape, patch_grid_shape, images_shape):
        channels = sum(shape[-1] for shape in tokens_shape) * (2 if self.class_token else 1)
        self.bn.build((None, None, None, channels))
        self.conv.build((None, None, None, channels))

    def call(self, tokens, patch_grid, images, training=None):
        maps = []
        for t in tokens:
            grid = self.grid(t, patch_grid)
            maps += [grid, ops.ones_like(grid) * self.class_map(t)] if self.class_token else [grid]
        x = self.conv(self.bn(ops.concatenate(maps, axis=-1), training=training))
        x = resize(x, ops.shape(images)[1:3], align_corners=False)
        return x if self.task == "semantic" else ops.relu(x[..., 0])


@keras.saving.register_keras_serializable(package="keras_vit")
class ResidualConvUnit(keras.layers.Layer):
    """DPT's pre-activation residual unit: ReLU, 3x3 conv (BatchNorm), ReLU, 3x3 conv (BatchNorm), plus the input."""

    def __init__(self, channels, batch_norm=False, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.channels, self.batch_norm, self.use_bias = int(channels), bool(batch_norm), bool(use_bias)
        policy = self.dtype_policy
        self.conv1 = _conv(self.channels, 3, "conv1", self.use_bias, policy)
        self.conv2 = _conv(self.channels, 3, "conv2", self.use_bias, policy)
        if self.batch_norm:
            self.bn1 = keras.layers.BatchNormalization(**BATCH_NORM, name="bn1", dtype=policy)
            self.bn2 = keras.layers.BatchNormalization(**BATCH_NORM, name="bn2", dtype=policy)

    def build(self, shape):
        for layer in (self.conv1, self.conv2, *((self.bn1, self.bn2) if self.batch_norm else ())):
            layer.build((None, None, None, self.channels))

    def call(self, x, training=None):
        y = self.conv1(ops.relu(x))
        if self.batch_norm:
            y = self.bn1(y, training=training)
        y = self.conv2(ops.relu(y))
        if self.batch_norm:
            y = self.bn2(y, training=training)
        return x + y

    def compute_output_shape(self, shape):
        return shape

    def get_config(self):
        return {**super().get_config(), "channels": self.channels, "batch_norm": self.batch_norm,
                "use_bias": self.use_bias}


@keras.saving.register_keras_serializable(package="keras_vit")
class DPTHead(_TokenHead):
    """DPT's neck and head (Ranftl et al., 2021), as transformers' `DPTForDepthEstimation` (defaults)
    and `DepthAnythingForDepthEstimation` (`fusion_resize="next"`, `head_upsample="input"`,
    `readout="ignore"`) compute them, on four blocks' tokens.

    Reassemble: the class token used as `readout` says ("ignore"; "add" to every patch token;
    "project": concatenated to each, then Linear + GELU back to the width), a 1x1 convolution to
    `neck_hidden_sizes[i]`, resampled by `reassemble_factors[i]` (transposed convolution up, strided
    3x3 convolution down), then a 3x3 convolution (no bias) to `fusion_hidden_size`. Fusion, from the
    deepest map: residual units, bilinear up-sampling (`align_corners=True`) to the next map's size
    or twice the size, 1x1 projection. Head on fused map `head_in_index`: depth is a 3x3 conv to half
    the channels, up-sampling (`align_corners=True`) to the input size or twice the size, 3x3 conv to
    `head_hidden_size`, ReLU, 1x1 conv, then ReLU (relative) or sigmoid times `max_depth` (metric);
    semantic is a 3x3 conv, BatchNorm, ReLU, 1x1 conv to the classes, resized to the input size.
    `fusion_batch_norm` and `fusion_bias`: DPT's `use_batch_norm_in_fusion_residual` and `use_bias_in_fusion_residual`."""

    def __init__(self, task="depth", num_classes=None, num_prefix_tokens=1, class_token=True,
                 neck_hidden_sizes=(96, 192, 384, 768), reassemble_factors=(4, 2, 1, 0.5), fusion_hidden_size=256,
                 readout="project", fusion_resize="double", fusion_batch_norm=False, fusion_bias=True,
                 head_hidden_size=32, head_upsample="double", head_in_index=-1,
                 depth_activation="relu", max_depth=1.0, **kwargs):
        super().__init__(task, num_classes, num_prefix_tokens, class_token, **kwargs)
        self.neck_hidden_sizes = tuple(int(s) for s in neck_hidden_sizes)
        self.reassemble_factors = tuple(reassemble_factors)
        if len(self.reassemble_factors) != len(self.neck_hidden_sizes):
            raise ValueError(f"reassemble_factors={reassemble_factors!r}: one factor per neck size "
                             f"({len(self.neck_hidden_sizes)}), got {len(self.reassemble_factors)}.")
        for factor in self.reassemble_factors:
            if not (factor >= 1 and factor == int(factor) or 0 < factor < 1 and (1 / factor) == int(1 / factor)):
                raise ValueError(f"reassemble_factors={reassemble_factors!r}: expected whole numbers >= 1 "
                                 "(up-sampling) or 1/n (down-sampling).")
        self.fusion_hidden_size = int(fusion_hidden_size)
        self.readout = _choice(readout, READOUTS, "readout")
        if readout != "ignore" and not self.class_token:
            raise ValueError(f"readout={readout!r} reads the class token, which the backbone has none of; use 'ignore'.")
        self.fusion_resize = _choice(fusion_resize, FUSION_RESIZES, "fusion_resize")
        self.fusion_batch_norm, self.fusion_bias = bool(fusion_batch_norm), bool(fusion_bias)
        self.head_hidden_size = int(head_hidden_size)
        self.head_upsample = _choice(head_upsample, HEAD_UPSAMPLES, "head_upsample")
        self.head_in_index = int(head_in_index)
        self.depth_activation = _choice(depth_activation, DEPTH_ACTIVATIONS, "depth_activation")
        self.max_depth = float(max_depth)
        self._make_layers()

    def _make_layers(self):
        policy, channels = self.dtype_policy, self.fusion_hidden_size
        self.readouts = []  # made in `build`: their width is the backbone's
        self.projections, self.resamplers, self.neck_convs, self.fusions = [], [], [], []
        for i, (size, factor) in enumerate(zip(self.neck_hidden_sizes, self.reassemble_factors)):
            self.projections.append(keras.layers.Conv2D(size, 1, name=f"reassemble_{i}_projection", dtype=policy))
            if factor > 1:
                self.resamplers.append(keras.layers.Conv2DTranspose(
                    size, int(factor), strides=int(factor), name=f"reassemble_{i}_resize", dtype=policy))
            elif factor < 1:  # padded in `_reassemble`
                self.resamplers.append(keras.layers.Conv2D(
                    size, 3, strides=round(1 / factor), name=f"reassemble_{i}_resize", dtype=policy))
            else:
                self.resamplers.append(None)
            self.neck_convs.append(_conv(channels, 3, f"neck_conv_{i}", False, policy))
            units = [ResidualConvUnit(channels, self.fusion_batch_norm, self.fusion_bias, name=f"fusion_{i}_residual_{j}",
                                      dtype=policy) for j in (1, 2)]
            self.fusions.append((units, keras.layers.Conv2D(channels, 1, name=f"fusion_{i}_projection", dtype=policy)))
        if self.task == "depth":
            self.head_convs = [_conv(channels // 2, 3, "head_conv1", dtype=policy),
                               _conv(self.head_hidden_size, 3, "head_conv2", dtype=policy),
                               keras.layers.Conv2D(1, 1, name="head_conv3", dtype=policy)]
        else:
            self.head_convs = [_conv(channels, 3, "head_conv1", False, policy),
                               keras.layers.BatchNormalization(**BATCH_NORM, name="head_bn", dtype=policy),
                               keras.layers.Conv2D(self.num_classes, 1, name="head_conv2", dtype=policy)]

    def build(self, tokens_shape, patch_grid_shape, images_shape):
        width, channels = tokens_shape[0][-1], self.fusion_hidden_size
        shape = lambda c: (None, None, None, c)  # noqa: E731
        if self.readout == "project":
            self.readouts = [keras.layers.Dense(width, name=f"readout_{i}", dtype=self.dtype_policy)
                             for i in range(len(self.neck_hidden_sizes))]
        for layer in self.readouts:
            layer.build(shape(2 * width))
        for i, size in enumerate(self.neck_hidden_sizes):
            self.projections[i].build(shape(width))
            if self.resamplers[i] is not None:
                self.resamplers[i].build(shape(size))
            self.neck_convs[i].build(shape(size))
            units, projection = self.fusions[i]
            for layer in (*units, projection):
                layer.build(shape(channels))
        inputs = [channels, channels // 2, self.head_hidden_size] if self.task == "depth" else [channels] * 3
        for layer, c in zip(self.head_convs, inputs):
            layer.build(shape(c))

    def _reassemble(self, i, tokens, patch_grid):
        x = self.grid(tokens, patch_grid)
        if self.readout != "ignore":
            cls = self.class_map(tokens)
            if self.readout == "add":
                x = x + cls
            else:
                x = ops.gelu(self.readouts[i](ops.concatenate([x, ops.ones_like(x) * cls], axis=-1)), approximate=False)
        x = self.projections[i](x)
        if self.reassemble_factors[i] < 1:  # PyTorch's padding=1 on both sides, whatever the parity
            x = ops.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
        if self.resamplers[i] is not None:
            x = self.resamplers[i](x)
        return self.neck_convs[i](x)

    def _fuse(self, i, x, residual, size, training):
        (unit1, unit2), projection = self.fusions[i]
        if residual is not None:
            residual = resize(residual, ops.shape(x)[1:3], align_corners=False)
            x = x + unit1(residual, training=training)
        x = unit2(x, training=training)
        if size is None:
            size = (ops.shape(x)[1] * 2, ops.shape(x)[2] * 2)
        return projection(resize(x, size, align_corners=True))

    def call(self, tokens, patch_grid, images, training=None):
        if len(tokens) != len(self.neck_hidden_sizes):
            raise ValueError(f"DPTHead takes {len(self.neck_hidden_sizes)} blocks' tokens, got {len(tokens)}.")
        maps = [self._reassemble(i, t, patch_grid) for i, t in enumerate(tokens)][::-1]
        fused, x = [], None
        for i, feature in enumerate(maps):
            nxt = maps[i + 1] if self.fusion_resize == "next" and i + 1 < len(maps) else None
            size = None if nxt is None else ops.shape(nxt)[1:3]
            x = self._fuse(i, feature, None, size, training) if x is None else self._fuse(i, x, feature, size, training)
            fused.append(x)
        x = fused[self.head_in_index]
        height, width = ops.shape(images)[1], ops.shape(images)[2]
        if self.task == "semantic":
            conv, bn, classes = self.head_convs
            x = classes(ops.relu(bn(conv(x), training=training)))
            return resize(x, (height, width), align_corners=False)
        conv1, conv2, conv3 = self.head_convs
        x = conv1(x)
        size = (height, width) if self.head_upsample == "input" else (ops.shape(x)[1] * 2, ops.shape(x)[2] * 2)
        x = conv3(ops.relu(conv2(resize(x, size, align_corners=True))))[..., 0]
        return (ops.relu(x) if self.depth_activation == "relu" else ops.sigmoid(x)) * self.max_depth

    def compute_output_shape(self, tokens_shape, patch_grid_shape, images_shape):
        if self.head_upsample == "input" or self.task == "semantic":
            return super().compute_output_shape(tokens_shape, patch_grid_shape, images_shape)
        return (images_shape[0], None, None)

    def get_config(self):
        return {
            **super().get_config(), "neck_hidden_sizes": self.neck_hidden_sizes,
            "reassemble_factors": self.reassemble_factors, "fusion_hidden_size": self.fusion_hidden_size,
            "readout": self.readout, "fusion_resize": self.fusion_resize, "fusion_batch_norm": self.fusion_batch_norm,
            "fusion_bias": self.fusion_bias, "head_hidden_size": self.head_hidden_size,
            "head_upsample": self.head_upsample,
            "head_in_index": self.head_in_index, "depth_activation": self.depth_activation, "max_depth": self.max_depth,
        }
