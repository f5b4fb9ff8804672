"""Models: find them by name (`registry`), convert the bundled ones (`convert`), read a model's
card without its weights (`card`), load one on a device and precision (`loader`), and choose the
CPU encoder's precision by timing it (`precision_probe`).

Names are imported on first use (`streamcap._face`): loading pulls in torch and transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamcap._face import lazy_face

if TYPE_CHECKING:  # what the names are, for type checkers; imported on first use at run time
    from streamcap.models.card import ModelCard as ModelCard
    from streamcap.models.loader import LoadedModel as LoadedModel
    from streamcap.models.loader import Placement as Placement
    from streamcap.models.loader import PlacementError as PlacementError
    from streamcap.models.loader import choose_placement as choose_placement
    from streamcap.models.loader import load_model as load_model
    from streamcap.models.registry import DEFAULT_MODEL as DEFAULT_MODEL
    from streamcap.models.registry import ModelNotFoundError as ModelNotFoundError
    from streamcap.models.registry import resolve as resolve

#: public name -> the module of this package that defines it
_EXPORTS = {
    "ModelCard": "card",
    "LoadedModel": "loader",
    "Placement": "loader",
    "PlacementError": "loader",
    "choose_placement": "loader",
    "load_model": "loader",
    "DEFAULT_MODEL": "registry",
    "ModelNotFoundError": "registry",
    "resolve": "registry",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_face(__name__, _EXPORTS)
