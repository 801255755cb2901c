"""Reads and writes the `.safetensors` format (an 8-byte header length, a JSON header, raw
little-endian tensors) without the `safetensors` package and without loading whole files."""

import json
import os
import struct

import numpy as np

from keras_vit.files import atomic_path
from keras_vit.weights.lazy import FileArray

DTYPES = {
    "F64": "<f8", "F32": "<f4", "F16": "<f2", "BF16": "<u2",
    "I64": "<i8", "I32": "<i4", "I16": "<i2", "I8": "i1", "U8": "u1", "BOOL": "?",
}
CODES = {np.dtype(v): k for k, v in DTYPES.items() if k != "BF16"}
MAX_HEADER = 100 * 2**20


def is_safetensors(path):
    """Whether the file starts like a safetensors file."""
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) < 9:
        return False
    (size,) = struct.unpack("<Q", head[:8])
    return 2 <= size <= MAX_HEADER and head[8:9] == b"{"


def read_header(path):
    """`(tensors, metadata, data_start)` of a safetensors file; checks the file is complete."""
    file_size = os.path.getsize(path)
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        if size > min(MAX_HEADER, file_size - 8):
            raise ValueError(f"{path}: not a valid safetensors file (header size {size}).")
        try:
            header = json.loads(f.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}: corrupt safetensors header ({error}).") from None
    metadata = header.pop("__metadata__", None) or {}
    data_start = 8 + size
    end = 0
    for name, info in header.items():
        begin, stop = info["data_offsets"]
        if info["dtype"] not in DTYPES:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}.")
        expected = int(np.prod(info["shape"])) * np.dtype(DTYPES[info["dtype"]]).itemsize
        if stop - begin != expected:
            raise ValueError(f"{path}: tensor {name!r} has {stop - begin} bytes, expected {expected}.")
        end = max(end, stop)
    if data_start + end != file_size:
        raise ValueError(
            f"{path}: truncated or corrupt safetensors file ({file_size} bytes, the header "
            f"describes {data_start + end})."
        )
    return header, metadata, data_start


def read_safetensors(path):
    """`(dict name -> LazyArray, metadata)`; bfloat16 tensors load as float32."""
    header, metadata, start = read_header(path)
    tensors = {
        name: FileArray(
            path,
            start + info["data_offsets"][0],
            DTYPES[info["dtype"]],
            info["shape"],
            source=f"{name!r} in {path}",
            bfloat16=info["dtype"] == "BF16",
        )
        for name, info in header.items()
    }
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """Writes `tensors` (name -> LazyArray or array) to `path` atomically, one tensor in
    memory at a time."""
    header, offset = {}, 0
    for name, tensor in tensors.items():
        dtype = np.dtype(tensor.dtype).newbyteorder("<")
        if dtype not in CODES:
            raise ValueError(f"Cannot write tensor {name!r} of dtype {tensor.dtype} to safetensors.")
        nbytes = int(np.prod(tensor.shape)) * dtype.itemsize
        header[name] = {"dtype": CODES[dtype], "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, tensor in tensors.items():
            array = tensor.load() if hasattr(tensor, "load") else np.asarray(tensor)
            f.write(np.ascontiguousarray(array, dtype=np.dtype(array.dtype).newbyteorder("<")).tobytes())
