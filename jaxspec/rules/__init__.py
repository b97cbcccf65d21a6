"""tf.estimator's rules written once, for both sides of the JAX/TF line.

Pure Python (no jax, no TensorFlow): jaxspec imports these modules, and so does
``tf_bridge``'s runtime wing (tf_bridge may import jaxspec; jaxspec never imports TF).
A rule fixed here is fixed for the JAX Estimator and the TF one at once.

- ``head_keys``: the names of the heads' outputs (metric, prediction and signature keys)
  and the loss reductions;
- ``head_args``: the heads' constructor arguments and the static shape rules of logits,
  labels, weights and ``loss_fn`` outputs (``HeadInterface``, ``HeadArgs``);
- ``early_stopping``: the stop conditions of ``tf.estimator.experimental``'s
  early-stopping hooks and the four ``stop_if_*`` factories (``EarlyStoppingFactories``);
- ``model_fn``: ``verify_model_fn_args``;
- ``numbers``: positive and non-negative integer arguments.
"""
