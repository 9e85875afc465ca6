"""The steps of the device check (``benchmarks/gpu_check.sh`` runs each in its own process,
under its own timeout); every step writes ``OUT/<step>.json``:
``{"step", "status": ok|failed|skipped, "device", "figures": {...}, "note"}``.

    python benchmarks/gpu_check.py STEP --out DIR [--dry-run]
    python benchmarks/gpu_check.py summary --out DIR --steps a,b,c

Steps (``--dry-run``: the CPU, tiny sizes, seconds):

- ``machine``: python, torch, the GPU, which optional packages import;
- ``parity``: each torch-native environment on CUDA against the CPU one in float64, from the
  same states with the same actions (max |difference| of observation and reward; flags equal),
  and the host synchronisations of one rollout at two horizons (``set_sync_debug_mode``);
- ``control_ppo``: PPO on CartPole (the ``cartpole`` task's loop) at N = 65,536 environments,
  environment steps per second on CUDA (fp32, and ``precision: bf16``) and on the CPU (fp32,
  all its cores);
- ``seed_axis``: 32 seeds of a logreg trial, sequential vs on a seed axis, and 8 seeds of
  control PPO on a seed axis, on CUDA;
- ``rlvr``: ``benchmarks/rlvr_tokens.py --precision P`` (hf rollout and training tokens/s);
- ``sweep``: a short cartpole sweep on CUDA tracked into a local SQLite store, or, where
  mlflow/optuna do not import, untracked (``workbench run``) or skipped, said so.

Peak GPU memory (``torch.cuda.max_memory_allocated``, reset at the step's start) is in each
step's figures as ``peak_memory_mib`` when the device is CUDA. Imports only the standard
library at the top: ``summary`` runs even where torch does not.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPTIONAL = ("pydantic", "optuna", "mlflow", "sqlalchemy", "gymnasium", "transformers", "vllm",
            "pynvml", "yaml", "pandas", "scipy")


def _device(dry_run: bool):
    import torch

    if dry_run:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise RuntimeError("CUDA is not available (use --dry-run on a machine without a GPU)")
    return torch.device("cuda")


def _reset_peak(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def _peak(device) -> dict:
    import torch

    if device.type != "cuda":
        return {}
    torch.cuda.synchronize()
    return {"peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20}


# ---- steps ---------------------------------------------------------------------------------

def step_machine(dry_run: bool) -> dict:
    import platform

    import torch

    figures = {"python": platform.python_version(), "torch": torch.__version__,
               "cuda_available": torch.cuda.is_available(), "cpus": os.cpu_count()}
    if torch.cuda.is_available():
        figures |= {"gpu": torch.cuda.get_device_name(0), "cuda": torch.version.cuda,
                    "gpu_memory_gib": torch.cuda.get_device_properties(0).total_memory / 2**30}
    figures["imports"] = {name: importlib.util.find_spec(name) is not None
                          for name in OPTIONAL}
    return {"device": "cuda" if torch.cuda.is_available() else "cpu", "figures": figures}


def step_parity(dry_run: bool) -> dict:
    import warnings

    import torch

    from workbench.testbeds.control.policy import ActorCritic
    from workbench.testbeds.control.rollout import collect
    from workbench.testbeds.envs import ENV_IDS, make

    device = _device(dry_run)
    n, steps = (64, 10) if dry_run else (4096, 200)
    _reset_peak(device)
    figures: dict = {"num_envs": n, "steps": steps}
    for env_id in ENV_IDS:
        cpu = make(env_id, n, dtype=torch.float64, seed=0, max_episode_steps=50)
        dev = make(env_id, n, dtype=torch.float64, seed=0, device=device, max_episode_steps=50)
        draws = torch.Generator().manual_seed(0)
        obs_diff = reward_diff = 0.0
        flag_mismatches = 0
        for _ in range(steps):
            dev.set_state(cpu.get_state().to(device), cpu.get_elapsed().to(device))
            if cpu.discrete:
                actions = torch.randint(0, cpu.n_actions, (n,), generator=draws)
            else:
                actions = torch.rand((n, 1), generator=draws, dtype=torch.float64) * 4 - 2
            a, b = cpu.step(actions), dev.step(actions.to(device))
            obs_diff = max(obs_diff, float((a.final_obs - b.final_obs.cpu()).abs().max()))
            reward_diff = max(reward_diff, float((a.reward - b.reward.cpu()).abs().max()))
            flag_mismatches += int((a.terminated != b.terminated.cpu()).sum()
                                   + (a.truncated != b.truncated.cpu()).sum())
        figures[env_id] = {"max_abs_obs_diff": obs_diff, "max_abs_reward_diff": reward_diff,
                           "flag_mismatches": flag_mismatches}
    # host synchronisations of one rollout: the same at 8 and 32 steps when none is per step
    syncs = {}
    for horizon in (8, 32):
        env = make("CartPole-v1", n, seed=0, device=device, max_episode_steps=5)
        torch.manual_seed(0)
        agent = ActorCritic(env.obs_dim, n_actions=env.n_actions).to(device)
        obs = env.reset(seed=0)
        if device.type == "cuda":
            torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if device.type == "cuda":
                torch.cuda.set_sync_debug_mode("warn")
            try:
                collect(env, agent, obs, horizon)
            finally:
                if device.type == "cuda":
                    torch.cuda.set_sync_debug_mode("default")
        syncs[str(horizon)] = sum("synchroniz" in str(w.message) for w in caught)
    figures["rollout_host_syncs_by_horizon"] = syncs
    worst = max(figures[e]["max_abs_obs_diff"] for e in ENV_IDS)
    mismatches = sum(figures[e]["flag_mismatches"] for e in ENV_IDS)
    ok = worst <= 1e-9 and mismatches == 0 and syncs["8"] == syncs["32"]
    return {"device": str(device), "figures": figures | _peak(device),
            "status": "ok" if ok else "failed",
            "note": f"worst |obs diff| {worst:.3g}, flag mismatches {mismatches}, "
                    f"rollout syncs {syncs}"}


def _ppo_steps_per_second(task, params, device, updates: int, warmup: int) -> float:
    import torch

    from workbench import registry
    from workbench.testbeds import Budget

    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    if warmup:
        task().run(params, chosen, seed=0, device=device, budget=Budget(steps=warmup),
                   log=lambda s, m: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    task().run(params, chosen, seed=0, device=device, budget=Budget(steps=updates),
               log=lambda s, m: None)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return params.num_envs * params.rollout_len * updates / (time.perf_counter() - started)


def step_control_ppo(dry_run: bool) -> dict:
    import torch

    from workbench.testbeds import get_task

    device = _device(dry_run)
    n, horizon = (64, 8) if dry_run else (65_536, 32)
    task = get_task("cartpole")
    threads = os.cpu_count() or 1
    params = task.Params(num_envs=n, rollout_len=horizon, cpu_threads=threads)
    _reset_peak(device)
    on_device = _ppo_steps_per_second(task, params, device, updates=1 if dry_run else 4,
                                      warmup=0 if dry_run else 1)
    figures = {"num_envs": n, "rollout_len": horizon, "device_steps_per_s": on_device}
    figures |= _peak(device)
    bf16 = params.model_copy(update={"precision": "bf16"})
    figures["device_bf16_steps_per_s"] = _ppo_steps_per_second(
        task, bf16, device, updates=1 if dry_run else 4, warmup=0)
    on_cpu = _ppo_steps_per_second(task, params, torch.device("cpu"), updates=1 if dry_run
                                   else 2, warmup=0)
    figures |= {"cpu_steps_per_s": on_cpu, "cpu_threads": threads,
                "device_over_cpu": on_device / on_cpu}
    return {"device": str(device), "figures": figures,
            "note": f"N={n:,}: {on_device:,.0f} steps/s on {device}, {on_cpu:,.0f} on the CPU "
                    f"({threads} threads): {on_device / on_cpu:.1f}x"}


def step_seed_axis(dry_run: bool) -> dict:
    sys.path.insert(0, str(ROOT))
    import torch

    from benchmarks.seed_axis import sequential, vectorised
    from workbench import registry
    from workbench.testbeds import Budget, get_task

    device = _device(dry_run)
    seeds, steps = (list(range(4)), 5) if dry_run else (list(range(32)), 200)
    _reset_peak(device)
    vectorised("polyak", seeds[:2], 2, device)  # warm-up
    alone = sequential("polyak", seeds, steps, device)
    together = vectorised("polyak", seeds, steps, device)
    figures = {"logreg_seeds": len(seeds), "logreg_steps": steps,
               "logreg_sequential_s": alone, "logreg_vectorised_s": together,
               "logreg_ratio": alone / together}
    task = get_task("cartpole")
    n, horizon, updates, k = (16, 8, 2, 2) if dry_run else (4096, 32, 4, 8)
    params = task.Params(num_envs=n, rollout_len=horizon)
    chosen = {slot: registry.get(slot, name)() for slot, name in task.default_methods.items()}
    kwargs = dict(device=device, budget=Budget(steps=updates), log=lambda s, m: None)

    def run(count: int) -> None:
        if count == 1:
            task().run(params, chosen, seed=0, **kwargs)
        else:
            task().run_seeds(params, chosen, seeds=list(range(count)), **kwargs)

    rates = {}
    for count in (1, k):
        run(count)  # warm-up
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        run(count)
        if device.type == "cuda":
            torch.cuda.synchronize()
        rates[count] = count * n * horizon * updates / (time.perf_counter() - started)
    figures |= {"control_num_envs": n, "control_seeds": k,
                "control_one_seed_steps_per_s": rates[1],
                "control_seed_axis_steps_per_s": rates[k],
                "control_ratio": rates[k] / rates[1]}
    return {"device": str(device), "figures": figures | _peak(device),
            "note": f"logreg {len(seeds)} seeds: {alone / together:.1f}x vectorised; control "
                    f"{k} seeds at N={n}: {rates[k] / rates[1]:.1f}x one seed's steps/s"}


def step_rlvr(dry_run: bool, precision: str, out: Path) -> dict:
    """``benchmarks/rlvr_tokens.py --precision P`` in this process (for its peak memory)."""
    sys.path.insert(0, str(ROOT))
    import runpy

    device = _device(dry_run)
    rows = out / f"rlvr_tokens_{precision}.json"
    argv = ["rlvr_tokens.py", "--precision", precision, "--device", device.type, "--quick",
            "--json", str(rows)]
    if dry_run:
        argv += ["--prompts", "2", "--samples", "2", "--max-new-tokens", "4"]
    _reset_peak(device)
    saved = sys.argv
    sys.argv = argv
    try:
        runpy.run_path(str(ROOT / "benchmarks" / "rlvr_tokens.py"), run_name="__main__")
    except SystemExit as stop:  # argparse: e.g. --precision not (yet) accepted
        if stop.code not in (0, None):
            return {"device": str(device), "status": "failed", "figures": _peak(device),
                    "note": f"rlvr_tokens.py {' '.join(argv[1:])} exited {stop.code} "
                            "(see the step's log)"}
    finally:
        sys.argv = saved
    figures = _peak(device)
    if rows.exists():
        for row in json.loads(rows.read_text()).get("rows", []):
            key = f"{row.get('device')}_{row.get('backend')}"
            for name in ("rollout_tokens_per_s", "train_tokens_per_s"):
                if name in row:
                    figures[f"{key}_{name}"] = row[name]
    return {"device": str(device), "figures": figures | {"precision": precision}}


def _sweep_spec(dry_run: bool, name: str) -> dict:
    n, horizon, updates = (16, 8, 2) if dry_run else (4096, 32, 20)
    return {"name": name, "task": {"name": "cartpole",
                                   "params": {"num_envs": n, "rollout_len": horizon}},
            "methods": {"advantage": ["gae"]}, "seeds": 2, "trials": 1 if dry_run else 3,
            "sampler": {"name": "random", "seed": 0}, "pruner": "none",
            "objective": {"metric": "train/return_recent", "direction": "maximize"},
            "budget": {"steps": updates}, "execution": {"seeds": "auto"}}


def _imports(*modules: str) -> bool:
    """Whether ``python -c 'import MODULES'`` succeeds (installed and importable)."""
    code = f"import {', '.join(modules)}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0


def step_sweep(dry_run: bool, out: Path) -> dict:
    import yaml

    device = "cpu" if dry_run else "cuda"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    tracked = _imports("mlflow", "optuna")
    spec = _sweep_spec(dry_run, "gpu-check")
    started = time.perf_counter()
    if tracked:
        path = out / "sweep.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        store = out / "sweep_store.db"
        cmd = [sys.executable, "-m", "workbench", "sweep", str(path), "--storage",
               f"sqlite:///{store}", "--device", device, "--quiet"]
        done = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        figures = {"tracked": True, "store": str(store), "trials": spec["trials"],
                   "seeds": spec["seeds"], "seconds": time.perf_counter() - started}
        return {"device": device, "figures": figures,
                "status": "ok" if done.returncode == 0 else "failed",
                "note": f"workbench sweep exited {done.returncode}"}
    print("tracking off: mlflow/optuna not installed on this machine", flush=True)
    if not _imports("optuna"):  # the method registry needs optuna
        return {"device": device, "status": "skipped", "figures": {"tracked": False},
                "note": "tracking off: mlflow/optuna not installed on this machine; the "
                        "untracked run needs optuna too (the method registry): skipped"}
    params = spec["task"]["params"]
    cmd = [sys.executable, "-m", "workbench", "run", "cartpole", "advantage=gae",
           *(f"{k}={v}" for k, v in params.items()), "--steps", str(spec["budget"]["steps"]),
           "--device", device, "--json"]
    with tempfile.TemporaryDirectory() as scratch:
        done = subprocess.run(cmd, cwd=scratch, env=env, capture_output=True, text=True)
    print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
    figures = {"tracked": False, "seconds": time.perf_counter() - started}
    try:
        final = json.loads(done.stdout.strip().splitlines()[-1])
        figures["train/return_recent"] = final.get("train/return_recent")
    except (ValueError, IndexError):
        pass
    return {"device": device, "status": "ok" if done.returncode == 0 else "failed",
            "figures": figures,
            "note": "tracking off: mlflow/optuna not installed on this machine; the objective "
                    f"ran untracked (workbench run), exit {done.returncode}"}


# ---- summary -------------------------------------------------------------------------------

def summary(out: Path, steps: list[str]) -> int:
    """``summary.json`` and ``summary.txt``: each step's status, seconds and figures."""
    rows = []
    for name in steps:
        path = out / f"{name}.json"
        try:
            row = json.loads(path.read_text())
        except (OSError, ValueError):
            row = {"step": name, "status": "failed", "note": f"no result file {path.name}"}
        rows.append(row)
    (out / "summary.json").write_text(json.dumps({"steps": rows}, indent=2))
    lines = []
    for row in rows:
        lines.append(f"{row['step']:<12} {row.get('status', '?'):<8} "
                     f"{row.get('seconds', float('nan')):7.1f} s  {row.get('note', '')}")
        for key, value in sorted((row.get("figures") or {}).items()):
            shown = f"{value:,.4g}" if isinstance(value, float) else json.dumps(value)
            lines.append(f"    {key}: {shown}")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


STEPS = {"machine": step_machine, "parity": step_parity, "control_ppo": step_control_ppo,
         "seed_axis": step_seed_axis}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("step", help="machine, parity, control_ppo, seed_axis, rlvr_fp32, "
                                     "rlvr_bf16, sweep or summary")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true", help="the CPU, tiny sizes")
    parser.add_argument("--steps", default="", help="summary: the steps, comma-separated")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.step == "summary":
        return summary(args.out, [s for s in args.steps.split(",") if s])
    started = time.perf_counter()
    try:
        if args.step in STEPS:
            result = STEPS[args.step](args.dry_run)
        elif args.step.startswith("rlvr_"):
            result = step_rlvr(args.dry_run, args.step.removeprefix("rlvr_"), args.out)
        elif args.step == "sweep":
            result = step_sweep(args.dry_run, args.out)
        else:
            parser.error(f"unknown step {args.step!r}")
    except Exception as err:  # the step failed: say why in its result file, then exit 1
        traceback.print_exc()
        result = {"status": "failed", "note": f"{type(err).__name__}: {err}"[:500]}
    result = {"step": args.step, "status": "ok", "dry_run": args.dry_run, **result,
              "seconds": time.perf_counter() - started}
    (args.out / f"{args.step}.json").write_text(json.dumps(result, indent=2, default=str))
    print(f"{args.step}: {result['status']} {result.get('note', '')}", flush=True)
    return 0 if result["status"] in ("ok", "skipped") else 1


if __name__ == "__main__":
    sys.exit(main())
