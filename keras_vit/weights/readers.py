"""Opens a checkpoint file or folder as a dict of `LazyArray`s, whatever its container.

The container is recognised from the content (magic bytes, zip member names), never from the
file name: NumPy `.npz`, `.safetensors`, PyTorch pickles (`.pth`, `.bin`), a Hugging Face
model folder, Keras `.weights.h5` / `.keras`. Nothing is ever unpickled except by
`torch.load(weights_only=True)`, and `.npy` members holding Python objects are refused.
"""

import dataclasses
import json
import os
import pickle
import struct
import zipfile
import zlib

import numpy as np

from keras_vit.weights import keras_io, safetensors_io
from keras_vit.weights.lazy import CRCCheck, FileArray, LazyArray, decode_bfloat16

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
HF_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)


@dataclasses.dataclass
class RawCheckpoint:
    """A checkpoint's tensors under their own names. `container`: "npz", "safetensors",
    "torch", "keras" (variable paths); `meta`: e.g. the Hugging Face `config.json`."""

    path: str
    container: str
    tensors: dict
    meta: dict = dataclasses.field(default_factory=dict)


def detect_container(path):
    """The container format of `path`, from its content."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if any(os.path.exists(os.path.join(path, f)) for f in HF_WEIGHT_FILES):
            return "hf_dir"
        raise ValueError(
            f"{path} is a folder without Hugging Face weights (expected one of {', '.join(HF_WEIGHT_FILES)})."
        )
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No checkpoint file or folder at {path}.")
    with open(path, "rb") as f:
        head = f.read(8)
    if head == HDF5_MAGIC:
        return "keras_h5"
    if head[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as zf:
                names = zf.namelist()
        except zipfile.BadZipFile as error:
            raise ValueError(f"{path}: corrupt or truncated zip archive ({error}).") from None
        if "config.json" in names and "model.weights.h5" in names:
            return "keras"
        if any(n == "data.pkl" or n.endswith("/data.pkl") for n in names):
            return "torch"
        if names and all(n.endswith(".npy") for n in names):
            return "npz"
        raise ValueError(f"{path}: a zip archive that is neither .npz, a PyTorch checkpoint nor a .keras file.")
    if safetensors_io.is_safetensors(path):
        return "safetensors"
    if head[:1] == b"\x80":
        return "torch"
    raise ValueError(
        f"{path}: unrecognised checkpoint format (expected .npz, .safetensors, a PyTorch "
        ".pth/.bin, a Hugging Face folder, .weights.h5 or .keras)."
    )


def open_checkpoint(path):
    """Opens `path` as a `RawCheckpoint`."""
    path = os.fspath(path)
    container = detect_container(path)
    if container == "npz":
        return RawCheckpoint(path, "npz", read_npz(path))
    if container == "safetensors":
        tensors, metadata = safetensors_io.read_safetensors(path)
        return RawCheckpoint(path, "safetensors", tensors, {"metadata": metadata, **_sibling_config(path)})
    if container == "torch":
        return RawCheckpoint(path, "torch", read_torch(path), _sibling_config(path))
    if container == "hf_dir":
        return read_hf_dir(path)
    return RawCheckpoint(path, "keras", *keras_io.read_keras(path, container))


def _npz_member(zf, path, info):
    name = info.filename[: -len(".npy")]
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        header_len = f.tell()
    source = f"{name!r} in {path}"
    if dtype.hasobject:
        raise ValueError(f"{source} holds Python objects; refusing to unpickle it (allow_pickle=False).")
    bf16 = dtype.kind == "V" and dtype.itemsize == 2
    if info.compress_type == zipfile.ZIP_STORED and not fortran and not info.flag_bits & 1:
        with open(path, "rb") as raw:
            raw.seek(info.header_offset + 26)
            name_len, extra_len = struct.unpack("<HH", raw.read(4))
            start = info.header_offset + 30 + name_len + extra_len
            raw.seek(start)
            prefix = raw.read(header_len)
        offset, end = start + header_len, start + info.file_size
        crc = CRCCheck(info.CRC, prefix, offset, end, source)
        return name, FileArray(path, offset, dtype, shape, source, bfloat16=bf16, crc=crc)

    def load():
        try:
            with zipfile.ZipFile(path) as archive, archive.open(info.filename) as member:
                array = np.lib.format.read_array(member, allow_pickle=False)
                member.read()  # to the end, where zipfile checks the CRC-32
        except (zipfile.BadZipFile, zlib.error, EOFError) as error:
            raise ValueError(f"{source}: corrupt data ({error}); the file is damaged, get a fresh copy.") from None
        return decode_bfloat16(array) if bf16 else array

    return name, LazyArray(shape, np.float32 if bf16 else dtype, load, source)


def read_npz(path):
    """The arrays of an `.npz`: stored members are read straight from the file, compressed
    ones decompressed on demand, each checked against its CRC-32 as it is read in full;
    bfloat16 (`|V2`) arrays load as float32."""
    with zipfile.ZipFile(path) as zf:
        return dict(_npz_member(zf, path, info) for info in zf.infolist())


def _torch_array(tensor):
    import torch

    if tensor.dtype == torch.bfloat16:
        return decode_bfloat16(tensor.contiguous().view(torch.int16).numpy())
    return tensor.numpy()


def read_torch(path):
    """A PyTorch state dict, loaded with `torch.load(weights_only=True)` (no code runs)."""
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"Reading the PyTorch checkpoint {path} needs the `torch` package; install it or "
            "use the .safetensors version of the checkpoint."
        ) from None
    try:
        if path.endswith(".safetensors"):  # torch.load would hand such a name to safetensors
            with open(path, "rb") as f:
                obj = torch.load(f, map_location="cpu", weights_only=True)
        else:
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        reason = str(error).strip().splitlines()[0]
        raise ValueError(
            f"{path}: refused to load: the pickle holds objects other than tensors and plain "
            f"containers, which could run code (torch.load(weights_only=True) said: {reason})"
        ) from None
    except (RuntimeError, EOFError) as error:
        raise ValueError(f"{path}: corrupt or truncated PyTorch checkpoint ({error}).") from None
    for key in ("state_dict", "model", "module"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
    if not isinstance(obj, dict):
        raise ValueError(f"{path}: expected a state dict (name -> tensor), found {type(obj).__name__}.")
    tensors = {}
    for name, tensor in obj.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        name = name[len("module."):] if name.startswith("module.") else name
        dtype = np.float32 if tensor.dtype == torch.bfloat16 else tensor.numpy().dtype
        tensors[name] = LazyArray(tuple(tensor.shape), dtype, lambda t=tensor: _torch_array(t), f"{name!r} in {path}")
    return tensors


def _read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _sibling_config(path):
    """The Hugging Face `config.json` next to a weights file, if there is one."""
    config = os.path.join(os.path.dirname(os.path.abspath(path)), "config.json")
    if os.path.isfile(config):
        data = _read_json(config)
        if isinstance(data, dict) and "model_type" in data:
            return {"hf_config": data}
    return {}


def _read_weights_file(path):
    if safetensors_io.is_safetensors(path):
        return safetensors_io.read_safetensors(path)[0]
    return read_torch(path)


def _shard_path(folder, index, shard):
    """The path of `shard`, named in the shard index `index`: a plain file name of a regular
    file in `folder` (a symlink to one, as in the Hugging Face cache, is followed)."""
    if not isinstance(shard, str) or shard in ("", ".", "..") or "/" in shard or "\\" in shard:
        raise ValueError(f"{index}: shard {shard!r} is not a plain file name in {folder}; refusing to read it.")
    path = os.path.join(folder, shard)
    if not os.path.isfile(path):  # also False for devices, FIFOs and folders
        raise ValueError(f"{index}: shard {shard!r} is missing or not a regular file in {folder}.")
    return path


def read_hf_dir(folder):
    """A Hugging Face model folder: `config.json` plus single or sharded weight files."""
    config_path = os.path.join(folder, "config.json")
    meta = {"hf_config": _read_json(config_path)} if os.path.isfile(config_path) else {}
    for name in HF_WEIGHT_FILES:
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            continue
        if name.endswith(".index.json"):
            index = _read_json(path)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict):
                raise ValueError(f"{path}: a shard index without a weight_map (tensor name -> shard file).")
            tensors = {}
            for shard in sorted(set(weight_map.values()), key=str):
                tensors.update(_read_weights_file(_shard_path(folder, path, shard)))
        else:
            tensors = _read_weights_file(path)
        return RawCheckpoint(folder, "hf_dir", tensors, meta)
    raise ValueError(f"{folder}: no Hugging Face weights file found.")
