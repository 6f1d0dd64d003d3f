"""The sweep composition cache builds exactly the config Hydra's load_sweep_config builds."""
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from trainstack.config.resolve import CONF_DIR
from trainstack.config.sweep_cache import SweepConfigCache

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


def test_validated_point_is_handed_to_the_launcher_once(loader_and_master):
    """The sweeper's validation composes a point with keep=True; the launcher's load takes that very
    config (no second copy), and a later load composes afresh (a config is never shared twice)."""
    loader, master = loader_and_master
    cache = SweepConfigCache(loader, master)
    point = ["experiment=qwen3-4B-grpo-dapo", "++algo.lr=4e-06"]
    kept = cache.load(point, keep=True)
    assert cache.load(point) is kept
    again = cache.load(point)
    assert again is not kept and plain(again) == plain(kept)


def test_hydra_config_without_copy_answers_like_hydra(loader_and_master):
    """set_hydra_config holds the point's config: HydraConfig.get() and ${hydra:...} answer as after
    Hydra's set_config (which keeps a masked deep copy), and the point's own keys still resolve."""
    from hydra.core.hydra_config import HydraConfig

    from trainstack.config.sweep_cache import set_hydra_config

    loader, master = loader_and_master
    cache = SweepConfigCache(loader, master)
    mine = cache.load(["++algo.lr=5e-06", "++args.seed=9"])
    theirs = loader.load_sweep_config(master, ["++algo.lr=5e-06", "++args.seed=9"])
    HydraConfig.instance().set_config(theirs)
    want = (OmegaConf.to_container(HydraConfig.get().job, resolve=True), HydraConfig.get().runtime.choices.algo,
            OmegaConf.select(theirs, "hydra.job.override_dirname"))
    set_hydra_config(mine)
    got = (OmegaConf.to_container(HydraConfig.get().job, resolve=True), HydraConfig.get().runtime.choices.algo,
           OmegaConf.select(mine, "hydra.job.override_dirname"))
    assert got == want
    probe = OmegaConf.create({"x": "${hydra:runtime.choices.algo}", "lr": "${algo.lr}"})
    assert probe.x == want[1]
    assert OmegaConf.is_readonly(mine.hydra)


def test_memoized_interpolations_resolve_each_points_values(loader_and_master):
    """One parse per ${...} string: points that share an interpolation still get their own values."""
    from trainstack.config.sweep_cache import memoize_interpolation_parsing

    memoize_interpolation_parsing()
    memoize_interpolation_parsing()  # idempotent: never a cache around a cache
    from omegaconf import base

    assert not hasattr(base.parse.__wrapped__, "__wrapped__")
    a = OmegaConf.create({"v": 1, "w": "${v}"})
    b = OmegaConf.create({"v": 2, "w": "${v}"})
    assert (a.w, b.w) == (1, 2)
    from omegaconf.errors import GrammarParseError

    for _ in range(2):  # a parse error is raised every time, never cached
        with pytest.raises(GrammarParseError):
            OmegaConf.create({"w": "${oops"})
