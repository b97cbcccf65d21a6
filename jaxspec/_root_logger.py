"""The root logger's handlers before ``import jaxspec`` ran its imports.

Imported first by ``jaxspec/__init__``: Orbax logs through absl while it is imported,
and absl then calls ``logging.basicConfig()`` on an unconfigured root logger, after which
the program's own ``basicConfig(level=...)`` would silently do nothing. ``jaxspec``
removes what was added (``jaxspec.loop.console.undo_basic_config``).
"""

import logging

HANDLERS_BEFORE_IMPORT = list(logging.root.handlers)
