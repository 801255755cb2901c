"""The conversion engine: key tables between the canonical layout and a checkpoint format.

A `Row` ties a group of canonical key templates to a group of another format's key templates,
with a lazy transform each way. Templates hold named indices: `{i}` (a transformer block),
or any other name (`{s}`, `{u}`, ...), optionally with an offset: `"stages.{s-1}.blocks.{u-1}"`
on one side and `"block{s}/unit{u}"` on the other say that timm counts from 0 where the
canonical names count from 1. A `Table` expands its rows over the indices present in the
source keys and reports every missing or unexpected key by name.

Transforms are functions `(arrays, heads) -> arrays` on lists of `LazyArray`s (`heads`: the
attention head count, or None); None means "unchanged".
"""

import dataclasses
import itertools
import re

_FIELD = re.compile(r"\{([A-Za-z_]\w*)([+-]\d+)?\}")


class Template:
    """A key template such as `"stages.{s-1}.blocks.{u-1}.conv{c}.weight"`: `match(key)` gives
    the indices (offsets undone) or None; `render(indices)` the key."""

    def __init__(self, text):
        self.text = text
        self.fields = [(m.group(1), int(m.group(2) or 0)) for m in _FIELD.finditer(text)]
        self.names = frozenset(name for name, _ in self.fields)
        if len(self.names) != len(self.fields):
            raise ValueError(f"Key template {text!r} uses an index twice.")
        parts = _FIELD.split(text)  # literal, name, offset, literal, ...
        pattern = re.escape(parts[0]) + "".join(
            rf"(?P<{name}>\d+)" + re.escape(literal) for name, literal in zip(parts[1::3], parts[3::3])
        )
        self._regex = re.compile(pattern + r"\Z")
        self._format = _FIELD.sub(lambda m: "{" + m.group(1) + "}", text)

    def match(self, key):
        found = self._regex.match(key)
        if found is None:
            return None
        values = {name: int(found.group(name)) - offset for name, offset in self.fields}
        # A number written with a leading zero, or an index below 0, is not this template's key.
        return values if self.render(values) == key and min(values.values(), default=0) >= 0 else None

    def render(self, indices):
        return self._format.format(**{name: indices[name] + offset for name, offset in self.fields})

    def __repr__(self):
        return f"Template({self.text!r})"


def _templates(value):
    return tuple(Template(t) for t in ((value,) if isinstance(value, str) else value))


@dataclasses.dataclass(frozen=True, init=False)
class Row:
    """`canonical`: canonical key template(s); `theirs`: the format's key template(s), with
    the same indices; `to_canonical` / `from_canonical`: transforms `(arrays, heads) -> arrays`
    (None: unchanged); `optional`: the group may be absent as a whole (a head)."""

    canonical: tuple
    theirs: tuple
    to_canonical: object = None
    from_canonical: object = None
    optional: bool = False

    def __init__(self, canonical, theirs, to_canonical=None, from_canonical=None, optional=False):
        set_ = object.__setattr__
        set_(self, "canonical", _templates(canonical))
        set_(self, "theirs", _templates(theirs))
        set_(self, "to_canonical", to_canonical)
        set_(self, "from_canonical", from_canonical)
        set_(self, "optional", optional)
        names = {t.names for t in self.canonical + self.theirs}
        if len(names) > 1:
            raise ValueError(f"Row {self.canonical} <-> {self.theirs}: all templates need the same indices.")

    @property
    def indices(self):
        return self.canonical[0].names


def pairs(*canonical_theirs, optional=False):
    """One-key rows with no transform: `pairs(("cls", "cls_token"), ...)`."""
    return tuple(Row(c, t, optional=optional) for c, t in canonical_theirs)


def _describe(keys, limit=6):
    keys = sorted(keys)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


@dataclasses.dataclass(frozen=True)
class Table:
    """Rows between the canonical layout and one format. `dense`: index name -> what it
    counts; such an index runs over 0..max found (so a whole missing block is reported) and
    must be found at all. Other indices expand over the combinations found for each row."""

    rows: tuple
    dense: dict = dataclasses.field(default_factory=lambda: {"i": "transformer blocks"})

    def __add__(self, rows):
        return dataclasses.replace(self, rows=tuple(self.rows) + tuple(rows))

    def to_canonical(self, tensors, heads=None, what="checkpoint", keep=None):
        """The canonical tensors of `tensors` (this format's keys). `keep(key)`: keys passed
        through unchanged. Raises ValueError naming missing and unexpected keys."""
        return self._convert(tensors, heads, what, keep, to_canonical=True)

    def from_canonical(self, tensors, heads=None, what="checkpoint", keep=None):
        """This format's tensors of canonical `tensors`."""
        return self._convert(tensors, heads, what, keep, to_canonical=False)

    def rename(self, tensors):
        """Maps each key that one-key `theirs` templates match to its `canonical` key, leaving
        other keys as they are (for a table of renames between two spellings of a format)."""
        out = {}
        for key, value in tensors.items():
            for row in self.rows:
                found = row.theirs[0].match(key)
                if found is not None:
                    key = row.canonical[0].render(found)
                    break
            out[key] = value
        return out

    def key_of(self, canonical):
        """This format's key for the index-free canonical key `canonical`, or None."""
        return next((r.theirs[0].text for r in self.rows if r.canonical[0].text == canonical and not r.indices), None)

    def _bindings(self, tensors, to_canonical):
        """Per row, the list of index dicts its source templates are expanded with."""
        found = {}
        for k, row in enumerate(self.rows):
            sources = (row.theirs if to_canonical else row.canonical) if row.indices else ()
            found[k] = [m for t in sources for key in tensors for m in [t.match(key)] if m is not None]
        ranges = {}
        for name in self.dense:
            values = [m[name] for ms in found.values() for m in ms if name in m]
            ranges[name] = range(max(values) + 1) if values else range(0)
        bindings = {}
        for k, row in enumerate(self.rows):
            if not row.indices:
                bindings[k] = [{}]
                continue
            dense = sorted(n for n in row.indices if n in self.dense)
            sparse = sorted(row.indices - set(dense))
            combos = sorted({tuple(m[n] for n in sparse) for m in found[k]}) if sparse else [()]
            bindings[k] = [
                {**dict(zip(sparse, combo)), **dict(zip(dense, values))}
                for combo in combos
                for values in itertools.product(*(ranges[n] for n in dense))
            ]
        return bindings, ranges

    def _convert(self, tensors, heads, what, keep, to_canonical):
        bindings, ranges = self._bindings(tensors, to_canonical)
        out, used, missing = {}, set(), []
        for k, row in enumerate(self.rows):
            sources, targets = (row.theirs, row.canonical) if to_canonical else (row.canonical, row.theirs)
            transform = row.to_canonical if to_canonical else row.from_canonical
            for indices in bindings[k]:
                keys = [t.render(indices) for t in sources]
                present = [key in tensors for key in keys]
                if not all(present):
                    if not (row.optional and not any(present)):
                        missing += [key for key, p in zip(keys, present) if not p]
                    continue
                arrays = [tensors[key] for key in keys]
                values = transform(arrays, heads) if transform else arrays
                out.update(zip((t.render(indices) for t in targets), values))
                used.update(keys)
        unexpected = []
        for key in tensors.keys() - used:
            if keep is not None and keep(key):
                out[key] = tensors[key]
            else:
                unexpected.append(key)
        for name, counted in self.dense.items():
            if not ranges[name] and any(name in r.indices for r in self.rows):
                missing.insert(0, f"(no {counted} found)")
        if missing or unexpected:
            parts = []
            if missing:
                parts.append(f"missing keys: {_describe(missing)}")
            if unexpected:
                parts.append(f"keys keras_vit cannot map: {_describe(unexpected)}")
            raise ValueError(f"{what}: " + "; ".join(parts) + ".")
        return out
