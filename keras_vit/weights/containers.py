"""Checkpoint containers: the file kinds, read as dicts of `LazyArray`s under their stored
names, with no knowledge of any format's key names.

The container is recognised from the content (magic bytes, zip member names), never from the
file name: NumPy `.npz`, `.safetensors` (read with the `safetensors` package, lazily), PyTorch
pickles (`.pth`, `.bin`; only through `torch.load(weights_only=True)`), Keras `.weights.h5`
(h5py) and `.keras` (its zip, read without Keras), and folders holding such files (a Hugging
Face model folder, a KerasHub preset). `.npy` members holding Python objects are refused;
bfloat16 tensors load as float32. Nothing here imports Keras.
"""

import dataclasses
import json
import math
import os
import pickle
import shutil
import struct
import tempfile
import zipfile
import zlib

import h5py
import numpy as np

from keras_vit.utils.files import atomic_path, parse_json, regular_file
from keras_vit.utils.limits import check_keras_config, check_shape, check_tensor_count
from keras_vit.weights.lazy import CRCCheck, FileArray, LazyArray, bfloat16_to_float32

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
MAX_SAFETENSORS_HEADER = 100 * 2**20
HF_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "open_clip_model.safetensors",
    "open_clip_pytorch_model.bin",
)
# OpenCLIP's model configuration beside its weights (meta "open_clip_config").
OPEN_CLIP_CONFIG = "open_clip_config.json"
KERAS_WEIGHT_SUFFIX = ".weights.h5"
# Float32 weights barely compress: a zip member or HDF5 dataset declaring more than this many
# times what it stores (plus a MiB, for small zero-filled tensors) is refused before it is read.
MAX_INFLATION = 16


def _inflation_limit(stored):
    return stored * MAX_INFLATION + 2**20


@dataclasses.dataclass
class RawCheckpoint:
    """A checkpoint's tensors under their stored names.

    `container`: "npz", "safetensors", "torch", "keras_h5" (`.weights.h5`) or "keras"
    (`.keras`); for a folder, that of its weights files. Keys of Keras weights are the names
    of the layers holding a variable, then `vars/<position>` (e.g.
    `encoder/encoderblock_0/ln_1/vars/0`); in a folder, prefixed by the file name
    (`model.weights.h5/...`). `meta`: "config" (the `config.json` of a folder or `.keras`
    file, or a Hugging Face one beside a weights file), "open_clip_config" (an OpenCLIP
    `open_clip_config.json` in the folder or beside the file), "files" (a folder's file names),
    "metadata" (a safetensors header's)."""

    path: str
    container: str
    tensors: dict
    meta: dict = dataclasses.field(default_factory=dict)


def _is_safetensors(path):
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9:
        return False
    (size,) = struct.unpack("<Q", head[:8])
    return 2 <= size <= MAX_SAFETENSORS_HEADER and head[8:9] == b"{"


def folder_weight_files(folder):
    """The weights files that reading `folder` as a checkpoint reads (none: not a checkpoint)."""
    names = sorted(os.listdir(folder))
    hf = [n for n in HF_WEIGHT_FILES if n in names]
    return hf[:1] or [n for n in names if n.endswith(KERAS_WEIGHT_SUFFIX)]


def reads_name(name):
    """Whether reading a checkpoint folder looks at a file called `name`."""
    return name in (*HF_WEIGHT_FILES, "config.json", "task.json", OPEN_CLIP_CONFIG) or name.endswith(KERAS_WEIGHT_SUFFIX)


def detect_container(path):
    """The container of `path` ("folder" for a folder with weights), from its content."""
    path = os.fspath(path)
    if os.path.isdir(path):
        if folder_weight_files(path):
            return "folder"
        raise ValueError(
            f"{path} is a folder without weights (expected one of {', '.join(HF_WEIGHT_FILES)}, "
            f"or *{KERAS_WEIGHT_SUFFIX} files)."
        )
    if not os.path.lexists(path):
        raise FileNotFoundError(f"No checkpoint file or folder at {path}.")
    with open(regular_file(path, "as a checkpoint"), "rb") as f:
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
    if _is_safetensors(path):
        return "safetensors"
    if head[:1] == b"\x80":
        return "torch"
    raise ValueError(
        f"{path}: unrecognised checkpoint format (expected .npz, .safetensors, a PyTorch "
        ".pth/.bin, a Hugging Face folder, .weights.h5 or .keras)."
    )


def open_checkpoint(path):
    """Opens `path` (a file or folder) as a `RawCheckpoint`."""
    path = os.fspath(path)
    container = detect_container(path)
    if container == "folder":
        return read_folder(path)
    if container == "npz":
        return RawCheckpoint(path, container, read_npz(path))
    if container == "safetensors":
        tensors, metadata = read_safetensors(path)
        return RawCheckpoint(path, container, tensors, {"metadata": metadata, **_sibling_config(path)})
    if container == "torch":
        return RawCheckpoint(path, container, read_torch(path), _sibling_config(path))
    if container == "keras_h5":
        return RawCheckpoint(path, container, read_weights_h5(path))
    return read_keras(path)


def check_complete(path):
    """Raises ValueError unless the file at `path` parses completely (zip members' CRC-32, a
    safetensors header that covers the file)."""
    container = detect_container(path)
    if container == "safetensors":
        read_safetensors(path)
    elif container in ("npz", "torch", "keras"):
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
        if bad is not None:
            raise ValueError(f"{path}: member {bad!r} is corrupt (CRC mismatch).")


# ------------------------------------------------------------------ npz


def _npz_member(zf, path, info):
    name = info.filename[: -len(".npy")]
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran, dtype = read_header(f)
        header_len = f.tell()
    source = f"{name!r} in {path}"
    check_shape(shape, source, allow_empty=True)
    declared = math.prod(shape) * dtype.itemsize
    if declared > info.file_size - header_len or info.file_size > _inflation_limit(info.compress_size):
        raise ValueError(
            f"{source}: declares a {shape} array ({declared} bytes) in a member of {info.file_size} bytes, "
            f"{info.compress_size} compressed; the file is damaged or crafted."
        )
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
        return bfloat16_to_float32(array) if bf16 else array

    return name, LazyArray(shape, np.float32 if bf16 else dtype, load, source)


def read_npz(path):
    """The arrays of an `.npz`: stored members are read straight from the file, compressed
    ones decompressed on demand, each checked against its CRC-32 as it is read in full;
    bfloat16 (`|V2`) arrays load as float32."""
    with zipfile.ZipFile(path) as zf:
        members = zf.infolist()
        check_tensor_count(len(members), path)
        return dict(_npz_member(zf, path, info) for info in members)


def write_npz(path, tensors):
    """A `.npz` with the keys of `tensors` (name -> LazyArray), as `np.savez` writes it, in
    float32, written atomically one tensor in memory at a time."""
    with atomic_path(path) as tmp, zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, tensor in tensors.items():
            array = np.ascontiguousarray(tensor.load(), dtype=np.float32)
            with zf.open(key + ".npy", "w", force_zip64=array.nbytes > 2**31) as f:
                np.lib.format.write_array(f, array, allow_pickle=False)


# ------------------------------------------------------------------ safetensors


SAFETENSORS_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": np.float32,  # bfloat16 loads as float32
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def _safe_open(path, source):
    from safetensors import SafetensorError, safe_open

    try:
        return safe_open(path, framework="numpy")
    except SafetensorError as error:
        raise ValueError(f"{source}: truncated or corrupt safetensors file ({error}).") from None


class SafetensorsArray(LazyArray):
    """A tensor of a safetensors file, or rows `start:stop` of it, read when loaded."""

    def __init__(self, path, name, shape, dtype, start=None, stop=None):
        self.path, self.name, self.start, self.stop = path, name, start, stop
        if start is not None:
            shape = (stop - start, *shape[1:])
        super().__init__(shape, dtype, self._read, f"{name!r} in {path}")

    def _read(self):
        with _safe_open(self.path, self.source) as f:
            array = f.get_slice(self.name)[self.start : self.stop] if self.start is not None else f.get_tensor(self.name)
        return array.astype(np.float32) if array.dtype != self.dtype else array

    def rows(self, start, stop):
        offset = self.start or 0
        return SafetensorsArray(self.path, self.name, self.shape, self.dtype, offset + start, offset + stop)

    def __getitem__(self, index):
        if not 0 <= index < self.shape[0]:
            raise IndexError(f"{self.source}: index {index} out of range for shape {self.shape}.")
        return self.rows(index, index + 1).reshape(*self.shape[1:])


def read_safetensors(path):
    """`(dict name -> LazyArray, metadata)` of a safetensors file: its header is read and
    checked against the file's size now, tensors when loaded; bfloat16 loads as float32."""
    with _safe_open(path, path) as f:
        metadata = f.metadata() or {}
        tensors = {}
        names = f.keys()
        check_tensor_count(len(names), path)
        for name in names:
            part = f.get_slice(name)
            dtype = SAFETENSORS_DTYPES.get(part.get_dtype())
            if dtype is None:
                raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {part.get_dtype()}.")
            tensors[name] = SafetensorsArray(path, name, part.get_shape(), dtype)
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (name -> LazyArray or array) to a safetensors file, atomically."""
    from safetensors.numpy import save_file

    arrays = {name: np.ascontiguousarray(t.load() if hasattr(t, "load") else t) for name, t in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(arrays, tmp, metadata={str(k): str(v) for k, v in (metadata or {}).items()})
# ------------------------------------------------------------------ PyTorch


def _torch_array(tensor):
    import torch

    if tensor.dtype == torch.bfloat16:
        return bfloat16_to_float32(tensor.contiguous().view(torch.int16).numpy())
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
    check_tensor_count(len(obj), path)
    tensors = {}
    for name, tensor in obj.items():
        if not isinstance(tensor, torch.Tensor):
            continue
        name = name[len("module."):] if name.startswith("module.") else name
        dtype = np.float32 if tensor.dtype == torch.bfloat16 else tensor.numpy().dtype
        tensors[name] = LazyArray(tuple(tensor.shape), dtype, lambda t=tensor: _torch_array(t), f"{name!r} in {path}")
    return tensors


# ------------------------------------------------------------------ Keras


def _check_stored(dataset, source):
    """Raises ValueError unless an HDF5 dataset stores what its shape declares (Keras writes
    them contiguous and uncompressed; a compressed one may inflate `MAX_INFLATION` times)."""
    if not isinstance(dataset, h5py.Dataset):
        raise ValueError(f"{source}: not an HDF5 dataset.")
    declared, stored = dataset.size * dataset.dtype.itemsize, dataset.id.get_storage_size()
    limit = _inflation_limit(stored) if dataset.compression else stored
    if declared > limit:
        raise ValueError(
            f"{source}: declares a {dataset.shape} tensor ({declared} bytes) but stores {stored} bytes; "
            "the file is damaged or crafted."
        )


def h5_array(dataset, source):
    """The values of one HDF5 dataset, read once its declared shape is bounded and matches
    what it stores (the inflation limit for a compressed one)."""
    _check_stored(dataset, source)
    return LazyArray(dataset.shape, dataset.dtype, lambda: dataset[()], source).load()


def _h5_variables(group, chain, out, where, prefix):
    variables = group.get("vars")
    if isinstance(variables, h5py.Group) and chain is not None:
        chain = chain + [variables.attrs.get("name", "?")]
        for j in range(len(variables)):
            key = prefix + "/".join(chain + ["vars", str(j)])
            dataset = variables[str(j)]
            _check_stored(dataset, f"{key!r} in {where}")
            check_tensor_count(len(out) + 1, where)
            out[key] = LazyArray(dataset.shape, dataset.dtype, lambda d=dataset: d[()], f"{key!r} in {where}")
    for name, child in group.items():
        # The root's "optimizer" group holds a compiled model's optimizer state, not weights.
        if name != "vars" and isinstance(child, h5py.Group) and not (chain is None and name == "optimizer"):
            _h5_variables(child, [] if chain is None else chain, out, where, prefix)


def read_weights_h5(source, where=None, prefix=""):
    """Key -> LazyArray for a Keras `.weights.h5` (a path or a binary file object): each
    variable under the names of the layers holding it, then `vars/<position>` (optimizer
    state left out)."""
    where = where or source
    try:
        handle = h5py.File(source, "r")
    except OSError as error:
        raise ValueError(f"{where}: corrupt or truncated HDF5 file ({error}).") from None
    tensors = {}
    _h5_variables(handle, None, tensors, where, prefix)
    if not tensors:
        raise ValueError(f"{where}: an HDF5 file without Keras weights.")
    return tensors


def _unpacked(archive, info, path):
    """A compressed member of a `.keras` zip unpacked, streamed, into an anonymous temporary
    file (not memory), refused past `MAX_INFLATION` times its compressed size."""
    limit = _inflation_limit(info.compress_size)
    if info.file_size > limit:
        raise ValueError(
            f"{path}: member {info.filename!r} declares {info.file_size} bytes unpacked from "
            f"{info.compress_size}; refusing it (weights compress at most {MAX_INFLATION} times)."
        )
    out = tempfile.TemporaryFile()
    with archive.open(info) as member:
        shutil.copyfileobj(member, out, 2**20)
    out.seek(0)
    return out


def read_keras(path):
    """A `.keras` file, without Keras: the variables of its `model.weights.h5` and its
    `config.json` (meta "config"). A damaged zip (CRC, truncation) is refused in one line."""
    try:
        archive = zipfile.ZipFile(path)
        config = parse_json(archive.read("config.json"))
        info = archive.getinfo("model.weights.h5")
        # h5py needs a seekable file: a stored member is read in place, a compressed one unpacked.
        member = archive.open(info) if info.compress_type == zipfile.ZIP_STORED else _unpacked(archive, info, path)
        if not isinstance(config, dict):
            raise ValueError(f"{path}: its config.json holds a {type(config).__name__}, not a JSON object.")
        check_keras_config(config, path)
        tensors = read_weights_h5(member, where=path)  # h5py reads a stored member to its end: its CRC is checked
    except (zipfile.BadZipFile, zlib.error, EOFError, UnicodeDecodeError, json.JSONDecodeError, KeyError) as error:
        raise ValueError(f"{path}: a damaged .keras file ({error}); get a fresh copy.") from None
    return RawCheckpoint(path, "keras", tensors, {"config": config})


# ------------------------------------------------------------------ folders


class JsonConfig(dict):
    """A JSON object read from `path` (its objects inside too): `get(key, default)` of a key
    recorded as null where the reader has a default (a value it needs) is a one-line ValueError,
    never read as the key's absence (e.g. DINOv3's `rope_theta: null` built as another model)."""

    def __init__(self, data, path):
        super().__init__({k: JsonConfig(v, path) if isinstance(v, dict) else v for k, v in data.items()})
        self.path = path

    def get(self, key, default=None):
        value = super().get(key, default)
        if value is None and default is not None and key in self:
            raise ValueError(f"{self.path}: {key} is null; expected a value like {default!r} (leave the key out for "
                             "its default).")
        return value


def read_json(path):
    """The JSON object in the regular file at `path` (a `JsonConfig`), or a one-line ValueError."""
    try:
        with open(regular_file(path, "as part of a checkpoint"), encoding="utf-8") as f:
            data = parse_json(f.read())
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path}: not a valid JSON file ({error}).") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object ({{...}}), found a {type(data).__name__}.")
    return JsonConfig(data, path)


def _sibling_config(path):
    """The Hugging Face `config.json` next to a weights file, if there is one, and OpenCLIP's."""
    folder = os.path.dirname(os.path.abspath(path))
    meta = _open_clip_config(folder)
    config = os.path.join(folder, "config.json")
    if os.path.isfile(config):
        data = read_json(config)
        if "model_type" in data:
            meta["config"] = data
    return meta


def _open_clip_config(folder):
    path = os.path.join(folder, OPEN_CLIP_CONFIG)
    return {"open_clip_config": read_json(path)} if os.path.lexists(path) else {}  # a FIFO, folder or loop: refused


def _read_weights_file(path):
    container = detect_container(path)
    if container == "safetensors":
        return read_safetensors(path)[0]
    if container == "torch":
        return read_torch(path)
    raise ValueError(f"{path}: a {container} file where safetensors or PyTorch weights were expected.")


def _shard_path(folder, index, shard):
    """The path of `shard`, named in the shard index `index`: a plain file name of a regular
    file in `folder` (a symlink to one, as in the Hugging Face cache, is followed)."""
    if not isinstance(shard, str) or shard in ("", ".", "..") or "/" in shard or "\\" in shard:
        raise ValueError(f"{index}: shard {shard!r} is not a plain file name in {folder}; refusing to read it "
                         "(each weight_map value must name a file in the index's folder).")
    return regular_file(os.path.join(folder, shard), f"as a shard named by {index}")


def _read_hf_weights(folder, name):
    path = os.path.join(folder, name)
    if not name.endswith(".index.json"):
        return _read_weights_file(path)
    index = read_json(path)
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict):
        raise ValueError(f"{path}: a shard index without a weight_map (tensor name -> shard file).")
    check_tensor_count(len(weight_map), path)
    tensors = {}
    for shard in sorted({_shard_path(folder, path, shard) for shard in weight_map.values()}):
        tensors.update(_read_weights_file(shard))
    return tensors


def read_folder(folder):
    """A folder of weights: Hugging Face single or sharded weight files, else its Keras
    `*.weights.h5` files (keys prefixed by the file name). Meta: "files" (the folder's file
    names), "config" (its `config.json`), "open_clip_config" (OpenCLIP's)."""
    names = sorted(os.listdir(folder))
    meta = {"files": names, **_open_clip_config(folder)}
    if "config.json" in names:
        meta["config"] = read_json(os.path.join(folder, "config.json"))
    files = folder_weight_files(folder)
    if not files:
        raise ValueError(f"{folder}: no weights file in the folder (expected {', '.join(HF_WEIGHT_FILES)} or "
                         f"*{KERAS_WEIGHT_SUFFIX}).")
    if files[0] in HF_WEIGHT_FILES:
        tensors = _read_hf_weights(folder, files[0])
        container = "safetensors" if "safetensors" in files[0] else "torch"
    else:
        tensors, container = {}, "keras_h5"
        for name in files:
            tensors.update(read_weights_h5(regular_file(os.path.join(folder, name), "as part of a checkpoint"), prefix=name + "/"))
    return RawCheckpoint(folder, container, tensors, meta)
