"""Builders of imported models' architectures, registered by ``arch`` (``PRETRAINED_ARCHS``).

Importing this module registers them: ``mae_vit`` (engine.pretrained.image) and ``bert_hf``
(engine.pretrained.text).
"""

import engine.pretrained.image  # noqa: F401 (registers mae_vit)
import engine.pretrained.text  # noqa: F401 (registers bert_hf)
