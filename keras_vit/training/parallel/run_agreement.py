"""The processes of a multi-process run resume from one saved state, or none starts.

Each process reads the run state in its own view of the run folder. When the folder is
not shared (separate disks), or a process's copy lost its checkpoint, they would resume at
different steps: one would train alone and all would hang in their next collective. Every
process compares what it would resume from with the others' (one gather), and on any
difference all refuse with the same one-line error.
"""

import os
import zlib

from keras_vit import run_folder
from keras_vit.training.checkpointing import STATE, read_state


class RunStatesDiffer(ValueError):
    """The processes of a run see different saved states."""


def saved_state(directory):
    """`[step, checksum]` of the run state in `directory` (`[0, 0]`: none saved)."""
    state = read_state(directory)  # a malformed state is refused in one line here too
    if state is None:
        return [0, 0]
    with open(os.path.join(directory, STATE), "rb") as handle:
        return [state["step"], zlib.crc32(handle.read()) + 1]


def check_same_state(plan, run_dir):
    """Raises `RunStatesDiffer` on every process unless all would resume from one state."""
    rows = plan.gather(saved_state(run_folder.path(run_dir, run_folder.CHECKPOINT)))
    if all(row == rows[0] for row in rows):
        return
    seen = ", ".join(
        f"process {i}: " + (f"step {step} (state {checksum - 1:08x})" if checksum else "no saved state")
        for i, (step, checksum) in enumerate(rows)
    )
    raise RunStatesDiffer(
        f"The processes of this run would resume from different saved states in {run_dir} ({seen}): "
        "every process must see the same run folder (shared storage), or start over with --fresh "
        "(resume=False); refused so that no process trains alone and hangs."
    )
