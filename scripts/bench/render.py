#!/usr/bin/env python3
"""Renders BENCHMARKS.md's tables from their JSON specs (bench/tables/*.json).

A table in BENCHMARKS.md sits between `<!-- table: ID -->` and `<!-- /table -->`; its spec is
bench/tables/ID.json:

    {"machine": "...", "date": "YYYY-MM-DD", "command": "...", "raw": "bench/...",
     "columns": ["title", ...],
     "values": {"name": VALUE, ...},          # shared by every row (optional)
     "rows": [{"values": {"name": VALUE, ...}, "cells": ["{name:.1f} tok/s", ...]}, ...]}

A VALUE is a number, a string, or a reference into a raw result file that a bench script
wrote: {"file": "bench/gpu/.../8b-bench.json", "where": {"batch": 1}, "field": "decode_tok_s"}
(the file holds JSON objects, one per line or as a list; lines that are not JSON are skipped;
"where" and "field" pick the one object whose fields match and that has the field; "field"
may be a dotted path), or an
expression over earlier names: {"expr": "rlx / peer"}. A cell is a Python format string over
the row's names; {name|met} reads "met" or "not met" for a truthy/falsy value.

    python3 scripts/bench/render.py          # rewrite BENCHMARKS.md in place
    python3 scripts/bench/render.py --check  # exit 1 if BENCHMARKS.md is not what the specs render
"""
import json
import math
import pathlib
import re
import string
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOC = ROOT / "BENCHMARKS.md"
SPECS = ROOT / "bench" / "tables"
BLOCK = re.compile(r"(<!-- table: ([\w.-]+) -->\n)(.*?)(<!-- /table -->)", re.S)


class SpecError(Exception):
    """A spec that cannot be rendered; the message names the table and the value."""


def records(path):
    """The JSON objects in a raw result file (a list, one object, or one per line)."""
    text = (ROOT / path).read_text()
    try:
        data = json.loads(text)
        return data if isinstance(data, list) else [data]
    except ValueError:
        out = []
        for line in text.splitlines():
            line = line.strip()
            start = line.find("{")
            if start < 0:
                continue
            try:
                out.append(json.loads(line[start:]))
            except ValueError:
                continue
        return out


def has(obj, dotted):
    try:
        field(obj, dotted)
        return True
    except (KeyError, TypeError):
        return False


def field(obj, dotted):
    for part in dotted.split("."):
        obj = obj[part]
    return obj


def resolve(table, name, value, names):
    if not isinstance(value, dict):
        return value
    if "expr" in value:
        try:
            return eval(value["expr"], {"__builtins__": {}, "min": min, "max": max, "sqrt": math.sqrt}, dict(names))
        except Exception as e:  # noqa: BLE001 - reported with the table's name
            raise SpecError(f"{table}: {name} = {value['expr']!r}: {e}") from e
    if "file" in value:
        try:
            found = [
                r
                for r in records(value["file"])
                if all(r.get(k) == v for k, v in value.get("where", {}).items()) and has(r, value["field"])
            ]
        except OSError as e:
            raise SpecError(f"{table}: {name}: cannot read {value['file']}: {e}") from e
        if len(found) != 1:
            raise SpecError(f"{table}: {name}: {len(found)} records of {value['file']} match {value.get('where')}, want 1")
        try:
            return field(found[0], value["field"])
        except (KeyError, TypeError) as e:
            raise SpecError(f"{table}: {name}: no field {value['field']!r} in {value['file']}") from e
    raise SpecError(f"{table}: {name}: a value is a number, a string, {{file, where, field}} or {{expr}}")


class Cells(string.Formatter):
    """str.format with `{name|met}` for targets."""

    def get_field(self, field_name, args, kwargs):
        name, _, conv = field_name.partition("|")
        obj, used = super().get_field(name, args, kwargs)
        if conv == "met":
            obj = "met" if obj else "not met"
        elif conv:
            raise KeyError(f"unknown conversion |{conv}")
        return obj, used


def render_table(table, spec):
    shared = {}
    for name, value in spec.get("values", {}).items():
        shared[name] = resolve(table, name, value, shared)
    cols = spec["columns"]
    lines = []
    caption = [f"{k}: {spec[k]}" for k in ("machine", "date") if spec.get(k)]
    if spec.get("command"):
        caption.append(f"command: `{spec['command']}`")
    if spec.get("raw"):
        caption.append(f"raw output: `{spec['raw']}`")
    if caption:
        lines += ["*" + "; ".join(caption) + ".*", ""]
    align = spec.get("align", ["---"] * len(cols))
    lines.append("| " + " | ".join(cols) + " |")
    lines.append("|" + "|".join(align) + "|")
    fmt = Cells()
    for i, row in enumerate(spec["rows"]):
        names = dict(shared)
        for name, value in row.get("values", {}).items():
            names[name] = resolve(table, name, value, names)
        cells = row["cells"]
        if len(cells) != len(cols):
            raise SpecError(f"{table}: row {i + 1} has {len(cells)} cells for {len(cols)} columns")
        try:
            lines.append("| " + " | ".join(fmt.format(c, **names) for c in cells) + " |")
        except (KeyError, ValueError, TypeError) as e:
            raise SpecError(f"{table}: row {i + 1}: {e}") from e
    return "\n".join(lines) + "\n"


def render(doc):
    seen = set()

    def one(m):
        table = m.group(2)
        seen.add(table)
        path = SPECS / f"{table}.json"
        try:
            spec = json.loads(path.read_text())
        except OSError as e:
            raise SpecError(f"{table}: no spec {path.relative_to(ROOT)} ({e.strerror})") from e
        except ValueError as e:
            raise SpecError(f"{table}: {path.relative_to(ROOT)} is not JSON: {e}") from e
        return m.group(1) + render_table(table, spec) + m.group(4)

    out = BLOCK.sub(one, doc)
    unused = sorted(p.stem for p in SPECS.glob("*.json")) if SPECS.is_dir() else []
    unused = [t for t in unused if t not in seen]
    if unused:
        raise SpecError(f"specs without a place in BENCHMARKS.md: {', '.join(unused)}")
    return out


def main(argv):
    check = "--check" in argv
    doc = DOC.read_text()
    try:
        out = render(doc)
    except SpecError as e:
        print(f"render.py: {e}", file=sys.stderr)
        return 2
    if out == doc:
        print(f"BENCHMARKS.md: {len(BLOCK.findall(doc))} tables up to date")
        return 0
    if check:
        print("BENCHMARKS.md differs from what bench/tables/*.json render; run python3 scripts/bench/render.py", file=sys.stderr)
        return 1
    DOC.write_text(out)
    print(f"BENCHMARKS.md: {len(BLOCK.findall(out))} tables rendered")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
