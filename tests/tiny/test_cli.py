"""Fast checks of the slime-argv parser, the flag policy and the plugin-facing contracts."""
from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.upstream.argtable import load_table
from trainstack.errors import ConfigErrors
from trainstack.tiny import flags as F
from trainstack.tiny.cli import _load_raw_actions, parse_argv

from tiny_helpers import ARCH, GRPO, ROOT, env_for, task_argv


def _value_tokens(a: dict, spec) -> list[str]:
    choices = spec.choice_values()
    if choices:
        v = str(choices[0])
    else:
        v = {"int": "1", "float": "0.5", "json": "{}", "bool": "true"}.get(spec.value_kind, "x")
    nargs = a.get("nargs")
    if isinstance(nargs, str) and nargs.isdigit():
        nargs = int(nargs)
    if isinstance(nargs, int) and nargs > 1:
        return [v] * nargs
    return [v]


def test_every_slime_option_string_parses():
    """All 1390 recorded actions: each option string is accepted with a value of its kind."""
    table = load_table()
    argv: list[str] = []
    seen = set()
    for a in _load_raw_actions():
        spec = table.specs[a["dest"]]
        for opt in a["option_strings"]:
            if opt in seen:
                continue
            seen.add(opt)
            takes_value = a["action"] in ("_StoreAction", "DeprecatedAliasStoreAction", "LoRAPathAction", "_AppendAction") \
                and a.get("nargs") not in (0,)
            argv += [opt] + (_value_tokens(a, spec) if takes_value else [])
    parsed = parse_argv(argv)
    assert len(parsed.explicit) == len(table.specs)
    assert seen == set(table.flag_to_dest)


def test_values_converted_and_lists():
    p = parse_argv(["--rollout-batch-size", "8", "--lr", "3e-4", "--eval-prompt-data", "a", "x.jsonl", "b", "y.jsonl",
                    "--rollout-sample-hook-path", "m.f", "--rollout-sample-hook-path", "m.g",
                    "--train-env-vars", '{"A": "1"}', "--no-offload-train", "--disable-rollout-global-dataset"])
    a = p.args
    assert a.rollout_batch_size == 8 and a.lr == 3e-4
    assert a.eval_prompt_data == ["a", "x.jsonl", "b", "y.jsonl"]
    assert a.rollout_sample_hook_path == ["m.f", "m.g"]
    assert a.train_env_vars == {"A": "1"}
    assert a.offload_train is False and a.rollout_global_dataset is False
    assert a.seed == 1234  # table default


def test_bad_values_and_choices():
    with pytest.raises(ConfigErrors, match="expects an integer"):
        parse_argv(["--rollout-batch-size", "eight"])
    with pytest.raises(ConfigErrors, match="not one of its choices"):
        parse_argv(["--advantage-estimator", "dpo"])


def test_unknown_flag_did_you_mean():
    with pytest.raises(ConfigErrors) as e:
        parse_argv(["--rollout-batchsize", "8"])
    assert "did you mean '--rollout-batch-size'" in str(e.value)


def _run(argv, tmp_path):
    return subprocess.run([sys.executable, "-m", "trainstack.tiny.train", *argv], cwd=tmp_path, capture_output=True,
                          text=True, env=env_for(), timeout=120)


def test_unknown_flag_exit_2_no_traceback(tmp_path, data_dir):
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1) + ["--rollout-batchsize", "8"], tmp_path)
    assert r.returncode == 2
    assert "--rollout-batchsize" in r.stderr and "did you mean '--rollout-batch-size'" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("extra,needle", [
    (["--advantage-estimator", "ppo"], "--advantage-estimator"),
    (["--loss-type", "sft_loss"], "--loss-type"),
    (["--kl-coef", "0.1"], "--kl-coef"),
    (["--use-tis"], "--use-tis"),
    (["--partial-rollout"], "--partial-rollout"),
    (["--debug-rollout-only"], "--debug-rollout-only"),
])
def test_refused_flags_exit_2(tmp_path, data_dir, extra, needle):
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1) + extra, tmp_path)
    assert r.returncode == 2, r.stderr
    assert needle in r.stderr and "not supported by the tiny backend" in r.stderr
    assert "Traceback" not in r.stderr


def test_kl_loss_needs_ref_load(tmp_path, data_dir):
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1) + ["--use-kl-loss"], tmp_path)
    assert r.returncode == 2 and "--ref-load" in r.stderr and "Traceback" not in r.stderr
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1) + ["--use-kl-loss", "--ref-load", str(tmp_path / "nope")],
             tmp_path)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_batch_arithmetic_checked(tmp_path, data_dir):
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1, gbs=100), tmp_path)
    assert r.returncode == 2 and "--global-batch-size" in r.stderr


def test_ignored_flags_listed_once(tmp_path, data_dir):
    extra = ["--tensor-model-parallel-size", "2", "--sglang-mem-fraction-static", "0.7", "--recompute-granularity",
             "full", "--use-dynamic-batch-size", "--max-tokens-per-gpu", "9216", "--attention-backend", "flash"]
    r = _run(ARCH + GRPO + task_argv(data_dir, num_rollout=1, rbs=4, n=4, gbs=16) + extra, tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "ignored by the tiny backend" in ln]
    assert len(lines) == 1
    for flag in ("--tensor-model-parallel-size", "--sglang-mem-fraction-static", "--recompute-granularity",
                 "--use-dynamic-batch-size", "--attention-backend"):
        assert lines[0].count(flag) == 1
    assert "--lr" not in lines[0].split()  # supported flags are not listed


def test_policy_tables_name_real_dests():
    table = load_table()
    assert not [d for d in F.SUPPORTED if d not in table.specs]
    assert not [r.dest for r in F.REFUSALS if r.dest not in table.specs]


def test_reward_has_slime_signature():
    from trainstack.tiny.arithmetic import reward, score

    assert inspect.iscoroutinefunction(reward)
    params = list(inspect.signature(reward).parameters.values())
    assert [p.name for p in params[:2]] == ["args", "sample"]
    assert params[2].kind is inspect.Parameter.VAR_KEYWORD
    assert score("7", "7") == 1.0 and score("7+", 7) == 1.0 and score("6", "7") == 0.75 and score("=", "7") == 0.0


def test_sample_field_names():
    from trainstack.tiny.sample import Sample

    fields = set(Sample.__dataclass_fields__)
    for f in ("prompt", "tokens", "response", "response_length", "label", "reward", "loss_mask", "status", "metadata",
              "rollout_log_probs", "index", "group_index", "remove_sample", "generate_function_path"):
        assert f in fields
    assert {s.name for s in Sample.Status} == {"PENDING", "COMPLETED", "TRUNCATED", "ABORTED", "FAILED"}


def test_arithmetic_files_deterministic(tmp_path):
    from trainstack.tiny.arithmetic import prepare, write_task

    a = write_task(tmp_path / "a", seed=3)
    b = write_task(tmp_path / "b", seed=3)
    for k in ("train", "eval"):
        assert open(a[k]).read() == open(b[k]).read()
    train = {json.loads(x)["prompt"] for x in open(a["train"])}
    ev = {json.loads(x)["prompt"] for x in open(a["eval"])}
    assert train and ev and not (train & ev)  # eval prompts are held out
    paths = prepare(tmp_path / "data")
    assert paths["train"].endswith("arithmetic/train.jsonl")
    r = subprocess.run([sys.executable, "-m", "trainstack.tiny.arithmetic", "--out", str(tmp_path / "c")],
                       capture_output=True, text=True, env=env_for(), cwd=ROOT)
    assert r.returncode == 0 and (tmp_path / "c" / "eval.jsonl").exists()


def test_import_is_light():
    code = "import sys, trainstack, trainstack.tiny, trainstack.tiny.arithmetic, " \
           "trainstack.tiny.checkpoint; print(any(m in sys.modules for m in ('torch', 'wandb', 'tensorboard')))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env_for(), cwd=ROOT)
    assert r.stdout.strip() == "False", r.stderr


def test_latest_complete(tmp_path):
    from trainstack.tiny.checkpoint import TRACKER, latest_complete

    assert latest_complete(tmp_path) is None
    d = tmp_path / "iter_0000003"
    d.mkdir()
    (d / "model.pt").write_bytes(b"x")
    (tmp_path / TRACKER).write_text("3")
    assert latest_complete(tmp_path) is None  # no meta.json: incomplete
    (d / "meta.json").write_text(json.dumps({"files": ["model.pt"]}))  # meta.json lists what the save wrote
    assert latest_complete(tmp_path) == 3
    (tmp_path / TRACKER).write_text("release")
    assert latest_complete(tmp_path) is None


_TABLE = load_table()
_FLAGS = sorted(_TABLE.flag_to_dest)
_TOKENS = st.one_of(
    st.sampled_from(_FLAGS),  # a flag of the table, as written
    st.sampled_from(_FLAGS).map(lambda f: f[:max(3, len(f) // 2)]),  # an abbreviation (refused: allow_abbrev off)
    st.sampled_from(_FLAGS).flatmap(lambda f: st.sampled_from(["1", "-1", "x", "{}", "0.5"]).map(lambda v: f"{f}={v}")),
    st.sampled_from(["1", "-1", "-0.5", "x", "true", "{}", "--", "-", "--not-a-slime-flag", "-x", "--=1"]),
)


@settings(max_examples=300, deadline=None)
@given(argv=st.lists(_TOKENS, max_size=12))
def test_the_parser_of_an_argvs_own_flags_parses_it_as_the_whole_tables_parser(argv):
    """A preflight builds the parser of the flags its argv names (~1 ms) instead of the table's 1,400 actions
    (~30 ms): any argv (values that look like flags, negative numbers, abbreviations, `--flag=value`, unknown
    flags, `--`) gets the same namespace and leftovers, or the same refusal."""
    from trainstack.tiny.cli import _ParseFailure, build_parser

    def outcome(parser):
        try:
            ns, extras = parser.parse_known_args(list(argv))
            return vars(ns), extras
        except _ParseFailure as e:
            return "refused", str(e)

    assert outcome(build_parser(argv)) == outcome(build_parser())
    named = {t.split("=", 1)[0] for t in argv if t.startswith("--")}
    assert len(build_parser(argv)._actions) <= 2 * len(named)  # the argv's own flags, not the table's 1,400
