"""MkDocs hook: the reference pages written at build time from the code, so they cannot drift from it.

- `reference/settings.md`: the service's `Settings`, a collection's `CollectionSpec` and the trainer's
  `TrainSettings`, each field with its environment variable, default and the words the code gives it
  (its `description`, else the comment above it in the class);
- `reference/cli.md`: every `ssi` command and option, grouped as `--help` groups them;
- `reference/kinds.md`: every kind `ssi train` takes and every form a bundle can name, from their registries;
- `reference/http-api.md`: every route and body of the service's OpenAPI schema (built without a bundle).

Pages that other parts of the project add on their own (`OPTIONAL_PAGES`) join the navigation when they
exist, so a strict build neither fails for a page not written yet nor leaves one out.
"""

from __future__ import annotations

import inspect
import os
import re
import tempfile
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from pydantic import AliasChoices, BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

# page -> (its title, the top-level navigation section it joins)
OPTIONAL_PAGES: dict[str, tuple[str, str]] = {
    "python-api.md": ("Python API", "Reference"),
    "cluster-faults.md": ("Cluster faults", "Operate"),
}


# -- text helpers ---------------------------------------------------------------------------------


def cell(text: str) -> str:
    """Text for a markdown table cell: one line; outside code spans, pipes escaped and angle brackets shown
    (a pipe inside a code span does not split the cell, and an escape there would be shown)."""
    parts = " ".join(str(text).split()).split("`")
    for i in range(0, len(parts), 2):  # even parts are outside backticks
        parts[i] = parts[i].replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def type_name(annotation: Any) -> str:
    """`Path | None`, `Literal['flat', 'hnsw']`: the annotation without module prefixes."""
    text = annotation.__name__ if isinstance(annotation, type) else str(annotation)
    return re.sub(r"\b(?:[a-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text)


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


# -- settings -------------------------------------------------------------------------------------


def field_comments(cls: type) -> dict[str, str]:
    """The comment lines right above each field of a class body (and one at the end of its line)."""
    comments: dict[str, str] = {}
    pending: list[str] = []
    for line in inspect.getsource(cls).splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#") and line.startswith("    #"):
            pending.append(stripped.lstrip("# "))
            continue
        field = re.match(r"^    ([a-z_]\w*)\s*:", line)
        if field:
            trailing = line.split("  # ", 1)[1] if "  # " in line else ""
            comments[field.group(1)] = " ".join([*pending, trailing]).strip()
        if field or not line.startswith("     "):  # a field, a blank line, a method: the comment is used up
            pending = []
    return comments


def default_of(field: FieldInfo) -> str:
    if field.default_factory is not None:
        empty = {dict: "{}", list: "[]"}.get(field.default_factory)  # type: ignore[call-overload]
        return f"`{empty}`" if empty else "computed at start"
    if field.default is PydanticUndefined:
        return "required"
    if field.default is None:
        return "none"
    return f"`{field.default}`"


def env_names(name: str, field: FieldInfo, prefix: str) -> str:
    alias = field.validation_alias
    names = [c for c in alias.choices if isinstance(c, str)] if isinstance(alias, AliasChoices) else []
    return ", ".join(f"`{n}`" for n in (names or [prefix + name.upper()]))


def option_helps(command: str) -> dict[str, str]:
    """`ssi COMMAND`'s options by parameter name (the setting each one sets): their help text."""
    import typer

    from ssi_cli.main import build_app

    group = typer.main.get_command(build_app(command))
    params = group.commands[command].params  # type: ignore[attr-defined]
    return {param.name: param.help for param in params if param.name and param.help}


def settings_table(cls: type[BaseModel], prefix: str | None, helps: dict[str, str] | None = None) -> str:
    """One row a field; its words: the flag's help, else the field's description, else the comment above it."""
    comments = field_comments(cls)
    rows = []
    for name, field in cls.model_fields.items():
        about = cell((helps or {}).get(name) or field.description or comments.get(name, ""))
        names = f"`{name}`" if prefix is None else f"`{name}`<br>{env_names(name, field, prefix)}"
        rows.append([names, default_of(field), cell(f"`{type_name(field.annotation)}`"), about])
    return table(["setting" if prefix is None else "setting, environment", "default", "type", "what it does"], rows)


def settings_page() -> str:
    from service.settings import CollectionSpec, Settings
    from training.settings import TrainSettings

    return "\n\n".join(
        [
            "# Settings",
            "Generated from the settings classes and the commands' options when the site is built "
            "(`docs/hooks/generate.py`). Flags of `ssi serve` and `ssi train` override the environment; "
            "the [command line](cli.md) lists the flags.",
            "## The service: `ssi serve` (`service/settings.py`, `Settings`)",
            settings_table(Settings, "SSI_", option_helps("serve")),
            "## A collection in `SSI_COLLECTIONS` (`CollectionSpec`)",
            'JSON, by name: `{"ads": {"bundle": "bundles/ads", "corpus": "ads.jsonl", "type": "adverts"}}`.',
            settings_table(CollectionSpec, None),
            "## The trainer: `ssi train` (`training/settings.py`, `TrainSettings`)",
            settings_table(TrainSettings, "SSI_TRAIN_", option_helps("train")),
        ]
    )


# -- the kinds and forms --------------------------------------------------------------------------


def first_paragraph(obj: Any) -> str:
    """The first paragraph of an object's own docstring, else of its module's."""
    import sys

    doc = obj.__dict__.get("__doc__") or sys.modules[obj.__module__].__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def kinds_page() -> str:
    from ssi.forms import FORMS
    from training.fitted import FITTED
    from training.kinds import EM_KINDS, PROJECTION_KINDS, SGD_KINDS
    from training.models import REGISTRY

    kinds = []
    for how, names in (("margin ranking, SGD", SGD_KINDS), ("closed form", PROJECTION_KINDS), ("EM", EM_KINDS)):
        for kind in names:
            cls = REGISTRY.get(kind) or FITTED.get(kind)
            where = f"`{cls.__module__}.{cls.__name__}`" if cls else "**not in a registry**"
            kinds.append([f"`{kind}`", how, where, cell(first_paragraph(cls)) if cls else ""])
    forms = [
        [f"`{name}`", "exactly" if cls.served_exactly else "no: `ssi eval` ranks it", f"`{cls.__module__}`",
         cell(first_paragraph(cls))]
        for name, cls in FORMS.items()
    ]  # fmt: skip
    return "\n\n".join(
        [
            "# Kinds and forms",
            "Generated from the registries when the site is built: `training.kinds` (what `ssi train --kind` "
            "takes), `training.models.REGISTRY` and `training.fitted.FITTED` (how each kind trains), and "
            "`ssi.forms.FORMS` (the score a bundle's manifest names). Each family, its equations and its "
            "paper: [the model family](../models/index.md).",
            "## Kinds (`ssi train --kind`)",
            table(["kind", "trained by", "class", "about"], kinds),
            "## Forms (what a bundle holds and the service serves)",
            table(["form", "served", "module", "about"], forms),
        ]
    )


# -- the command line -----------------------------------------------------------------------------


def option_row(param: Any) -> list[str]:
    names = ", ".join(f"`{n}`" for n in (*param.opts, *param.secondary_opts))
    if param.param_type_name == "argument":
        names = f"`{(param.name or '').upper()}` (argument)"
    default = param.default
    shown = "required" if param.required else ("" if default in (None, (), []) else f"`{default}`")
    return [names, shown, cell(param.help or "")]


def command_section(path: str, command: Any, level: int) -> list[str]:
    parts = ["#" * level + f" `{path}`", cell(command.help or "").replace("\\|", "|")]
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name in sorted(subcommands):
            parts += command_section(f"{path} {name}", subcommands[name], level + 1)
        return parts
    panels: dict[str, list[list[str]]] = {}
    for param in command.params:
        if param.name != "help":
            panels.setdefault(getattr(param, "rich_help_panel", None) or "Options", []).append(option_row(param))
    for panel, rows in panels.items():
        parts += [f"**{panel}**", table(["option", "default", "what it does"], rows)]
    return parts


def cli_page() -> str:
    import typer

    from ssi_cli.main import build_app

    group = typer.main.get_command(build_app())
    parts = [
        "# Command line",
        "Generated from the `ssi` command itself when the site is built: the same text as `ssi COMMAND --help`.",
    ]
    for name in sorted(group.commands):  # type: ignore[attr-defined]
        parts += command_section(f"ssi {name}", group.commands[name], 2)  # type: ignore[attr-defined]
    return "\n\n".join(parts)


# -- the HTTP API ---------------------------------------------------------------------------------


def schema_type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#schema-{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(schema_type(s) for s in schema["anyOf"])
    if schema.get("type") == "array":
        return "array of " + schema_type(schema.get("items", {}))
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    return str(schema.get("type", "any"))


def limits(schema: dict[str, Any]) -> str:
    keys = ("minimum", "maximum", "exclusiveMinimum", "minLength", "maxLength", "minItems", "maxItems", "default")
    return ", ".join(f"{k} {schema[k]}" for k in keys if k in schema and not isinstance(schema[k], dict | list))


def operation_section(method: str, path: str, op: dict[str, Any]) -> list[str]:
    parts = [f"### `{method.upper()} {path}`", cell(op.get("summary", "")), op.get("description", "").strip()]
    params = [
        [
            f"`{p['name']}`",
            p["in"],
            "yes" if p.get("required") else "",
            schema_type(p.get("schema", {})),
            cell(" ".join(filter(None, [p.get("description", ""), limits(p.get("schema", {}))]))),
        ]
        for p in op.get("parameters", [])
    ]
    if params:
        parts.append(table(["parameter", "in", "required", "type", "what it is"], params))
    body = op.get("requestBody", {}).get("content", {})
    for media, spec in body.items():
        parts.append(f"Body ({media}): {schema_type(spec.get('schema', {}))}")
    responses = [
        [
            f"`{status}`",
            cell(r.get("description", "")),
            ", ".join(schema_type(c.get("schema", {})) for c in r.get("content", {}).values()),
        ]
        for status, r in op.get("responses", {}).items()
    ]
    parts.append(table(["status", "when", "body"], responses))
    return [p for p in parts if p]


def schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    parts = [f"### {name} {{#schema-{name.lower()}}}", cell(schema.get("description", ""))]
    required = set(schema.get("required", []))
    rows = [
        [
            f"`{field}`",
            "yes" if field in required else "",
            schema_type(spec),
            cell(" ".join(filter(None, [spec.get("description", ""), limits(spec)]))),
        ]
        for field, spec in schema.get("properties", {}).items()
    ]
    if rows:
        parts.append(table(["field", "required", "type", "what it is"], rows))
    return [p for p in parts if p]


def http_api_page() -> str:
    from service.app import create_app
    from service.settings import Settings

    # The schema needs no model: the app is built with a bundle path that is never loaded, and with the
    # default settings whatever SSI_* variables the building shell has (the schema states the bounds).
    saved = {name: os.environ.pop(name) for name in list(os.environ) if name.startswith("SSI_")}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            schema = create_app(Settings(bundle=Path(tmp) / "bundle", cache_dir=Path(tmp) / "cache")).openapi()
    finally:
        os.environ.update(saved)
    info = schema["info"]
    parts = [
        "# HTTP API",
        f"{info['title']} {info['version']}: {cell(info.get('summary', ''))}. Generated from the service's "
        "OpenAPI schema when the site is built; a running service serves the same schema at `/openapi.json` "
        "and an explorer at `/docs`. Bounds are shown at their default settings.",
        "## Routes",
    ]
    for path, operations in schema["paths"].items():
        for method, op in operations.items():
            parts += operation_section(method, path, op)
    parts.append("## Bodies")
    for name, spec in sorted(schema.get("components", {}).get("schemas", {}).items()):
        parts += schema_section(name, spec)
    return "\n\n".join(parts)


# -- the hooks ------------------------------------------------------------------------------------

GENERATED = {
    "reference/settings.md": settings_page,
    "reference/cli.md": cli_page,
    "reference/kinds.md": kinds_page,
    "reference/http-api.md": http_api_page,
}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    docs = Path(config.docs_dir)
    for page, (title, section) in OPTIONAL_PAGES.items():
        if (docs / page).is_file():
            for entry in config.nav or []:
                if isinstance(entry, dict) and section in entry:
                    entry[section].append({title: page})
    return config


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for path, render in GENERATED.items():
        files.append(File.generated(config, path, content=render() + "\n"))
    return files
