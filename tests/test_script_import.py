"""`trainstack import`: slime's own launch scripts read without running them, written as experiments
that render the scripts' argv; checked against what nobody here wrote: slime's scripts at the pin,
the argv recorded from slime's real parser for three of them (tests/data/reference_runs.json), and
bash itself (the model files and generated scripts, run by bash with `python3` replaced by a printer).
"""
from __future__ import annotations

import glob
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import ROOT, run_py
from trainstack.cli.main import main
from trainstack.errors import ConfigErrors
from trainstack.script_import import bash
from trainstack.script_import.importer import draft, run_import
from trainstack.script_import.shell import Shell

SLIME = ROOT / "slime"
UPSTREAM = sorted(Path(p).relative_to(SLIME).as_posix()
                  for p in glob.glob(str(SLIME / "scripts" / "run-*.sh")) + glob.glob(str(SLIME / "examples/*/*.sh")))
# What the multi-node scripts read from their environment (they refuse to start without it).
ENV = {"BASE_DIR": "/data", "BASE_FOLDER": "/data", "MASTER_ADDR": "10.0.0.1", "RUN_ROOT": "/data/runs/swe"}
# The scripts import refuses, each with what it says (the rest reproduce exactly).
REFUSED = {
    # the script as bash runs it: line 172 lacks its `\`, so slime gets 4 flags and the rest is a command
    "scripts/run-kimi-k2-Instruct.sh": "is run as a command after the launch at line 166",
    # --sglang-config is a file `$(mktemp ...)` names at run time (and the script writes with a here-document)
    "scripts/run-glm5.2-744B-A40B.sh": "--sglang-config $(mktemp",
    # trainstack's checks refuse what Megatron refuses: 47 layers on 2 pipeline stages, EP x PP = 16 on 8 GPUs
    "examples/delta_weight_sync/run-glm4.7-30B-A3B-delta.sh": "num_layers 47 is not divisible by pipeline-parallel",
    "scripts/run-glm4.7-30B-A3B.sh": "EP x ETP x PP = 8 x 1 x 2 = 16 does not divide the 8 training GPUs",
}
# scripts whose argv slime's real parser recorded (tests/data/reference_runs.json) -> the run's name there
REFERENCE = {"scripts/run-qwen3-4B.sh": "qwen3-4B-grpo", "scripts/run-qwen2.5-0.5B-reproducibility.sh":
             "qwen2.5-0.5B-reproducibility", "scripts/run-qwen3-4B-base-sft.sh": "qwen3-4B-base-sft"}


def imported(script: Path, tmp_path: Path, **kw):
    return run_import(script, tmp_path / "conf", slime_root=SLIME, **kw)


def test_the_upstream_scripts_are_all_listed():
    """A script slime adds shows up here; the count reproduced exactly is the closing note's number."""
    assert len(UPSTREAM) == 38 and set(REFUSED) <= set(UPSTREAM)
    assert len(UPSTREAM) - len(REFUSED) == 34


@pytest.mark.slow
@pytest.mark.parametrize("rel", UPSTREAM)
def test_upstream_script_imports_and_renders_its_argv(rel, tmp_path, reference_runs):
    script = SLIME / rel
    if rel in REFUSED:
        with pytest.raises(ConfigErrors) as err:
            imported(script, tmp_path, env=ENV)
        assert REFUSED[rel] in err.value.render(), err.value.render()
        assert not (tmp_path / "conf").exists(), "a refused import wrote something"
        return
    result = imported(script, tmp_path, env=ENV)
    assert result.proof.exact, "\n".join(result.proof.different)
    assert result.written and result.target.is_file()
    assert not result.plan.nulls or len(result.plan.nulls) <= 7, result.plan.nulls
    if rel in REFERENCE:  # the argv slime's real parser recorded, compared as tests/test_reference_runs.py does
        from test_reference_runs import MANAGED, same_value, split_flags, upstream_argv

        ref = split_flags(upstream_argv(next(r for r in reference_runs if r["name"] == REFERENCE[rel])))
        ours = split_flags(result.proof.argv)
        assert set(ref) - set(ours) == set()
        for flag, values in ref.items():
            if flag not in MANAGED:
                assert len(ours[flag]) == len(values) and all(map(same_value, ours[flag], values)), flag


def test_the_reference_scripts_pick_the_shipped_recipes_presets(tmp_path):
    """The hand-written recipe for run-qwen3-4B.sh (conf/experiment/qwen3-4B-grpo-dapo.yaml) uses
    qwen3-4B + grpo + dapo_math + local_8xh100; import finds the same, with no null."""
    result = imported(SLIME / "scripts/run-qwen3-4B.sh", tmp_path, write=False)
    assert result.plan.choices == {"model": "qwen3-4B", "algo": "grpo", "env": "dapo_math", "cluster": "local_8xh100"}
    assert result.plan.nulls == []
    sft = imported(SLIME / "scripts/run-qwen3-4B-base-sft.sh", tmp_path, write=False)
    assert sft.plan.choices["algo"] == "sft" and sft.plan.choices["env"] == "openhermes_sft"
    assert sft.target.name == "qwen3-4B-base-sft-imported.yaml"  # trainstack ships qwen3-4B-base-sft


def bash_model_args(path: Path) -> list[str]:
    from trainstack.upstream.sync_slime import source_model_args

    return source_model_args(path)


def our_model_args(path: Path) -> list[str]:
    shell = Shell(path, {}, SLIME)
    shell.run(bash.parse(path.read_text()))
    return [t.text for t in shell.vars["MODEL_ARGS"]]  # type: ignore[union-attr]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_every_model_file_reads_as_bash_sources_it():
    """39 scripts/models/*.sh (MoE layer lists built by `for ((...))` and `printf -v`, `$((...))`,
    `${X:-default}`): MODEL_ARGS as import reads it equals what bash makes of it."""
    files = sorted((SLIME / "scripts" / "models").glob("*.sh"))
    assert len(files) >= 39
    for path in files:
        assert our_model_args(path) == bash_model_args(path), path.name


# --- generated scripts: bash agrees, and import -> render gives the argv back --------------------
BASE = [  # run-qwen3-4B.sh's launch without its model file: valid for trainstack's checks
    ("--actor-num-nodes", ["1"]), ("--actor-num-gpus-per-node", ["8"]), ("--colocate", []),
    ("--hf-checkpoint", ["/root/Qwen3-4B"]), ("--ref-load", ["/root/Qwen3-4B_torch_dist"]),
    ("--load", ["/root/Qwen3-4B_slime/"]), ("--save", ["/root/Qwen3-4B_slime/"]),
    ("--prompt-data", ["/root/dapo-math-17k/dapo-math-17k.jsonl"]), ("--input-key", ["prompt"]),
    ("--label-key", ["label"]), ("--rm-type", ["deepscaler"]), ("--num-rollout", ["3000"]),
    ("--rollout-batch-size", ["32"]), ("--n-samples-per-prompt", ["8"]), ("--global-batch-size", ["256"]),
    ("--rollout-max-response-len", ["8192"]), ("--optimizer", ["adam"]), ("--lr", ["1e-6"]),
    ("--advantage-estimator", ["grpo"]),
]
DROPPABLE = [  # flags presets set (kept or left out together): without them the experiment undoes the preset
    [("--apply-chat-template", [])], [("--rollout-shuffle", [])], [("--balance-data", [])],
    [("--tensor-model-parallel-size", ["2"]), ("--sequence-parallel", [])],
    [("--use-dynamic-batch-size", []), ("--max-tokens-per-gpu", ["9216"])],
    [("--attention-backend", ["flash"])], [("--rollout-num-gpus-per-engine", ["2"])],
    [("--sglang-mem-fraction-static", ["0.7"])], [("--weight-decay", ["0.1"])],
    [("--eval-interval", ["20"]), ("--eval-prompt-data", ["aime", "/root/aime-2024/aime-2024.jsonl"])],
]
WORD = st.text("abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)
POOL = {  # flags whose values trainstack's checks take in any combination: flag -> values strategy
    "--eps-clip": st.floats(0.01, 0.5).map(lambda x: [f"{x:.3g}"]),
    "--entropy-coef": st.sampled_from(["0", "0.001", "1e-4"]).map(lambda x: [x]),
    "--rollout-temperature": st.sampled_from(["0.6", "1", "1.0"]).map(lambda x: [x]),
    "--rollout-top-k": st.integers(-1, 100).map(lambda x: [str(x)]),
    "--seed": st.integers(0, 10**6).map(lambda x: [str(x)]),
    "--save-interval": st.integers(1, 100).map(lambda x: [str(x)]),
    "--lr-decay-style": st.sampled_from(["constant", "cosine", "linear"]).map(lambda x: [x]),
    "--metadata-key": WORD.map(lambda x: [x]),
    "--rollout-stop-token-ids": st.lists(st.integers(0, 200000).map(str), min_size=1, max_size=4),
    "--disable-rollout-global-dataset": st.just([]),
    "--no-offload-train": st.just([]),
    "--train-env-vars": st.dictionaries(st.sampled_from(["A", "B_1"]), WORD, max_size=2).map(
        lambda d: ["{" + ",".join(f'"{k}":"{v}"' for k, v in d.items()) + "}"]),
    "--clip-grad": st.sampled_from(["0.5", "1.0", "2"]).map(lambda x: [x]),
}


@st.composite
def scripts(draw):
    """A launch script: the flags spread over arrays and the launch line, values written literally,
    through variables, `${UNSET:-default}`, or quoted, with comments and continuation lines."""
    flags = list(BASE) + [f for group in DROPPABLE if draw(st.booleans()) for f in group]
    for flag in draw(st.lists(st.sampled_from(sorted(POOL)), unique=True, max_size=6)):
        flags.append((flag, draw(POOL[flag])))
    flags = draw(st.permutations(flags))
    lines, variables = ["#!/bin/bash", "set -ex", f'SLIME_DIR="{SLIME}"',
                        'source "${SLIME_DIR}/scripts/models/qwen3-4B.sh"'], 0
    n_arrays = draw(st.integers(0, 3))
    arrays: list[list[str]] = [[] for _ in range(n_arrays)]
    inline: list[str] = []

    def spell(value: str) -> str:
        nonlocal variables
        plain = all(c.isalnum() or c in "._-/:" for c in value)
        how = draw(st.sampled_from(["bare", "double", "single", "var", "default"] if plain else ["single", "var"]))
        if how == "double":
            return f'"{value}"'
        if how == "single":
            return f"'{value}'"
        if how in ("var", "default"):
            variables += 1
            if how == "var":
                lines.append(f"V{variables}='{value}'")
                return draw(st.sampled_from([f'"${{V{variables}}}"', f'"$V{variables}"']))
            return f"\"${{UNSET_{variables}:-{value}}}\""
        return value if value and plain else f"'{value}'"

    for flag, values in flags:
        words = [flag] + [spell(v) for v in values]
        if n_arrays and draw(st.booleans()):
            arrays[draw(st.integers(0, n_arrays - 1))].append(" ".join(words))
        else:
            inline.append(" ".join(words))
    for k, items in enumerate(arrays):
        lines.append(f"ARGS_{k}=(")
        for item in items:
            lines.append(f"   {item}" + draw(st.sampled_from(["", "  # a comment"])))
            if draw(st.booleans()):
                lines.append("")
        lines.append(")")
    expansions = ['${MODEL_ARGS[@]}'] + [draw(st.sampled_from([f'"${{ARGS_{k}[@]}}"', f"${{ARGS_{k}[@]}}"]))
                                         for k in range(n_arrays)]
    launch = ["ray job submit --address=\"http://127.0.0.1:8265\" \\", "   -- python3 train.py \\"]
    body = draw(st.permutations(inline + expansions))
    launch += [f"   {item} \\" for item in body[:-1]] + [f"   {body[-1]}"]
    return "\n".join(lines + launch) + "\n"


PRINT_ARGV = 'ray() { while [ "$1" != "--" ]; do shift; done; shift; "$@"; }; python3() { shift; printf "%s\\0" "$@"; }'


def bash_argv(path: Path) -> list[str]:
    res = subprocess.run(["bash", "--noprofile", "--norc", "-c", f'{PRINT_ARGV}; . "$0"', str(path)],
                         capture_output=True, timeout=30, env={"PATH": os.environ["PATH"]})
    assert res.returncode == 0, res.stderr.decode()
    return res.stdout.decode().split("\0")[:-1]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=scripts())
def test_generated_scripts_read_as_bash_runs_them_and_round_trip(text, tmp_path_factory):
    from trainstack.script_import.shell import read_script

    where = tmp_path_factory.mktemp("gen")
    path = where / "run-gen.sh"
    path.write_text(text)
    reading = read_script(path, {}, SLIME)
    assert [t.text.text for t in reading.launch.argv] == bash_argv(path)
    result = run_import(path, where / "conf", slime_root=SLIME, write=False)
    assert result.proof.exact, "\n".join(result.proof.different) + "\n" + result.text


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_any_damage_to_a_script_is_one_message_never_a_traceback(data, tmp_path_factory):
    """Bad input as a class: a real script with characters inserted or lines cut anywhere either still
    reads (and plans) or is refused with ConfigErrors (exit 2, one message); nothing else escapes. (The
    render after it is trainstack's own pipeline, whose bad input has its tests.)"""
    text = (SLIME / "scripts" / "run-qwen3-4B.sh").read_text()
    lines = text.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 3))):
        i = data.draw(st.integers(0, len(lines) - 1))
        action = data.draw(st.sampled_from(["cut", "insert", "truncate"]))
        if action == "cut":
            del lines[i]
        elif action == "insert":
            at = data.draw(st.integers(0, len(lines[i])))
            junk = data.draw(st.text(alphabet="\"'`$(){}[]\\|&;<>#=-* \nabc", min_size=1, max_size=4))
            lines[i] = lines[i][:at] + junk + lines[i][at:]
        else:
            lines = lines[:i]
        if not lines:
            lines = ["\n"]
    where = tmp_path_factory.mktemp("bad")
    path = where / "run-bad.sh"
    path.write_text("".join(lines))
    try:
        draft(path, where / "conf", slime_root=SLIME, env=ENV)
    except ConfigErrors as err:
        assert err.errors and all(e.problem for e in err.errors)


# --- the command --------------------------------------------------------------------------------
def cli(*args: str) -> int:
    try:
        return main(["import", *args])
    except SystemExit as ex:
        return int(ex.code or 0)


def test_import_writes_an_experiment_that_render_and_run_py_take(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli("scripts/run-qwen3-4B.sh", "--config-dir", "my-conf") == 0  # found in the slime checkout
    out = capsys.readouterr().out
    assert "presets : model=qwen3-4B algo=grpo env=dapo_math cluster=local_8xh100" in out
    assert "the experiment renders the script's argv: 70 flags the same" in out
    assert "--load: the run's checkpoint dir" in out and "/checkpoints (the script: /root/Qwen3-4B_slime/)" in out
    written = tmp_path / "my-conf" / "experiment" / "qwen3-4B.yaml"
    assert written.read_text().startswith("# @package _global_\n")
    assert main(["render", "--config-dir", "my-conf", "experiment=qwen3-4B", "--format", "lines"]) == 0
    argv = capsys.readouterr().out.splitlines()
    assert argv[argv.index("--lr") + 1] == "1e-06" and argv[argv.index("--hf-checkpoint") + 1] == "/root/Qwen3-4B"
    res = run_py("--config-dir", str(tmp_path / "my-conf"), "experiment=qwen3-4B", "--cfg", "job", cwd=tmp_path)
    assert res.returncode == 0 and "hf_checkpoint: /root/Qwen3-4B" in res.stdout, res.stderr
    assert cli("scripts/run-qwen3-4B.sh", "--config-dir", "my-conf") == 2  # exists: --force or --name
    assert "exists already" in capsys.readouterr().err
    assert cli("scripts/run-qwen3-4B.sh", "--config-dir", "my-conf", "--force") == 0


BAD = {
    "missing": (None, "does not exist"),
    "no-launch": ("#!/bin/bash\necho hello\nray status\n", "launches no slime trainer"),
    "case": ("#!/bin/bash\ncase $X in\n a) python3 train.py --lr 1;;\nesac\n", ":2: `case` is outside what import"),
    "unclosed": ("#!/bin/bash\nARGS=(\n --lr 1e-6\npython3 train.py ${ARGS[@]}\n", "the array `ARGS=(` is not closed"),
    "unknown-flag": ("python3 train.py --rollout-batchsize 8\n", "did you mean '--rollout-batch-size'"),
    "no-value": ("python3 train.py --lr --seed 1\n", "--lr needs a value"),
    "needs-env": ("python3 train.py --prompt-data $DATA/x.jsonl --rollout-batch-size 8\n",
                  "give --env DATA=VALUE"),
    "cmd": ("F=$(mktemp)\npython3 train.py --sglang-config $F --rollout-batch-size 8\n",
            "`$(mktemp)` (line 1), which import does not run"),
    "guard": ("#!/bin/bash\n[ -n \"$HOME_DIR\" ] || exit 1\nexit 3\npython3 train.py --rollout-batch-size 8\n",
              ":3: the script stops here (`exit 3`) before it launches slime"),
    "binary": (b"\x7fELF\x00\x00", "is not a text file"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_one_message_exit_2_nothing_written(case, tmp_path, capsys):
    text, expected = BAD[case]
    script = tmp_path / "run-bad.sh"
    if isinstance(text, bytes):
        script.write_bytes(text)
    elif text is not None:
        script.write_text(text)
    assert cli(str(script), "--config-dir", str(tmp_path / "conf")) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainstack import: ") and "nothing was written" in err
    assert expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "conf").exists()


def test_secrets_go_to_the_environment_and_guesses_are_said(tmp_path, capsys):
    script = tmp_path / "run-mine.sh"
    script.write_text((SLIME / "scripts" / "run-qwen3-4B.sh").read_text().replace(
        "# --use-wandb", "--use-wandb").replace("# --wandb-key ${WANDB_KEY}", "--wandb-key ${WANDB_KEY}")
        .replace('source "${SCRIPT_DIR}/models/qwen3-4B.sh"', 'source scripts/models/qwen3-4B.sh'))
    assert cli(str(script), "--config-dir", str(tmp_path / "conf"), "--env", "WANDB_KEY=abc-secret-123") == 0
    out = capsys.readouterr().out
    text = (tmp_path / "conf" / "experiment" / "mine.yaml").read_text()
    assert "abc-secret-123" not in text + out and "wandb_key" not in text
    assert "export WANDB_API_KEY=... in the launching shell" in out
    assert "--wandb-key: a secret, from the launching shell's environment instead" in out
    assert "--actor-num-gpus-per-node 8 (line 150): chosen by the test" in out  # NUM_GPUS from nvidia-smi
    assert "--env NUM_GPUS=..." in out


def test_what_trainstack_cannot_reproduce_is_written_listed_and_exit_1(tmp_path, capsys):
    """--ckpt-step is trainstack's to decide (a run resumes from its latest checkpoint): the experiment is
    written without it and the difference is listed; exit 1, as `diff` says "different"."""
    script = tmp_path / "run-step.sh"
    script.write_text((SLIME / "scripts" / "run-qwen3-4B.sh").read_text().replace(
        "--save-interval 20", "--save-interval 20\n   --ckpt-step 100"))
    assert cli(str(script), "--config-dir", str(tmp_path / "conf")) == 1
    out = capsys.readouterr().out
    assert "the experiment differs from the script in 1 place(s):" in out
    assert "--ckpt-step: the script gives 100, trainstack leaves it out" in out
    assert "--ckpt-step 100 (line" in out and "left out: a run resumes from its latest complete checkpoint" in out
    assert (tmp_path / "conf" / "experiment" / "step.yaml").is_file()
