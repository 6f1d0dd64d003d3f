"""Every command in the README's and docs' bash blocks runs as written and says what the docs
promise: each has an expected exit code and a key line of its output (or a file it must write) in
EXPECT, and a test fails when a documented command has no entry or an entry is no longer documented.
docs/compare.md and docs/slurm.md have their own tests. A line marked `(not run in tests: ...)` needs
what CI does not have (slime's own environment) or is the test suite itself, and says so.

Commands run as a newcomer follows them, every command in its doc's order, with `python` being this
interpreter (the activated venv) and `run.py` the checkout's; `make` targets run in the checkout, and the
README's clean-clone path (`make install`, `source .venv/bin/activate`) is checked as a user runs it.

A doc can be followed alone and after any other. Alone: each doc (the README too) is walked for real in a
scratch directory of its own (its commands build on each other: `make run` trains, the README's later
examples continue that run), so a doc that needs another doc's runs fails. After the README: once the
README's walk is done, each doc's training commands are dry-run in the README's directory and must start
fresh (not land on a run the README trained, finished or bound to another launcher); and no two docs train
the same run, sweep points included (`test_no_two_docs_train_the_same_run`: the run id ignores the run
length, so `algo.lr=1e-3` anywhere is `make run`'s run unless the doc names its runs). Docs' real walks run
once each (the cheap way to have both orders: the in-order pass only dry-runs).
"""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Callable, Union

import pytest

from conftest import ROOT

def reading_order() -> list[Path]:
    """README, then the docs in the order the README first links them, then any doc it does not link."""
    linked = dict.fromkeys(re.findall(r"docs/([\w-]+\.md)", (ROOT / "README.md").read_text()))
    docs = sorted((ROOT / "docs").glob("*.md"))
    first = [ROOT / "docs" / name for name in linked if (ROOT / "docs" / name).is_file()]
    return [ROOT / "README.md", *first, *[d for d in docs if d not in first]]


DOCS = reading_order()
WALK = "walk"  # the one scratch directory (under the worker's pytest base temp) the docs are followed in
OWN_TESTS = {"compare.md", "slurm.md", "hub.md", "lium.md",  # hub.md: test_hub_runs.py, lium.md: test_lium.py
             "install.md"}  # test_packaging.py: a fresh venv with the wheel, outside the checkout
NOT_RUN = "(not run in tests"
VENV = ROOT / ".venv"

Check = Union[str, Callable[[str, Path], bool]]  # a line the output contains, or a check of (output, cwd)

def optuna_best_is_a_trials_final_reward(out: str, cwd: Path) -> bool:
    """Optuna's best value is the final rollout/raw_reward one of the four trials' runs logged."""
    import json

    import yaml

    sweep = cwd / "multirun" / "optuna-lr"
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())["best_value"]
    runs = json.loads((sweep / "sweep.json").read_text())["runs"]
    finals = []
    for r in runs:
        lines = [json.loads(x) for x in (Path(r["run_dir"]) / "metrics.jsonl").read_text().splitlines() if x.strip()]
        finals.append([x["metrics"]["rollout/raw_reward"] for x in lines if "rollout/raw_reward" in x["metrics"]][-1])
    return len(runs) == 4 and out.count("waited for 2 runs: 2 finished") == 2 and best == max(finals)


# documented command -> (exit code, key line of its stdout+stderr, or a check of what it wrote)
EXPECT: dict[str, tuple[int, Check]] = {
    # README
    "make install": (0, lambda out, cwd: (VENV / "bin" / "trainstack").is_file()),
    "source .venv/bin/activate": (0, f"{VENV}/bin/trainstack"),
    "python run.py dry_run=short": (0, lambda out, cwd: verdict_first(out, "tiny-grpo-arithmetic-", "local")),
    "make run": (0, "(finished, exit code 0)"),
    "python run.py --cfg job algo.lr=2e-3": (0, "lr: 0.002"),
    "python run.py algo.lr=2e-3 dry_run=short": (0, lambda out, cwd: verdict_first(out, "tiny-grpo-arithmetic-", "local")),
    "python run.py env.num_rollout=350": (0, "resuming from rollout 299 (next: 300)"),
    "python run.py -m algo.lr=5e-4,2e-3 env.num_rollout=50 args.save_interval=25 hydra.sweep.dir=multirun/lr-sweep":
        (0, "2 points: 2 ok, 0 failed"),
    "trainstack compare multirun/lr-sweep --plot lr.png": (0, "plot: lr.png"),
    "python run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 cluster.lium.pod.image=you/trainstack-slime:0.1 "
    "dry_run=short": (0, lambda out, cwd: verdict_first(out, "qwen3-4B-grpo-dapo-", "lium")),
    "trainstack status": (0, "runs under runs"),
    "trainstack --help": (0, "examples:\n  trainstack run dry_run=short"),
    "make lint": (0, "Success: no issues found"),
    # docs/config.md
    "python run.py --help": (0, "trainstack: compose a slime"),
    "python run.py --cfg job algo.lr=2e-6": (0, "lr: 2.0e-06"),
    "python run.py --info defaults": (0, "Defaults List"),
    "trainstack args --rollout-batch-size": (0, "--rollout-batch-size  (dest rollout_batch_size"),
    "python run.py -sc install=bash": (0, "hydra_bash_completion"),
    # docs/validation.md
    "python run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 cluster.lium.pod.image=you/trainstack-slime:0.1 dry_run=true":
        (0, "launch (the trainer runs on a lium host)"),
    "python run.py experiment=qwen3-4B-grpo-dapo cluster=lium_8xh100 cluster.lium.pod.image=you/trainstack-slime:0.1 dry_run=true output=cmd.json":
        (0, lambda out, cwd: '"ray_submit"' in (cwd / "cmd.json").read_text()),
    "python run.py experiment=qwen3-4B-grpo-dapo slime.root=/opt/slime dry_run=true":
        (2, "git clone https://github.com/THUDM/slime.git /opt/slime && git -C /opt/slime checkout "),
    "trainstack render experiment=qwen3-4B-grpo-dapo --format shell": (0, "ray job submit --address="),
    "trainstack render experiment=qwen3-4B-base-sft -o sft.json":
        (0, lambda out, cwd: "train_async.py" in (cwd / "sft.json").read_text()),
    "python run.py -m hydra/launcher=lium 'experiment=glob(*,exclude=cpu-*)' cluster=lium_8xh100 cluster.lium.pod.image=you/trainstack-slime:0.1 dry_run=true":
        (0, "ok  qwen3-4B-base-sft-"),
    "python run.py -m algo.lr=1e-6,2e-6 dry_run=true": (0, lambda out, cwd: "ok  tiny-grpo-arithmetic-" in out and not (
        cwd / "multirun").exists()),  # a dry sweep leaves nothing behind
    # docs/inputs.md
    "trainstack prepare --plan": (0, "nothing to download or convert for tiny-grpo-arithmetic-"),
    # docs/slime_versions.md
    "trainstack slime list": (0, "slime v0.3.0 (bf14dc21)"),
    # docs/models.md
    "python -m trainstack.upstream.sync_slime presets --check": (0, "generated file(s) up to date"),
    "python -m trainstack.render.golden": (0, "golden files up to date"),
    # docs/launchers.md
    "python run.py env.num_rollout=40 run_id=demo-exec": (0, "(finished, exit code 0)"),
    "trainstack exec demo-exec": (0, "run demo-exec is finished"),
    # docs/launchers.md: Optuna on the local launcher, each trial's value its run's final reward
    "python run.py -m hydra/launcher=local hydra/sweeper=optuna hydra.sweeper.n_trials=4 hydra.sweeper.direction=maximize "
    "hydra.sweeper.objective=rollout/raw_reward 'algo.lr=interval(0.0005,0.005)' env.num_rollout=3 "
    "hydra.sweep.dir=multirun/optuna-lr": (0, optuna_best_is_a_trials_final_reward),
    # docs/resume.md (its own run ids)
    "python run.py run_id=resume-demo env.num_rollout=40 args.save_interval=10": (0, "run dir"),
    "python run.py run_id=resume-demo env.num_rollout=60 args.save_interval=10": (0, "resuming from rollout 39"),
    "python run.py cluster.launcher=ray_job cluster.ray_job.start_head=true run_id=ray-demo env.num_rollout=20 "
    "args.save_interval=10": (0, lambda out, cwd: "(finished, exit code 0)" in out and re.search(  # the head's phase
        r"trainstack: starting a Ray head at http://127.0.0.1:\d+ .*: done in [\d.]+ s", out) is not None),
    # docs/http_env.md
    "python run.py experiment=cpu-agentic run_id=agentic-demo env.num_rollout=5": (
        0, lambda out, cwd: "(finished, exit code 0)" in out and len(re.findall(  # GRPO's ~0 loss, not `+0.0000`
            r"loss [+-]\d\.\de[-+]\d+  gnorm \d", out)) == 5 and "loss +0.0000" not in out),
    "trainstack env list": (0, "chain_sum"),
    "python run.py env=liveweb model=qwen3-4B cluster=lium_8xh100 cluster.lium.pod.image=you/trainstack-slime:0.1 dry_run=true":
        (0, "the generate function will use the env server at http://127.0.0.1:18080"),
    # docs/import.md
    "trainstack import scripts/run-qwen3-4B.sh --config-dir my-conf":
        (0, "the experiment renders the script's argv: 70 flags the same"),
    "trainstack render --config-dir my-conf experiment=qwen3-4B --format shell": (0, "--hf-checkpoint /root/Qwen3-4B"),
    "trainstack import scripts/run-qwen3-235B-A22B.sh --config-dir my-conf --env BASE_FOLDER=/data --env MASTER_ADDR=10.0.0.1":
        (0, "presets : model=qwen3-235B-A22B algo=gspo env=dapo_math"),
    # docs/tiny_trainer.md (/tmp/ paths are taken in the scratch directory)
    "python -m trainstack.tiny.arithmetic --out /tmp/arith": (0, "train: "),
    "python -m trainstack.tiny.init_model --save /tmp/tiny_init --num-layers 2 --hidden-size 64 "
    "--num-attention-heads 4 --ffn-hidden-size 256 --max-position-embeddings 32 --seed 1": (0, "133760 parameters"),
    # docs/eval.md (its own runs: followed alone or after any other doc)
    "python run.py run_id=evals-demo env.num_rollout=20 args.save_interval=10 eval.every=10":
        (0, lambda out, cwd: len((cwd / "runs" / "evals-demo" / "evals.jsonl").read_text().splitlines()) == 2),
    "trainstack eval evals-demo --all": (0, "done earlier"),
    "trainstack eval evals-demo --iter 19 args.n_samples_per_eval_prompt=8 args.eval_temperature=0.5": (0, "finished ("),
    "python run.py run_id=evals-demo-lr algo.lr=2e-3 env.num_rollout=20 args.save_interval=10": (0, "(finished, exit code 0)"),
    "trainstack eval evals-demo-lr --all": (0, "eval: 2 checkpoint(s)"),
    "trainstack compare evals-demo evals-demo-lr --metric eval/arithmetic --plot evals.png":
        (0, lambda out, cwd: (cwd / "evals.png").is_file() and "2 runs (evals-demo, evals-demo-lr" in out),
    "trainstack export evals-demo --to evals-demo-hf": (0, "exported evals-demo iter 19"),
    "python -c \"from transformers import AutoModelForCausalLM as M, AutoTokenizer as T; m, t = "
    "M.from_pretrained('evals-demo-hf'), T.from_pretrained('evals-demo-hf'); print(t.decode(m.generate(t('23+4=', "
    "return_tensors='pt').input_ids, max_new_tokens=2, do_sample=False)[0]))\"": (0, "23+4="),
}


def verdict_first(out: str, run_id: str, launcher: str) -> bool:
    """The dry run's first line is its verdict and the summary follows (dry_run=short: nothing else)."""
    lines = out.splitlines()
    return (lines[0].startswith(f"ok: ready to launch {run_id}") and lines[0].endswith(f" on {launcher}")
            and lines[1].startswith("  run ") and "── " not in out and len(lines) <= 25)


# Commands that need nothing an earlier command made, and make nothing a later one reads: under pytest-xdist
# they run on whichever worker is free (in that worker's copy of the walk directory), the others one after
# another on one worker, in reading order (tests/conftest.py).
INDEPENDENT = {"make lint", "python run.py experiment=cpu-agentic run_id=agentic-demo env.num_rollout=5",
               "python -m trainstack.upstream.sync_slime presets --check", "python -m trainstack.render.golden"}
TINY_TRAIN_PREFIX = "python -m trainstack.tiny.train --num-layers 2"


def tiny_trainer_learns(out: str, cwd: Path) -> bool:
    """docs/tiny_trainer.md's direct run trains all 100 rollouts, learns (the mean reward of the last 10
    rollouts beats the first 10 by 0.2: the test of learning on the CPU default's task) and saves its
    last iteration where the doc says."""
    rewards = [float(r) for r in re.findall(r"\[tiny\] rollout \d+/100\s+reward ([\d.]+)", out)]
    first, last = sum(rewards[:10]) / 10, sum(rewards[-10:]) / 10
    assert len(rewards) == 100 and last > first + 0.2, (len(rewards), first, last)
    return "rollout 100/100" in out and (cwd / "ck" / "iter_0000099" / "model.pt").is_file()


EXPECT_PREFIX: dict[str, tuple[int, Check]] = {TINY_TRAIN_PREFIX: (0, tiny_trainer_learns)}


def commands(path: Path) -> list[str]:
    """The commands of a doc's bash blocks (continuation lines joined, comments dropped)."""
    out = []
    for block in re.findall(r"```bash\n(.*?)```", path.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if not line or line.startswith("#") or NOT_RUN in line:
                continue
            out.append(" ".join(line.split("  #", 1)[0].split()))
    return out


CASES = [(p.name, c) for p in DOCS if p.name not in OWN_TESTS for c in commands(p)]


def expectation(cmd: str) -> tuple[int, Check] | None:
    if cmd in EXPECT:
        return EXPECT[cmd]
    return next((v for k, v in EXPECT_PREFIX.items() if cmd.startswith(k)), None)


def test_every_documented_command_has_an_expectation():
    assert len(CASES) >= 30
    missing = [c for _, c in CASES if expectation(c) is None]
    assert not missing, "documented commands without an expected output in EXPECT:\n" + "\n".join(missing)
    documented = {c for _, c in CASES}
    stale = [k for k in EXPECT if k not in documented]
    stale += [k for k in EXPECT_PREFIX if not any(c.startswith(k) for c in documented)]
    assert not stale, "EXPECT entries no longer documented:\n" + "\n".join(stale)


SWEEP_FUNCS = ("glob(", "interval(", "range(", "choice(", "tag(", "sort(", "shuffle(")


def training_points(cmd: str) -> list[list[str]] | None:
    """The override lists of the runs a documented command trains (one per sweep point), or None when it
    trains nothing (a dry run, a help page, not `python run.py` / `make run`) or its points are drawn at
    random (Optuna's `interval(...)`)."""
    import itertools

    toks = shlex.split(cmd)
    if toks == ["make", "run"]:
        return [[]]
    if toks[:2] != ["python", "run.py"]:
        return None
    args = toks[2:]
    if {"--cfg", "--help", "--info", "-sc", "--hydra-help"} & set(args) or "hydra.launcher.dry=true" in args:
        return None
    if any(a.startswith("dry_run=") and a != "dry_run=false" for a in args) or any(f in a for a in args
                                                                                  for f in SWEEP_FUNCS):
        return None
    sweep = "-m" in args
    args = [a for a in args if a != "-m" and not a.startswith(("hydra.", "hydra/", "+hydra."))]
    if not sweep:
        return [args]
    axes = []
    for a in args:
        key, _, value = a.partition("=")
        axes.append([f"{key}={v}" for v in value.split(",")] if "," in value and not value.startswith(("[", "{"))
                    else [a])
    return [list(point) for point in itertools.product(*axes)]


def test_no_two_docs_train_the_same_run():
    """A newcomer follows the README and then each doc in one directory: a doc's training command whose run
    id the README (or another doc) already trained lands on a finished run ("nothing to train") or on a run
    bound to another launcher. Every training command of the docs (all of them, with their own tests too;
    every point of a sweep; `make run`) belongs to one doc's run ids only. docs/lium.md's sweep once trained
    `algo.lr=1e-3,2e-3`: the runs of `make run` and of the README's sweep (exit 2 after the README)."""
    from trainstack.render.pipeline import build_from_overrides

    owners: dict[str, set[str]] = {}
    ids: dict[tuple[str, ...], str] = {}
    for path in DOCS:
        for cmd in commands(path):
            for point in training_points(cmd) or []:
                if tuple(point) not in ids:
                    ids[tuple(point)] = build_from_overrides(point)[0].run_id
                owners.setdefault(ids[tuple(point)], set()).add(path.name)
    assert len(owners) >= 10, owners
    shared = {rid: sorted(docs) for rid, docs in owners.items() if len(docs) > 1}
    assert not shared, f"run ids trained by more than one doc (give the later doc's runs a run_id= or name=): {shared}"


def test_the_walk_is_the_readers_path():
    """Every doc is linked from the README (so the walk has an order), the README comes first, and the walk
    meets the docs in the order the README first names them."""
    readme = (ROOT / "README.md").read_text()
    unlinked = [d.name for d in (ROOT / "docs").glob("*.md") if f"docs/{d.name}" not in readme]
    assert not unlinked, f"docs the README never links (a newcomer cannot find them): {unlinked}"
    names = [d.name for d in DOCS]
    assert names[0] == "README.md" and len(names) == len(set(names)) == 1 + len(list((ROOT / "docs").glob("*.md")))
    first_named = {name: readme.index(f"docs/{name}") for name in names[1:]}
    assert names[1:] == sorted(names[1:], key=first_named.__getitem__), "the docs are not walked in README order"
    walked = [d for d, _ in CASES]
    assert walked == sorted(walked, key=names.index), "the cases do not follow the reading order"


def test_readme_starts_from_a_clean_clone():
    """The quick start: install, activate, then commands by hand (the path every other doc assumes)."""
    text = (ROOT / "README.md").read_text()
    quick = text[text.index("## Quick start"):text.index("## The main loop")]
    cmds = commands_in(quick)
    assert cmds[:4] == ["make install", "source .venv/bin/activate", "python run.py dry_run=short", "make run"]
    assert re.findall(r"^## (.*)$", text, re.M)[:2] == ["Quick start", "The main loop"]  # how-to first
    assert len(text.splitlines()) <= 150  # it was 360 lines: details live in docs/, linked
    loop = commands_in(text[text.index("## The main loop"):text.index("\n## ", text.index("## The main loop") + 3)])
    assert [c.split()[:3] for c in loop][:2] == [["python", "run.py", "--cfg"], ["python", "run.py", "algo.lr=2e-3"]]
    assert any(" -m " in c for c in loop) and loop[-1].startswith("trainstack compare")  # ... sweep, compare
    assert "make" in (ROOT / "Makefile").read_text() and "install:" in (ROOT / "Makefile").read_text()


def commands_in(text: str) -> list[str]:
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        out += [" ".join(ln.split("  #", 1)[0].split()) for ln in block.splitlines() if ln.strip()]
    return out


def to_argv(cmd: str, cwd: Path) -> list[str]:
    # a doc's /tmp/... paths go under the walk's scratch dir (before the interpreter and run.py are filled
    # in: the checkout itself may be under /tmp)
    toks = [t.replace("/tmp/", f"{cwd}/", 1) if t.startswith("/tmp/") else t for t in shlex.split(cmd)]
    if toks[0] == "trainstack":
        return [sys.executable, "-m", "trainstack.cli.main", *toks[1:]]
    if toks[0] == "make":  # `make run` trains in the doc's runs root: the README's next examples continue it
        extra = [f"ARGS=paths.runs_root={cwd}/runs paths.data_root={cwd}/data"] if toks[1:] == ["run"] else []
        return ["make", "-C", str(ROOT), *toks[1:], *extra]
    if toks[:2] == ["source", ".venv/bin/activate"]:
        return ["bash", "-c", f"source {shlex.quote(str(VENV / 'bin' / 'activate'))} && command -v python trainstack"]
    assert toks[0] == "python", cmd
    toks[0] = sys.executable
    if len(toks) > 1 and toks[1] == "run.py":
        toks[1] = str(ROOT / "run.py")
    return toks


def walk_dir(tmp_path_factory, doc: str) -> Path:
    """The scratch directory a doc is walked in (one per doc, so each doc is followed alone)."""
    cwd = tmp_path_factory.getbasetemp() / WALK / doc
    cwd.mkdir(parents=True, exist_ok=True)
    return cwd


def needs_the_checkout_venv(cmd: str) -> bool:
    return cmd.startswith(("make ", "source "))


@pytest.mark.slow
@pytest.mark.parametrize("doc,cmd", CASES, ids=[f"{d}:{c[:60]}" for d, c in CASES])
def test_doc_command_runs(doc, cmd, tmp_path_factory):
    if needs_the_checkout_venv(cmd) and not (VENV / "bin" / "python").is_file():
        pytest.skip("the checkout's .venv (make install) is not there: the tests run from another environment")
    cwd = walk_dir(tmp_path_factory, doc)  # the doc alone: its commands build on each other, on nothing else
    code, check = expectation(cmd) or (0, "")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_API_KEY": "", "COLUMNS": "120"}
    res = subprocess.run(to_argv(cmd, cwd), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    out = res.stdout + res.stderr
    assert res.returncode == code, f"{cmd}\nexit {res.returncode}, documented {code}\n{out[-3000:]}"
    assert "Traceback" not in res.stderr, res.stderr[-3000:]
    if callable(check):
        assert check(out, cwd), f"{cmd}: what it wrote is not what the docs say\n{out[-2000:]}"
    else:
        assert check in out, f"{cmd}: expected {check!r} in its output\n{out[-3000:]}"


FOLLOWING = [(p.name, c) for p in DOCS[1:] for c in commands(p) if (training_points(c) or [[]]) != [[]]
             and " -m " not in f" {c} "]


@pytest.mark.slow
@pytest.mark.parametrize("doc,cmd", FOLLOWING, ids=[f"{d}:{c[:60]}" for d, c in FOLLOWING])
def test_a_doc_can_follow_the_readme(doc, cmd, tmp_path_factory):
    """After the README's walk (in its directory, on the same worker: tests/conftest.py groups this with the
    README's cases), a doc's training command starts fresh: not a run the README trained (finished: nothing
    to train; bound to another launcher: refused). A dry run says so at no training cost; sweeps are checked
    by test_no_two_docs_train_the_same_run."""
    import shutil

    if "launcher=slurm" in cmd and shutil.which("sbatch") is None:
        pytest.skip("a SLURM launch's dry run needs sbatch on PATH (CI has the local cluster)")
    readme = walk_dir(tmp_path_factory, "README.md")
    if not (readme / "runs").is_dir():
        pytest.skip("the README's walk did not run in this session (run the docs walk with it)")
    toks = to_argv(cmd, readme)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_API_KEY": "", "COLUMNS": "200"}
    res = subprocess.run([*toks, "dry_run=short"], cwd=readme, env=env, capture_output=True, text=True, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0 and out.startswith("ok: ready to launch "), f"{doc}: {cmd}\n{out[-3000:]}"
    assert re.search(r"^  run +\S+: fresh start", out, re.M), f"{doc}: {cmd} would not start fresh\n{out[:2000]}"

