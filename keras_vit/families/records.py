"""The records of a family file (`keras_vit.families`): how a family's images are scaled
(`Preprocessing`), one downloadable checkpoint (`WeightsEntry`), and `hub_entries`, the entries
of files on the Hugging Face hub. Plain Python, no Keras."""

import dataclasses

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
HALF = (0.5, 0.5, 0.5)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)  # OpenAI CLIP's
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)

TIMM_HUB = "https://huggingface.co/timm/{}/resolve/main/model.safetensors"  # timm's copies, by timm's name
HUB = "https://huggingface.co/{}/resolve/main/model.safetensors"  # a hub repository, by its repo id


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """`mean` / `std`: per RGB channel, in [0, 1] units; `interpolation`: "bilinear" or
    "bicubic"; `crop_fraction`: the evaluation centre crop (1.0: none)."""

    mean: tuple
    std: tuple
    interpolation: str
    crop_fraction: float

    @property
    def offset(self):
        """`255 * mean`: what is subtracted from 0-255 pixels."""
        return tuple(255 * m for m in self.mean)

    @property
    def scale(self):
        """`255 * std`: what the centred pixels are divided by."""
        return tuple(255 * s for s in self.std)


@dataclasses.dataclass(frozen=True)
class WeightsEntry:
    """One downloadable checkpoint of the named model `variant`. `classes`: head size (None: no
    head); `representation_size`: width of its pre_logits layer (None: none); `container`: its
    file kind ("npz", "safetensors", "torch": a PyTorch pickle, read with `weights_only=True`);
    `preprocessing`: the name of its inputs' scaling (a family's
    `PREPROCESSING`); `quick_gelu`: its MLPs' activation where the file does not record it
    (timm's CLIP towers: True for OpenAI's and the other quick-GELU trainings)."""

    variant: str
    name: str
    resolution: int
    classes: int
    representation_size: int
    container: str
    url: str
    license: str = "apache-2.0"
    sha256: str = None
    size: int = None
    aliases: tuple = ()
    preprocessing: str = "vit"
    quick_gelu: bool = None

    @property
    def file_name(self):
        return self.url.rsplit("/", 1)[-1]

    @property
    def description(self):
        head = f"{self.classes} classes" if self.classes else "no head"
        pre = f", pre_logits {self.representation_size}" if self.representation_size else ""
        return f"{self.resolution}px, {head}{pre}, {self.container}, {self.preprocessing} preprocessing"


def hub_entries(variant, preprocessing, resolution, classes, *names, url=TIMM_HUB, license="apache-2.0",
                quick_gelu=None):
    """The safetensors entries of `variant` named `names` (timm names, or repo ids with `url=HUB`:
    the entry is named by the part after the last "/")."""
    return [
        WeightsEntry(variant, name.rsplit("/", 1)[-1], resolution, classes, None, "safetensors", url.format(name),
                     license=license, preprocessing=preprocessing, quick_gelu=quick_gelu)
        for name in names
    ]


def timm_resolution(name):
    """The input size in a timm name ("vit_base_patch16_224.augreg_in21k" -> 224)."""
    return int(name.split(".")[0].rsplit("_", 1)[-1])
