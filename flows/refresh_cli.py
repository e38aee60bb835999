"""The `bertfactory refresh CONFIG --run-dir RUN [--source LOC ...] [--continue-pretraining]` command (parser and
handler; flows/cli.py wires them in): one corpus refresh (flows/refresh.py), as the Prefect flow `corpus_refresh`
or, with --no-prefect, directly.

    bertfactory refresh configs/local.yaml --run-dir runs/news --source /data/news/
    bertfactory refresh configs/local.yaml --run-dir runs/wiki --source https://dumps.example.org/enwiki/
"""

from __future__ import annotations

from pathlib import Path


def add_refresh_parser(sub) -> None:
    text = "build the next corpus version from new inputs at the watched sources -> RUN/corpora/vN"
    p = sub.add_parser("refresh", help=text, description=text + ". Sources: directories, globs, fsspec URLs, a "
                       "Wikipedia dumps directory (dumpstatus.json), a CC-News warc.paths(.gz) listing. Inputs already "
                       "read by a version (by sha256) are skipped; with none new it says so and writes nothing. "
                       "See docs/orchestration.md.")
    p.add_argument("config", help="recipe YAML or bundled recipe name, e.g. local")
    p.add_argument("--run-dir", required=True, help="run directory holding RUN/corpora")
    p.add_argument("--source", dest="sources", action="append", default=None, metavar="LOCATION",
                   help="a location to watch (repeatable; default: the recipe's corpus.inputs)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value, e.g. --set refresh.list_attempts=6 (repeatable; values are YAML)")
    p.add_argument("--continue-pretraining", action="store_true",
                   help="continue pretraining on the new version from the latest checkpoint (refresh.continue_steps)")
    p.add_argument("--no-prefect", action="store_true", help="run directly, without Prefect (same outputs)")


def cmd_refresh(args, prefect_environment) -> int:
    from .recipe import load_recipe, resolve_recipe

    args.config = str(resolve_recipe(args.config))  # a bundled recipe's name -> the file the flow is given
    recipe = load_recipe(args.config, args.overrides)  # validate before starting anything
    from bertfactory.run_location import resolve_run_dir

    run_dir = resolve_run_dir(args.run_dir)  # a URL: checked, then its working copy (docs/cluster.md)
    if args.no_prefect:
        from .lock import run_dir_lock
        from .refresh import refresh_corpus

        with run_dir_lock(run_dir, "corpus_refresh"):
            result = refresh_corpus(recipe, run_dir, args.sources)
            if args.continue_pretraining and result["version"]:
                from .continued import continue_pretraining

                result["pretrain"] = continue_pretraining(recipe, run_dir, result["version"])
    else:
        prefect_environment()
        from .refresh import corpus_refresh

        location = args.run_dir if run_dir != Path(args.run_dir) else str(run_dir)  # a flow gets the URL itself
        result = corpus_refresh(args.config, location, args.sources, args.overrides, args.continue_pretraining)
    if result["status"] == "nothing_new":
        print(result["message"])
        if result["pretrain"]:
            print(f"continued pretraining resumed and finished: {result['pretrain']}")
        return 0
    print(f"corpus version {result['version']}: {result['corpus_dir']} ({len(result['new_inputs'])} new input file(s), "
          f"{result['counts'].get('docs_kept')} documents kept)")
    for location in result["new_inputs"]:
        print(f"  {location}")
    if result["pretrain"]:
        print(f"continued pretraining: {result['pretrain']}")
    return 0
