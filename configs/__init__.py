"""The bundled recipes, installed as the package `bertfactory.recipes` (pyproject.toml maps this directory), so that
`bertfactory run local` or `bertfactory recipes show bert-base` works from any directory. Resolution of a recipe name
or path: flows/recipe.py; listing: `bertfactory recipes list`."""
