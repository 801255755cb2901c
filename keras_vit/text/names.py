"""The named image-text checkpoints `ImageTextModel.from_checkpoint(name)` reads: Hugging Face hub
repositories holding both towers in transformers' layout (or OpenCLIP's: timm's SigLIP copies and
`OPEN_CLIP`), each name its repository id (as the image towers' named weights are). Plain Python, no Keras.

A name's files (config, weights, image processor and tokenizer files) come from the hub through
`huggingface_hub.snapshot_download` (its cache); a folder holding them put by hand at
`local_folder(name)` is read instead, without network. Each weights file is checked once, in full,
when first read (`keras_vit.weights.download.check_once`: its sha256 against `SHA256`'s pin where
one is declared, a parse of the whole file) and its sha256 recorded beside `local_folder(name)`'s
copy; a file that later differs from its record is refused in one line. A pinned file of another
kind (config, tokenizer) is hashed each time it is read."""

import fnmatch
import os
import types

from keras_vit.text.tokenizers import FILES as TOKENIZER_FILES
from keras_vit.utils.files import remove
from keras_vit.weights.download import DownloadError, check_once, record_path, sha256_of
from keras_vit.weights.registry import cache_path

# repository id -> licence of its weights. MetaCLIP 2 (worldwide, XLM-V tokenizer; `MetaClip2Model`).
METACLIP2 = {f"facebook/metaclip-2-worldwide-{name}": "cc-by-nc-4.0" for name in (
    "s16", "s16-384", "m16", "m16-384", "b32", "b32-384", "b16", "b16-384", "l14", "huge-quickgelu", "huge-378",
    "giant", "giant-378")}
# OpenCLIP's copies of SigLIP and SigLIP 2 (`open_clip_model.safetensors`, `open_clip_config.json`, HF tokenizer).
OPEN_CLIP_SIGLIP = {f"timm/ViT-{name}": "apache-2.0" for name in (
    "B-16-SigLIP", "B-16-SigLIP-256", "B-16-SigLIP-i18n-256", "B-16-SigLIP-384", "B-16-SigLIP-512", "L-16-SigLIP-256",
    "L-16-SigLIP-384", "SO400M-14-SigLIP", "SO400M-14-SigLIP-384", "SO400M-16-SigLIP-i18n-256", "B-32-SigLIP2-256",
    "B-16-SigLIP2", "B-16-SigLIP2-256", "B-16-SigLIP2-384", "B-16-SigLIP2-512", "L-16-SigLIP2-256", "L-16-SigLIP2-384",
    "L-16-SigLIP2-512", "SO400M-14-SigLIP2", "SO400M-14-SigLIP2-378", "SO400M-16-SigLIP2-256", "SO400M-16-SigLIP2-384",
    "SO400M-16-SigLIP2-512", "gopt-16-SigLIP2-256", "gopt-16-SigLIP2-384")}
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
NAMES = {**METACLIP2, **OPEN_CLIP_SIGLIP, **CLIP, **SIGLIP, **SIGLIP2,
         **{name: licence for name, (licence, _) in OPEN_CLIP.items()}}
# the files of a repository that are read (transformers' single or sharded safetensors, OpenCLIP's)
PATTERNS = ("config.json", "preprocessor_config.json", "model.safetensors", "model.safetensors.index.json",
            "model-*.safetensors", "open_clip_config.json", "open_clip_model.safetensors", *TOKENIZER_FILES)
# the files checked in full once and recorded
WEIGHTS = ("model.safetensors", "model-*.safetensors", "open_clip_model.safetensors", "open_clip_pytorch_model.bin")
# repository id -> {file name: its sha256}: a file's pin, declared once, checked whenever the file is
# read. Only hashes verified against the hub's files belong here; none are pinned yet (the records
# of `check_once` still refuse a file that changes after its first use).
SHA256 = {}


def patterns(name):
    """The files of the named checkpoint `name` that are read: `PATTERNS`, or an OpenCLIP repository's."""
    return ("open_clip_config.json", OPEN_CLIP[name][1], *TOKENIZER_FILES) if name in OPEN_CLIP else PATTERNS


def local_folder(name):
    """Where the files of the named checkpoint `name` are picked up when put there by hand:
    `$KERAS_VIT_HOME/ImageText/<owner>--<repository>/`."""
    place = types.SimpleNamespace(variant="ImageText", name=name.replace("/", "--"), file_name="")
    return cache_path(place).rstrip(os.sep)


def _has_weights(folder):
    def has(*names):
        return any(os.path.isfile(os.path.join(folder, name)) for name in names)

    return (has("config.json") and has("model.safetensors", "model.safetensors.index.json")) or (
        has("open_clip_config.json") and has("open_clip_model.safetensors", "open_clip_pytorch_model.bin"))


def _file(name, file_name):
    """The record of the named checkpoint's file `file_name` as `check_once` takes it: its pin
    (None where none is declared), its record beside `local_folder(name)`'s copy."""
    return types.SimpleNamespace(variant="ImageText", name=name.replace("/", "--"), file_name=file_name, size=None,
                                 sha256=SHA256.get(name, {}).get(file_name),
                                 url=f"https://huggingface.co/{name}/resolve/main/{file_name}")


def check_files(name, folder, force_download=False):
    """Checks the files of the named checkpoint `name` in `folder`: each weights file once, in
    full (its pin, a parse; recorded, then only compared with its record; `force_download`:
    checked anew), each other pinned file by its sha256. Raises ValueError in one line."""
    for file_name in sorted(os.listdir(folder)):
        entry, path = _file(name, file_name), os.path.join(folder, file_name)
        try:
            if any(fnmatch.fnmatch(file_name, pattern) for pattern in WEIGHTS):
                if force_download:
                    remove(record_path(entry))
                check_once(path, entry)
            elif entry.sha256 is not None and sha256_of(path) != entry.sha256.lower():
                raise ValueError(f"{path}: sha256 {sha256_of(path)} does not match the expected {entry.sha256}.")
        except ValueError as error:
            raise ValueError(f"{error} (a file of {name}; ImageTextModel.from_checkpoint(..., force_download=True) "
                             "fetches it again)") from None


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
        check_files(name, target)
        return target
    files = patterns(name)[:2] if name in OPEN_CLIP else PATTERNS[:3]
    where = f"put its {', '.join(files)} and tokenizer files in {target}; they are picked up from there"
    try:
        import huggingface_hub
    except ImportError:
        raise DownloadError(f"Reading {name} needs huggingface_hub (pip install huggingface_hub), or {where}.") from None
    try:
        folder = huggingface_hub.snapshot_download(repo_id=name, allow_patterns=list(patterns(name)),
                                                   **({"force_download": True} if force_download else {}))
    except Exception as error:  # the hub client's network and HTTP errors
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise DownloadError(f"Could not download {name} from the Hugging Face hub ({reason}). To use it without "
                            f"downloading it here, {where}.") from error
    check_files(name, folder, force_download)
    return folder
