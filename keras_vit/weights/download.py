"""Downloads named checkpoints into the cache (`KERAS_VIT_HOME`, default ~/.keras/keras_vit).

Files hosted on the Hugging Face hub (timm's) go through the Hugging Face cache when
`huggingface_hub` is installed, so they share the user's cache, token and mirror (`HF_HOME`,
`HF_TOKEN`, `HF_ENDPOINT`), and are checked in place. Other files, or without
`huggingface_hub`, are downloaded with `keras.utils.get_file` (which checks the sha256 where
the registry knows it): a download goes to a private temporary folder next to its cache path,
is checked (size where known, and always a full parse of the file, so a truncated or corrupt
file fails), and only then renamed into place; the folders that killed downloads left
behind are removed first. A file put at the cache path by hand, or found in the Hugging Face
cache, is used as is, after the same checks and its sha256.
"""

import hashlib
import logging
import os
import re

from keras_vit.files import remove, remove_stale, temporary_name
from keras_vit.weights import containers
from keras_vit.weights.registry import cache_path

logger = logging.getLogger("keras_vit.weights")
HUB_URL = re.compile(r"https://huggingface\.co/(?P<repo_id>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")


class DownloadError(OSError):
    """A named checkpoint could not be downloaded."""


def sha256_of(path, chunk=2**22):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify(path, entry, hashed=False):
    """Raises ValueError unless `path` is a complete, intact copy of `entry`'s file (its
    sha256 too, unless `hashed`: already checked by the download)."""
    if entry.size is not None and os.path.getsize(path) != entry.size:
        raise ValueError(f"{path} has {os.path.getsize(path)} bytes, expected {entry.size}.")
    if not hashed and entry.sha256 is not None and sha256_of(path) != entry.sha256.lower():
        raise ValueError(f"{path}: sha256 {sha256_of(path)} does not match the expected {entry.sha256}.")
    containers.check_complete(path)


def _hub_file(entry):
    """`hf_hub_download` arguments for `entry`'s file, or None where it is not on the hub or
    `huggingface_hub` is not installed."""
    match = HUB_URL.fullmatch(entry.url)
    if match is None:
        return None
    try:
        import huggingface_hub  # noqa: F401
    except ImportError:
        return None
    return match.groupdict()


def _download_error(entry, target, error):
    return DownloadError(
        f"Could not download {entry.url} ({error}). To use this checkpoint without "
        f"downloading it here, fetch that file by other means and put it at {target}; "
        "it is picked up from there."
    )


def _fetch_from_hub(entry, hub, target):
    import huggingface_hub

    try:
        path = huggingface_hub.hf_hub_download(**hub)
    except Exception as error:
        raise _download_error(entry, target, error) from error
    try:
        verify(path, entry)
    except ValueError as error:
        raise ValueError(
            f"{error} (the Hugging Face cache's copy of {entry.url}; delete it there to download it again)"
        ) from None
    return path


def fetch(entry):
    """The local path of `entry`'s file: a copy put at its cache path by hand, else the
    Hugging Face cache's (hub files), else downloaded into the cache."""
    target = cache_path(entry)
    if os.path.exists(target):
        try:
            verify(target, entry)
        except ValueError as error:
            raise ValueError(f"{error} Delete {target} to download it again.") from None
        return target
    hub = _hub_file(entry)
    if hub is not None:
        return _fetch_from_hub(entry, hub, target)
    folder = os.path.dirname(target)
    os.makedirs(folder, exist_ok=True)
    remove_stale(folder)
    scratch = temporary_name(target)
    os.makedirs(scratch)
    try:
        try:
            import keras

            path = keras.utils.get_file(
                fname=entry.file_name, origin=entry.url, cache_dir=scratch, cache_subdir=".",
                file_hash=entry.sha256 and entry.sha256.lower(),
            )
            verify(path, entry, hashed=True)
        except Exception as error:
            raise _download_error(entry, target, error) from error
        os.replace(path, target)
    finally:
        remove(scratch)
    logger.info("Cached %s at %s", entry.url, target)
    return target
