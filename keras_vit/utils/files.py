"""Files written by keras_vit: atomically, with normal permissions, and no leftovers.

Every file or folder the project writes goes through `atomic_path`: the writer fills a
temporary name in the same folder (`.keras_vit-tmp-PID-TOKEN.NAME`, so the extension that
Keras' writers check is kept), which replaces the target only once complete. A process
killed half-way leaves such a name behind; `remove_stale` deletes those of dead processes.
"""

import contextlib
import errno
import json
import os
import shutil
import stat
import tempfile
import uuid

TMP_PREFIX = ".keras_vit-tmp-"


def parse_json(text):
    """`json.loads(text)`; nesting too deep for Python's parser is a `json.JSONDecodeError` (a
    ValueError) like any malformed JSON, not a RecursionError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise json.JSONDecodeError("nested too deeply", "", 0) from None


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _normal_permissions(path):
    """Gives `path` (and, for a folder, everything in it) the modes new files get here."""
    mask = _umask()
    if not os.path.isdir(path):
        os.chmod(path, 0o666 & ~mask)
        return
    for root, folders, names in os.walk(path):
        os.chmod(root, 0o777 & ~mask)
        for name in names:
            os.chmod(os.path.join(root, name), 0o666 & ~mask)


def remove(path):
    """Removes a file or a folder tree if it exists."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


def temporary_name(path):
    """A fresh temporary path next to `path`, ending in `path`'s own name."""
    folder, name = os.path.split(os.path.abspath(os.fspath(path)))
    return os.path.join(folder, f"{TMP_PREFIX}{os.getpid()}-{uuid.uuid4().hex[:8]}.{name}")


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary path next to `path` for the block to write a file or a folder at.

    On success it gets normal permissions (umask) and replaces `path` (a folder already at
    `path` is moved aside and removed only after the swap); on failure it is removed and
    `path` is untouched. Whether `path` may be overwritten is the caller's decision.
    """
    path = os.path.abspath(os.fspath(path))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = temporary_name(path)
    try:
        yield tmp
        _normal_permissions(tmp)
        if os.path.isdir(path) and not os.path.islink(path):
            aside = temporary_name(path)
            os.replace(path, aside)
            os.replace(tmp, path)
            remove(aside)
        else:
            os.replace(tmp, path)
    finally:
        remove(tmp)


def write_text(path, text):
    """Writes `text` (UTF-8) to `path` atomically, synced to disk."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def append_text(path, text, header=""):
    """Adds `text` at the end of the file at `path` (`header` first if there is none, or it is
    empty) by writing the whole file anew atomically: a kill never leaves half a line."""
    old = ""
    if os.path.lexists(path):
        with open(regular_file(path, "to add to it"), encoding="utf-8", newline="") as handle:
            old = handle.read()
    write_text(path, (old or header) + text)


def write_json(path, payload):
    """Writes `payload` as JSON (UTF-8, indented) to `path` atomically, synced to disk."""
    write_text(path, json.dumps(payload, indent=2) + "\n")


def check_target(path, overwrite=False, folder=False, replaceable=False, inputs=()):
    """Raises OSError (one clear line) unless a `folder` (or a file) may be written at `path`:
    the nearest existing folder above it takes new files, and anything already at `path` is of
    the same kind (a file never replaces a folder, nor the reverse) and may go: `overwrite`,
    or `replaceable` (an earlier output of the same writer). Never when `path` is one of the
    `inputs` (paths being read) or a folder holding one: replacing it would delete them."""
    path = os.path.abspath(os.fspath(path))
    for source in inputs:
        if os.path.exists(path) and os.path.exists(source) and _holds(path, source):
            raise FileExistsError(
                f"{path} is or holds the input {os.fspath(source)}; refusing to replace it (even with "
                "--overwrite): choose another output path."
            )
    above = os.path.dirname(path)
    while not os.path.exists(above):
        above = os.path.dirname(above)
    if not os.path.isdir(above):
        raise NotADirectoryError(f"Cannot write {path}: {above} is a file, not a folder.")
    try:
        tempfile.TemporaryFile(dir=above).close()
    except OSError as error:
        raise PermissionError(f"Cannot write {path}: {above} does not take new files ({error.strerror}).") from None
    if not os.path.lexists(path):
        return
    kinds = ("file", "folder")
    if os.path.isdir(path) != folder:
        raise FileExistsError(
            f"{path} is a {kinds[os.path.isdir(path)]}; refusing to replace it by a {kinds[folder]}: "
            "choose another output path."
        )
    if not (overwrite or replaceable):
        raise FileExistsError(
            f"{path} already exists; refusing to overwrite it (pass --overwrite, or overwrite=True, to replace it)."
        )


# Room kept beyond a file's data for its container's own records (HDF5, zip, JSON headers).
WRITE_MARGIN = 2**20


def regular_file(path, purpose):
    """`path`, or a one-line ValueError unless it is a regular file (a symlink to one counts):
    a FIFO or device named like a file of ours would block or never end when read. Every
    path that opens a user's file goes through here."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        kind = "not a regular file but a symbolic link loop" if error.errno == errno.ELOOP else "missing"
        if kind == "missing" and os.path.lexists(path):
            kind = "a broken symbolic link"
        raise ValueError(f"{path} is {kind}; refusing to read it {purpose}.") from None
    if not stat.S_ISREG(mode):
        kinds = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))
        kind = next((name for test, name in kinds if test(mode)), "a device")
        raise ValueError(f"{path} is not a regular file but {kind}; refusing to read it {purpose}.")
    return path


def check_space(path, nbytes):
    """Raises OSError (one line) unless the filesystem that would hold `path` has room for
    `nbytes` more (plus `WRITE_MARGIN`): HDF5 writers crash rather than fail cleanly on a full
    disk, so a write that cannot fit is refused before it starts."""
    above = os.path.dirname(os.path.abspath(os.fspath(path)))
    while not os.path.exists(above):
        above = os.path.dirname(above)
    stats = os.statvfs(above)
    free = stats.f_bavail * stats.f_frsize
    if nbytes + WRITE_MARGIN > free:
        raise OSError(
            errno.ENOSPC,
            f"Not enough space to write {os.fspath(path)}: it needs about {_mib(nbytes + WRITE_MARGIN)}, "
            f"{above} has {_mib(free)} free",
        )


def _mib(nbytes):
    return f"{nbytes / 2**20:.1f} MiB"


@contextlib.contextmanager
def one_line_errors(path):
    """Re-raises a write's OSError or RuntimeError (h5py's run over several lines) as one
    OSError line naming `path`."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        code = getattr(error, "errno", None)
        reason = os.strerror(code) if code else (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise OSError(code, f"Writing {os.fspath(path)} failed: {reason}; what was there is untouched") from None


def _holds(path, source):
    """Whether `source` is `path` (a hard link counts) or lies inside it (links resolved)."""
    if os.path.samefile(path, source):
        return True
    path, source = os.path.realpath(path), os.path.realpath(os.fspath(source))
    return source.startswith(path.rstrip(os.sep) + os.sep)


def alive(pid):
    """Whether a process `pid` runs on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale(folder):
    """Deletes the temporary files and folders that killed processes left in `folder`;
    returns their names."""
    removed = []
    if not os.path.isdir(folder):
        return removed
    for name in os.listdir(folder):
        if not name.startswith(TMP_PREFIX):
            continue
        pid = name[len(TMP_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            remove(os.path.join(folder, name))
            removed.append(name)
    return removed
