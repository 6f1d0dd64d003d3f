"""The sweep composition cache builds exactly the config Hydra's load_sweep_config builds."""
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from trainstack.resolve import CONF_DIR
from trainstack.sweep_cache import SweepConfigCache

POINTS = [
    ["experiment=qwen3-4B-grpo-dapo", "++algo.lr=2e-06", "++args.seed=3"],
    ["experiment=qwen3-4B-grpo-dapo", "++algo.lr=3e-06", "++args.seed=3"],
    ["experiment=qwen3-4B-base-sft", "++algo.lr=2e-06", "cluster.num_nodes=1"],
    ["model=qwen3-8B", "++args.sglang_mem_fraction_static=0.5", "++runtime_env.env_vars.X=1"],
    ["++algo.lr=1e-3", "env=arithmetic", "dry_run=true"],
    ["hydra.job.chdir=false", "++algo.lr=1e-3"],
]


@pytest.fixture(scope="module")
def loader_and_master():
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        master = compose("config", return_hydra_config=True)
        loader = GlobalHydra.instance().config_loader()
        yield loader, master
    GlobalHydra.instance().clear()


def plain(cfg):
    c = OmegaConf.to_container(cfg, resolve=False)
    c["hydra"].pop("runtime", None)  # cwd/version/config_sources: identical by construction
    return c


@pytest.mark.parametrize("point", POINTS, ids=[" ".join(p) for p in POINTS])
def test_cached_point_equals_hydra_composition(point, loader_and_master):
    loader, master = loader_and_master
    cache = SweepConfigCache.for_master(loader, master)
    got = cache.load(point)
    want = loader.load_sweep_config(master, list(point))
    assert plain(got) == plain(want)
    assert OmegaConf.to_container(got.hydra.runtime.choices) == OmegaConf.to_container(want.hydra.runtime.choices)
    assert OmegaConf.is_struct(got) == OmegaConf.is_struct(want)


def test_value_only_points_share_one_composition(loader_and_master):
    loader, master = loader_and_master
    cache = SweepConfigCache(loader, master)
    for lr in ("1e-06", "2e-06", "3e-06"):
        assert cache.load(["experiment=qwen3-4B-grpo-dapo", f"++algo.lr={lr}"]).algo.lr == float(lr)
    assert len(cache._bases) == 1


def test_unknown_key_still_fails_like_hydra(loader_and_master):
    from hydra.errors import ConfigCompositionException

    loader, master = loader_and_master
    with pytest.raises(ConfigCompositionException):
        SweepConfigCache(loader, master).load(["cluster.not_a_field=1"])
