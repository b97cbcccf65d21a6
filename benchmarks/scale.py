"""Real-size states: device memory, host memory, checkpoint and train time of
``TPUEstimator`` against a hand-written loop + Orbax, over state size x devices x k.

The model is one square float32 weight ``w`` ``[n, n]`` trained by adam (1e-3) on a
least-squares loss ``mean((x @ w - y)**2)``: the state (``w`` and adam's two moments) is
``3 n^2 * 4`` bytes, ``n`` chosen for each row's ``MiB``. With ``num_cores_per_replica``
``k > 1`` every 2-D leaf is split over ``'core'`` by columns (``partition_rules``); with
``k = 1`` the state is replicated. Per-replica batch 8; ``--steps`` steps,
``--ipl`` per compiled loop.

Both sides, each in its own subprocess (so that peak RSS is the side's own):

* ``jaxspec``: ``TPUEstimator(use_tpu=True).train(input_fn, steps=N)`` on a fresh
  model_dir (init_fn compiled with the rules' shardings, the compiled loop, the final
  checkpoint, its integrity record);
* ``hand``: what a JAX user writes instead: the state born sharded (``jax.jit`` of the
  init with ``out_shardings``), ``jax.jit(lax.scan(step), donate_argnums=0)`` with the
  same NamedShardings on the same ``('replica', 'core')`` mesh, the batches put on the
  mesh per loop, then one Orbax ``CheckpointManager`` save, waited for;
* ``ckpt``: one state on the mesh, saved and restored alternately by Orbax's own
  ``CheckpointManager`` (``StandardSave``/``StandardRestore``) and by jaxspec's
  ``CheckpointStore`` (``save`` + ``wait``; a fresh store's ``latest_step`` + ``restore``:
  the integrity record written and checked), ``--repeats`` times, the sides alternating
  which goes first: the ratio is the median of each repeat's jaxspec / Orbax;
* ``imports``: only the imports and the backend: the RSS every figure is taken above.

Per row: device bytes (``memory_analysis()`` of the compiled train loop: arguments +
outputs + temporaries - aliased, per device), host peak RSS above the import-only
process, save s, restore s, whole train s and per-loop s (host work per loop: end of
one loop to the end of the next), each with ``ratio`` = jaxspec / hand (lower is better; 1 =
the same). jaxspec's compiled loop is found in ``Estimator._compile_cache`` (today
``['modes']['train'].compiled``: shape signature -> ``jax.stages.Compiled``); the search
walks that cache for ``Compiled`` objects, so it survives the engine's restructuring.

Devices: on CPU each subprocess gets ``--xla_force_host_platform_device_count=D`` for the
row's D; on GPU/TPU the backend's device count is used (rows for other counts are
skipped). Without ``--quick`` the full grid runs (about 10-15 minutes on 2 CPU cores).

    .venv/bin/python benchmarks/scale.py --quick
    .venv/bin/python benchmarks/scale.py [--rows 1:1:412,8:8:1200] [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This checkout's jaxspec, not an installed one (a script's sys.path starts at benchmarks/).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
MiB = 2**20
LR = 1e-3
PER_REPLICA_BATCH = 8
# (devices, k, state MiB). k = 1 replicates the state on every device (D copies on a
# CPU host), so the replicated rows stay small enough for 24 GiB of host memory.
FULL_GRID = [
    (1, 1, 16),
    (1, 1, 412),
    (1, 1, 1200),
    (8, 1, 16),
    (8, 2, 16),
    (8, 8, 16),
    (8, 8, 412),
    (8, 8, 1200),
    (64, 1, 16),
    (64, 8, 16),
]
QUICK_GRID = [(1, 1, 16), (8, 2, 16)]
METRICS = ("device_bytes", "rss_above_imports", "save_s", "restore_s", "train_s", "loop_s")


def side_n(mib: float) -> int:
    """``n`` of the ``[n, n]`` weight whose state (weight + two adam moments) is closest to
    ``mib`` MiB, a multiple of 64 (so that any k up to 64 splits its columns)."""
    return max(64, round(math.sqrt(mib * MiB / 12) / 64) * 64)


def peak_rss() -> int:
    """This process's peak resident set size in bytes (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


# -- the worker side (one measurement per process) ---------------------------------------------
def _imports() -> dict[str, Any]:
    """Everything a measurement imports, and the backend: the RSS every figure is above."""
    global jax, jnp, np, optax, ocp, train_state, P, NamedSharding, jaxspec
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    import orbax.checkpoint as ocp
    from flax.training import train_state
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import jaxspec

    devices = jax.devices()
    assert Path(jaxspec.__file__).resolve().parent.parent == Path(__file__).resolve().parent.parent
    return {"platform": devices[0].platform, "device_kind": devices[0].device_kind, "devices": len(devices)}


def _mesh(k: int) -> Any:
    devices = np.array(jax.devices())
    return jax.sharding.Mesh(devices.reshape(len(devices) // k, k), ("replica", "core"))


def _spec(leaf: Any, k: int) -> Any:
    return P(None, "core") if k > 1 and getattr(leaf, "ndim", 0) == 2 else P()


_TX: dict[bool, Any] = {}  # one optimizer object per kind: the state's tree metadata stays equal


def _apply(p: Any, x: Any) -> Any:
    return x @ p["w"]


def _init_state(n: int, cross_shard: bool = False) -> Any:
    """The first state: ``w`` drawn from N(0, 1/n), adam's moments zero."""
    if cross_shard not in _TX:
        _TX[cross_shard] = jaxspec.CrossShardOptimizer(optax.adam(LR)) if cross_shard else optax.adam(LR)
    w = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32) * (1.0 / math.sqrt(n))
    return train_state.TrainState.create(apply_fn=_apply, params={"w": w}, tx=_TX[cross_shard])


def _loss(params: Any, x: Any, y: Any) -> Any:
    return jnp.mean((x @ params["w"] - y) ** 2)


def _batches(n: int, steps: int, batch: int) -> tuple[Any, Any]:
    rng = np.random.RandomState(0)
    x = rng.standard_normal((steps, batch, n)).astype(np.float32)
    return x, (0.5 * x).astype(np.float32)


def _device_bytes(compiled: Any) -> int:
    m = compiled.memory_analysis()
    return int(
        m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
    )


def _compiled_in(obj: Any, depth: int = 0, seen: set[int] | None = None) -> list[Any]:
    """Every ``jax.stages.Compiled`` reachable from ``obj`` through dicts, sequences and
    attributes (jaxspec's compile cache), at most 5 levels deep."""
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 5:
        return []
    seen.add(id(obj))
    if isinstance(obj, jax.stages.Compiled):
        return [obj]
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, list | tuple):
        children = list(obj)
    elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("jaxspec"):
        children = list(vars(obj).values())
    else:
        return []
    return [c for child in children for c in _compiled_in(child, depth + 1, seen)]


def _state_shardings(state: Any, mesh: Any, k: int) -> Any:
    return jax.tree.map(lambda leaf: NamedSharding(mesh, _spec(leaf, k)), state)


def _born_sharded(n: int, mesh: Any, k: int) -> Any:
    shapes = jax.eval_shape(lambda: _init_state(n))
    return jax.jit(lambda: _init_state(n), out_shardings=_state_shardings(shapes, mesh, k))()


def run_hand(n: int, k: int, steps: int, ipl: int, workdir: str) -> dict[str, Any]:
    """The hand loop: born-sharded state, donated jit(scan), one Orbax save at the end."""
    mesh = _mesh(k)
    replicas = mesh.shape["replica"]
    xs, ys = _batches(n, steps, PER_REPLICA_BATCH * replicas)
    batch = NamedSharding(mesh, P(None, "replica"))
    t0 = time.perf_counter()
    state = _born_sharded(n, mesh, k)
    shardings = _state_shardings(state, mesh, k)

    def loop(st: Any, x: Any, y: Any) -> Any:
        def body(st: Any, xy: Any) -> Any:  # the global batch's gradient: XLA all-reduces it
            loss, grads = jax.value_and_grad(_loss)(st.params, *xy)
            return st.apply_gradients(grads=grads), loss

        return jax.lax.scan(body, st, (x, y))

    step = jax.jit(
        loop, in_shardings=(shardings, batch, batch), out_shardings=(shardings, None), donate_argnums=0
    )
    chunks = [(xs[s : s + ipl], ys[s : s + ipl]) for s in range(0, steps, ipl)]
    compiled = step.lower(state, *jax.device_put(chunks[0], batch)).compile()
    ends, losses = [], None
    for chunk in chunks:
        state, losses = compiled(state, *jax.device_put(chunk, batch))
        jax.block_until_ready(losses)
        ends.append(time.perf_counter())
    manager = ocp.CheckpointManager(
        os.path.join(workdir, "hand"),
        options=ocp.CheckpointManagerOptions(max_to_keep=5, create=True, enable_async_checkpointing=True),
    )
    manager.save(steps, args=ocp.args.StandardSave(state))
    manager.wait_until_finished()
    train_s = time.perf_counter() - t0
    manager.close()
    return {
        "device_bytes": _device_bytes(compiled),
        "train_s": train_s,
        "loop_s": (ends[-1] - ends[0]) / (len(ends) - 1),
        "final_loss": float(np.asarray(losses)[-1]),
    }


class _LoopEnds:
    """The time and loss at the end of every loop, recorded by a ``LoggingTensorHook``'s
    formatter (a jaxspec hook, known not to read the state: the loop ahead may donate it;
    a user's own SessionRunHook might read it, and for a state over
    ``donated_state.KEEP_AHEAD_MAX_BYTES`` per device no loop is dispatched ahead of it)."""

    def __init__(self) -> None:
        self.ends: list[float] = []
        self.losses: list[float] = []
        self.hook = jaxspec.LoggingTensorHook({"loss": "loss"}, every_n_iter=1, formatter=self._record)

    def _record(self, values: dict[str, Any]) -> str:
        self.ends.append(time.perf_counter())
        self.losses.append(float(values["loss"]))
        return f"loss = {self.losses[-1]}"


def run_jaxspec(n: int, k: int, steps: int, ipl: int, workdir: str) -> dict[str, Any]:
    """``TPUEstimator.train(steps=N)`` on a fresh model_dir, final checkpoint included."""
    replicas = jax.device_count() // k
    xs, ys = _batches(n, steps, PER_REPLICA_BATCH * replicas)

    def model_fn(features: Any, labels: Any, mode: str, params: Any, state: Any) -> Any:
        loss, grads = jax.value_and_grad(_loss)(state.params, features["x"], labels)
        return jaxspec.TPUEstimatorSpec(mode, loss=loss, train_op=state.apply_gradients(grads=grads))

    def input_fn(params: dict[str, Any]) -> Any:
        return (({"x": xs[i]}, ys[i]) for i in range(steps))  # PER_HOST_V1: the host's batch

    config = jaxspec.RunConfig(
        model_dir=os.path.join(workdir, "jaxspec"),
        save_checkpoints_steps=None,
        save_checkpoints_secs=None,
        save_summary_steps=None,
        log_step_count_steps=None,
        tpu_config=jaxspec.TPUConfig(iterations_per_loop=ipl, num_cores_per_replica=k),
    )
    est = jaxspec.TPUEstimator(
        model_fn,
        config=config,
        train_batch_size=PER_REPLICA_BATCH * replicas,
        init_fn=lambda: _init_state(n, cross_shard=True),
        partition_rules=[(r"w$", P(None, "core"))] if k > 1 else None,
    )
    clock = _LoopEnds()
    t0 = time.perf_counter()
    est.train(input_fn, steps=steps, hooks=[clock.hook])
    train_s = time.perf_counter() - t0
    loops = _compiled_in(est._compile_cache)
    if not loops:
        raise RuntimeError("no compiled train loop found in Estimator._compile_cache")
    device_bytes = max(_device_bytes(c) for c in loops)  # the train loop (the state's in and out)
    return {
        "device_bytes": device_bytes,
        "train_s": train_s,
        "loop_s": (clock.ends[-1] - clock.ends[0]) / (len(clock.ends) - 1),
        "final_loss": clock.losses[-1],
    }


def _orbax_save_restore(state: Any, directory: str, step: int) -> tuple[float, float]:
    """Orbax's own CheckpointManager: save + wait, then a fresh manager's restore (s, s)."""
    options = ocp.CheckpointManagerOptions(max_to_keep=1, create=True, enable_async_checkpointing=True)
    manager = ocp.CheckpointManager(directory, options=options)
    t0 = time.perf_counter()
    manager.save(step, args=ocp.args.StandardSave(state))
    manager.wait_until_finished()
    save_s = time.perf_counter() - t0
    manager.close()
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
    manager = ocp.CheckpointManager(directory, options=options)
    t0 = time.perf_counter()
    back = manager.restore(manager.latest_step(), args=ocp.args.StandardRestore(abstract))
    jax.block_until_ready(back)
    restore_s = time.perf_counter() - t0
    manager.close()
    return save_s, restore_s


def _jaxspec_save_restore(state: Any, model_dir: str, step: int) -> tuple[float, float]:
    """jaxspec's CheckpointStore: save + wait (integrity record written), then a fresh
    store's latest_step + restore (the record checked) (s, s)."""
    from jaxspec.store.checkpoints import CheckpointStore

    store = CheckpointStore(model_dir)
    t0 = time.perf_counter()
    store.save(step, state)
    store.wait()
    save_s = time.perf_counter() - t0
    store.close()
    store = CheckpointStore(model_dir)
    t0 = time.perf_counter()
    back = store.restore(store.latest_step(), state)
    jax.block_until_ready(back)
    restore_s = time.perf_counter() - t0
    store.close()
    return save_s, restore_s


def _integrity_check_s(model_dir: str, step: int) -> float:
    """The integrity check alone (every record of the step read and verified), as a
    restore runs it first: its own share of jaxspec's restore (and, as the record is
    computed the same way, of its save)."""
    from jaxspec.store import checkpoint_integrity
    from jaxspec.store.checkpoints import checkpoint_dir

    t0 = time.perf_counter()
    problem = checkpoint_integrity.damage(os.path.join(checkpoint_dir(model_dir), str(step)))
    if problem is not None:
        raise RuntimeError(f"the benchmark's checkpoint is damaged: {problem}")
    return time.perf_counter() - t0


def run_ckpt(n: int, k: int, repeats: int, workdir: str) -> dict[str, Any]:
    """Save and restore times of Orbax's own manager and of jaxspec's store on the same
    state, the side going first alternating; the median of ``repeats`` each (and the
    best)."""
    state = _born_sharded(n, _mesh(k), k)
    jax.block_until_ready(state)
    times: dict[str, list[float]] = {
        "orbax_save": [],
        "jaxspec_save": [],
        "orbax_restore": [],
        "jaxspec_restore": [],
        "jaxspec_check": [],
    }
    sides = [("orbax", _orbax_save_restore), ("jaxspec", _jaxspec_save_restore)]
    for r in range(repeats):
        for name, side in sides if r % 2 == 0 else sides[::-1]:
            directory = os.path.join(workdir, f"{name}{r}")
            save_s, restore_s = side(state, directory, r + 1)
            times[f"{name}_save"].append(save_s)
            times[f"{name}_restore"].append(restore_s)
            if name == "jaxspec":
                times["jaxspec_check"].append(_integrity_check_s(directory, r + 1))
            shutil.rmtree(directory)
    return {
        "times_s": times,
        **{f"{name}_s": statistics.median(ts) for name, ts in times.items()},
        **{f"{name}_min_s": min(ts) for name, ts in times.items()},
    }


def worker(args: argparse.Namespace) -> None:
    info = _imports()
    workdir = tempfile.mkdtemp(prefix="jaxspec_scale_")
    try:
        n = side_n(args.mib) if args.mib else 0
        if args.worker == "hand":
            out = run_hand(n, args.k, args.steps, args.ipl, workdir)
        elif args.worker == "jaxspec":
            out = run_jaxspec(n, args.k, args.steps, args.ipl, workdir)
        elif args.worker == "ckpt":
            out = run_ckpt(n, args.k, args.repeats, workdir)
        else:
            out = {}
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("RESULT " + json.dumps({**info, **out, "peak_rss": peak_rss()}), flush=True)


# -- the driver side -----------------------------------------------------------------------------
def _run_worker(kind: str, devices: int | None, extra: list[str]) -> dict[str, Any]:
    env = dict(os.environ)
    env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # GPU: no pool counted as the loop's
    env["JAXSPEC_COMPILATION_CACHE_DIR"] = "off"  # both sides compile, as a first train does
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    if devices is not None:
        flags.append(f"--xla_force_host_platform_device_count={devices}")
    env["XLA_FLAGS"] = " ".join(flags)
    cmd = [sys.executable, __file__, "--worker", kind, *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=Path(__file__).parent.parent)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout)[-3000:]
        raise RuntimeError(f"worker {kind} {extra} failed (rc {proc.returncode}):\n{tail}")
    return json.loads(lines[-1][len("RESULT ") :])


def _ratios(row: dict[str, Any]) -> dict[str, float]:
    out = {}
    for m in METRICS:
        ours, base = row["jaxspec"].get(m), row["hand"].get(m)
        if ours is not None and base:
            out[m] = ours / base
    return out


def measure_row(
    devices: int, k: int, mib: float, args: argparse.Namespace, force_devices: bool, imports: dict
) -> dict:
    dev = devices if force_devices else None
    common = ["--mib", str(mib), "--k", str(k), "--steps", str(args.steps), "--ipl", str(args.ipl)]
    hand = _run_worker("hand", dev, common)
    ours = _run_worker("jaxspec", dev, common)
    ckpt = _run_worker("ckpt", dev, [*common, "--repeats", str(args.repeats)])
    base_rss = imports[devices]["peak_rss"]
    hand["rss_above_imports"] = hand["peak_rss"] - base_rss
    ours["rss_above_imports"] = ours["peak_rss"] - base_rss
    hand["save_s"], ours["save_s"] = ckpt["orbax_save_s"], ckpt["jaxspec_save_s"]
    hand["restore_s"], ours["restore_s"] = ckpt["orbax_restore_s"], ckpt["jaxspec_restore_s"]
    ours["check_s"] = ckpt["jaxspec_check_s"]  # the integrity check alone (in save and restore)
    n = side_n(mib)
    row = {
        "devices": hand["devices"],
        "k": k,
        "mesh": [hand["devices"] // k, k],
        "state_mib": 12 * n * n / MiB,
        "n": n,
        "imports_rss": base_rss,
        "hand": hand,
        "jaxspec": ours,
        "ckpt_times_s": ckpt["times_s"],
    }
    row["ratio"] = _ratios(row)
    # Save and restore: the median of each repeat's own ratio (the two sides of a repeat
    # run back to back, so a slow moment of the machine weighs on both).
    for m in ("save", "restore"):
        times = ckpt["times_s"]
        pairs = [j / o for j, o in zip(times[f"jaxspec_{m}"], times[f"orbax_{m}"], strict=True)]
        row["ratio"][f"{m}_s"] = statistics.median(pairs)
    return row


def _print_row(row: dict[str, Any]) -> None:
    r, h, j = row["ratio"], row["hand"], row["jaxspec"]
    print(
        f"D={row['devices']:<3} k={row['k']:<2} state {row['state_mib']:7.1f} MiB | "
        f"device {j['device_bytes'] / MiB:8.1f}/{h['device_bytes'] / MiB:8.1f} MiB x{r['device_bytes']:.2f} | "
        f"rss+ {j['rss_above_imports'] / MiB:7.0f}/{h['rss_above_imports'] / MiB:7.0f} MiB "
        f"x{r['rss_above_imports']:.2f} | save {j['save_s']:.2f}/{h['save_s']:.2f} x{r['save_s']:.2f} | "
        f"restore {j['restore_s']:.2f}/{h['restore_s']:.2f} x{r['restore_s']:.2f} "
        f"(check {j['check_s']:.3f} s, {j['check_s'] / h['restore_s']:.1%}) | "
        f"train {j['train_s']:.2f}/{h['train_s']:.2f} x{r['train_s']:.2f} | "
        f"loop {j['loop_s']:.3f}/{h['loop_s']:.3f} x{r['loop_s']:.2f} | "
        f"loss {j['final_loss']:.6g}/{h['final_loss']:.6g}",
        flush=True,
    )


def _parse_rows(text: str) -> list[tuple[int, int, float]]:
    rows = []
    for item in text.split(","):
        d, k, mib = item.split(":")
        rows.append((int(d), int(k), float(mib)))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help=f"only the rows {QUICK_GRID} (devices, k, MiB)")
    ap.add_argument("--rows", help="rows to run, as devices:k:MiB,... (overrides the grid)")
    ap.add_argument("--steps", type=int, default=6, help="steps per train (a multiple of --ipl, >= 2 loops)")
    ap.add_argument("--ipl", type=int, default=2, help="iterations_per_loop")
    ap.add_argument("--repeats", type=int, default=5, help="saves and restores per side in the ckpt worker")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "scale.json"))
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--mib", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--k", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if args.steps % args.ipl or args.steps < 2 * args.ipl:
        ap.error("--steps must be a multiple of --ipl and at least twice it")
    grid = _parse_rows(args.rows) if args.rows else QUICK_GRID if args.quick else FULL_GRID
    probe = _run_worker("imports", None, [])
    force = probe["platform"] == "cpu"
    if not force:  # GPU/TPU: the backend's devices, the rows of other counts skipped
        grid = [(probe["devices"], k, mib) for d, k, mib in grid if probe["devices"] % k == 0]
        grid = list(dict.fromkeys(grid))
    started = time.perf_counter()
    imports = {d: _run_worker("imports", d if force else None, []) for d in sorted({d for d, _, _ in grid})}
    rows = []
    for devices, k, mib in grid:
        try:
            row = measure_row(devices, k, mib, args, force, imports)
        except RuntimeError as err:  # one failed row (e.g. out of memory) does not end the grid
            print(f"D={devices} k={k} {mib} MiB failed: {str(err)[-800:]}", flush=True)
            rows.append({"devices": devices, "k": k, "state_mib": mib, "error": str(err)[-3000:]})
            continue
        rows.append(row)
        _print_row(row)
    result = {
        "platform": probe["platform"],
        "device_kind": probe["device_kind"],
        "steps": args.steps,
        "iterations_per_loop": args.ipl,
        "per_replica_batch": PER_REPLICA_BATCH,
        "repeats": args.repeats,
        "wall_s": time.perf_counter() - started,
        "imports_rss": {str(d): v["peak_rss"] for d, v in imports.items()},
        "rows": rows,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out} ({result['wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
