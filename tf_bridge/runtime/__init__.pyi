# The runtime wing's subpackages and modules that ``tf_bridge`` names as attributes
# (``tf_bridge.heads``, ...), loaded on first use through ``lazy_loader.attach_stub``.

from . import canned as canned
from . import heads as heads
from . import hooks as hooks
from . import npu as npu
from . import runner as runner
