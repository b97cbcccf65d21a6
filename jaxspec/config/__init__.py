"""Where and how an Estimator runs: ``RunConfig`` (``run_config``), ``TPUConfig`` and
``InputPipelineConfig`` (``tpu_config``), ``NPURunConfig`` (``npu_config``),
``WarmStartSettings`` (``warm_start_settings``), and the cluster a process belongs to
(``cluster``: TF_CONFIG, a ``Cluster``, a ClusterResolver; ``launchers``: Slurm, Open MPI,
Cloud TPU, Kubernetes and the ``JAX_*`` variables, through JAX's own detection).

``from jaxspec.config import RunConfig, TPUConfig, InputPipelineConfig`` works as it did
when this was one module.
"""

from jaxspec.config.run_config import REPLACEABLE_FIELDS as REPLACEABLE_FIELDS
from jaxspec.config.run_config import RunConfig as RunConfig
from jaxspec.config.tpu_config import InputPipelineConfig as InputPipelineConfig
from jaxspec.config.tpu_config import IterationsPerLoopCounter as IterationsPerLoopCounter
from jaxspec.config.tpu_config import TPUConfig as TPUConfig
from jaxspec.config.tpu_config import iterations_per_loop_count as iterations_per_loop_count
from jaxspec.config.tpu_config import loop_duration_secs as loop_duration_secs
from jaxspec.config.tpu_config import parse_iterations_per_loop as parse_iterations_per_loop
