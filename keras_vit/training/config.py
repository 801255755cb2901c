"""`TrainConfig`: everything a training run needs, each field declared once (`fields.option`)
with its default, accepted values, help line and group; a config is validated when it is made.

Plain Python, no Keras: the command line lists and checks options before importing anything heavy.
"""

import dataclasses
import importlib.util
import math
import os
import typing
from typing import Optional, Union

from keras_vit.config import fields
from keras_vit.config.fields import option
from keras_vit.utils.limits import MAX_PIXELS
from keras_vit.data.naflex_inputs import check_seq_lens
from keras_vit.lora.targets import LORA_TARGETS, parse_lora_targets  # noqa: F401  (part of this module's interface)
from keras_vit.config.vit_config import DEPTHS, SIZES, ViTConfig
from keras_vit.variants import ARCHITECTURE_KEYS, FAMILIES, VARIANTS, list_models

OPTIMIZERS = ("sgd", "adam", "adamw", "muon", "lamb", "lion", "adafactor")
CROPS = ("inception", "simple")
LOSSES = ("ce", "bce")
SCHEDULES = ("cosine", "linear", "constant")
LR_SCALINGS = ("none", "linear", "sqrt")
PRECISIONS = ("auto", "float32", "tf32", "mixed_bfloat16", "mixed_float16")
STRATEGIES = {
    "tensorflow": ("auto", "none", "mirrored", "tpu", "multi_worker"),
    "jax": ("auto", "none", "data_parallel", "model_parallel"),
    "torch": ("auto", "none", "torch_ddp"),
}
MASK_TARGETS = ("color", "pixels")
TASKS = ("classification", "segmentation", "depth")
DENSE_HEADS = ("linear", "dpt", "eomt")
DISTILL_MODES = ("soft", "hard", "feature")
FEATURE_LOSSES = ("mse", "cosine")
# Bounds of the batch size and the step and epoch counts: beyond them TensorFlow's int32 / int64
# counters overflow; no real run comes near (2**20 images a step, 10**9 steps or epochs).
MAX_BATCH = 2**20
MAX_STEPS = 10**9
IMAGE_SIDES = f"[1, {math.isqrt(MAX_PIXELS)}]"  # a square image within `keras_vit.utils.limits`

DATA, MODEL, DISTILLATION, OPTIMISATION, PRETRAIN, SYSTEM, OUTPUTS = (
    "data", "model", "distillation", "optimisation", "masked patch prediction (pretrain)", "system", "outputs"
)


def check_decay(decay):
    """`decay` as a float, if it is a valid `layer_decay`."""
    if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 < decay <= 1:
        raise ValueError(f"layer_decay={decay!r} must be a number with 0 < layer_decay <= 1 (or None: off).")
    return float(decay)


def check_data(data):
    """`data` if it names a data set (a non-empty string or path)."""
    if not isinstance(data, (str, os.PathLike)) or not os.fspath(data).strip():
        raise ValueError(
            f"data={data!r} must name the data: 'digits', a tensorflow-datasets name, an image folder "
            "(CLASS/IMAGE) or an .npz file."
        )
    return data


def _check_split(split):
    split = fields.numbers_tuple("mask_split", 3, "fractions of the [mask] token, a random other patch, unchanged")(split)
    if min(split) < 0 or sum(split) <= 0:
        raise ValueError(
            f"mask_split={split} must be three fractions >= 0 ([mask] token, random other patch, unchanged), "
            "e.g. 0.8,0.1,0.1."
        )
    return split


def _is_utf8(path):
    """Whether the file system path `path` is UTF-8 (no undecodable bytes, kept as surrogates)."""
    try:
        os.fspath(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _backend():
    import keras

    return keras.backend.backend()


@dataclasses.dataclass
class _TrainFields:
    """The fields declared here; `TrainConfig` adds the model options of `MODEL_OPTIONS`."""

    task: str = option(
        "classification", "classification, or segmentation (DIR/images/NAME.jpg + DIR/masks/NAME.png, class ids, 255: "
        "not labelled) or depth (DIR/images + DIR/depth/NAME.png|npy) with a dense head; or a tensorflow-datasets "
        "builder with masks / depth (oxford_iiit_pet, cityscapes, nyu_depth_v2)", group=DATA, choices=TASKS)
    data: str = option(
        "digits", "'digits', a tensorflow-datasets name (cifar10, imagenet2012, ...), an image folder "
        "(CLASS/IMAGE) or an .npz", group=DATA, metavar="NAME|DIR|FILE", check=check_data)
    data_dir: Optional[str] = option(
        None, "tensorflow-datasets data_dir (default $TFDS_DATA_DIR or ~/tensorflow_datasets)", group=DATA,
        metavar="DIR")
    manual_dir: Optional[str] = option(
        None, "folder with manually downloaded archives (e.g. imagenet2012)", group=DATA, metavar="DIR")
    download: bool = option(True, "download and prepare a missing tensorflow-datasets dataset", group=DATA)
    train_split: Optional[str] = option(
        None, "training split (tfds slicing allowed, e.g. train[:90%]); default train", group=DATA, metavar="SPLIT")
    val_split: Optional[str] = option(
        None, "validation split; default validation, else test, else a held-out part of train", group=DATA,
        metavar="SPLIT")
    depth_scale: Optional[float] = option(
        None, "depth: a 16-bit depth PNG holds depth x this (KITTI 256, NYU's millimetres 1000); default: its values "
        "as they are", group=DATA, interval="(0, inf)")
    eval_window: str = option(
        "whole", "segmentation / depth evaluation: whole (each image resized to image_size) or slide (its short side "
        "resized to image_size, windows of image_size over it, outputs averaged where they overlap)", group=DATA,
        choices=("whole", "slide"))
    eval_stride: Optional[int] = option(
        None, "eval_window slide: the step between windows (default 2/3 of image_size, as mmseg's 512 / 341)",
        group=DATA, interval="[1, inf)")
    val_fraction: Optional[float] = option(
        None, "fraction of the training data held out when there is no validation split (default 0.2 for "
        "digits, else 0.1)", group=DATA, interval="(0, 1)")
    on_corrupt: str = option(
        "skip", "unreadable images in a folder: skip (with a warning) or error", group=DATA,
        choices=("skip", "error"))
    image_size: int = option(224, "training / evaluation resolution (square)", group=DATA, interval=IMAGE_SIDES)
    crop: str = option(
        "inception", "training crop: inception (random area / aspect, crop_area and crop_aspect) or simple "
        "(DeiT III: the shorter side resized, 4 pixels reflected around, a random square)", group=DATA,
        choices=CROPS)
    crop_area: tuple = option(
        (0.05, 1.0), "inception crop: min,max fraction of the image area", group=DATA, metavar="MIN,MAX",
        check=fields.numbers_tuple("crop_area", 2, "min,max fraction of the image area"))
    crop_aspect: tuple = option(
        (0.75, 4 / 3), "inception crop: min,max aspect ratio", group=DATA, metavar="MIN,MAX",
        check=fields.numbers_tuple("crop_aspect", 2, "min,max aspect ratio"))
    flip: bool = option(True, "random horizontal flips", group=DATA)
    eval_crop: float = option(
        1.0, "evaluation: resize the short side to image_size/eval_crop, then centre-crop", group=DATA,
        interval="(0, 1]")
    randaugment_ops: int = option(0, "RandAugment operations per image (0: off)", group=DATA, interval="[0, inf)")
    randaugment_factor: float = option(0.5, "RandAugment strength in [0, 1]", group=DATA, interval="[0, 1]")
    three_augment: bool = option(
        False, "DeiT III's 3-Augment: one of grayscale, solarisation, Gaussian blur per image", group=DATA)
    color_jitter: float = option(
        0.0, "brightness, contrast and saturation jitter strength (0: off; DeiT III 0.3)", group=DATA,
        interval="[0, 1)")
    random_erasing: float = option(
        0.0, "probability of erasing one random box per image with noise (0: off; DeiT 0.25)", group=DATA,
        interval="[0, 1]")
    repeated_augment: int = option(
        1, "repeated augmentation: each drawn image this many times per batch stream, differently augmented "
        "(1: off; DeiT 3)", group=DATA, interval="[1, 16]")
    mixup: float = option(0.0, "MixUp alpha (0: off; DeiT 0.8)", group=DATA, interval="[0, 100]")
    cutmix: float = option(0.0, "CutMix alpha (0: off; DeiT 1.0)", group=DATA, interval="[0, 100]")
    shuffle_buffer: int = option(10_000, "shuffle buffer (examples)", group=DATA, interval="[1, inf)")
    deterministic: bool = option(False, "reproducible input order, augmentation and ops (slower)", group=DATA)
    seed: int = option(0, "random seed", group=DATA, interval="[0, inf)")

    model: str = option(
        "ViTB16", "a named model (`keras-vit list-models`: the paper's ViTTi16 ... ViTH14, R50ViTB16, and every "
        "family's, e.g. DINOv2S14, SigLIPB16, CLIPB16) or 'custom' (then give patch_size ... mlp_dim); the fields "
        "below override its architecture", group=MODEL, choices=(*list_models(), "custom"), metavar="NAME")
    patch_size: Optional[int] = option(None, "architecture override", group=MODEL, interval=SIZES)
    hidden_dim: Optional[int] = option(None, "architecture override", group=MODEL, interval=SIZES)
    depth: Optional[int] = option(None, "architecture override", group=MODEL, interval=DEPTHS)
    num_heads: Optional[int] = option(None, "architecture override", group=MODEL, interval=SIZES)
    mlp_dim: Optional[int] = option(None, "architecture override", group=MODEL, interval=SIZES)
    pooling: Optional[str] = option(
        None, "token (class token) or avg (mean of the patch tokens); none: the model's own (its class token if it "
        "has one, else the mean; SigLIP's MAP head)", group=MODEL, choices=("token", "avg"))
    class_token: Optional[bool] = option(
        None, "prepend the class token (false: the paper's class-token-free model, App. D.3; pool with avg); none: "
        "the model's own (the paper's variants have one)", group=MODEL)
    naflex_seq_lens: Optional[tuple] = option(
        None, "train a NaFlex model (naflex=True; needs class_token=false and pooling avg) on images at their own "
        "aspect ratio: each batch draws its patch budget from these and holds batch_size*max/budget images "
        "(timm's NaFlex loader; e.g. 128,256,576,784,1024); validation at the largest (none: square images)",
        group=MODEL, metavar="N,N,...", check=check_seq_lens)
    naflex_pack: bool = option(
        False, "with naflex_seq_lens: pack each training and validation batch, its images by first fit into "
        "sequences of its budget with attention within each image and one loss term per image (less "
        "padding; the saved model is the plain NaFlex model)", group=MODEL)
    representation_size: Optional[int] = option(
        None, "width of a tanh pre-logits layer (pre-training), none for a linear head", group=MODEL,
        interval="[1, inf)")
    weights: Optional[str] = option(
        None, "pretrained weights (a name or a checkpoint path) to fine-tune from", group=MODEL, metavar="NAME|PATH")
    dropout: float = option(0.0, "dropout rate", group=MODEL, interval="[0, 1)")
    attention_dropout: float = option(0.0, "attention dropout rate", group=MODEL, interval="[0, 1)")
    drop_path: float = option(0.0, "stochastic depth rate (last block)", group=MODEL, interval="[0, 1)")
    linear_probe: bool = option(False, "train only the classification head (the encoder frozen)", group=MODEL)
    lora_rank: Optional[int] = option(
        None, "LoRA: train rank-r updates of the encoder projections lora_targets and the head, nothing else; "
        "RUN/lora.npz holds them (none: off)", group=MODEL, interval="[1, inf)")
    lora_targets: str = option(
        "qkv,out", "LoRA: the projections, comma-separated among qkv, out, mlp", group=MODEL, metavar="NAMES",
        check=parse_lora_targets)
    head: str = option(
        "linear", "segmentation / depth: the head, linear (DINOv2's linear evaluation), dpt or eomt "
        "(segmentation: EoMT's queries in the last blocks, its matching loss and mask annealing)", group=MODEL,
        choices=DENSE_HEADS)
    freeze_backbone: bool = option(
        False, "segmentation / depth: train the head only, the ViT frozen (DINOv2's linear protocol)", group=MODEL)
    remat: bool = option(
        False, "recompute encoder block activations in the backward pass (less memory, ~1/3 more compute)",
        group=MODEL)

    teacher: Optional[str] = option(
        None, "a frozen teacher (inference mode, the run's precision): a run folder, a .keras file, or a checkpoint "
        "path or name keras_vit.from_checkpoint reads; it sees each augmented image resized and scaled as its own "
        "preprocessing wants (needs distill)", group=DISTILLATION, metavar="RUN|FILE|NAME")
    distill: Optional[str] = option(
        None, "soft (KL of the temperature-scaled logits times T^2), hard (DeiT: the teacher's class as a second "
        "target) or feature (a learned projection of the student's pooled feature against the teacher's); a "
        "student with distillation_token trains its distillation head on the teacher (needs teacher)",
        group=DISTILLATION, choices=DISTILL_MODES)
    distill_temperature: float = option(
        1.0, "soft distillation: the softmax temperature T", group=DISTILLATION, interval="(0, inf)")
    distill_alpha: float = option(
        0.5, "the loss is (1 - alpha) * label loss + alpha * distillation loss", group=DISTILLATION,
        interval="[0, 1]")
    distill_feature_loss: str = option(
        "mse", "feature distillation: mse or cosine (1 - cosine similarity) of the projected student feature and "
        "the teacher's", group=DISTILLATION, choices=FEATURE_LOSSES)

    batch_size: int = option(
        512, "global batch size of one optimizer step (all replicas, all accumulated micro-batches)",
        group=OPTIMISATION, interval=f"[1, {MAX_BATCH}]")
    accumulation_steps: int = option(
        1, "micro-batches accumulated per optimizer step", group=OPTIMISATION, interval=f"[1, {MAX_BATCH}]")
    epochs: int = option(10, "epochs (ignored when steps is set)", group=OPTIMISATION, interval=f"[1, {MAX_STEPS}]")
    steps: Optional[int] = option(
        None, "total optimizer steps, exactly (overrides epochs; the last epoch runs what is left)", group=OPTIMISATION, interval=f"[1, {MAX_STEPS}]")
    optimizer: str = option(
        "sgd", "sgd, adam, adamw, muon (Keras' Muon for the hidden kernels, its AdamW step for embeddings, head, "
        "norms and biases), lamb (DeiT III), lion or adafactor (Keras' own)", group=OPTIMISATION, choices=OPTIMIZERS)
    learning_rate: float = option(
        0.003, "peak learning rate (at reference_batch_size when lr_scaling is set)", group=OPTIMISATION,
        interval="[0, inf)")
    lr_scaling: str = option(
        "none", "none, linear or sqrt scaling of the learning rate with batch_size/reference_batch_size",
        group=OPTIMISATION, choices=LR_SCALINGS)
    reference_batch_size: int = option(
        512, "the batch size learning_rate was tuned for", group=OPTIMISATION, interval="[1, inf)")
    momentum: float = option(
        0.9, "SGD momentum; Muon's (Nesterov) momentum (Muon's own default: 0.95)", group=OPTIMISATION,
        interval="[0, 1)")
    beta_1: float = option(0.9, "first-moment decay of Adam, AdamW, LAMB and Muon's AdamW step, Lion's interpolation", group=OPTIMISATION, interval="[0, 1)")
    beta_2: Optional[float] = option(
        None, "second-moment decay of Adam, AdamW, LAMB and Muon's AdamW step, Lion's momentum decay (none: the "
        "optimizer's own, 0.999; Lion 0.99)", group=OPTIMISATION, interval="[0, 1)")
    weight_decay: float = option(
        0.0, "decoupled weight decay (not on biases, norms, class token, position embeddings)",
        group=OPTIMISATION, interval="[0, inf)")
    layer_decay: Optional[float] = option(
        None, "layer-wise learning-rate decay: block i of depth L learns at layer_decay**(L-i) times the rate, "
        "the embeddings at layer_decay**(L+1) (none: off)", group=OPTIMISATION, check=check_decay)
    clipnorm: Optional[float] = option(
        1.0, "clip gradients to this global norm (none: off)", group=OPTIMISATION, interval="[0, inf)")
    schedule: str = option(
        "cosine", "cosine, linear or constant after the warm-up", group=OPTIMISATION, choices=SCHEDULES)
    warmup_steps: int = option(500, "linear warm-up steps", group=OPTIMISATION, interval="[0, inf)")
    ema_decay: float = option(
        0.0, "keep an exponential moving average of the trained weights with this decay per optimizer update "
        "(e.g. 0.999); validation, best.keras and the final model use it (0: off)", group=OPTIMISATION,
        interval="[0, 1)")
    label_smoothing: float = option(0.0, "label smoothing", group=OPTIMISATION, interval="[0, 1)")
    loss: str = option(
        "ce", "ce (softmax cross-entropy) or bce (binary cross-entropy of each class on the one-hot or mixed "
        "targets, DeiT III)", group=OPTIMISATION, choices=LOSSES)

    mask_rate: float = option(0.5, "fraction of the patches corrupted", group=PRETRAIN, interval="(0, 1]")
    mask_split: tuple = option(
        (0.8, 0.1, 0.1), "fractions of the corrupted patches given the [mask] token, a random other patch, "
        "left unchanged", group=PRETRAIN, metavar="MASK,RANDOM,SAME", check=_check_split)
    mask_target: str = option(
        "color", "color (the mean colour, color_bits per channel, as classes) or pixels (L2 regression of "
        "the patch)", group=PRETRAIN, choices=MASK_TARGETS)
    color_bits: int = option(
        3, "bits per channel of the mean-colour target (3: 512 classes)", group=PRETRAIN, interval="[1, 8]")

    precision: str = option(
        "auto", "auto, float32 (exact), tf32 (float32 with TF32 matmuls on GPUs), mixed_bfloat16 or "
        "mixed_float16", group=SYSTEM, choices=PRECISIONS)
    strategy: str = option(
        "auto", "auto, none, mirrored / tpu / multi_worker (tensorflow), data_parallel / model_parallel (jax), "
        "torch_ddp (torch)", group=SYSTEM, choices=tuple(dict.fromkeys(s for names in STRATEGIES.values() for s in names)))
    model_parallel_size: int = option(
        2, "devices per model replica with strategy model_parallel", group=SYSTEM, interval="[1, inf)")
    host_timeout: float = option(
        300.0, "multi-host runs: seconds after which a silent host counts as lost and every other one exits",
        group=SYSTEM, interval="[1, 86400]")
    jit_compile: Union[bool, str] = option(
        "auto", "auto, true or false", group=SYSTEM, choices=("auto", True, False), metavar="auto|true|false")

    output_dir: Optional[str] = option(
        None, "run directory (default runs/RECIPE): checkpoints, best/final models, logs", group=OUTPUTS,
        metavar="DIR")
    checkpoint_every: int = option(
        0, "also save the training state every N steps (0: at epoch ends only)", group=OUTPUTS, interval="[0, inf)")
    fewshot_every: int = option(
        0, "every N steps (and at the first epoch's end and the run's end) log the few-shot linear accuracy of the "
        "frozen representation on the run's data: fewshot.csv, log.csv, TensorBoard (0: off)", group=OUTPUTS,
        interval="[0, inf)")
    monitor: str = option("val_accuracy", "metric choosing the best model", group=OUTPUTS, metavar="METRIC")
    tensorboard: bool = option(True, "write TensorBoard logs", group=OUTPUTS)
    verbose: Union[int, str] = option(
        "auto", "auto, 0, 1 or 2 (Keras fit verbosity)", group=OUTPUTS, choices=("auto", 0, 1, 2),
        metavar="auto|0|1|2")
    recipe: str = option("custom", "recipe name recorded with the run", group=OUTPUTS)

    def __post_init__(self):
        fields.validate(self)
        if self.model == "custom":
            missing = [key for key in ARCHITECTURE_KEYS if getattr(self, key) is None]
            if missing:
                raise ValueError(f"model='custom' needs {', '.join(missing)}.")
        if self.layer_decay is not None and self.optimizer == "muon":
            raise ValueError("layer_decay works with every optimizer but muon (sgd, adam, adamw, lamb, lion, adafactor); "
                             "set layer_decay=none.")
        if self.loss == "bce" and self.label_smoothing:
            raise ValueError("loss=bce takes no label_smoothing (DeiT III trains without it); set label_smoothing=0.")
        if self.lora_rank and self.linear_probe:
            raise ValueError("lora_rank and linear_probe exclude each other: LoRA trains the head too.")
        if self.tensorboard and self.output_dir and not _is_utf8(self.output_dir):
            raise ValueError(f"output_dir={self.output_dir!r} is not UTF-8 text, which TensorBoard's writer needs; "
                             "choose another folder name, or set tensorboard=false.")
        if (self.teacher is None) != (self.distill is None):
            given, missing = ("teacher", "distill soft|hard|feature") if self.distill is None else ("distill", "teacher PATH")
            raise ValueError(f"{given} needs {missing}: distillation takes a teacher and a mode (distill=soft, hard "
                             "or feature, teacher=a run folder, .keras file or checkpoint).")
        if self.naflex_seq_lens:
            self._check_naflex()
        elif self.naflex_pack:
            raise ValueError("naflex_pack=true packs NaFlex batches: it needs naflex_seq_lens (e.g. 64,128,256).")
        self._check_model_options()
        self._check_task()
        if self.batch_size % self.accumulation_steps:
            raise ValueError(
                f"batch_size={self.batch_size} (per optimizer step) must be divisible by "
                f"accumulation_steps={self.accumulation_steps}."
            )

    def _check_naflex(self):
        class_token = self.architecture().get("class_token", True)
        pooling = self.head_pooling or ("token" if class_token else "avg")
        unsupported = {"class_token": class_token, "pooling=token": pooling == "token",
                       "mixup": self.mixup, "cutmix": self.cutmix, "randaugment_ops": self.randaugment_ops,
                       "crop=simple": self.crop == "simple", "three_augment": self.three_augment,
                       "color_jitter": self.color_jitter, "random_erasing": self.random_erasing,
                       "repeated_augment": self.repeated_augment > 1,
                       "fewshot_every": self.fewshot_every, "teacher": self.teacher}
        given = [name for name, value in unsupported.items() if value]
        if given:
            raise ValueError(f"naflex_seq_lens trains a NaFlex model, which takes no {', '.join(given)}: set "
                             "class_token=false, pooling=avg, mixup=0, cutmix=0, randaugment_ops=0, fewshot_every=0 and leave the "
                             "crop, three_augment, color_jitter, random_erasing and repeated_augment at their defaults.")

    def _check_task(self):
        if self.eval_stride is not None and self.eval_window != "slide":
            raise ValueError(f"eval_stride={self.eval_stride} is the step of eval_window=slide; set eval_window=slide.")
        if self.depth_scale is not None and self.task != "depth":
            raise ValueError(f"depth_scale={self.depth_scale} is for task depth (16-bit depth PNGs), not {self.task}.")
        if self.task == "classification":
            if self.freeze_backbone:
                raise ValueError("freeze_backbone is for task segmentation / depth; a classifier trains its head "
                                 "alone with linear_probe=true.")
            if self.eval_window != "whole":
                raise ValueError("eval_window=slide is for task segmentation / depth (a classifier is evaluated on "
                                 "the centre crop, eval_crop).")
            return
        unsupported = {"mixup": self.mixup, "cutmix": self.cutmix, "randaugment_ops": self.randaugment_ops,
                       "naflex_seq_lens": self.naflex_seq_lens,
                       "fewshot_every": self.fewshot_every, "lora_rank": self.lora_rank,
                       "linear_probe": self.linear_probe, "representation_size": self.representation_size,
                       "teacher": self.teacher}
        if self.head == "eomt" and (self.task != "segmentation" or self.freeze_backbone):
            raise ValueError("head=eomt segments (task=segmentation) with the queries it joins to the ViT's last "
                             "blocks, which train with it: freeze_backbone=true is not its option.")
        if self.head == "eomt" and self.jit_compile is True and _backend() == "tensorflow":
            raise ValueError("head=eomt matches its predictions on the host (tf.numpy_function), which XLA cannot "
                             "compile: jit_compile=auto or false on TensorFlow.")
        given = [name for name, value in unsupported.items() if value]
        if given:
            raise ValueError(f"task={self.task} takes no {', '.join(given)} (classification options); unset them "
                             "(freeze_backbone=true trains the dense head alone).")

    @property
    def writes_tensorboard(self):
        """Whether the run writes TensorBoard logs: asked for (`tensorboard`) and the package is installed."""
        return self.tensorboard and importlib.util.find_spec("tensorboard") is not None

    @property
    def micro_batch_size(self):
        """The global batch of one forward / backward pass (`batch_size / accumulation_steps`)."""
        return self.batch_size // self.accumulation_steps

    @property
    def run_dir(self):
        return self.output_dir or os.path.join("runs", self.recipe)

    def architecture(self):
        """The builder arguments of the model: the named model's (its family file's, `families.MODELS`), with
        any field given here; the class token where set."""
        named = {key: value for key, value in dict(FAMILIES.get(self.model) or VARIANTS.get(self.model) or {}).items()
                 if key not in NOT_ARCHITECTURE}
        named.update({key: getattr(self, key) for key in ARCHITECTURE_KEYS if getattr(self, key) is not None})
        return {**named, **({} if self.class_token is None else {"class_token": self.class_token})}

    @property
    def head_pooling(self):
        """The pooling the classification head reads: this run's, else the named model's own (None: the
        builder's choice, the class token if any, else the mean)."""
        return self.pooling or FAMILIES.get(self.model, {}).get("pooling")

    def model_options(self):
        """The builder options of `MODEL_OPTIONS` this run sets (the others: the variant's or the weights' own)."""
        return {name: getattr(self, name) for name in MODEL_OPTIONS if getattr(self, name) is not None}

    def _check_model_options(self):
        """Raises the builder's one-line ValueError for a combination it refuses (e.g. patch_drop_rate with rope)."""
        if self.model_options():
            naflex = {"naflex": True, "class_token": False} if self.naflex_seq_lens else {}
            ViTConfig(**{**self.architecture(), **naflex}, pooling=self.head_pooling, **self.model_options())

    def replace(self, **overrides):
        """A copy with `overrides` (field names) applied and validated."""
        known = [field.name for field in dataclasses.fields(self)]
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise ValueError(f"Unknown training option(s) {unknown}; known: {known}.")
        return dataclasses.replace(self, **overrides)

    def override(self, assignments):
        """A copy with `["key=value", ...]` strings applied (values parsed by field type)."""
        overrides = {}
        for assignment in assignments:
            key, sep, value = assignment.partition("=")
            key = key.strip().replace("-", "_")
            if not sep:
                raise ValueError(f"Override {assignment!r} must look like key=value.")
            overrides[key] = fields.parse(type(self), key, value.strip())
        return self.replace(**overrides)

    def to_dict(self):
        return dataclasses.asdict(self)


# The entries of a named model's table that a run sets itself (input size, scaling, head).
NOT_ARCHITECTURE = ("input_size", "preprocessing", "include_top", "pooling")

# The builder options a run may set (`--qk-norm true`, `--set norm=rmsnorm`), each declared once in
# `keras_vit.config.vit_config.ViTConfig`: a field here has its help, accepted values and check, and defaults to None
# (not set: the variant's, or the weights' own when fine-tuning).
MODEL_OPTIONS = ("distillation_token", "qk_norm", "norm", "qkv_bias", "proj_bias", "mlp_bias", "key_bias", "mlp",
                 "layer_scale_init", "patch_drop_rate", "patch_norm", "position_embedding", "sincos_form",
                 "preprocessing")


def _model_option(declared, kind):
    """`(name, type, field)` of the training field of the `ViTConfig` field `declared` of type `kind`."""
    meta = declared.metadata
    field = option(None, f"{meta['help']} (none: the model's own)", group=MODEL, choices=meta["choices"],
                   interval=meta["interval"], metavar=meta["metavar"], check=meta["check"])
    return declared.name, Optional[kind], field


_HINTS = typing.get_type_hints(ViTConfig)
TrainConfig = dataclasses.make_dataclass(
    "TrainConfig",
    [_model_option(f, _HINTS[f.name]) for f in dataclasses.fields(ViTConfig) if f.name in MODEL_OPTIONS],
    bases=(_TrainFields,),
    namespace={"__doc__": "Everything a training run needs (`keras-vit train --help` lists each field).",
               "__module__": __name__},
)


def parse_value(key, text):
    """`text` converted to the type of `TrainConfig` field `key` ("none" gives None where allowed)."""
    return fields.parse(TrainConfig, key, text)


def field_table():
    """The Markdown table of every `TrainConfig` field, by group (for the documentation)."""
    return fields.table(TrainConfig, skip=("recipe",))
