"""DINOv2's linear segmentation head files (`dinov2_vit*14_{ade20k,voc2012}_{linear,ms}_head.pth`):
mmseg checkpoints of DINOv2's `BNHead`, `{"state_dict": {"decode_head.bn.*", "decode_head.conv_seg.*"}}`.
The head reads the patch tokens of the backbone's last block (`linear`) or last four blocks (`ms`,
DINOv2's `linear4`) after the final LayerNorm (`get_intermediate_layers(reshape=True)`, no class
token: `in_channels` = blocks x width), concatenated, then BatchNorm (eps 1e-5) and a 1x1
convolution to the classes, up-sampled bilinearly to the image (`align_corners=False`): keras_vit's
`LinearHead`. Their key table (the head's weight paths <-> mmseg's) and the file's reading as
`DenseModel` arguments. No Keras."""

from keras_vit.dense.layouts import BATCH_NORM, conv_to_keras, conv_to_torch
from keras_vit.weights.table import Row, Table

PREFIX = "decode_head."
CONV = PREFIX + "conv_seg.weight"
TABLE = Table((
    Row(tuple(f"bn/{k}" for k, _ in BATCH_NORM), tuple(f"{PREFIX}bn.{t}" for _, t in BATCH_NORM)),
    Row(("conv/kernel", "conv/bias"), (CONV, PREFIX + "conv_seg.bias"), conv_to_keras, conv_to_torch),
), dense={})


def is_head_file(tensors):
    """Whether a checkpoint's tensors are an mmseg decode head's (DINOv2's `BNHead`)."""
    return CONV in tensors


def head_tensors(tensors, path):
    """The head's tensors, refusing anything but the decode head's (a whole segmentor, a backbone)."""
    other = sorted(k for k in tensors if not k.startswith(PREFIX))
    if other:
        raise ValueError(f"{path}: keys outside the decode head ({', '.join(other[:4])}{', ...' if len(other) > 4 else ''}); "
                         "keras_vit reads DINOv2's head files, whose keys are all 'decode_head.*'.")
    tensors = {k: v for k, v in tensors.items() if not k.endswith("num_batches_tracked")}
    odd = next((k for k, v in tensors.items() if v.dtype.kind != "f"), None)
    if odd is not None:
        raise ValueError(f"{path}: {odd} is {tensors[odd].dtype}; accepted: float16, bfloat16, float32 or float64 "
                         "weights.")
    return tensors


def head_args(tensors, path, width, depth, num_classes=None, layers=None, class_token=False):
    """`DenseModel` arguments of a head file on a backbone of `width` and `depth` blocks: its
    classes, and the blocks it reads (`layers`, default: the last `in_channels / width`)."""
    shape = tuple(tensors[CONV].shape)
    if len(shape) != 4 or shape[2:] != (1, 1):
        raise ValueError(f"{path}: {CONV} has shape {shape}; a 1x1 convolution's is (classes, in_channels, 1, 1).")
    classes, channels = shape[:2]
    if num_classes is not None and num_classes != classes:
        raise ValueError(f"{path} predicts {classes} classes, not num_classes={num_classes!r}.")
    per_block = width * (2 if class_token else 1)
    what = f"{'2 x ' if class_token else ''}the backbone's width {width}"
    if layers is None:
        if channels % per_block or not 1 <= channels // per_block <= depth:
            raise ValueError(f"{path}: in_channels {channels} is not a whole number (1..{depth}) of blocks x {what} "
                             "(DINOv2's heads read 1 (linear) or 4 (ms) blocks); is it the head of another backbone?")
        layers = list(range(-(channels // per_block), 0))
    elif len(layers) * per_block != channels:
        raise ValueError(f"{path}: in_channels {channels} is not {len(layers)} blocks x {what}.")
    return dict(num_classes=classes, layers=layers, class_token=class_token)
