"""Rewrites the generated parts of docs/: the tables of training fields and of what each recipe
sets in docs/training.md (from `keras_vit.training.config.field_table` and
`keras_vit.training.recipes.recipe_table`) and the named models of every family in
docs/families.md (`keras_vit.families.model_table`). `tests/test_docs.py` fails while they are stale."""

import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from keras_vit.families import model_table  # noqa: E402
from keras_vit.training.config import field_table  # noqa: E402
from keras_vit.training.recipes import recipe_table  # noqa: E402

PAGE = REPO / "docs" / "training.md"
FAMILIES_PAGE = REPO / "docs" / "families.md"
# <!-- NAME:start --> ... <!-- NAME:end --> regions, on whichever page holds them.
TABLES = {"fields": field_table, "recipes": recipe_table, "models": model_table}


def updated(text):
    """`text` with each generated region holding its current table."""
    for name, table in TABLES.items():
        region = re.compile(rf"(<!-- {name}:start -->\n).*?(<!-- {name}:end -->)", re.S)
        text = region.sub(lambda m: m.group(1) + table().rstrip() + "\n" + m.group(2), text)
    return text


if __name__ == "__main__":
    for page in (PAGE, FAMILIES_PAGE):
        page.write_text(updated(page.read_text()))
