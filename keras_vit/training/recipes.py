"""Training recipes: named `TrainConfig`s whose every field can be overridden.

- "finetune": the paper's fine-tuning (App. B.1.1): SGD momentum 0.9, no weight decay,
  batch 512, global-norm clipping 1.0, cosine decay with 500 warm-up steps, 384 px,
  inception crop + flip, the head zero-initialised (the builders do that), starting from
  pretrained weights (`weights=`). The paper sweeps lr over {0.001, 0.003, 0.01, 0.03}
  and trains 10k steps on CIFAR (20k on ImageNet, 500 on Pets / Flowers).
- "scratch": training from scratch on ImageNet-size data in the DeiT / "How to train your
  ViT" style: AdamW, weight decay 0.05, warm-up + cosine, label smoothing 0.1, stochastic
  depth 0.1, RandAugment, MixUp / CutMix.
- "digits": the quick default: a small ViT (16 px = the 8x8 digits upscaled 2x, patch 4, width
  64, depth 4, average pooling) on scikit-learn's digits, ~97% in 40 short epochs.
- "masked_patch": the paper's self-supervised pre-training (App. B.1.2, `keras-vit pretrain`):
  masked patch prediction, Adam lr 2e-4, batch 4096, 1M steps, 10k warm-up steps, cosine
  (on ImageNet by default; the paper pre-trained on JFT-300M).
- "masked_patch_digits": the same objective for the digits architecture (2000 short steps).

    config = recipe("finetune", data="cifar10", learning_rate=0.01)
    config = recipe("digits").override(["epochs=5", "precision=mixed_bfloat16"])
"""

import dataclasses
import numbers
import os
import typing
from typing import Optional, Union

from keras_vit.variants import VARIANTS

ARCHITECTURE = ("patch_size", "hidden_dim", "depth", "num_heads", "mlp_dim")

# The accepted values of the options that take one of a fixed set, here (no Keras import) so
# that the command line lists and checks them before importing anything heavy.
OPTIMIZERS = ("sgd", "adam", "adamw")
SCHEDULES = ("cosine", "linear", "constant")
LR_SCALINGS = ("none", "linear", "sqrt")
PRECISIONS = ("auto", "float32", "tf32", "mixed_bfloat16", "mixed_float16")
STRATEGIES = {
    "tensorflow": ("auto", "none", "mirrored", "tpu", "multi_worker"),
    "jax": ("auto", "none", "data_parallel", "model_parallel"),
    "torch": ("auto", "none", "torch_ddp"),
}
CHOICES = {
    "model": (*VARIANTS, "custom"),
    "on_corrupt": ("skip", "error"),
    "optimizer": OPTIMIZERS,
    "schedule": SCHEDULES,
    "lr_scaling": LR_SCALINGS,
    "precision": PRECISIONS,
    "strategy": tuple(dict.fromkeys(s for accepted in STRATEGIES.values() for s in accepted)),
}


MASK_TARGETS = ("color", "pixels")


def check_decay(decay):
    """`decay` as a float, if it is a valid `layer_decay`."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise ValueError(f"layer_decay={decay!r} must be a number with 0 < layer_decay <= 1 (or None: off).")
    return float(decay)


def check_masking(rate, split, target, bits):
    """Raises ValueError on corruption / target settings that make no sense."""
    if not 0 < rate <= 1:
        raise ValueError(f"mask_rate={rate} must be in (0, 1].")
    if len(split) != 3 or min(split) < 0 or sum(split) <= 0:
        raise ValueError(
            f"mask_split={tuple(split)} must be three fractions >= 0 ([mask] token, random "
            "other patch, unchanged), e.g. 0.8,0.1,0.1."
        )
    if target not in MASK_TARGETS:
        raise ValueError(f"mask_target={target!r}; expected one of {', '.join(MASK_TARGETS)}.")
    if not 1 <= bits <= 8:
        raise ValueError(f"color_bits={bits} must be between 1 and 8.")


# The meaningful values of the numeric fields ("[" / "]": the end is included); None, where a
# field allows it, is not checked.
RANGES = {
    **dict.fromkeys(("batch_size", "accumulation_steps", "epochs", "steps", "image_size", "reference_batch_size",
                     "shuffle_buffer", "model_parallel_size", "representation_size", "lora_rank", *ARCHITECTURE),
                   "[1, inf)"),
    **dict.fromkeys(("learning_rate", "weight_decay", "clipnorm", "warmup_steps", "checkpoint_every", "fewshot_every", "seed",
                     "randaugment_ops", "mixup", "cutmix"), "[0, inf)"),
    **dict.fromkeys(("momentum", "beta_1", "beta_2", "label_smoothing", "dropout", "attention_dropout", "drop_path"),
                    "[0, 1)"),
    "val_fraction": "(0, 1)",
    "eval_crop": "(0, 1]",
    "randaugment_factor": "[0, 1]",
}


def check_range(name, value, interval):
    """Raises a ValueError unless the number `value` of field `name` lies in `interval` ("[0, 1)")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} must be a number in {interval}.")
    low, high = (float(end) for end in interval[1:-1].split(","))
    above = value >= low if interval[0] == "[" else value > low
    below = value <= high if interval[-1] == "]" else value < high
    if not (above and below):  # NaN is neither
        raise ValueError(f"{name}={value!r} must be in {interval}.")


@dataclasses.dataclass
class TrainConfig:
    """Everything a training run needs. See `keras-vit train --help` for each field."""

    # data
    data: str = "digits"
    data_dir: Optional[str] = None
    manual_dir: Optional[str] = None
    download: bool = True
    train_split: Optional[str] = None
    val_split: Optional[str] = None
    val_fraction: Optional[float] = None
    on_corrupt: str = "skip"
    image_size: int = 224
    crop_area: tuple = (0.05, 1.0)
    crop_aspect: tuple = (0.75, 4 / 3)
    flip: bool = True
    eval_crop: float = 1.0
    randaugment_ops: int = 0
    randaugment_factor: float = 0.5
    mixup: float = 0.0
    cutmix: float = 0.0
    shuffle_buffer: int = 10_000
    deterministic: bool = False
    seed: int = 0
    # model
    model: str = "ViTB16"
    patch_size: Optional[int] = None
    hidden_dim: Optional[int] = None
    depth: Optional[int] = None
    num_heads: Optional[int] = None
    mlp_dim: Optional[int] = None
    pooling: str = "token"
    representation_size: Optional[int] = None
    weights: Optional[str] = None
    dropout: float = 0.0
    attention_dropout: float = 0.0
    drop_path: float = 0.0
    remat: bool = False
    # what is trained (default: every weight)
    linear_probe: bool = False
    lora_rank: Optional[int] = None
    lora_targets: str = "qkv,out"
    # optimisation
    batch_size: int = 512
    accumulation_steps: int = 1
    epochs: int = 10
    steps: Optional[int] = None
    optimizer: str = "sgd"
    learning_rate: float = 0.003
    lr_scaling: str = "none"
    reference_batch_size: int = 512
    momentum: float = 0.9
    beta_1: float = 0.9
    beta_2: float = 0.999
    weight_decay: float = 0.0
    layer_decay: Optional[float] = None
    clipnorm: Optional[float] = 1.0
    schedule: str = "cosine"
    warmup_steps: int = 500
    label_smoothing: float = 0.0
    # masked patch prediction (keras-vit pretrain)
    mask_rate: float = 0.5
    mask_split: tuple = (0.8, 0.1, 0.1)
    mask_target: str = "color"
    color_bits: int = 3
    # system
    precision: str = "auto"
    strategy: str = "auto"
    model_parallel_size: int = 2
    jit_compile: Union[bool, str] = "auto"
    # outputs
    output_dir: Optional[str] = None
    checkpoint_every: int = 0
    fewshot_every: int = 0
    monitor: str = "val_accuracy"
    tensorboard: bool = True
    verbose: Union[int, str] = "auto"
    recipe: str = "custom"

    def __post_init__(self):
        self.crop_area = tuple(float(v) for v in self.crop_area)
        self.crop_aspect = tuple(float(v) for v in self.crop_aspect)
        self.mask_split = tuple(float(v) for v in self.mask_split)
        if self.model != "custom" and self.model not in VARIANTS:
            raise ValueError(f"model={self.model!r}; expected 'custom' or one of {', '.join(VARIANTS)}.")
        if self.model == "custom":
            missing = [f for f in ARCHITECTURE if getattr(self, f) is None]
            if missing:
                raise ValueError(f"model='custom' needs {', '.join(missing)}.")
        for name, interval in RANGES.items():
            if getattr(self, name) is not None:
                check_range(name, getattr(self, name), interval)
        if self.batch_size % self.accumulation_steps:
            raise ValueError(
                f"batch_size={self.batch_size} (per optimizer step) must be divisible by "
                f"accumulation_steps={self.accumulation_steps}."
            )
        if self.on_corrupt not in CHOICES["on_corrupt"]:
            raise ValueError(f"on_corrupt={self.on_corrupt!r}; expected 'skip' or 'error'.")
        if self.layer_decay is not None:
            self.layer_decay = check_decay(self.layer_decay)
        check_masking(self.mask_rate, self.mask_split, self.mask_target, self.color_bits)

    @property
    def micro_batch_size(self):
        """The global batch of one forward / backward pass (`batch_size / accumulation_steps`)."""
        return self.batch_size // self.accumulation_steps

    @property
    def run_dir(self):
        return self.output_dir or os.path.join("runs", self.recipe)

    def architecture(self):
        """The builder arguments of the model: the variant's, with any field given here."""
        arch = dict(VARIANTS[self.model]) if self.model in VARIANTS else {}
        arch.update({f: getattr(self, f) for f in ARCHITECTURE if getattr(self, f) is not None})
        return arch

    def replace(self, **overrides):
        """A copy with `overrides` (field names) applied and validated."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"Unknown training option(s) {unknown}; known: {field_names()}.")
        return dataclasses.replace(self, **overrides)

    def override(self, assignments):
        """A copy with `["key=value", ...]` strings applied (values parsed by field type)."""
        overrides = {}
        for assignment in assignments:
            key, sep, value = assignment.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise ValueError(f"Override {assignment!r} must look like key=value.")
            overrides[key] = parse_value(key, value.strip())
        return self.replace(**overrides)

    def to_dict(self):
        return dataclasses.asdict(self)


def field_names():
    return [f.name for f in dataclasses.fields(TrainConfig)]


def _field_type(key):
    hints = typing.get_type_hints(TrainConfig)
    if key not in hints:
        raise ValueError(f"Unknown training option {key!r}; known: {field_names()}.")
    return hints[key]


def _parse_bool(text):
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false).")


def parse_value(key, text):
    """`text` converted to the type of field `key` ("none" gives None where allowed)."""
    kind = _field_type(key)
    options = typing.get_args(kind) if typing.get_origin(kind) is Union else (kind,)
    if text.lower() in ("none", "null") and type(None) in options:
        return None
    errors = []
    for option in (o for o in options if o is not type(None)):
        try:
            if option is bool:
                return _parse_bool(text)
            if option is tuple:
                return tuple(float(v) for v in text.strip("()[]").split(","))
            if option is int:
                return int(text)
            return option(text)
        except ValueError as error:
            errors.append(str(error))
    raise ValueError(f"Bad value for {key}: {text!r} ({'; '.join(errors)}).")


# The small ViT and input of the `digits` recipes (supervised and masked patch prediction).
_DIGITS_VIT = dict(
    model="custom",
    patch_size=4,
    hidden_dim=64,
    depth=4,
    num_heads=4,
    mlp_dim=128,
    data="digits",
    image_size=16,
    crop_area=(0.8, 1.0),
    crop_aspect=(0.8, 1.25),
    flip=False,
)

RECIPES = {
    "finetune": dict(
        model="ViTB16",
        data="cifar10",
        image_size=384,
        batch_size=512,
        steps=10_000,
        optimizer="sgd",
        momentum=0.9,
        learning_rate=0.003,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=500,
        crop_area=(0.05, 1.0),
        flip=True,
        weights="imagenet21k",
        precision="auto",
    ),
    "scratch": dict(
        model="ViTB16",
        data="imagenet2012",
        image_size=224,
        eval_crop=0.875,
        batch_size=1024,
        epochs=300,
        optimizer="adamw",
        learning_rate=1e-3,
        lr_scaling="linear",
        reference_batch_size=1024,
        weight_decay=0.05,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=6_000,
        label_smoothing=0.1,
        dropout=0.0,
        drop_path=0.1,
        randaugment_ops=2,
        randaugment_factor=0.5,
        mixup=0.8,
        cutmix=1.0,
        precision="auto",
    ),
    "digits": dict(
        **_DIGITS_VIT,
        pooling="avg",
        batch_size=64,
        epochs=40,
        optimizer="adamw",
        learning_rate=2e-3,
        reference_batch_size=64,
        weight_decay=0.05,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=50,
        label_smoothing=0.1,
        drop_path=0.1,
        shuffle_buffer=2_000,
        precision="float32",
    ),
    "masked_patch": dict(
        model="ViTB16",
        data="imagenet2012",
        image_size=224,
        batch_size=4096,
        steps=1_000_000,
        optimizer="adam",
        learning_rate=2e-4,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=10_000,
        crop_area=(0.05, 1.0),
        flip=True,
        monitor="val_loss",
        precision="auto",
    ),
    "masked_patch_digits": dict(
        **_DIGITS_VIT,
        batch_size=64,
        steps=2_000,
        optimizer="adam",
        learning_rate=1e-3,
        reference_batch_size=64,
        weight_decay=0.0,
        clipnorm=1.0,
        schedule="cosine",
        warmup_steps=100,
        shuffle_buffer=2_000,
        monitor="val_loss",
        precision="float32",
    ),
}


def recipe(name="digits", **overrides):
    """The `TrainConfig` of recipe `name` with `overrides` applied."""
    if name not in RECIPES:
        raise ValueError(f"Unknown recipe {name!r}; expected one of {sorted(RECIPES)}.")
    return TrainConfig(**{**RECIPES[name], "recipe": name}).replace(**overrides)


FIELD_HELP = {
    "data": "'digits', a tensorflow-datasets name (cifar10, imagenet2012, ...), an image folder (CLASS/IMAGE) or an .npz",
    "data_dir": "tensorflow-datasets data_dir (default $TFDS_DATA_DIR or ~/tensorflow_datasets)",
    "manual_dir": "folder with manually downloaded archives (e.g. imagenet2012)",
    "download": "download and prepare a missing tensorflow-datasets dataset",
    "train_split": "training split (tfds slicing allowed, e.g. train[:90%%]); default train",
    "val_split": "validation split; default validation, else test, else a held-out part of train",
    "val_fraction": "fraction of the training data held out when there is no validation split (default 0.2 for digits, else 0.1)",
    "on_corrupt": "unreadable images in a folder: skip (with a warning) or error",
    "image_size": "training / evaluation resolution (square)",
    "crop_area": "inception crop: min,max fraction of the image area",
    "crop_aspect": "inception crop: min,max aspect ratio",
    "flip": "random horizontal flips",
    "eval_crop": "evaluation: resize the short side to image_size/eval_crop, then centre-crop",
    "randaugment_ops": "RandAugment operations per image (0: off)",
    "randaugment_factor": "RandAugment strength in [0, 1]",
    "mixup": "MixUp alpha (0: off)",
    "cutmix": "CutMix alpha (0: off)",
    "shuffle_buffer": "shuffle buffer (examples)",
    "deterministic": "reproducible input order, augmentation and ops (slower)",
    "seed": "random seed",
    "model": "a variant (ViTTi16 ... ViTH14) or 'custom' (then give patch_size ... mlp_dim)",
    "patch_size": "architecture override", "hidden_dim": "architecture override", "depth": "architecture override",
    "num_heads": "architecture override", "mlp_dim": "architecture override",
    "pooling": "token (class token) or avg",
    "representation_size": "width of a tanh pre-logits layer (pre-training), none for a linear head",
    "weights": "pretrained weights (a name or a checkpoint path) to fine-tune from",
    "dropout": "dropout rate", "attention_dropout": "attention dropout rate",
    "drop_path": "stochastic depth rate (last block)",
    "linear_probe": "train only the classification head (the encoder frozen)",
    "lora_rank": "LoRA: train rank-r updates of the encoder projections lora_targets and the head, nothing else; "
                 "RUN/lora.npz holds them (none: off)",
    "lora_targets": "LoRA: the projections, comma-separated among qkv, out, mlp",
    "remat": "recompute encoder block activations in the backward pass (less memory, ~1/3 more compute)",
    "batch_size": "global batch size of one optimizer step (all replicas, all accumulated micro-batches)",
    "accumulation_steps": "micro-batches accumulated per optimizer step",
    "epochs": "epochs (ignored when steps is set)",
    "steps": "total optimizer steps (overrides epochs)",
    "optimizer": "sgd, adam or adamw",
    "learning_rate": "peak learning rate (at reference_batch_size when lr_scaling is set)",
    "lr_scaling": "none, linear or sqrt scaling of the learning rate with batch_size/reference_batch_size",
    "reference_batch_size": "the batch size learning_rate was tuned for",
    "momentum": "SGD momentum", "beta_1": "Adam beta_1", "beta_2": "Adam beta_2",
    "weight_decay": "decoupled weight decay (not on biases, norms, class token, position embeddings)",
    "layer_decay": "layer-wise learning-rate decay: block i of depth L learns at layer_decay**(L-i) "
                   "times the rate, the embeddings at layer_decay**(L+1) (none: off)",
    "clipnorm": "clip gradients to this global norm (none: off)",
    "schedule": "cosine, linear or constant after the warm-up",
    "warmup_steps": "linear warm-up steps",
    "label_smoothing": "label smoothing",
    "mask_rate": "pretrain: fraction of the patches corrupted",
    "mask_split": "pretrain: fractions of the corrupted patches given the [mask] token, a random other patch, left unchanged",
    "mask_target": "pretrain: color (the mean colour, color_bits per channel, as classes) or pixels (L2 regression of the patch)",
    "color_bits": "pretrain: bits per channel of the mean-colour target (3: 512 classes)",
    "precision": "auto, float32 (exact), tf32 (float32 with TF32 matmuls on GPUs), mixed_bfloat16 or mixed_float16",
    "strategy": "auto, none, mirrored / tpu / multi_worker (tensorflow), data_parallel / model_parallel (jax), torch_ddp (torch)",
    "model_parallel_size": "devices per model replica with strategy model_parallel",
    "jit_compile": "auto, true or false",
    "output_dir": "run directory (default runs/RECIPE): checkpoints, best/final models, logs",
    "checkpoint_every": "also save the training state every N steps (0: at epoch ends only)",
    "fewshot_every": "every N steps (and at the first epoch's end and the run's end) log the few-shot linear "
                     "accuracy of the frozen representation on the run's data: fewshot.csv, log.csv, TensorBoard (0: off)",
    "monitor": "metric choosing the best model",
    "tensorboard": "write TensorBoard logs",
    "verbose": "auto, 0, 1 or 2 (Keras fit verbosity)",
    "recipe": "recipe name recorded with the run",
}
