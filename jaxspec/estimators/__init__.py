"""The public Estimator classes and what drives them (the facades of DESIGN's table):
``Estimator`` (``estimator``), ``TPUEstimator`` (``tpu_estimator``), ``NPUEstimator``
(``npu_estimator``), ``train_and_evaluate`` with ``TrainSpec``/``EvalSpec``
(``training``), the exporters (``exporter``), ``add_metrics`` (``extenders``), and the
model_fn caller they share (``_model_fn``). Thin: each describes a call as a plan that
``jaxspec.loop`` runs."""
