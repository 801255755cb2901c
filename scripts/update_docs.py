"""Rewrites the generated parts of docs/: the table of training fields in docs/training.md
(from `keras_vit.training.config.field_table`). `tests/test_docs.py` fails while they are stale."""

import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from keras_vit.training.config import field_table  # noqa: E402

PAGE = REPO / "docs" / "training.md"
REGION = re.compile(r"(<!-- fields:start -->\n).*?(<!-- fields:end -->)", re.S)


def updated(text):
    """`text` with its fields region holding the current table."""
    return REGION.sub(lambda m: m.group(1) + field_table().rstrip() + "\n" + m.group(2), text)


if __name__ == "__main__":
    PAGE.write_text(updated(PAGE.read_text()))
