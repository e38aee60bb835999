"""pretrain.device xla in an environment without torch-xla (the main one) fails up front with the way to get it."""

import importlib.util

import pytest

from bertfactory.errors import ConfigError
from training.backends import resolve_device


@pytest.mark.skipif(importlib.util.find_spec("torch_xla") is not None, reason="torch-xla is installed here")
def test_xla_without_torch_xla_names_the_environment_to_use():
    with pytest.raises(ConfigError, match="torch-xla cannot be imported .*scripts/xla_env.sh"):
        resolve_device("xla")
