"""``microrag.toml``: a command's options kept in a file under version control, and
``microrag config show`` (the options a command would run with, without secrets).

One table per command, its keys the command's long options (``rate-per-minute`` or
``rate_per_minute``)::

    [serve]
    index = "/srv/kb"
    port = 8080
    no-anonymous = true
    allowed-host = ["rag.example.com"]

    [ingest]
    index = "/srv/kb"
    dlp = "redact"

The file is ``--config FILE`` (before the command), else ``$MICRORAG_CONFIG``, else
``./microrag.toml`` when there is one. The command line wins over the file, the file over
the defaults. A key the command does not have, a value of the wrong type or outside the
option's choices is an error naming the file, the table and the key: a typo never passes
as a default silently. Secrets stay out of the file: the model's key is ``LLM_API_KEY``.
"""

from __future__ import annotations

import argparse
import json
import tomllib
from pathlib import Path
from typing import Any

from ..config import config_file, llm_environment
from ..errors import MicroRAGError
from .options import add_output

SECRET_WORDS = ("key", "password", "secret", "token")


def register(sub: argparse._SubParsersAction) -> None:
    cf = sub.add_parser("config", help="show the options a command runs with (microrag.toml + command line)")
    csub = cf.add_subparsers(dest="action", metavar="ACTION", required=True)
    show = csub.add_parser("show", help="print the effective options of COMMAND (default: serve), secrets hidden")
    show.add_argument("target", nargs="?", default="serve", metavar="COMMAND", help="the command (default: serve)")
    add_output(show, json=True)
    show.set_defaults(run=cmd_show)


def read(path: Path) -> dict[str, dict[str, Any]]:
    """The file's tables; a missing or malformed file is one clear error."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MicroRAGError(f"{path}: no such options file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MicroRAGError(f"{path}: cannot read it ({type(exc).__name__})") from None
    except tomllib.TOMLDecodeError as exc:
        raise MicroRAGError(f"{path}: not valid TOML: {exc}") from None
    for name, table in data.items():
        if not isinstance(table, dict):
            raise MicroRAGError(f"{path}: {name!r} must be a table ([{name}]) of a command's options")
    return data


def options_of(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """A command's long options by their destination (positionals are not settable in a file)."""
    return {a.dest: a for a in parser._actions if a.option_strings and a.dest != "help"}


def apply(parser: argparse.ArgumentParser, command: str, table: dict[str, Any], where: str) -> None:
    """Make ``table``'s values ``parser``'s defaults, checked as the command line would check them."""
    actions = options_of(parser)
    defaults = {}
    for key, value in table.items():
        dest = key.replace("-", "_")
        action = actions.get(dest)
        if action is None:
            raise MicroRAGError(f"{where} [{command}]: unknown option {key!r}; `microrag {command} --help` lists them")
        defaults[dest] = _checked(action, value, f"{where} [{command}] {key}")
    parser.set_defaults(**defaults)


def _checked(action: argparse.Action, value: Any, where: str) -> Any:
    if action.nargs == 0:  # a switch (store_true / store_false)
        if not isinstance(value, bool):
            raise MicroRAGError(f"{where}: must be true or false")
        return value if isinstance(action, argparse._StoreTrueAction) else not value
    if isinstance(action, argparse._AppendAction):
        items = value if isinstance(value, list) else [value]
        return [_one(action, v, where) for v in items]
    return _one(action, value, where)


def _one(action: argparse.Action, value: Any, where: str) -> Any:
    if isinstance(value, bool | dict | list):
        raise MicroRAGError(f"{where}: must be a single value")
    convert = action.type if callable(action.type) else str
    try:
        converted = convert(str(value))
    except argparse.ArgumentTypeError as exc:
        raise MicroRAGError(f"{where}: {exc}") from None
    except ValueError:
        raise MicroRAGError(f"{where}: {value!r} is not a valid {convert.__name__ if isinstance(convert, type) else 'value'}") from None
    if action.choices is not None and converted not in action.choices:
        raise MicroRAGError(f"{where}: {value!r} is not one of {', '.join(map(str, action.choices))}")
    return converted


def load_into(parser: argparse.ArgumentParser, command: str, named: str | None) -> Path | None:
    """Apply the options file's table for ``command`` (``named``: ``--config``) to its parser."""
    path = Path(named) if named else config_file()
    if path is None:
        return None
    table = read(path).get(command)
    if table:
        apply(parser, command, table, str(path))
    return path


def hidden(dest: str, value: Any) -> Any:
    """``value`` as it may be printed: secrets replaced, a URI's password removed."""
    if any(w in dest.lower() for w in SECRET_WORDS):
        return "***" if value else value
    if isinstance(value, str) and "://" in value and "@" in value.split("://", 1)[1]:
        scheme, rest = value.split("://", 1)
        auth, host = rest.rsplit("@", 1)
        return f"{scheme}://{auth.split(':', 1)[0]}{':***' if ':' in auth else ''}@{host}"
    return value


def cmd_show(args: argparse.Namespace) -> int:
    from .main import build_parser, command_parser  # (main imports this module's group lazily)

    parser = build_parser([args.target])
    sub = command_parser(parser, args.target)
    if sub is None:
        raise MicroRAGError(f"no command {args.target!r}; `microrag --help` lists them")
    path = load_into(sub, args.target, args.config)
    chosen = vars(parser.parse_args([args.target]))
    shown = {dest: hidden(dest, chosen.get(dest)) for dest in options_of(sub)}
    model = {k: ("***" if any(w in k.lower() for w in SECRET_WORDS) and v else v) for k, v in sorted(llm_environment().items())}
    if args.json:
        print(json.dumps({"command": args.target, "file": str(path) if path else None, "options": shown, "model": model},
                         indent=2))
        return 0
    print(f"# microrag {args.target}: command line > {path or 'no options file'} > defaults")
    print(f"[{args.target}]")
    for dest, value in shown.items():
        key = dest.replace("_", "-")
        print(f"{key} = {_toml(value)}" if value is not None else f"# {key} (not set)")
    if model:
        print("# the model, from the environment")
        for k, v in model.items():
            print(f"# {k}={v}")
    return 0


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a TOML basic string is a JSON string
