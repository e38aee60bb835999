"""Imports every model module of the family so that each registers its architecture (see registry.py).
A new member adds its import here."""

from . import bert  # noqa: F401
from . import electra  # noqa: F401
from . import spanbert  # noqa: F401
from . import xlm  # noqa: F401
from . import relative_members  # noqa: F401  (XLNet, Transformer-XL)
