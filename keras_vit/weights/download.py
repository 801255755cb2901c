"""Downloads named checkpoints into the cache (`KERAS_VIT_HOME`, default ~/.keras/keras_vit).

Files hosted on the Hugging Face hub (timm's) go through the Hugging Face cache when
`huggingface_hub` is installed, so they share the user's cache, token and mirror (`HF_HOME`,
`HF_TOKEN`, `HF_ENDPOINT`). Other files, or without `huggingface_hub`, are downloaded with
`keras.utils.get_file` into a private temporary folder next to their cache path, checked, and
only then renamed into place; the folders that killed downloads left behind are removed first.

Each file is checked once, in full, when it is first used (downloaded, found in the Hugging
Face cache, or put at the cache path by hand): its size and sha256 against the entry's where
known, and a parse of the whole file, so a truncated or corrupt file fails. Its size, sha256,
modification time and path are then recorded beside its cache path (`record_path`, written
atomically); later loads compare the file's size and modification time with the record and read
nothing more. A file that differs from its record (replaced, or a newer upstream revision in
the Hugging Face cache) is hashed: a different sha256 is refused in one line that says how to
fetch it again (`force_download=True`).
"""

import hashlib
import logging
import os

from keras_vit.utils.files import regular_file, remove, remove_stale, temporary_name, write_json
from keras_vit.weights import containers
from keras_vit.weights.registry import HUB_URL, cache_path

logger = logging.getLogger("keras_vit.weights")
RECORD_SUFFIX = ".sha256.json"
REFETCH = "force_download=True (PretrainedWeights, from_checkpoint; keras-vit convert --redownload)"


class DownloadError(OSError):
    """A named checkpoint could not be downloaded."""


def sha256_of(path, chunk=2**22):
    digest = hashlib.sha256()
    with open(regular_file(path, "to check its content"), "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify(path, entry):
    """Raises ValueError unless `path` is a complete, intact copy of `entry`'s file (its size
    and sha256 where the entry knows them, and a parse of the whole file); returns its sha256."""
    if entry.size is not None and os.path.getsize(path) != entry.size:
        raise ValueError(f"{path} has {os.path.getsize(path)} bytes, expected {entry.size}.")
    digest = sha256_of(path)
    if entry.sha256 is not None and digest != entry.sha256.lower():
        raise ValueError(f"{path}: sha256 {digest} does not match the expected {entry.sha256}.")
    containers.check_complete(path)
    return digest


def record_path(entry):
    """Where the record of `entry`'s checked file is kept: beside its cache path."""
    return cache_path(entry) + RECORD_SUFFIX


def _stamp(path):
    stat = os.stat(path)
    return {"path": os.path.realpath(path), "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _read_record(entry):
    try:
        record = containers.read_json(record_path(entry))
    except (OSError, ValueError):  # none, or not one this module wrote: check the file again
        return None
    return record if isinstance(record.get("sha256"), str) else None


def _write_record(path, entry, digest):
    os.makedirs(os.path.dirname(record_path(entry)), exist_ok=True)
    write_json(record_path(entry), {**_stamp(path), "sha256": digest, "url": entry.url})


def check_once(path, entry):
    """Checks `path`, `entry`'s file, unless its record says it was checked as it is now (same
    path, size and modification time); records it when checked. Raises ValueError when its
    content differs from the record's."""
    record = _read_record(entry)
    if record is not None and all(record.get(k) == v for k, v in _stamp(path).items()):
        return
    if record is None:
        digest = verify(path, entry)
    else:
        digest = sha256_of(path)
        if digest != record["sha256"]:
            raise ValueError(
                f"{path} is not the file checked when it was first downloaded (sha256 {digest[:16]}..., recorded "
                f"{record['sha256'][:16]}... in {record_path(entry)}); to fetch it again pass {REFETCH}."
            )
    _write_record(path, entry, digest)


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
    reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:300]
    return DownloadError(
        f"Could not download {entry.url} ({reason}). To use this checkpoint without "
        f"downloading it here, fetch that file by other means and put it at {target}; "
        "it is picked up from there. weights=None builds the model without it (random weights)."
    )


def _fetch_from_hub(entry, hub, target, force):
    import huggingface_hub

    try:
        path = huggingface_hub.hf_hub_download(**hub, **({"force_download": True} if force else {}))
    except Exception as error:
        raise _download_error(entry, target, error) from error
    if force:
        remove(record_path(entry))
    try:
        check_once(path, entry)
    except ValueError as error:
        raise ValueError(f"{error} (the Hugging Face cache's copy of {entry.url})") from None
    return path


def fetch(entry, force=False):
    """The local path of `entry`'s file: a copy at its cache path (put there by hand, or
    downloaded before), else the Hugging Face cache's (hub files), else downloaded into the
    cache. `force`: download it again (replacing the cached copy), and check it anew."""
    target = cache_path(entry)
    if os.path.lexists(target) and not force:
        try:
            check_once(regular_file(target, "as a cached checkpoint"), entry)
        except ValueError as error:
            raise ValueError(f"{error} Delete {target} to download it again.") from None
        return target
    hub = _hub_file(entry)
    if hub is not None:
        return _fetch_from_hub(entry, hub, target, force)
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
            digest = verify(path, entry)
        except Exception as error:
            raise _download_error(entry, target, error) from error
        remove(record_path(entry))
        os.replace(path, target)
    finally:
        remove(scratch)
    _write_record(target, entry, digest)
    logger.info("Cached %s at %s", entry.url, target)
    return target
