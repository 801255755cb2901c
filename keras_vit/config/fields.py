"""Configuration fields declared once (the training config's and the builder arguments'):
`option()` gives a dataclass field its default, its accepted values, its help line, its
command-line metavar, its group and the layer it is relayed to, and everything else is derived
from that one declaration: `validate` (run when a config is made), `relayed` (the values a
layer takes), `parse` (a command-line value), `add_flags` (the `--flags` and `--help`) and
`table` (the documentation).

Plain Python, no Keras: the command line builds its flags from here before importing anything heavy.
"""

import argparse
import dataclasses
import functools
import math
import numbers
import os
import typing
from typing import Union


def option(default, help, *, group, choices=None, interval=None, metavar=None, check=None, to=None):
    """A dataclass field with what describes it.

    Args:
        default: its value when not given (immutable).
        help: one line for `--help` and the documentation.
        group: the heading it is listed under ("data", "model", ...).
        choices: the accepted values, if it takes one of a fixed set.
        interval: the meaningful range of a number, e.g. "[0, 1)" ("[" / "]": the end is
            included); None, where the type allows it, is not checked.
        metavar: what a free-form value looks like on the command line ("MIN,MAX").
        check: a function of the value that raises ValueError if it is bad (its type included)
            and returns the value as stored (e.g. a list made a tuple of floats).
        to: the layer the value is relayed to, for `relayed` (e.g. "encoder").
    """
    meta = dict(help=help, group=group, choices=choices, interval=interval, metavar=metavar, check=check, to=to)
    return dataclasses.field(default=default, metadata=meta)


def check_range(name, value, interval):
    """Raises a ValueError unless the number `value` of field `name` lies in `interval` ("[0, 1)")."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name}={value!r} must be a number in {interval}.")
    low, high = (float(end) for end in interval[1:-1].split(","))
    above = value >= low if interval[0] == "[" else value > low
    below = value <= high if interval[-1] == "]" else value < high
    if not (above and below):  # NaN is neither
        raise ValueError(f"{name}={value!r} must be in {interval}.")


def check_count(name, value, meaning):
    """Raises a ValueError (one line) unless `value` is a whole number >= 1 (NumPy integers too); `meaning` says what it counts."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name}={value!r} must be a whole number >= 1 ({meaning}).")


def numbers_tuple(name, length, meaning):
    """A `check` for a field of `length` finite numbers (`meaning`: what they are, for the message)."""

    def check(value):
        if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != length or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v) for v in value
        ):
            raise ValueError(f"{name}={value!r} must be {length} finite numbers: {meaning}.")
        return tuple(float(v) for v in value)

    return check


@functools.lru_cache(maxsize=None)
def _hints(cls):
    """The type hints of the dataclass `cls` (resolved once: `typing.get_type_hints` is slow)."""
    return typing.get_type_hints(cls)


def _kinds(cls, name):
    hint = _hints(cls)[name]
    return typing.get_args(hint) if typing.get_origin(hint) is Union else (hint,)


def _is_kind(value, kind):
    if kind is typing.Any:
        return True
    if kind is type(None):
        return value is None
    if kind is bool:
        return isinstance(value, bool)
    if kind in (int, float):
        integral = isinstance(value, numbers.Integral)
        return not isinstance(value, bool) and (integral if kind is int else isinstance(value, numbers.Real))
    if kind is str:
        return isinstance(value, (str, os.PathLike))
    return isinstance(value, (tuple, list)) if kind is tuple else isinstance(value, kind)


def _type_name(kinds):
    names = {bool: "true/false", int: "an integer", float: "a number", str: "a string", tuple: "numbers",
             type(None): "None"}
    return " or ".join(names.get(kind, kind.__name__) for kind in kinds)


def validate(config):
    """Checks every field of the dataclass instance `config` against its declaration (its
    check, else its type; choices; interval) and stores the normalised values (frozen
    dataclasses too); raises ValueError (one line)."""
    for field in dataclasses.fields(config):
        object.__setattr__(config, field.name, check_value(type(config), field.name, getattr(config, field.name)))


def check_value(cls, name, value):
    """`value` of the field `name` of the dataclass `cls`, checked against its declaration and
    normalised; raises ValueError (one line) naming the field, the value and what is accepted."""
    meta = cls.__dataclass_fields__[name].metadata
    kinds = _kinds(cls, name)
    if value is None and type(None) in kinds:
        return None
    if meta.get("check"):  # it checks the type too
        value = meta["check"](value)
    elif not any(_is_kind(value, kind) for kind in kinds):
        raise ValueError(f"{name}={value!r} must be {_type_name(kinds)}.")
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if meta.get("choices") is not None and value not in meta["choices"]:
        raise ValueError(f"Unknown {name}={value!r}; expected one of {', '.join(map(str, meta['choices']))}.")
    if meta.get("interval"):
        check_range(name, value, meta["interval"])
    return value


def relayed(config, to):
    """`{name: value}` of the fields of `config` declared with `to=to`."""
    return {field.name: getattr(config, field.name) for field in dataclasses.fields(config)
            if field.metadata.get("to") == to}


def _parse_bool(text):
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false).")


def parse(cls, name, text):
    """`text` converted to the type of field `name` of `cls` ("none" gives None where allowed)."""
    if name not in {field.name for field in dataclasses.fields(cls)}:
        raise ValueError(f"Unknown training option {name!r}; known: {[field.name for field in dataclasses.fields(cls)]}.")
    kinds = _kinds(cls, name)
    if text.lower() in ("none", "null") and type(None) in kinds:
        return None
    errors = []
    for kind in (k for k in kinds if k is not type(None)):
        try:
            if kind is bool:
                return _parse_bool(text)
            if kind is tuple:
                return tuple(float(v) for v in text.strip("()[]").split(","))
            return kind(text)
        except ValueError as error:
            errors.append(str(error))
    raise ValueError(f"Bad value for {name}: {text!r} ({'; '.join(errors)}).")


def metavar(cls, field):
    """What the value of `field` looks like on the command line: its declared metavar, else its type."""
    if field.metadata.get("metavar"):
        return field.metadata["metavar"]
    names = {bool: "true|false", int: "INT", float: "FLOAT", str: "TEXT", type(None): "none"}
    return "|".join(names[kind] for kind in _kinds(cls, field.name))


def groups(cls, skip=()):
    """`{group: [field, ...]}` of the dataclass `cls`, in declaration order."""
    grouped = {}
    for field in dataclasses.fields(cls):
        if field.name not in skip:
            grouped.setdefault(field.metadata["group"], []).append(field)
    return grouped


def add_flags(parser, cls, skip=()):
    """Adds a `--field-name` flag per field of `cls` (but `skip`), one argument group per field
    group. A flag not given leaves no attribute on the parsed arguments (the default stays)."""
    for group, fields in groups(cls, skip).items():
        section = parser.add_argument_group(f"{group} options")
        for field in fields:
            choices = field.metadata.get("choices")

            def parse_flag(text, name=field.name):
                try:
                    return parse(cls, name, text)
                except ValueError as error:
                    raise argparse.ArgumentTypeError(str(error)) from None

            section.add_argument(
                "--" + field.name.replace("_", "-"), dest=field.name, default=argparse.SUPPRESS, type=parse_flag,
                choices=choices, metavar=field.metadata.get("metavar") or (None if choices else metavar(cls, field)),
                help=field.metadata["help"].replace("%", "%%"),
            )


def _accepted(cls, field):
    meta = field.metadata
    if meta.get("choices") is not None and not meta.get("metavar"):
        return ", ".join(f"`{choice}`" for choice in meta["choices"])
    accepted = metavar(cls, field)
    return f"{accepted} in {meta['interval']}" if meta.get("interval") else accepted


def table(cls, skip=()):
    """The fields of `cls` as Markdown: a table per group (option, default, accepted values, meaning)."""
    lines = []
    for group, fields in groups(cls, skip).items():
        lines += [f"**{group}**", "", "| option | default | accepted | meaning |", "| --- | --- | --- | --- |"]
        for field in fields:
            flag = "--" + field.name.replace("_", "-")
            accepted = _accepted(cls, field).replace("|", "\\|")
            lines.append(f"| `{flag}` | `{field.default}` | {accepted} | {field.metadata['help']} |")
        lines.append("")
    return "\n".join(lines)
