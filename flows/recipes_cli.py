"""The `bertfactory recipes` command: the recipes that ship with the package (configs/, installed as
`bertfactory.recipes`), usable by name from any directory.

    bertfactory recipes list                 # name, kind (pipeline recipe or distillation config), first comment line
    bertfactory recipes show bert-base       # the YAML as shipped (copy it to edit: ... show local > my.yaml)
    bertfactory run local --run-dir runs/local   # a bundled recipe by name (flows/recipe.py resolves it)
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from bertfactory.config import load_yaml, read_config_text

# a full stop that ends a sentence: followed by a capital, and not the one of "et al." or "e.g."
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)\.\s+(?=[A-Z])")


def add_recipes_parser(sub) -> None:
    text = "list the bundled recipes, or print one (usable by name from any directory: bertfactory run NAME)"
    p = sub.add_parser("recipes", help=text, description=text + ". A path to your own YAML works wherever a "
                       "recipe name does; a file in the working directory shadows a bundled recipe of the same name. "
                       "See docs/recipes.md.")
    rsub = p.add_subparsers(dest="recipes_command", required=True, metavar="ACTION")
    rsub.add_parser("list", help="name, kind and summary of every bundled recipe")
    show = rsub.add_parser("show", help="print a bundled recipe's YAML (e.g. to start your own from it)")
    show.add_argument("name", metavar="NAME", help="a recipe name from `bertfactory recipes list` (or a path)")


def _kind(path: Path) -> str:
    """'recipe' for a pipeline recipe (flows.recipe.Recipe sections), 'distill' for a distillation config (its
    `teacher` section), from the top-level keys alone (nothing is validated)."""
    from .recipe import config_kind

    return config_kind(load_yaml(path))


def _summary(path: Path) -> str:
    """The first sentence of the file's leading comment (every bundled recipe starts with one)."""
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("#"):
            break
        text = line.lstrip("#").strip()
        if not text or text.startswith("bertfactory "):  # a usage line ends the description
            break
        lines.append(text)
    text = " ".join(lines)
    end = _SENTENCE_END.search(text)
    return text if end is None else text[: end.start() + 1]


def cmd_recipes(args: argparse.Namespace) -> int:
    from .recipe import bundled_recipes, resolve_recipe

    if args.recipes_command == "show":
        print(read_config_text(resolve_recipe(args.name)), end="")
        return 0
    recipes = bundled_recipes()
    width = max(len(name) for name in recipes)
    for name, path in recipes.items():
        summary = _summary(path)
        if len(summary) > 100:
            summary = summary[:97] + "..."
        print(f"{name:<{width}}  {_kind(path):<7}  {summary}")
    print(f"\n{len(recipes)} bundled recipes in {next(iter(recipes.values())).parent}; "
          "run one by name, e.g. `bertfactory run local`, or print it with `bertfactory recipes show NAME`")
    return 0
