"""Arrays that know their shape and load their values only when asked.

A checkpoint is opened as a dict of `LazyArray`s, so a loader can check every shape before
reading anything and then reads one tensor at a time: peak host memory stays near the model's
own size. Layout conversions (transpose, reshape, row slices, a leading index) compose lazily.
"""

import zlib

import ml_dtypes
import numpy as np

from keras_vit.utils.limits import check_shape


def bfloat16_to_float32(raw):
    """bfloat16 values stored as any 2-byte dtype -> float32."""
    return np.ascontiguousarray(raw).view(ml_dtypes.bfloat16).astype(np.float32)


class LazyArray:
    """`shape`, `dtype` (of the loaded values) and `source` (where it comes from, for error
    messages); `load()` returns a NumPy array. Every reader declares its tensors as these, so
    every declared shape is bounded here (`keras_vit.utils.limits.check_shape`), before any size is
    computed from it."""

    def __init__(self, shape, dtype, loader, source):
        check_shape(tuple(shape), source, allow_empty=True)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._loader = loader
        self.source = source

    @classmethod
    def wrap(cls, array, source):
        array = np.asarray(array)
        return cls(array.shape, array.dtype, lambda: array, source)

    def load(self):
        array = np.asarray(self._loader())
        if array.shape != self.shape:
            raise ValueError(f"{self.source}: stored data has shape {array.shape}, header says {self.shape}.")
        return array

    def _derive(self, shape, fn):
        return LazyArray(shape, self.dtype, lambda: fn(self.load()), self.source)

    def transpose(self, *axes):
        if len(axes) != len(self.shape):
            raise ValueError(f"{self.source}: shape {self.shape} has {len(self.shape)} axes; expected {len(axes)}.")
        return self._derive([self.shape[a] for a in axes], lambda a: np.transpose(a, axes))

    def reshape(self, *shape):
        size = int(np.prod(self.shape))
        known = int(np.prod([s for s in shape if s != -1]))
        if -1 in shape:
            if known == 0 or size % known:
                raise ValueError(f"{self.source}: cannot reshape {self.shape} to {shape}.")
            shape = tuple(size // known if s == -1 else s for s in shape)
        if int(np.prod(shape)) != size:
            raise ValueError(f"{self.source}: cannot reshape {self.shape} to {tuple(shape)}.")
        return self._derive(shape, lambda a: np.reshape(a, shape))

    def rows(self, start, stop):
        """`self[start:stop]` along the first axis."""
        return self._derive((stop - start, *self.shape[1:]), lambda a: a[start:stop])

    def __getitem__(self, index):
        """`self[index]` for an integer index into the first axis."""
        if not 0 <= index < self.shape[0]:
            raise IndexError(f"{self.source}: index {index} out of range for shape {self.shape}.")
        return self._derive(self.shape[1:], lambda a: a[index])

    def astype(self, dtype):
        out = self._derive(self.shape, lambda a: a.astype(dtype, copy=False))
        out.dtype = np.dtype(dtype)
        return out

    def __repr__(self):
        return f"LazyArray({self.shape}, {self.dtype}, {self.source!r})"


class CRCCheck:
    """Checks a stored zip member's CRC-32 while its bytes are read: the bytes before the data
    (`prefix`) at once, the data from `start` to `end` as it arrives, whole or in pieces. Pieces
    read out of order cannot be checked and are not; a read from `start` begins a new check."""

    def __init__(self, expected, prefix, start, end, source):
        self.expected, self.start, self.end, self.source = expected, start, end, source
        self._prefix_crc = zlib.crc32(prefix)
        self._crc, self._next = self._prefix_crc, start

    def update(self, offset, data):
        if offset == self.start:
            self._crc, self._next = self._prefix_crc, self.start
        elif offset != self._next:
            self._next = None
            return
        self._crc = zlib.crc32(data, self._crc)
        self._next = offset + data.nbytes
        if self._next == self.end and self._crc != self.expected:
            raise ValueError(
                f"{self.source}: corrupt data (CRC-32 {self._crc:08x}, the archive records "
                f"{self.expected:08x}); the file is damaged, get a fresh copy."
            )


class FileArray(LazyArray):
    """A C-ordered array stored raw at `offset` in `path`, read with `np.fromfile` (no memory
    map, no full-file read). Indexing the first axis reads only that slice. `crc`: a `CRCCheck`
    the bytes read go through."""

    def __init__(self, path, offset, stored_dtype, shape, source, bfloat16=False, crc=None):
        self.path, self.offset = path, int(offset)
        self.stored_dtype, self.bfloat16, self.crc = np.dtype(stored_dtype), bfloat16, crc
        super().__init__(shape, np.float32 if bfloat16 else stored_dtype, self._read, source)

    def _read(self):
        count = int(np.prod(self.shape))
        raw = np.fromfile(self.path, dtype=self.stored_dtype, count=count, offset=self.offset)
        if raw.size != count:
            raise ValueError(f"{self.source}: file {self.path} is truncated.")
        if self.crc is not None:
            self.crc.update(self.offset, raw)
        raw = raw.reshape(self.shape)
        return bfloat16_to_float32(raw) if self.bfloat16 else raw

    def _sub(self, offset, shape):
        return FileArray(self.path, offset, self.stored_dtype, shape, self.source, self.bfloat16, self.crc)

    def __getitem__(self, index):
        if not 0 <= index < self.shape[0]:
            raise IndexError(f"{self.source}: index {index} out of range for shape {self.shape}.")
        row = int(np.prod(self.shape[1:])) * self.stored_dtype.itemsize
        return self._sub(self.offset + index * row, self.shape[1:])

    def rows(self, start, stop):
        row = int(np.prod(self.shape[1:])) * self.stored_dtype.itemsize
        return self._sub(self.offset + start * row, (stop - start, *self.shape[1:]))


def concat(arrays, axis=0, source=None):
    """Lazy `np.concatenate(arrays, axis)`; declared of a part's dtype that is not floating point, if
    any, so that `Checkpoint.check` refuses it rather than a promotion hiding it."""
    shape = list(arrays[0].shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    dtypes = [a.dtype for a in arrays]
    return LazyArray(
        shape,
        next((d for d in dtypes if d.kind != "f"), np.result_type(*dtypes)),
        lambda: np.concatenate([a.load() for a in arrays], axis=axis),
        source or " + ".join(a.source for a in arrays),
    )
