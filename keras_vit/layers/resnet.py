"""The BiT-style ResNet stem of the hybrid ViT (paper section 3.1).

Weight-standardised convolutions and GroupNorm, as in the original R50+ViT-B/16
(google-research/vision_transformer `models_resnet.py`): a root (7x7/2 conv, GroupNorm,
ReLU, 3x3/2 max-pool, all with TF 'SAME' padding) and stages of bottleneck units. The units
of the hybrid are *not* pre-activation: conv -> GroupNorm -> ReLU, three times, the
projection shortcut on the first unit of each stage, ReLU after the residual sum (ResNet
v1.5 ordering; the stride sits on the 3x3 conv). The variable names mirror the original
checkpoint: `conv_root`, `gn_root`, `block{i}/unit{j}/{conv,gn}{1,2,3}`, `conv_proj`,
`gn_proj`.

Two numerical conventions exist for the same weights; pass one as `**ORIGINAL_NUMERICS` or
`**TIMM_NUMERICS`:
- the original Flax code standardises kernels as `(w - mean) / (std + 1e-5)` and uses
  GroupNorm epsilon 1e-6 (Flax's default);
- timm standardises as `(w - mean) / sqrt(var + 1e-8)` and uses GroupNorm epsilon 1e-5.
"""

import keras
from keras import ops

ORIGINAL_NUMERICS = dict(conv_epsilon=1e-5, conv_epsilon_on_variance=False, norm_epsilon=1e-6)
TIMM_NUMERICS = dict(conv_epsilon=1e-8, conv_epsilon_on_variance=True, norm_epsilon=1e-5)


def _same_size(size, stride):
    return None if size is None else -(-size // stride)


@keras.saving.register_keras_serializable(package="keras_vit")
class WeightStandardizedConv2D(keras.layers.Layer):
    """A bias-free Conv2D (TF 'SAME' padding) whose kernel is standardised at every call.

    Each output filter of the stored HWIO kernel is shifted to zero mean and scaled to unit
    (population) standard deviation over its `(height, width, in_channels)` axes before the
    convolution; the stored variable keeps the raw values, as in the checkpoints.
    `epsilon` is added to the standard deviation, or to the variance with
    `epsilon_on_variance=True`.
    """

    def __init__(self, filters, kernel_size, strides=1, epsilon=1e-5, epsilon_on_variance=False, **kwargs):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = int(kernel_size)
        self.strides = int(strides)
        self.epsilon = float(epsilon)
        self.epsilon_on_variance = bool(epsilon_on_variance)
        if min(self.filters, self.kernel_size, self.strides) < 1:
            raise ValueError(
                f"filters={filters}, kernel_size={kernel_size} and strides={strides} must be positive."
            )

    def build(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError(f"{self.name} needs a known number of input channels.")
        k = self.kernel_size
        self.kernel = self.add_weight(
            name="kernel",
            shape=(k, k, channels, self.filters),
            initializer=keras.initializers.LecunNormal(),
        )

    def standardized_kernel(self):
        """The kernel actually used by the convolution (float32)."""
        kernel = ops.cast(self.kernel, "float32")
        centred = kernel - ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        variance = ops.mean(ops.square(centred), axis=(0, 1, 2), keepdims=True)
        if self.epsilon_on_variance:
            return centred * ops.rsqrt(variance + self.epsilon)
        return centred / (ops.sqrt(variance) + self.epsilon)

    def call(self, x):
        kernel = ops.cast(self.standardized_kernel(), self.compute_dtype)
        return ops.conv(x, kernel, strides=self.strides, padding="same", data_format="channels_last")

    def compute_output_shape(self, input_shape):
        h, w = (_same_size(s, self.strides) for s in input_shape[1:3])
        return (input_shape[0], h, w, self.filters)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "epsilon": self.epsilon,
            "epsilon_on_variance": self.epsilon_on_variance,
        }


def _conv(filters, kernel_size, strides, numerics, name, policy):
    return WeightStandardizedConv2D(
        filters,
        kernel_size,
        strides,
        epsilon=numerics["conv_epsilon"],
        epsilon_on_variance=numerics["conv_epsilon_on_variance"],
        name=name,
        dtype=policy,
    )


def _norm(groups, numerics, name, policy, zero_scale=False):
    return keras.layers.GroupNormalization(
        groups=groups,
        epsilon=numerics["norm_epsilon"],
        gamma_initializer="zeros" if zero_scale else "ones",
        name=name,
        dtype=policy,
    )


def _numerics(layer):
    return dict(
        conv_epsilon=layer.conv_epsilon,
        conv_epsilon_on_variance=layer.conv_epsilon_on_variance,
        norm_epsilon=layer.norm_epsilon,
    )


class _StemPart(keras.layers.Layer):
    """Holds the numerical settings shared by the stem's parts."""

    def __init__(
        self,
        groups=32,
        conv_epsilon=ORIGINAL_NUMERICS["conv_epsilon"],
        conv_epsilon_on_variance=ORIGINAL_NUMERICS["conv_epsilon_on_variance"],
        norm_epsilon=ORIGINAL_NUMERICS["norm_epsilon"],
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.groups = int(groups)
        self.conv_epsilon = float(conv_epsilon)
        self.conv_epsilon_on_variance = bool(conv_epsilon_on_variance)
        self.norm_epsilon = float(norm_epsilon)

    def get_config(self):
        return {**super().get_config(), "groups": self.groups, **_numerics(self)}


@keras.saving.register_keras_serializable(package="keras_vit")
class BottleneckUnit(_StemPart):
    """The hybrid's bottleneck unit: 1x1 (`features`), 3x3 (`features`, `strides`), 1x1
    (`4 * features`), each followed by GroupNorm (ReLU after the first two); ReLU after the
    residual sum. With `projection`, the shortcut is a strided 1x1 conv + GroupNorm.
    The last GroupNorm's scale starts at zero, as in the original code.
    """

    def __init__(self, features, strides=1, projection=False, **kwargs):
        super().__init__(**kwargs)
        self.features = int(features)
        self.strides = int(strides)
        self.projection = bool(projection)
        if self.features % self.groups or self.features < 1:
            raise ValueError(
                f"features={features} must be a positive multiple of groups={self.groups}."
            )
        n, p, g = _numerics(self), self.dtype_policy, self.groups
        self.conv1 = _conv(self.features, 1, 1, n, "conv1", p)
        self.gn1 = _norm(g, n, "gn1", p)
        self.conv2 = _conv(self.features, 3, self.strides, n, "conv2", p)
        self.gn2 = _norm(g, n, "gn2", p)
        self.conv3 = _conv(4 * self.features, 1, 1, n, "conv3", p)
        self.gn3 = _norm(g, n, "gn3", p, zero_scale=True)
        if self.projection:
            self.conv_proj = _conv(4 * self.features, 1, self.strides, n, "conv_proj", p)
            self.gn_proj = _norm(g, n, "gn_proj", p)

    def build(self, input_shape):
        if not self.projection and (input_shape[-1] != 4 * self.features or self.strides != 1):
            raise ValueError(
                f"{self.name}: an identity shortcut needs {4 * self.features} input channels and "
                f"strides=1, got {input_shape[-1]} channels and strides={self.strides}; use "
                "projection=True."
            )
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2), (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
        if self.projection:
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))

    def call(self, x):
        shortcut = self.gn_proj(self.conv_proj(x)) if self.projection else x
        y = ops.relu(self.gn1(self.conv1(x)))
        y = ops.relu(self.gn2(self.conv2(y)))
        y = self.gn3(self.conv3(y))
        return ops.relu(shortcut + y)

    def compute_output_shape(self, input_shape):
        return self.conv3.compute_output_shape(self.conv2.compute_output_shape(input_shape))

    def get_config(self):
        return {
            **super().get_config(),
            "features": self.features,
            "strides": self.strides,
            "projection": self.projection,
        }


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetStage(_StemPart):
    """`depth` bottleneck units `unit1...`; the first projects and carries the stride."""

    def __init__(self, depth, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.depth = int(depth)
        self.features = int(features)
        self.strides = int(strides)
        if self.depth < 1:
            raise ValueError(f"A stage needs at least one unit, got depth={depth}.")
        shared = dict(groups=self.groups, **_numerics(self), dtype=self.dtype_policy)
        self.units = [
            BottleneckUnit(
                self.features,
                self.strides if j == 0 else 1,
                projection=j == 0,
                name=f"unit{j + 1}",
                **shared,
            )
            for j in range(self.depth)
        ]

    def build(self, input_shape):
        for unit in self.units:
            unit.build(input_shape)
            input_shape = unit.compute_output_shape(input_shape)

    def call(self, x):
        for unit in self.units:
            x = unit(x)
        return x

    def compute_output_shape(self, input_shape):
        for unit in self.units:
            input_shape = unit.compute_output_shape(input_shape)
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "depth": self.depth,
            "features": self.features,
            "strides": self.strides,
        }


@keras.saving.register_keras_serializable(package="keras_vit")
class ResNetV2Stem(_StemPart):
    """The CNN that feeds the hybrid ViT: root, then `len(stages)` stages of bottleneck units.

    Args:
        stages: units per stage; `(3, 4, 9)` is the paper's R50 with stage 4 removed and its
            units moved into stage 3. `()` keeps only the root.
        width: channels of the root; stage `i` (from 0) has bottleneck width `width * 2**i`
            and outputs `4 * width * 2**i` channels. Must be a multiple of `groups`.
        groups: GroupNorm groups (32).
        conv_epsilon, conv_epsilon_on_variance, norm_epsilon: see the module docstring.

    Input `(batch, height, width, channels)` images; output the feature map, `stride` times
    smaller (rounded up): `stride = 4 * 2**(len(stages) - 1)`, 16 for R50. The layer is named
    "stem" unless told otherwise (the name checkpoints are mapped to).
    """

    def __init__(self, stages=(3, 4, 9), width=64, **kwargs):
        kwargs.setdefault("name", "stem")
        super().__init__(**kwargs)
        stages = tuple(stages)
        if not all(isinstance(d, int) and d >= 1 for d in stages):
            raise ValueError(f"stages={stages} must be a sequence of positive unit counts.")
        if not isinstance(width, int) or width < 1 or width % self.groups:
            raise ValueError(f"width={width!r} must be a positive multiple of groups={self.groups}.")
        self.stages = stages
        self.width = width
        self.stride = 4 * 2 ** max(len(stages) - 1, 0)
        self.output_channels = 4 * width * 2 ** (len(stages) - 1) if stages else width
        n, p = _numerics(self), self.dtype_policy
        self.conv_root = _conv(width, 7, 2, n, "conv_root", p)
        self.gn_root = _norm(self.groups, n, "gn_root", p)
        self.blocks = [
            ResNetStage(
                depth,
                width * 2**i,
                strides=1 if i == 0 else 2,
                groups=self.groups,
                **n,
                name=f"block{i + 1}",
                dtype=p,
            )
            for i, depth in enumerate(stages)
        ]

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self._pooled_shape(shape)
        for block in self.blocks:
            block.build(shape)
            shape = block.compute_output_shape(shape)

    def call(self, images):
        x = ops.relu(self.gn_root(self.conv_root(images)))
        x = ops.max_pool(x, pool_size=3, strides=2, padding="same", data_format="channels_last")
        for block in self.blocks:
            x = block(x)
        return x

    @staticmethod
    def _pooled_shape(shape):
        return (shape[0], _same_size(shape[1], 2), _same_size(shape[2], 2), shape[3])

    def compute_output_shape(self, input_shape):
        shape = self._pooled_shape(self.conv_root.compute_output_shape(input_shape))
        for block in self.blocks:
            shape = block.compute_output_shape(shape)
        return shape

    def get_config(self):
        return {**super().get_config(), "stages": self.stages, "width": self.width}
