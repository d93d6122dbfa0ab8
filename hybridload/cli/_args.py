"""The command line's manners: argument types that refuse bad values in one line, a parser
whose errors are one line on stderr, and the conversion of a user's mistake into one.

Every user error ends as `UsageError`; ``hybridload.cli._commands.main`` prints its message
(one line, no traceback) and exits with status 2, as argparse does for its own errors.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from typing import TYPE_CHECKING, Callable, Iterator, NoReturn

if TYPE_CHECKING:
    from hybridload.recipe import Recipe

EXIT_USAGE = 2


class UsageError(Exception):
    """A user's mistake on the command line; the message is one line that says what to write."""


class _DefaultsFormatter(argparse.HelpFormatter):
    """Adds "(default: X)" to a flag's help unless the help already speaks of its default or it has none."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default  # 0 and 0.0 are defaults worth showing; None, False (a flag) are not
        if (
            "default" in text
            or default is None
            or default is False
            or default is argparse.SUPPRESS
            or not action.option_strings
        ):
            return text
        return text + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors (``hybridload profile: --batch-size: ...``) and shown defaults."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {one_line(message)} (see {self.prog} -h)\n")


def one_line(text: object) -> str:
    """``text`` with its line breaks folded into spaces."""
    return " ".join(str(text).split())


def _number(kind: Callable[[str], float], test: Callable[[float], bool], need: str) -> Callable[[str], float]:
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{need}, got {text!r}") from None
        if not test(value):
            raise argparse.ArgumentTypeError(f"{need}, got {text!r}")
        return value

    parse.__name__ = need  # argparse names the type in some messages
    return parse


positive_int = _number(int, lambda v: v > 0, "a whole number > 0")
count = _number(int, lambda v: v >= 0, "a whole number >= 0")
positive_float = _number(float, lambda v: v > 0, "a number > 0")
nonneg_float = _number(float, lambda v: v >= 0, "a number >= 0")
fraction = _number(float, lambda v: 0 < v <= 1, "a number in (0, 1]")


def data_root(text: str) -> str:
    """An ImageFolder root: an existing directory here (fsspec URLs pass through to the source)."""
    if "://" in text:
        return text
    if not os.path.exists(text):
        raise argparse.ArgumentTypeError(f"{text!r} does not exist; give an ImageFolder root (root/<class>/<image>)")
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is a file, not a directory; give an ImageFolder root (root/<class>/<image>)"
        )
    return text


def choices_list(allowed: tuple[str, ...], aliases: dict[str, str] | None = None) -> Callable[[str], list[str]]:
    """A comma-separated list of names from ``allowed`` (or ``aliases``' keys, mapped to their values)."""
    aliases = aliases or {}

    def parse(text: str) -> list[str]:
        names = [n.strip() for n in text.split(",") if n.strip()]
        bad = [n for n in names if n not in allowed and n not in aliases]
        if bad or not names:
            raise argparse.ArgumentTypeError(
                f"unknown {', '.join(bad) or 'empty list'}; choose from {', '.join(allowed + tuple(aliases))}"
            )
        return [aliases.get(n, n) for n in names]

    parse.__name__ = "list"
    return parse


@contextlib.contextmanager
def user_input(what: str) -> Iterator[None]:
    """Turn the errors of reading ``what`` (a path the user gave) into a one-line UsageError."""
    try:
        yield
    except (OSError, ValueError) as exc:
        raise UsageError(f"{what}: {one_line(exc)}") from exc


def fail(prog: str, message: str) -> int:
    """Print ``prog: message`` as one line on stderr and return the usage exit status."""
    sys.stderr.write(f"{prog}: {one_line(message)}\n")
    return EXIT_USAGE


def progress_bar(**kw):
    """A tqdm progress bar (tqdm imported when a command runs, not for ``--help``)."""
    from tqdm import tqdm

    return tqdm(**kw)


def recipe_arg(spec: str):
    """``--recipe imagenet_train[:SIZE]`` or ``imagenet_eval[:SIZE]`` as a recipe; `UsageError` otherwise."""
    from hybridload import recipe

    name, _, size = spec.partition(":")
    makers: dict[str, Callable[[int], Recipe]] = {
        "imagenet_train": recipe.imagenet_train,
        "imagenet_eval": recipe.imagenet_eval,
    }
    if name not in makers:
        raise UsageError(f"--recipe must be imagenet_train[:SIZE] or imagenet_eval[:SIZE], got {spec!r}")
    with user_input(f"--recipe {spec!r}"):
        return makers[name](int(size) if size else 224)


def image_folder(data: str):
    """The ``DATA`` argument as an `ImageFolder`; its problems as a `UsageError`."""
    from hybridload import sources

    with user_input("DATA"):
        return sources.ImageFolder(data)
