"""Every experiment, and every model x algo x cluster combination, either renders and validates
or fails with clear ConfigErrors (never another exception)."""
import itertools

import pytest

from conftest import ROOT, run_py
from tests.fakes import fake_gpu_host
from trainstack.errors import ConfigErrors
from trainstack.render.pipeline import build, compose

GROUP_DIR = ROOT / "conf"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (GROUP_DIR / group).glob("*.yaml"))


def test_experiment_glob_sweep_dry_runs_every_experiment(tmp_path):
    for exp in options("experiment"):  # the GPU recipes run on this machine: give it their inputs
        fake_gpu_host(tmp_path, [f"experiment={exp}", "args.no_save_optim=true"])
    res = run_py("-m", "experiment=glob(*)", "args.no_save_optim=true", "dry_run=true",
                 f"hydra.sweep.dir={tmp_path}/sweep", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("ok  ")]
    assert len(lines) == len(options("experiment"))
    for exp in options("experiment"):
        assert any(f" experiment={exp}" in ln for ln in lines), exp


# The combinations a user would expect to work, and impossible ones refused with the key that makes them so.
EXPECTED_VALID = [("qwen3-4B", "grpo", "local_8xh100"), ("qwen3-4B", "dapo", "lium_8xh100"),
                  ("qwen3-8B", "gspo", "slurm_8xh100"), ("qwen2.5-0.5B", "reinforce_plus_plus", "local_8xh100"),
                  ("glm4-9B", "ppo", "local_8xh100"), ("qwen3-4B", "sft", "local_8xh100"),
                  ("tiny", "grpo", "local_cpu"), ("tiny", "gspo", "local_cpu")]
EXPECTED_INVALID = [("qwen3-4B", "grpo", "local_1xh100"), ("deepseek-v3", "grpo", "local_cpu"),
                    ("tiny", "grpo", "lium_8xh100")]


def pairwise_combinations() -> list[tuple[str, str, str]]:
    """Every model x cluster pair once, the algo rotating so that every model x algo and every algo x
    cluster pair appears too (a Latin-square design: 240 compositions instead of all 1,440 triples,
    with every pair of presets checked together), plus the combinations asserted by name."""
    models, algos, clusters = options("model"), options("algo"), options("cluster")
    combos = [(m, algos[(i + j) % len(algos)], c) for i, m in enumerate(models) for j, c in enumerate(clusters)]
    return combos + [c for c in EXPECTED_VALID + EXPECTED_INVALID if c not in combos]


def test_pairwise_design_covers_every_pair():
    combos = pairwise_combinations()
    models, algos, clusters = options("model"), options("algo"), options("cluster")
    assert {(m, c) for m, _, c in combos} == set(itertools.product(models, clusters))
    assert {(m, a) for m, a, _ in combos} == set(itertools.product(models, algos))
    assert {(a, c) for _, a, c in combos} == set(itertools.product(algos, clusters))
    assert len(combos) < len(models) * len(algos) * len(clusters) / 4


@pytest.mark.slow
def test_model_algo_cluster_matrix():
    valid: list[tuple[str, str, str]] = []
    invalid = []
    for model, algo, cluster in pairwise_combinations():
        overrides = [f"model={model}", f"algo={algo}", f"cluster={cluster}"]
        if cluster != "local_cpu":
            overrides.append("env=dapo_math")
        cfg, origin = compose(overrides)
        try:
            build(cfg, origin)
            valid.append((model, algo, cluster))
        except ConfigErrors as err:
            assert err.errors and all(e.key and e.problem for e in err.errors)
            assert "Traceback" not in err.render()
            invalid.append((model, algo, cluster, [e.key for e in err.errors]))
    # The combinations a user would expect to work do.
    for combo in EXPECTED_VALID:
        assert combo in valid, combo
    # ...and the impossible ones are refused with the key that makes them impossible.
    bad = {(m, a, c): keys for m, a, c, keys in invalid}
    assert any("tensor_model_parallel_size" in k for k in bad[("qwen3-4B", "grpo", "local_1xh100")])
    assert ("deepseek-v3", "grpo", "local_cpu") in bad
    assert "model" in bad[("tiny", "grpo", "lium_8xh100")]  # slime cannot load the tiny model (meta.backends)
    assert len(valid) * 1440 > 100 * len(pairwise_combinations())  # as many valid, in proportion, as all triples had
