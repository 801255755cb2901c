"""The named image-text checkpoints `ImageTextModel.from_checkpoint(name)` reads: Hugging Face hub
repositories holding both towers in transformers' layout (or OpenCLIP's: `OPEN_CLIP`), each name its
repository id (as the image towers' named weights are). Plain Python, no Keras.

A name's files (config, weights, image processor and tokenizer files) come from the hub through
`huggingface_hub.snapshot_download` (its cache); a folder holding them put by hand at
`local_folder(name)` is read instead, without network."""

import os
import types

from keras_vit.text.tokenizers import FILES as TOKENIZER_FILES
from keras_vit.weights.download import DownloadError
from keras_vit.weights.registry import cache_path

# repository id -> licence of its weights
CLIP = {f"openai/clip-vit-{size}": "mit" for size in ("base-patch32", "base-patch16", "large-patch14",
                                                      "large-patch14-336")}
CLIP.update({f"laion/CLIP-ViT-{name}": "mit" for name in ("B-32-laion2B-s34B-b79K", "L-14-laion2B-s32B-b82K",
                                                          "H-14-laion2B-s32B-b79K", "bigG-14-laion2B-39B-b160k")})
SIGLIP = {f"google/siglip-{name}": "apache-2.0" for name in (
    "base-patch16-224", "base-patch16-256", "base-patch16-384", "base-patch16-512", "large-patch16-256",
    "large-patch16-384", "so400m-patch14-224", "so400m-patch14-384")}
SIGLIP2 = {f"google/siglip2-{name}": "apache-2.0" for name in (
    "base-patch16-224", "base-patch16-256", "base-patch16-384", "base-patch16-512", "large-patch16-256",
    "large-patch16-384", "large-patch16-512", "so400m-patch14-224", "so400m-patch14-384", "so400m-patch16-256",
    "so400m-patch16-384", "so400m-patch16-512", "giant-opt-patch16-256", "giant-opt-patch16-384",
    "base-patch16-naflex", "so400m-patch16-naflex")}
# OpenCLIP repositories (`open_clip_config.json`, OpenCLIP's weights, CLIP's tokenizer files): EVA-CLIP (BAAI, MIT)
# and Perception Encoder core (Meta, Apache-2.0), each with the one weights file read of it.
OPEN_CLIP = {f"timm/{name}": ("mit", "open_clip_pytorch_model.bin") for name in (
    "eva02_base_patch16_clip_224.merged2b_s8b_b131k", "eva02_large_patch14_clip_224.merged2b_s4b_b131k",
    "eva02_large_patch14_clip_336.merged2b_s6b_b61k")}
OPEN_CLIP.update({f"timm/PE-Core-{name}": ("apache-2.0", "open_clip_model.safetensors")
                  for name in ("T-16-384", "S-16-384", "B-16", "L-14-336")})
NAMES = {**CLIP, **SIGLIP, **SIGLIP2, **{name: licence for name, (licence, _) in OPEN_CLIP.items()}}
# the files of a repository that are read (transformers' single or sharded safetensors)
PATTERNS = ("config.json", "preprocessor_config.json", "model.safetensors", "model.safetensors.index.json",
            "model-*.safetensors", *TOKENIZER_FILES)


def patterns(name):
    """The files of the named checkpoint `name` that are read: `PATTERNS`, or an OpenCLIP repository's."""
    return ("open_clip_config.json", OPEN_CLIP[name][1], *TOKENIZER_FILES) if name in OPEN_CLIP else PATTERNS


def local_folder(name):
    """Where the files of the named checkpoint `name` are picked up when put there by hand:
    `$KERAS_VIT_HOME/ImageText/<owner>--<repository>/`."""
    place = types.SimpleNamespace(variant="ImageText", name=name.replace("/", "--"), file_name="")
    return cache_path(place).rstrip(os.sep)


def _has_weights(folder):
    files = os.listdir(folder)
    if "open_clip_config.json" in files:
        return any(name.startswith("open_clip_") and name.endswith((".safetensors", ".bin")) for name in files)
    return "config.json" in files and any(name.startswith("model") and name.endswith((".safetensors", ".json"))
                                          for name in files)


def fetch(name, force_download=False):
    """The local folder of the named checkpoint `name`: `local_folder(name)` where it holds a
    config and weights, else the Hugging Face cache's snapshot (downloaded if needed; again with
    `force_download`). Offline or without `huggingface_hub`: a one-line `DownloadError` saying
    where to put the files."""
    if name not in NAMES:
        raise ValueError(f"{name!r} is not a named image-text checkpoint; expected a folder or one of "
                         f"{', '.join(NAMES)}.")
    target = local_folder(name)
    if os.path.isdir(target) and _has_weights(target) and not force_download:
        return target
    files = patterns(name)[:2] if name in OPEN_CLIP else PATTERNS[:3]
    where = f"put its {', '.join(files)} and tokenizer files in {target}; they are picked up from there"
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError(f"Reading {name} needs huggingface_hub (pip install huggingface_hub), or {where}.") from None
    try:
        return huggingface_hub.snapshot_download(repo_id=name, allow_patterns=list(patterns(name)),
                                                 **({"force_download": True} if force_download else {}))
    except Exception as error:  # the hub client's network and HTTP errors
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DownloadError(f"Could not download {name} from the Hugging Face hub ({reason}). To use it without "
                            f"downloading it here, {where}.") from error
