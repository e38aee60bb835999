"""Error types. Every error a user can cause says which file/record/key is wrong and what to do."""


class BertfactoryError(Exception):
    """Base class: an error whose message is meant for the user (the CLI prints it without a traceback)."""


class ConfigError(BertfactoryError):
    """A recipe or override names an unknown key, has a wrong type, or an impossible value."""


class InputError(BertfactoryError):
    """Input data is unreadable or malformed (the message names the file and how far reading got)."""


class ContractError(BertfactoryError):
    """A file written by another stage (manifest, shard, checkpoint, results) fails validation."""


class SampleMissingError(BertfactoryError):
    """A real sample file is not in the cache; the message says to run `bertfactory samples fetch`."""
