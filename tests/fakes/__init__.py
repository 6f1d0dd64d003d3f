"""Local fakes for the tests: a W&B public-API GraphQL server (``wandb_api``) and run directories
written per docs/run_dir.md from a real composition (``write_run_dir``), with real TensorBoard
event files (tensorboard's EventFileWriter), metrics.jsonl and, on request, a real offline
wandb run (``wandb.init(mode="offline")``)."""
from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

Curve = dict[str, list[tuple[int, float]]]  # metric -> [(step, value)]


def write_tensorboard(logdir: Path, curves: Curve) -> None:
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    w = EventFileWriter(str(logdir))
    for name, pts in curves.items():
        for step, value in pts:
            w.add_event(Event(step=step, wall_time=time.time(),
                              summary=Summary(value=[Summary.Value(tag=name, simple_value=value)])))
    w.close()


def write_wandb_offline(run_dir: Path, wandb_id: str, group: str, curves: Curve, project: str = "trainstack") -> None:
    import os

    import wandb

    os.environ.pop("WANDB_RUN_ID", None)
    run = wandb.init(project=project, group=group, id=wandb_id, dir=str(run_dir), mode="offline",
                     config={"lr": 0.0}, settings=wandb.Settings(console="off", x_disable_stats=True, silent=True))
    for key in ("rollout", "train", "eval"):
        run.define_metric(f"{key}/step")
        run.define_metric(f"{key}/*", step_metric=f"{key}/step")
    for name, pts in curves.items():
        sk = {"train": "train/step", "eval": "eval/step"}.get(name.split("/")[0], "rollout/step")
        for step, value in pts:
            run.log({sk: step, name: value})
    run.finish()


def write_run_dir(runs_root: Path, overrides: list[str], curves: Curve, *, conf_dir: str | None = None,
                  state: str = "finished", tensorboard: bool = True, jsonl: bool = True,
                  wandb_group: str | None = None) -> tuple[Path, Any]:
    """Compose ``overrides`` for real and write the run directory the contract describes."""
    import yaml

    from trainstack.reports.display import redact
    from trainstack.render.pipeline import build_from_overrides

    default_root = Path(runs_root).resolve() == (Path.cwd() / "runs").resolve()  # then leave paths.runs_root alone
    run, cmd = build_from_overrides([*overrides, *([] if default_root else [f"paths.runs_root={runs_root}"])], conf_dir)
    d = Path(run.run_dir)
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.yaml").write_text(yaml.safe_dump(redact(run.config), sort_keys=False))
    (d / "command.json").write_text(json.dumps({"run_id": run.run_id, **cmd.to_json()}, indent=2))
    (d / "provenance.json").write_text(json.dumps(run.provenance, indent=2))
    (d / "choices.json").write_text(json.dumps(run.origin.choices, indent=2))
    (d / "overrides.yaml").write_text(yaml.safe_dump([o.lstrip("+") for o in run.origin.overrides]))
    n_rollout = 1 + max((s for name, pts in curves.items() if name.startswith("rollout/") for s, _ in pts), default=-1)
    last = {name: pts[-1][1] for name, pts in curves.items() if pts}
    (d / "status.json").write_text(json.dumps({"run_id": run.run_id, "state": state, "last_checkpoint": None,
                                               "num_rollout": n_rollout, "last_metrics": last,
                                               "updated_at": "2026-01-01T00:00:00Z", "host": "test", "pid": 0}))
    if jsonl:
        with open(d / "metrics.jsonl", "w") as f:
            for name, pts in curves.items():
                sk = {"train": "train/step", "eval": "eval/step"}.get(name.split("/")[0], "rollout/step")
                for step, value in pts:
                    f.write(json.dumps({"step_key": sk, "step": step, "metrics": {name: value}}) + "\n")
    if tensorboard:
        write_tensorboard(d / "tensorboard", curves)
    if wandb_group:
        write_wandb_offline(d, run.run_id, wandb_group, curves)
    return d, run


def write_sweep(root: Path, name: str, runs: list[tuple[Path, Any, list[str]]]) -> Path:
    sweep = root / "multirun" / name
    sweep.mkdir(parents=True, exist_ok=True)
    (sweep / "sweep.json").write_text(json.dumps({"sweep_dir": str(sweep), "runs": [
        {"run_id": run.run_id, "run_dir": str(d), "overrides": ov, "job_num": i, "job_id": str(i)}
        for i, (d, run, ov) in enumerate(runs)]}, indent=2))
    return sweep


def fake_gpu_host(cwd: Path, overrides: list[str]) -> list[str]:
    """Make `cwd` look like the machine a GPU recipe runs on: the slime entrypoint and every input
    path the run names (data files, checkpoint directories), as empty stand-ins. Returns what it made."""
    import os

    from trainstack.render.pipeline import build_from_overrides
    from trainstack.preflight.host_checks import HostFacts, _inputs, _plugins, slime_script

    old = os.getcwd()
    os.chdir(cwd)
    (cwd / "slime").mkdir(exist_ok=True)  # the run's slime.root (unset: ./slime when it exists), never ours
    try:
        run, cmd = build_from_overrides(overrides)
    finally:
        os.chdir(old)
    facts = HostFacts.from_run(run, cmd)
    made = []
    script = slime_script(facts)
    if script is not None:
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text("raise SystemExit('a stand-in for slime/train.py')\n")
        made.append(str(script))
        package = script.parent / "slime" / "__init__.py"  # what a CPU recipe's dry run looks for in the same ./slime
        if not package.exists():
            package.parent.mkdir(parents=True, exist_ok=True)
            package.write_text("")  # (like its .git/HEAD, not among what it returns: the run's own inputs)
        fake_slime_git(script.parent)
        for _dest, value in _plugins(facts):  # slime's own plugin modules (slime.rollout.sft_rollout, ...)
            module, _, fn = value.rpartition(".")
            if module.startswith("slime."):
                mod = script.parent.joinpath(*module.split(".")).with_suffix(".py")
                mod.parent.mkdir(parents=True, exist_ok=True)
                mod.write_text(f"def {fn}(*args, **kwargs):\n    raise NotImplementedError\n")
                made.append(str(mod))
    for _dest, kind, path in _inputs(facts):
        p = Path(path)
        if kind == "directory":
            p.mkdir(parents=True, exist_ok=True)
        else:
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text("{}\n")
        made.append(str(p))
    return made


def fake_slime_git(root: Path, commit: str | None = None) -> None:
    """A slime checkout as the host's version check reads it (trainstack/upstream/identity.py): the pin's
    argument files (copied from the `slime/` submodule) and git metadata at `commit` (default: the
    pin's). At another commit the argument files differ (one line added), so its content is unknown."""
    from trainstack.upstream import identity, versions

    here = Path(__file__).resolve().parents[2] / "slime"
    pin = versions.pin()
    for rel in identity.ARGUMENT_FILES:
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        text = (here / rel).read_text(encoding="utf-8")
        target.write_text(text if commit in (None, pin.commit) else text + f"# at {commit}\n", encoding="utf-8")
    (root / "slime" / "__init__.py").touch()
    (root / ".git").mkdir(parents=True, exist_ok=True)
    (root / ".git" / "HEAD").write_text((commit or pin.commit) + "\n")


def write_checkpoint(save_dir: Path, rollout_id: int) -> None:
    """A complete checkpoint of `rollout_id` in slime's layout with its manifest, the tracker naming it
    (the one place tests spell the layout; trainstack.storage.checkpoints decides what is complete)."""
    from trainstack.storage.checkpoints import TRACKER, Manifest, iter_name

    d = Path(save_dir) / iter_name(rollout_id)
    d.mkdir(parents=True, exist_ok=True)
    rel = []
    for name in ("model.pt", "meta.json"):
        (d / name).write_text(json.dumps({"rollout_id": rollout_id}))
        rel.append(f"{iter_name(rollout_id)}/{name}")
    (d / "manifest.json").write_text(Manifest.of_files(str(save_dir), rollout_id, rel, "tests").to_json())
    (Path(save_dir) / TRACKER).write_text(str(rollout_id))
