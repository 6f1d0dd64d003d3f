"""The three upstream recipes render to slime's exact argv (up to paths), and golden files
catch any drift in what every experiment renders."""
import json

import pytest

from trainstack.upstream.argtable import load_table
from trainstack.render.pipeline import build_from_overrides
from trainstack.render import golden

EXPERIMENT_OF = {
    "qwen3-4B-grpo": "qwen3-4B-grpo-dapo",
    "qwen2.5-0.5B-reproducibility": "qwen2.5-0.5B-reproducibility",
    "qwen3-4B-base-sft": "qwen3-4B-base-sft",
}
# Run identity trainstack adds (docs/config.md "managed dests"): --load = --save = the run's
# checkpoint dir (what makes a relaunch resume; the reproducibility script has neither), metrics in
# the run dir, and one W&B run per run_id. Everything the upstream scripts pass is reproduced.
MANAGED = {"--load", "--save", "--use-tensorboard", "--disable-wandb-random-suffix", "--wandb-dir"}
# Deliberate additions: trainstack always manages --save, and Megatron asserts save_interval is set
# whenever --save is given, so a recipe without one gets trainstack's default (docs/config.md).
ADDED_DEFAULTS = {"--save-interval"}


def split_flags(argv: list[str]) -> dict[str, tuple[str, ...]]:
    flags = load_table().flag_to_dest
    out, i = {}, 0
    while i < len(argv):
        j = i + 1
        while j < len(argv) and argv[j] not in flags:
            j += 1
        assert argv[i] not in out, f"{argv[i]} emitted twice"
        out[argv[i]] = tuple(argv[i + 1:j])
        i = j
    return out


def same_value(a: str, b: str) -> bool:
    a, b = a.rstrip("/"), b.rstrip("/")
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except ValueError:
        return False


def upstream_argv(run: dict) -> list[str]:
    values = {k: v.split(" (")[0] for k, v in run.get("upstream_values", {}).items() if not k.startswith("--")}
    return [values.get(tok, values.get(tok.rstrip("/") + "/", tok)) for tok in run["argv"]]


@pytest.mark.parametrize("name", sorted(EXPERIMENT_OF))
def test_upstream_recipe_argv_equals_reference(name, reference_runs):
    ref_run = next(r for r in reference_runs if r["name"] == name)
    run, cmd = build_from_overrides([f"experiment={EXPERIMENT_OF[name]}", "paths.models_root=/root",
                                     "paths.data_root=/root"])
    ours, ref = split_flags(cmd.argv), split_flags(upstream_argv(ref_run))
    assert set(ref) - set(ours) == set(), "flags the upstream script passes but trainstack does not"
    assert set(ours) - set(ref) <= MANAGED | ADDED_DEFAULTS, "flags trainstack adds"
    if "--save-interval" not in ref:
        assert run.source("save_interval").startswith("trainstack default"), run.source("save_interval")
    for flag, ref_vals in ref.items():
        if flag in MANAGED:
            continue
        assert len(ours[flag]) == len(ref_vals) and all(map(same_value, ours[flag], ref_vals)), \
            f"{flag}: ours {ours[flag]} vs upstream {ref_vals}"
    assert ours["--load"] == ours["--save"] and ours["--save"][0].endswith(f"{run.run_id}/checkpoints")
    assert cmd.entrypoint[-1].endswith(ref_run["entrypoint"])
    for var, val in ref_run["runtime_env"]["env_vars"].items():
        if not val.startswith("{"):
            assert cmd.env[var] == val


@pytest.mark.parametrize("experiment", golden.experiments())
def test_golden_file_matches(experiment):
    path = golden.GOLDEN_DIR / f"{experiment}.json"
    assert path.exists(), f"no golden file for {experiment}: run `make golden`"
    assert json.loads(path.read_text()) == golden.golden_record(experiment), \
        f"rendered command of {experiment} drifted from {path}; review, then `make golden`"


def test_golden_check_detects_drift(tmp_path, monkeypatch):
    monkeypatch.setattr(golden, "GOLDEN_DIR", tmp_path)
    assert golden.main(["--update"]) == 0
    assert golden.main([]) == 0
    victim = tmp_path / "cpu-smoke.json"
    victim.write_text(victim.read_text().replace('"--lr"', '"--lr-typo"'))
    assert golden.main([]) == 1


def test_make_golden_runs_and_leaves_current_files_unchanged():
    """`make golden` (README, "Adding ... an experiment") works and the committed files are what it writes."""
    import shutil
    import subprocess
    import sys

    from trainstack.config.resolve import PROJECT_ROOT as ROOT

    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    before = {p.name: p.read_bytes() for p in golden.GOLDEN_DIR.glob("*.json")}
    res = subprocess.run(["make", "-C", str(ROOT), "golden", f"PY={sys.executable}", "STAMP="],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    after = {p.name: p.read_bytes() for p in golden.GOLDEN_DIR.glob("*.json")}
    assert after == before, "golden files were stale: review `git diff tests/golden`"
