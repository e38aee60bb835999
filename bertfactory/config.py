"""Strict, typed configuration: the base class every stage's config section derives from, YAML loading,
`--set a.b=value` overrides, and error messages that name the key and its valid choices.

A recipe (see `flows.recipe`) is a YAML file with one section per stage; each section is validated by the
config class that lives next to the code it configures.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence, TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import ConfigError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Config base: unknown keys are errors, values are validated on assignment, models are frozen-ish
    (use `model_copy(update=...)`)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def _valid_keys_at(model: type[BaseModel], loc: Sequence[Any]) -> list[str] | None:
    """The field names of the (nested) model that `loc[:-1]` points into, for 'did you mean' messages."""
    current: Any = model
    for part in loc[:-1]:
        fields = _fields_of(current)
        if fields is None or not isinstance(part, str) or part not in fields:
            return None
        current = _section_type(fields[part].annotation)
    fields = _fields_of(current)
    return sorted(fields) if fields else None


def _section_type(ann: Any) -> Any:
    """A field's annotation with Optional[...] and similar single-model unions unwrapped to the model."""
    args = getattr(ann, "__args__", None)
    if args:
        models = [a for a in args if isinstance(a, type) and _fields_of(a) is not None]
        return models[0] if models else ann
    return ann


def _key_paths(model: Any, prefix: tuple[str, ...] = (), depth: int = 6) -> list[tuple[str, ...]]:
    """Every key of a config and its nested sections, as paths (('pretrain', 'max_steps'), ...)."""
    fields = _fields_of(model)
    if not fields or depth == 0:
        return []
    paths = []
    for name, info in fields.items():
        paths.append((*prefix, name))
        paths += _key_paths(_section_type(info.annotation), (*prefix, name), depth - 1)
    return paths


def _elsewhere(model: type[BaseModel], loc: Sequence[Any]) -> str:
    """'did you mean 'model.hidden_size'?' for an unknown key that is a key of another section (those below the
    section it was given in first); '' when it is a key of none, or of many (`enabled`: a guess would be noise)."""
    others = [path for path in _key_paths(model) if path[-1] == loc[-1] and path != tuple(loc)]
    below = [path for path in others if path[: len(loc) - 1] == tuple(loc[:-1])]
    others = below or others
    return f"did you mean {' or '.join(repr('.'.join(o)) for o in others)}?" if 0 < len(others) <= 2 else ""


def _fields_of(section: Any) -> dict[str, Any] | None:
    """The fields of a config section: a model's, or a pydantic dataclass's (e.g. a model member's settings)."""
    return getattr(section, "model_fields", None) or getattr(section, "__pydantic_fields__", None)


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """'did you mean 'max_steps'?' for the choice closest to a misspelt `name` (difflib, cutoff 0.6); '' when none is
    close. The one 'did you mean' of every refusal of a name (recipe keys, recipe names, objectives, tasks)."""
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else ""


def format_validation_error(model: type[BaseModel], err: ValidationError, source: str) -> str:
    lines = [f"invalid configuration in {source}:"]
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"]) or "(root)"
        if e["type"] in ("extra_forbidden", "unexpected_keyword_argument"):  # the latter: a dataclass section
            valid = _valid_keys_at(model, e["loc"])
            close = (did_you_mean(e["loc"][-1], valid) if valid else "") or _elsewhere(model, e["loc"])
            hint = (f" ({close})" if close else "") + (f"; valid keys here: {', '.join(valid)}" if valid else "")
            lines.append(f"  - unknown key '{key}'{hint}")
        else:
            got = e.get("input")
            got_s = repr(got) if not isinstance(got, dict) else "{...}"
            if len(got_s) > 80:
                got_s = got_s[:77] + "..."
            if e["type"] == "string_type" and isinstance(got, (bool, int, float)):
                # the Norway problem: `lang: no` (Norwegian) and `--set corpus.lang=no` read as False
                text = ("yes" if got else "no") if isinstance(got, bool) else str(got)
                got_s += ("; YAML reads an unquoted no, yes, on, off, true, false as a boolean and digits as a number: "
                          f"quote it for text, e.g. {e['loc'][-1]}: \"{text}\" in the file or --set '{key}=\"{text}\"'")
            lines.append(f"  - '{key}': {e['msg']} (got {got_s})")
    return "\n".join(lines)


def validate(model: type[M], data: Mapping[str, Any], source: str = "config") -> M:
    try:
        return model.model_validate(dict(data))
    except ValidationError as err:
        raise ConfigError(format_validation_error(model, err, source)) from None


def _where(mark: Any) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}"


def _yaml_error_line(path: Path, err: yaml.YAMLError) -> str:
    """A YAML syntax error in one line: the file, where, what (PyYAML's own text spans several lines and, for a
    string read from a file, names "<unicode string>" instead of the file)."""
    if not isinstance(err, yaml.MarkedYAMLError) or err.problem_mark is None:
        return f"{path} is not valid YAML: {' '.join(str(err).split())}"
    text = f"{path} is not valid YAML: {_where(err.problem_mark)}: {err.problem}"
    if err.context:
        starts = (f" that starts at {_where(err.context_mark)}" if err.context_mark is not None
                  and err.context_mark.line != err.problem_mark.line else "")
        if str(err.problem).startswith("but "):  # "expected a single document ..., but found another document"
            text = f"{path} is not valid YAML: {_where(err.problem_mark)}: {err.context}{starts}, {err.problem}"
        else:
            text += f" ({err.context}{starts})"
    if "'\\t'" in str(err.problem):
        text += "; YAML indents with spaces, not tabs"
    return text


def _duplicate_key(node: yaml.Node, path: tuple[str, ...], seen: set[int]) -> str | None:
    """The first key that a mapping under `node` holds twice, as 'KEY (line L, again at line M)'; None without."""
    if id(node) in seen:  # an alias of a node already walked
        return None
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        first: dict[tuple[str, str], Any] = {}
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in first:
                    name = ".".join((*path, key.value))
                    one, two = first[key.tag, key.value], key.start_mark
                    where = (f"line {one.line + 1}, again at line {two.line + 1}" if one.line != two.line
                             else f"columns {one.column + 1} and {two.column + 1}")  # a one-line --set value
                    return (f"key '{name}' appears twice ({where}); YAML would keep the second and silently drop the "
                            "first one's settings: merge them into one")
                first[key.tag, key.value] = key.start_mark
            found = _duplicate_key(value, (*path, key.value if isinstance(key, yaml.ScalarNode) else "?"), seen)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            if found := _duplicate_key(item, (*path, str(index)), seen):
                return found
    return None


def read_config_text(path: Path) -> str:
    """A config file's text; ConfigError naming the file, the byte and its line when it is not UTF-8 (a recipe saved
    as Latin-1 or UTF-16 by an editor was a UnicodeDecodeError traceback)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise ConfigError(f"{path} is not UTF-8 text (byte 0x{data[err.start]:02x} at line {line}): save it as "
                          "UTF-8") from None


def _yaml_document(text: str, name: str) -> Any:
    """The YAML document in `text` (safe types); ConfigError naming `name` for a key that a mapping holds twice
    (PyYAML keeps the last one without a word); yaml.YAMLError for a syntax error."""
    loader = yaml.SafeLoader(text)
    loader.name = name
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        duplicate = _duplicate_key(node, (), set())
        if duplicate:
            raise ConfigError(f"{name}: {duplicate}")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml(path: Path) -> Any:
    """The YAML document in `path` (safe types); ConfigError in one line naming the file for a syntax error or a key
    that a mapping holds twice (PyYAML keeps the last one without a word)."""
    try:
        return _yaml_document(read_config_text(path), str(path))
    except yaml.YAMLError as err:
        raise ConfigError(_yaml_error_line(path, err)) from None


def load_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(data).__name__}")
    return data


def parse_override(item: str) -> tuple[list[str], Any]:
    """'pretrain.max_steps=200' -> (['pretrain', 'max_steps'], 200). Values are parsed as YAML scalars/lists/maps
    (a map holding a key twice refused, as in a recipe file); a value YAML cannot parse is taken as text."""
    if "=" not in item:
        raise ConfigError(f"override '{item}' must look like section.key=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".")]
    if not all(parts):
        raise ConfigError(f"override '{item}': empty key component")
    try:
        value = _yaml_document(raw, f"--set {item}") if raw.strip() != "" else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a deep copy of `data` with each `a.b.c=value` applied. Unknown keys are caught later by
    validation, which names them and the valid choices."""
    import copy

    out = copy.deepcopy(data)
    for item in overrides:
        parts, value = parse_override(item)
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if nxt is None:
                nxt = {}
                node[p] = nxt
            if not isinstance(nxt, dict):
                raise ConfigError(f"override '{item}': '{p}' is a value, not a section")
            node = nxt
        node[parts[-1]] = value
    return out
