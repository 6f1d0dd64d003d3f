"""Lium GPU pods: register each run with the commander, which keeps it on a live pod.

`submit(spec)` (single runs, `cluster.launcher=lium`) and the Hydra launcher `hydra/launcher=lium`
(sweeps) do the same per run: check it like any launch (the resume check), store its spec in the
local run dir (status, compare and diff read it), make the pod's copy of the spec (paths moved
to the pod: run dir on the volume, data under the pod's workdir, the image's python), register
it with the commander, write `lium.json` in the run dir, and return at once (`wait=true` blocks
until every run has ended, pulling each run's metrics from the commander into its run dir here).
The commander rents, replaces and removes pods (trainstack/commander/).

Settings: `LiumSettings` under `cluster.lium:`: `pod` (GPU type and count, template or image,
volume, price and country limits; `PodRequest`), wait, restart_limit, spend_limit,
sweep_spend_limit, commander_url, public_url, poll_s (`hydra.launcher.*` for sweeps). The
commander is the one at `commander_url` / $TRAINSTACK_COMMANDER_URL, else one started on this
host (`trainstack commander serve`, state in ~/.trainstack/). Its token: $TRAINSTACK_COMMANDER_TOKEN.
Walkthrough: docs/lium.md.
"""
from __future__ import annotations

import copy
import json
import os
import posixpath
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from trainstack.errors import CommanderFailure, ConfigError, ConfigErrors
from trainstack.launch.base import Launcher
from trainstack.launch.lium_commander import (  # noqa: F401  (this module's API too)
    LOCAL_IDLE_EXIT_S, LiumSettings, commander, start_local_commander, state_dir)

if TYPE_CHECKING:  # the run dir and the spec are imported where a run is submitted: a dry run needs neither
    from trainstack.launch.base import Row
    from trainstack.run.rundir import manifest
    from trainstack.run.spec import RunSpec

TERMINAL = ("finished", "failed", "cancelled", "paused")


def pod_request(spec: RunSpec):
    """`cluster.lium.pod` as a PodRequest (checked at compose time), sized from the cluster."""
    from trainstack.commander.provider import PodRequest

    raw = dict(LiumLauncher().settings(spec).pod)
    if int(spec.cluster.num_nodes) != 1:
        raise ConfigErrors([ConfigError("cluster.num_nodes", "a Lium run is one pod (multi-pod runs are not supported)",
                                        "use cluster.num_nodes=1 with a pod of enough GPUs (cluster.gpus_per_node)",
                                        value=spec.cluster.num_nodes)])
    if spec.cluster.accelerator == "gpu" and "gpu_count" not in raw:
        raw["gpu_count"] = int(spec.cluster.gpus_per_node)
    if spec.cluster.gpu_type and "gpu_type" not in raw:
        raw["gpu_type"] = spec.cluster.gpu_type
    if isinstance(raw.get("countries"), str):
        raw["countries"] = [raw["countries"]]
    return PodRequest.from_dict(raw)


# ------------------------------------------------------------------------------------------
# The pod's copy of the spec
# ------------------------------------------------------------------------------------------
def project_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def pod_spec(spec: RunSpec, req) -> dict[str, Any]:
    """The spec with every submit-host path moved to where it is on the pod: the run dir (on the
    volume), the data root (pod-local, the env's prepare hook fills it), the project checkout
    (trainstack is installed in the image: cwd becomes the pod's workdir, PYTHONPATH drops it) and
    the interpreter (the image's python)."""
    d = copy.deepcopy(spec.to_json())
    moves = sorted([(spec.run_dir, req.run_dir(spec.run_id)),
                    (str(Path(spec.data_root).absolute()), f"{req.workdir.rstrip('/')}/data"),
                    (project_root(), req.workdir.rstrip("/")), *_input_moves(spec, req)], key=lambda m: -len(m[0]))

    def move(v: Any) -> Any:
        if isinstance(v, str):
            for old, new in moves:
                if v == old or v.startswith(old.rstrip("/") + "/"):
                    return new + v[len(old.rstrip("/")):] if v != old else new
            return v
        if isinstance(v, list):
            return [move(x) for x in v]
        if isinstance(v, dict):
            return {k: move(x) for k, x in v.items()}
        return v

    cmd = d["command"]
    entry = list(cmd.get("entrypoint") or [])
    if entry and (entry[0] == sys.executable or Path(entry[0]).name.startswith("python")):
        entry[0] = req.python
    env = dict(cmd.get("env") or {})
    if "PYTHONPATH" in env:
        kept = [p for p in env["PYTHONPATH"].split(os.pathsep)
                if p and p not in (project_root(), os.path.join(project_root(), "plugins"))]
        if kept:
            env["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            env.pop("PYTHONPATH")
    cmd["entrypoint"], cmd["env"] = entry, env
    if isinstance(d["config"].get("slime"), dict):  # unset: the checkout this host would use, moved to the image's
        from trainstack.upstream.slime_root import resolve

        d["config"]["slime"]["root"] = resolve(d["config"]["slime"].get("root"), os.getcwd())
    for group, key in (("paths", "models_root"), ("paths", "data_root"), ("slime", "root")):  # relative: the pod's cwd
        block = d["config"].get(group)
        if isinstance(block, dict) and isinstance(block.get(key), str):
            block[key] = str(Path(block[key]).absolute())
    for key in ("command", "args", "run_dir", "data_root", "inputs", "config"):
        d[key] = move(d[key])
    d.setdefault("extra", {})["lium"] = {"submit_run_dir": spec.run_dir}
    return d


def _input_moves(spec: RunSpec, req) -> list[tuple[str, str]]:
    """slime's checkout -> the image's (`cluster.lium.pod.slime_root`, the image's $TRAINSTACK_SLIME_ROOT);
    models_root -> the run's volume, so a replacement pod finds the download and conversion (docs/inputs.md)."""
    config = spec.config or {}
    from trainstack.upstream.slime_root import resolve

    slime_root = resolve((config.get("slime") or {}).get("root"), os.getcwd())
    models_root = str(Path(str((config.get("paths") or {}).get("models_root") or "models")).absolute())
    base = posixpath.dirname(posixpath.dirname(req.run_dir(spec.run_id)))  # <volume>/trainstack or the workdir
    return [(slime_root, req.slime_root.rstrip("/")), (models_root, posixpath.join(base, "models"))]


# ------------------------------------------------------------------------------------------
# Submitting
# ------------------------------------------------------------------------------------------
def image_problem(template_id: Any, image: Any) -> ConfigError | None:
    """A pod without trainstack's image cannot run the worker: with neither a template nor an image, Lium
    rents its stock PyTorch image (a pod that bills and cannot train), so the launch is refused."""
    if template_id or image:
        return None
    return ConfigError("cluster.lium.pod.image", "neither cluster.lium.pod.template_id nor cluster.lium.pod.image is "
                       "set, so Lium would rent its stock PyTorch image, which has no trainstack (the pod would bill "
                       "and never train)", "build and push docker/Dockerfile, then set cluster.lium.pod.image="
                       "<you>/trainstack-slime:<tag> (or cluster.lium.pod.template_id=<a Lium template of that image>); "
                       "docs/lium.md, section 1", value=None)


def check(spec: RunSpec) -> None:
    """What every launch checks, before anything is registered: the pod settings (a pod that can run
    trainstack), then the resume check."""
    from trainstack.run.resume import plan
    from trainstack.run.rundir import RunDir

    req = pod_request(spec)
    problem = image_problem(req.template_id, req.image)
    if problem is not None:
        raise ConfigErrors([problem])
    plan(spec, RunDir(spec.run_dir))


def submit_specs(specs: Sequence[RunSpec], settings: LiumSettings, sweep_dir: str | None = None) -> list[dict]:
    """Register every run (all checked first); the records written to each run dir."""
    from trainstack.commander.client import CommanderError
    from trainstack.run.rundir import RunDir, atomic_write, now_iso
    from trainstack.storage import layout

    for spec in specs:
        check(spec)
    client = commander(settings)
    out = []
    for spec in specs:
        req = pod_request(spec)
        run_settings = LiumLauncher().settings(spec)
        body = {"run_id": spec.run_id, "spec": pod_spec(spec, req), "settings": req.to_dict(),
                "sweep": sweep_dir, "restart_limit": int(run_settings.restart_limit),
                "capacity_wait_s": float(run_settings.capacity_wait_s),
                "spend_limit": run_settings.spend_limit, "sweep_spend_limit": run_settings.sweep_spend_limit}
        try:
            answer = client.post("/v1/runs", body)
        except CommanderError as ex:
            raise CommanderFailure(f"the commander refused {spec.run_id}: {ex.detail}",
                                   f"trainstack status {spec.run_id}; trainstack cancel {spec.run_id}") from None
        rundir = RunDir(spec.run_dir)
        rundir.write_spec(spec)
        rec = {"run_id": spec.run_id, "commander_url": client.url, "pod_run_dir": req.run_dir(spec.run_id),
               "sweep_dir": sweep_dir, "registered_at": now_iso(), "phase": answer.get("phase")}
        atomic_write(rundir.file(layout.LIUM), json.dumps(rec, indent=1) + "\n")
        if rundir.status().get("state") in (None, "created", "finished", "failed", "interrupted", "submitted"):
            rundir.update_status(run_id=spec.run_id, state="submitted", launcher="lium")
        out.append(rec)
    return out


def wait_for(client, run_ids: Sequence[str], poll_s: float) -> dict[str, dict]:
    """Block until every run is finished, failed, cancelled or paused; their records."""
    from trainstack.commander.client import Unreachable

    from trainstack.terminal.console import duration

    pending = set(run_ids)
    done: dict[str, dict] = {}
    seen: dict[str, str] = {}
    t0 = time.monotonic()
    while pending:
        for rid in sorted(pending):
            try:
                rec = client.get(f"/v1/runs/{rid}")
            except Unreachable:
                continue
            if rec["phase"] != seen.get(rid):  # a line per phase (provisioning, running, ...)
                seen[rid] = rec["phase"]
                print(f"trainstack: {rid}: {rec['phase']} ({duration(time.monotonic() - t0)} after submitting)",
                      file=sys.stderr, flush=True)
            if rec["phase"] in TERMINAL:
                done[rid] = rec
                pending.discard(rid)
        if pending:
            time.sleep(poll_s)
    return done


class LiumLauncher(Launcher):
    """Register the run with the Lium commander, which keeps it on a pod; returns at once."""

    name = "lium"
    waits = False
    Settings = LiumSettings
    sweeps_through_plugin = True
    sweep_verb = "registered {n} run{s} with the Lium commander"
    sweep_point = "run"

    @classmethod
    def cost_note(cls, settings: dict[str, Any]) -> str | None:
        price = (settings.get("pod") or {}).get("max_price_per_hour")
        if not isinstance(price, (int, float)) or isinstance(price, bool):
            return None
        spend = settings.get("spend_limit")
        return (f"at most ${price:.2f} per hour (cluster.lium.pod.max_price_per_hour); "
                + (f"spend limit ${spend:.2f}" if isinstance(spend, (int, float)) else "no spend limit"))

    @classmethod
    def settings_problems(cls, cluster: Any) -> list[ConfigError]:
        pod = (cluster.settings or {}).get("pod") or {}
        problem = image_problem(pod.get("template_id"), pod.get("image"))
        return [problem] if problem else []

    def check(self, spec: RunSpec) -> None:
        check(spec)

    def submit(self, spec: RunSpec) -> int:
        from trainstack.config.userconfig import run_target

        settings: LiumSettings = self.settings(spec)
        t0 = time.perf_counter()
        rec = submit_specs([spec], settings)[0]
        target = run_target(spec.run_id, spec.run_dir)  # found from any cwd, whatever paths.runs_root was
        print(f"trainstack: registered {spec.run_id} with the Lium commander at {rec['commander_url']} "
              f"({time.perf_counter() - t0:.2f} s); it rents a pod and keeps the run on one\n"
              f"  follow it: trainstack status {target}    logs: trainstack logs {target} -f    "
              f"stop it: trainstack cancel {target}", file=sys.stderr, flush=True)
        if not settings.wait:
            return 0
        done = wait_for(commander(settings, start=False), [spec.run_id], float(settings.poll_s))
        return 0 if done[spec.run_id]["phase"] == "finished" else 1

    def submit_sweep(self, specs: Sequence[RunSpec], sweep_dir: Path, nums: Sequence[int]) -> list[manifest.SweepRun]:
        from trainstack.run.rundir import manifest

        settings: LiumSettings = self.settings(specs[0])
        submit_specs(specs, settings, str(sweep_dir))
        self._wait = settings.wait
        return [manifest.SweepRun(run_id=s.run_id, run_dir=s.run_dir, overrides=list(s.overrides), job_num=n)
                for s, n in zip(specs, nums)]

    def record_sweep(self, sweep_dir: str | Path, runs: Sequence[manifest.SweepRun], **meta: Any) -> Path:
        return super().record_sweep(sweep_dir, runs, **{"wait": getattr(self, "_wait", False), **meta})

    def sweep_poll(self, specs: Sequence[RunSpec], runs: Sequence[manifest.SweepRun], settings: Any) -> list[Any]:
        """Each run's end as the commander records it: finished, or failed / cancelled / paused (with why)."""
        from trainstack.commander.client import Unreachable
        from trainstack.launch.base import RunEnd
        from trainstack.run.result import FAILED, FINISHED

        client = commander(settings, start=False)
        out: list[Any] = []
        for spec in specs:
            try:
                rec = client.get(f"/v1/runs/{spec.run_id}")
            except Unreachable:
                out.append(None)
                continue
            phase = rec.get("phase")
            out.append(None if phase not in TERMINAL else RunEnd(FINISHED, rec.get("exit_code")) if phase == "finished"
                       else RunEnd(FAILED, rec.get("exit_code"), f"{phase}: {rec.get('message') or ''}".strip(": ")))
        return out

    def fetch_traces(self, run_dirs: Sequence[str]) -> None:
        """The pod's metrics.jsonl, as the worker sent it to the commander, into each run dir here."""
        from trainstack.launch.lium_status import pull_metrics

        for d in run_dirs:
            pull_metrics(d)

    @classmethod
    def locate(cls, run_id: str) -> Path | None:
        from trainstack.launch.lium_status import locate

        return locate(run_id)

    # --- following: the commander's record is the truth (trainstack/launch/lium_status.py) ---
    def status(self, rows: Sequence["Row"]) -> None:
        from trainstack.launch.lium_status import fill_lium

        fill_lium(rows)

    purges = True  # cancel --purge deletes the run's volume

    def cancel(self, rows: Sequence["Row"], dry: bool = False, purge: bool = False) -> int:
        from trainstack.launch.lium_status import cancel_lium

        return cancel_lium(rows, dry, purge)

    def resume(self, rows: Sequence["Row"], spend_limit: float | None = None,
               sweep_spend_limit: float | None = None, from_scratch: bool = False) -> int:
        from trainstack.launch.lium_status import resume_lium

        return resume_lium(rows, spend_limit, sweep_spend_limit, from_scratch)

    def logs(self, row: "Row", follow: bool = False, which: str = "trainer") -> int:
        from trainstack.launch.lium_status import logs

        return logs(row.run_dir, row.run_id, follow, which=which)
