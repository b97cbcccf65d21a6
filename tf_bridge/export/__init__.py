"""The export wing of tf_bridge: the one part jaxspec imports (lazily, in the functions
that export; ``import jaxspec`` never imports TensorFlow).

- ``saved_model``: the SavedModel writer of jaxspec models (``export_saved_model``,
  ``export_all_saved_models``) and the export directory helper both writers share (mode
  order, the timestamped directory written atomically, ``assets_extra``);
- ``estimator_modes``: a jaxspec Estimator's modes, as the writer takes them;
- ``modes``, ``graph``, ``signatures``: per mode a TF1 graph around the jax2tf function,
  and tf.estimator's signature defs;
- ``receivers``: the serving input receivers; ``outputs``: export outputs between jaxspec
  and TensorFlow; ``compat``: the JAX/TF compatibility guard;
- ``warmup``: TF Serving's warmup records; ``validation``: the report comparing the
  written SavedModel's answers with JAX's (``ExportValidationError``).

It imports jaxspec and TensorFlow, never the runtime wing (``tf_bridge.runtime``).
"""
