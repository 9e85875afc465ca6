"""Seeds on a seed axis against the same seeds run one after another, measured in one run.

1. One trial of the quickstart's logistic regression (512 x 20, minibatch 64, 200 steps) on
   ``--seeds`` seeds (10), per step-size method: ``Task.run`` once per seed against one
   ``Task.run_seeds`` (the training steps as the engine runs them, metrics built for every
   seed at every step, nothing written). Target: >= 5x.
   The same for one trial of the MLP on the digits (width 64, minibatch 64), S networks
   trained as an ensemble (``torch.func.vmap`` over ``functional_call``).
   Control: PPO on CartPole (the task's defaults, T = 32 steps per update) with 8 seeds x
   N = 1,024 environments in one ``run_seeds`` against one seed's ``run`` at N = 1,024: total
   environment steps per second (target >= 3x), and against the CleanRL-style loop of
   ``benchmarks/control_ppo.py`` (one seed, N = 4; target >= 40x); the same at N = 8, where
   per-operation overhead rather than arithmetic sets the pace.
2. The thread default: the vectorised trial with one torch thread against two (the
   optimisation testbeds' default is one per worker).
3. Memory: the peak RSS of a vectorised trial of S seeds and of one seed, each in a fresh
   process. Target: at most S x the one-seed figure.
4. GPU: 32 seeds vectorised against 32 sequential runs on CUDA (target >= 10x); prints
   "no GPU" without one.
5. ``--sweeps``: the quickstart sweep through ``workbench sweep`` with ``execution: {seeds:
   auto}`` at 10 seeds against 3 seeds, CPU seconds of the whole command (target: <= 2x).

``--one-seed`` (alone, under 2 minutes): one seed through ``Task.run`` against the same seed as
``Task.run_seeds([seed])`` (a seed axis of one), same configuration, runs alternated: logreg
(``--steps`` steps; constant, polyak, armijo, adam), the MLP (sgd_momentum, adam) and PPO on
CartPole at N = 4 and N = 256 (``--control-updates`` updates, T = 32); the wall time of each
run (min and median of ``--repeats``), the ratio of the medians (axis / run: <= 1 means one
seed on the axis costs no more) and whether the logged metrics are the same bits (else the
largest relative difference). ``--against DIR`` instead times ``Task.run`` of this checkout
against ``Task.run`` of the checkout in DIR (another commit, e.g. from ``git worktree add``),
the same cases, in two worker processes called in turn (a load on the machine falls on both),
and compares their logged metrics bit for bit: "today" against a change.

Usage::

    python benchmarks/seed_axis.py [--seeds 10] [--steps 200] [--control-updates 8] [--sweeps]
    python benchmarks/seed_axis.py --one-seed [--repeats 5] [--steps 200] [--control-updates 8]
    python benchmarks/seed_axis.py --one-seed --against DIR [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

from workbench import registry
from workbench.common.budget import Budget
from workbench.testbeds import get_task

ROOT = Path(__file__).resolve().parent.parent
PARAMS = {"logreg": {"n_samples": 512, "dim": 20, "margin": 0.1, "batch_size": 64},
          "mlp": {"width": 64, "batch_size": 64}}


def methods(name: str) -> dict:
    return {"step_size": registry.get("step_size", name)(),
            "batch_size": registry.get("batch_size", "constant")()}


def params_of(task, threads: int):
    params = task.Params(**PARAMS[task.name])
    return params.model_copy(update={"cpu_threads": threads}) if threads != 1 else params


def sequential(name: str, seeds: list[int], steps: int, device: torch.device,
               threads: int = 1, task_name: str = "logreg") -> float:
    task = get_task(task_name)()
    params = params_of(task, threads)
    started = time.perf_counter()
    for seed in seeds:
        task.run(params, methods(name), seed=seed, device=device, budget=Budget(steps=steps),
                 log=lambda step, metrics: None)
    return time.perf_counter() - started


def vectorised(name: str, seeds: list[int], steps: int, device: torch.device,
               threads: int = 1, task_name: str = "logreg") -> float:
    task = get_task(task_name)()
    params = params_of(task, threads)
    started = time.perf_counter()
    task.run_seeds(params, methods(name), seeds=seeds, device=device,
                   budget=Budget(steps=steps), log=lambda step, per_seed: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def control_steps_per_second(n_seeds: int, num_envs: int, updates: int,
                             horizon: int = 32) -> float:
    """Environment steps per second, all seeds together, of PPO on CartPole: ``run`` for one
    seed, ``run_seeds`` for more."""
    task = get_task("cartpole")
    params = task.Params(num_envs=num_envs, rollout_len=horizon)
    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    cpu, budget = torch.device("cpu"), Budget(steps=updates)
    started = time.perf_counter()
    if n_seeds == 1:
        task().run(params, chosen, seed=0, device=cpu, budget=budget, log=lambda s, m: None)
    else:
        task().run_seeds(params, chosen, seeds=list(range(n_seeds)), device=cpu, budget=budget,
                         log=lambda s, m: None)
    return n_seeds * num_envs * horizon * updates / (time.perf_counter() - started)


def control(updates: int) -> None:
    if str(ROOT) not in sys.path:  # run as a script: the repository root is not on the path
        sys.path.insert(0, str(ROOT))
    from benchmarks.control_ppo import cleanrl_style_steps_per_second

    control_steps_per_second(2, 8, 2)  # warm-up
    baseline = cleanrl_style_steps_per_second(16_384)
    for num_envs, n_updates in ((1024, updates), (8, 4 * updates)):
        one = control_steps_per_second(1, num_envs, n_updates)
        eight = control_steps_per_second(8, num_envs, n_updates)
        print(f"   control PPO, N = {num_envs}: 1 seed {one:9.0f} steps/s, 8 seeds {eight:9.0f} "
              f"steps/s in all: {eight / one:5.2f}x one seed"
              + (f", {eight / baseline:5.1f}x the CleanRL-style loop ({baseline:.0f} steps/s)"
                 if num_envs == 1024 else ""))


def one_seed_case(task_name: str, params: dict, chosen: dict[str, tuple[str, dict]],
                  steps: int, repeats: int, label: str) -> None:
    """``run`` against ``run_seeds`` with one seed (``--one-seed``): times and parity."""
    import statistics

    task = get_task(task_name)()
    full = task.Params(**params)
    cpu, seed = torch.device("cpu"), 7

    def fresh():
        return {slot: registry.get(slot, name)(**hp) for slot, (name, hp) in chosen.items()}

    def alone():
        rows: list = []
        task.run(full, fresh(), seed=seed, device=cpu, budget=Budget(steps=steps),
                 log=lambda step, m: rows.append((step, dict(m))))
        return rows

    def axis():
        rows: list = []
        task.run_seeds(full, fresh(), seeds=[seed], device=cpu, budget=Budget(steps=steps),
                       log=lambda step, per_seed: rows.append((step, dict(per_seed[0]))))
        return rows

    a, b = alone(), axis()  # warm-up, and the numbers compared
    times: dict[str, list[float]] = {"run": [], "axis": []}
    for _ in range(repeats):
        for name, fn in (("run", alone), ("axis", axis)):
            started = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - started)
    worst, same = 0.0, [s for s, _ in a] == [s for s, _ in b]
    for (_, x), (_, y) in zip(a, b, strict=False):
        same = same and x.keys() == y.keys()
        for key in x.keys() & y.keys() - {"time/wall_seconds", "time/env_steps_per_second"}:
            u, v = x[key], y[key]
            if u != v and not (u != u and v != v):
                worst = max(worst, abs(u - v) / max(abs(u), abs(v), 1e-300))
    mr, ma = statistics.median(times["run"]), statistics.median(times["axis"])
    parity = "same bits" if same and worst == 0.0 else (
        f"max rel diff {worst:.1e}" if same else "DIFFERENT steps or keys")
    print(f"   {label:28s} run min {min(times['run']):6.3f} med {mr:6.3f} s | axis min "
          f"{min(times['axis']):6.3f} med {ma:6.3f} s | axis/run {ma / mr:5.2f} | {parity}",
          flush=True)


def one_seed_cases(steps: int, updates: int) -> list[tuple]:
    """(label, task, params, {slot: (method, hyperparameters)}, steps) of ``--one-seed``."""
    constant = ("constant", {})
    cases = [(f"logreg {name} x{steps}", "logreg", PARAMS["logreg"],
              {"step_size": (name, {}), "batch_size": constant}, steps)
             for name in ("constant", "polyak", "armijo", "adam")]
    cases += [(f"mlp {name} x{steps // 2}", "mlp", PARAMS["mlp"],
               {"step_size": (name, {}), "batch_size": constant}, steps // 2)
              for name in ("sgd_momentum", "adam")]
    chosen = {slot: (name, {}) for slot, name in get_task("cartpole").default_methods.items()}
    cases += [(f"cartpole PPO N={n} x{updates}", "cartpole", {"num_envs": n, "rollout_len": 32},
               chosen, updates) for n in (4, 256)]
    return cases


def one_seed(steps: int, updates: int, repeats: int) -> None:
    print(f"one seed: Task.run against Task.run_seeds([seed]), {repeats} repeats, one thread")
    for label, task_name, params, chosen, n in one_seed_cases(steps, updates):
        one_seed_case(task_name, params, chosen, n, repeats, label)


def run_once(task_name: str, params: dict, chosen: dict, steps: int) -> tuple[float, list]:
    """One ``Task.run`` of seed 7 on the CPU: (its wall time, its logged rows untimed)."""
    task = get_task(task_name)()
    methods = {slot: registry.get(slot, name)(**hp) for slot, (name, hp) in chosen.items()}
    rows: list = []
    untimed = {"time/wall_seconds", "time/env_steps_per_second"}
    started = time.perf_counter()
    task.run(task.Params(**params), methods, seed=7, device=torch.device("cpu"),
             budget=Budget(steps=steps),
             log=lambda step, m: rows.append((step, {k: v for k, v in m.items()
                                                     if k not in untimed})))
    return time.perf_counter() - started, rows


def worker(steps: int, updates: int) -> None:
    """``--worker``: read a case index per line, run it, print its time and a digest of its
    numbers (the repr of every logged value)."""
    import hashlib

    cases = one_seed_cases(steps, updates)
    for line in sys.stdin:
        _, task_name, params, chosen, n = cases[int(line)]
        seconds, rows = run_once(task_name, params, chosen, n)
        digest = hashlib.sha256(repr(rows).encode()).hexdigest()[:16]
        print(f"{seconds!r} {digest}", flush=True)


def against(other: Path, steps: int, updates: int, repeats: int) -> None:
    """``Task.run`` here against ``Task.run`` in the checkout ``other``, called in turn."""
    import statistics

    def start(root: Path) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, str(root / "benchmarks" / "seed_axis.py"), "--worker",
             "--steps", str(steps), "--control-updates", str(updates)],
            cwd=root, env={**os.environ, "PYTHONPATH": str(root)}, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, text=True)

    workers = {"other": start(other.resolve()), "here": start(ROOT)}

    def ask(name: str, index: int) -> tuple[float, str]:
        proc = workers[name]
        proc.stdin.write(f"{index}\n")
        proc.stdin.flush()
        seconds, digest = proc.stdout.readline().split()
        return float(seconds), digest

    print(f"one seed: Task.run here against Task.run in {other}, {repeats} runs each, in turn")
    for index, (label, *_) in enumerate(one_seed_cases(steps, updates)):
        digests = {name: ask(name, index)[1] for name in workers}  # warm-up; the numbers
        times: dict[str, list[float]] = {name: [] for name in workers}
        for _ in range(repeats):
            for name in workers:
                times[name].append(ask(name, index)[0])
        mo, mh = statistics.median(times["other"]), statistics.median(times["here"])
        print(f"   {label:28s} there min {min(times['other']):6.3f} med {mo:6.3f} s | here min "
              f"{min(times['here']):6.3f} med {mh:6.3f} s | here/there med {mh / mo:5.2f} min "
              f"{min(times['here']) / min(times['other']):5.2f} | "
              + ("same bits" if digests["here"] == digests["other"] else "NUMBERS DIFFER"),
              flush=True)
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()


def peak_rss_mib(n_seeds: int, steps: int) -> float:
    """Peak RSS of a fresh process that runs one vectorised trial of ``n_seeds`` seeds."""
    code = (f"import resource, torch, sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from benchmarks.seed_axis import vectorised; "
            f"vectorised('polyak', list(range({n_seeds})), {steps}, torch.device('cpu')); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, cwd=ROOT)
    return int(done.stdout.split()[-1]) / 1024


def sweep_cpu_seconds(seeds: int) -> float:
    """CPU seconds (user + system) of ``workbench sweep`` on the quickstart at ``seeds``."""
    spec = yaml.safe_load((ROOT / "sweeps" / "quickstart.yaml").read_text())
    spec.update(name=f"quickstart{seeds}", seeds=seeds, execution={"seeds": "auto"})
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "workbench", "sweep", str(path), "--storage",
                        f"sqlite:///{folder}/store.db", "--quiet"], check=True, cwd=folder,
                       capture_output=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sweeps", action="store_true", help="also time the quickstart sweep")
    parser.add_argument("--control-updates", type=int, default=8,
                        help="PPO updates per control measurement (N = 8: four times more)")
    parser.add_argument("--one-seed", action="store_true",
                        help="only: one seed through run against run_seeds([seed])")
    parser.add_argument("--repeats", type=int, default=5, help="--one-seed: runs of each")
    parser.add_argument("--against", type=Path, default=None,
                        help="--one-seed: time Task.run against the checkout in this folder")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.control_updates)
        return
    if args.one_seed and args.against is not None:
        against(args.against, args.steps, args.control_updates, args.repeats)
        return
    if args.one_seed:
        one_seed(args.steps, args.control_updates, args.repeats)
        return
    cpu, seeds = torch.device("cpu"), list(range(args.seeds))

    print(f"1. logreg trial, {args.seeds} seeds x {args.steps} steps, one thread (target >= 5x)")
    for name in ("constant", "polyak", "armijo", "adam"):
        vectorised(name, seeds[:2], 5, cpu)  # warm-up: first calls, vmap's set-up
        alone = sequential(name, seeds, args.steps, cpu)
        together = vectorised(name, seeds, args.steps, cpu)
        print(f"   {name:9s} sequential {alone:6.2f} s  vectorised {together:6.2f} s  "
              f"ratio {alone / together:5.2f}x")

    print(f"   mlp trial, {args.seeds} seeds x {args.steps} steps")
    for name in ("sgd_momentum", "adam"):
        vectorised(name, seeds[:2], 5, cpu, task_name="mlp")
        alone = sequential(name, seeds, args.steps, cpu, task_name="mlp")
        together = vectorised(name, seeds, args.steps, cpu, task_name="mlp")
        print(f"   {name:12s} sequential {alone:6.2f} s  vectorised {together:6.2f} s  "
              f"ratio {alone / together:5.2f}x")

    control(args.control_updates)

    one, two = (vectorised("polyak", seeds, args.steps, cpu, threads) for threads in (1, 2))
    print(f"2. vectorised polyak trial: 1 thread {one:.2f} s, 2 threads {two:.2f} s "
          f"(2 threads take {two / one:.2f}x the time of 1)")

    single, many = peak_rss_mib(1, args.steps), peak_rss_mib(args.seeds, args.steps)
    print(f"3. peak RSS: 1 seed {single:.0f} MiB, {args.seeds} seeds vectorised {many:.0f} MiB "
          f"({many / single:.2f}x; target <= {args.seeds}x)")

    if torch.cuda.is_available():
        gpu, many_seeds = torch.device("cuda"), list(range(32))
        vectorised("polyak", many_seeds[:2], 5, gpu)
        alone = sequential("polyak", many_seeds, args.steps, gpu)
        together = vectorised("polyak", many_seeds, args.steps, gpu)
        print(f"4. GPU, 32 seeds: sequential {alone:.2f} s, vectorised {together:.2f} s, "
              f"ratio {alone / together:.2f}x (target >= 10x)")
    else:
        print("4. no GPU")

    if args.sweeps:
        three, ten = sweep_cpu_seconds(3), sweep_cpu_seconds(10)
        print(f"5. quickstart sweep, execution auto: 3 seeds {three:.1f} CPU s, 10 seeds "
              f"{ten:.1f} CPU s ({ten / three:.2f}x; target <= 2x)")


if __name__ == "__main__":
    main()
