"""A corpus of bad inputs: each gives one clear message naming the key, exit code 2, no traceback,
and nothing written or launched."""
import pytest

from conftest import files_under, run_py
from trainstack.cli import main as cli

QWEN = "experiment=qwen3-4B-grpo-dapo"
LIUM = [QWEN, "cluster=lium_8xh100", "cluster.lium.pod.image=you/trainstack-slime:0.1"]
SLURM = [QWEN, "cluster=slurm_8xh100"]
SFT = "experiment=qwen3-4B-base-sft"

# (id, overrides, text that must appear in the message: the key, as the user wrote or should write it)
CORPUS = [
    # typos in slime dests (slime itself would silently ignore these)
    ("dest-typo", ["args.rollout_batchsize=64"], "args.rollout_batchsize"),
    ("dest-typo-plus", ["+args.rollout_batchsize=64"], "args.rollout_batchsize"),
    ("dest-typo-suggests", ["args.rollout_batchsize=64"], "did you mean 'args.rollout_batch_size'"),
    ("algo-typo", ["algo.learning_rate=1e-6"], "algo.learning_rate"),
    ("model-typo", ["model.num_layer=2"], "model.num_layers"),
    ("env-flag-spelling", ["env.prompt-data=/x.jsonl"], "env.prompt_data"),
    ("sglang-abbreviation", ["args.sglang_mem_frac=0.5"], "args.sglang_mem_frac"),
    ("kl-typo", ["args.kl_loss_coeff=0.1"], "args.kl_loss_coef"),
    ("dest-at-top-level", ["lr=1e-6"], "args.lr"),
    ("dest-nested", ["args.lr.value=1"], "args.lr.value"),
    ("root-typo", ["dry_runn=true"], "dry_run"),
    ("root-unknown-plus", ["+foo=1"], "foo"),
    ("cluster-typo", ["cluster.num_nodez=2"], "cluster.num_nodes"),
    ("paths-typo", ["paths.run_root=/x"], "paths.runs_root"),
    ("slime-typo", ["slime.rot=/x"], "slime.root"),
    ("runtime-env-typo", ["runtime_env.envvars.X=1"], "runtime_env.env_vars"),
    ("hub-typo", ["hub.repoid=a/b"], "hub.repo_id"),
    ("hub-repo-id", ["hub.repo_id=no-slash"], "hub.repo_id"),
    ("hub-every", ["hub.repo_id=a/b", "hub.every=0"], "hub.every"),
    ("hub-keep", ["hub.repo_id=a/b", "hub.keep=0"], "hub.keep"),
    ("hub-timeout", ["hub.repo_id=a/b", "hub.final_timeout_s=-1"], "hub.final_timeout_s"),
    ("hub-rollouts-without-repo", ["hub.push_rollouts=true"], "hub.push_rollouts"),
    # unknown presets
    ("model-case", ["model=qwen3-4b"], "model=qwen3-4B"),
    ("algo-preset", ["algo=grpoo"], "algo=grpo"),
    ("env-preset", ["env=dapo-math"], "env=dapo_math"),
    ("cluster-preset", ["cluster=lium_8xh200"], "cluster=lium_8xh100"),
    ("experiment-preset", ["experiment=qwen3-4B-grpo"], "experiment"),
    ("sweep-preset", ["model=tiny,qwen3-9B"], "qwen3-9B"),
    # wrong types
    ("int-as-word", ["args.rollout_batch_size=abc"], "args.rollout_batch_size"),
    ("float-as-word", ["args.lr=fast"], "args.lr"),
    ("switch-as-word", ["args.balance_data=yes"], "args.balance_data"),
    ("int-as-float", ["args.num_rollout=1.5"], "args.num_rollout"),
    ("seed-float", ["args.seed=1.5"], "args.seed"),
    ("cluster-int", ["cluster.num_nodes=two"], "cluster.num_nodes"),
    ("cluster-bool", ["cluster.colocate=maybe"], "cluster.colocate"),
    ("root-bool", ["dry_run=maybe"], "dry_run"),
    ("list-as-scalar", ["env.eval_prompt_data=aime"], "env.eval_prompt_data"),
    ("scalar-as-list", ["args.rollout_temperature=[1,2]"], "args.rollout_temperature"),
    ("type-bool-false", ["args.onnx_safe=false"], "args.onnx_safe"),
    ("syntax", ["args.lr=[1"], "args.lr"),
    # bad choices
    ("choice-attention", ["args.attention_backend=flashy"], "args.attention_backend"),
    ("choice-estimator", ["algo.advantage_estimator=grpo2"], "algo.advantage_estimator"),
    ("choice-optimizer", ["args.optimizer=lion"], "args.optimizer"),
    ("choice-wandb-mode", ["args.wandb_mode=on"], "args.wandb_mode"),
    ("choice-recompute", ["args.recompute_granularity=partial"], "args.recompute_granularity"),
    ("choice-loss", ["args.loss_type=dpo"], "args.loss_type"),
    ("choice-backend", ["cluster.backend=cuda"], "cluster.backend"),
    ("choice-launcher", ["cluster.launcher=k8s"], "cluster.launcher"),
    ("choice-entrypoint", ["slime.entrypoint=train2.py"], "slime.entrypoint"),
    # impossible GPU layouts
    ("tp-not-dividing", [QWEN, "model.tensor_model_parallel_size=3"], "model.tensor_model_parallel_size"),
    ("too-small-cluster", [QWEN, "cluster=local_1xh100"], "tensor_model_parallel_size"),
    ("engine-not-dividing", [QWEN, "model.rollout_num_gpus_per_engine=3"], "rollout_num_gpus_per_engine"),
    ("more-gpus-than-node", [QWEN, "args.actor_num_gpus_per_node=16"], "args.actor_num_gpus_per_node"),
    ("more-nodes-than-cluster", [QWEN, "args.actor_num_nodes=2"], "args.actor_num_nodes"),
    ("separate-without-rollout-gpus", [QWEN, "cluster.colocate=false"], "cluster.rollout_num_gpus"),
    ("rollout-takes-all", [QWEN, "cluster.colocate=false", "cluster.rollout_num_gpus=8"], "cluster.rollout_num_gpus"),
    # (a trainer of 13 GPUs on two nodes of 8 runs: slime places GPUs one at a time, tests/test_runtime_rules.py)
    ("pp-not-dividing-layers", [QWEN, "model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=8"],
     "pipeline_model_parallel_size"),
    ("heads-vs-tp", [QWEN, "model.num_attention_heads=31"], "num_attention_heads"),
    ("experts-vs-ep", [QWEN, "model=qwen3-30B-A3B", "model.expert_model_parallel_size=3"], "expert_model_parallel_size"),
    ("sweep-too-big", [QWEN, "cluster=local_1xh100", "model.tensor_model_parallel_size=1"], "rollout_num_gpus_per_engine"),
    ("gpu-budget", [QWEN, "cluster.colocate=false", "cluster.rollout_num_gpus=4", "args.actor_num_gpus_per_node=8"],
     "rollout_num_gpus"),
    # batch arithmetic
    ("gbs-too-big", [QWEN, "env.global_batch_size=512"], "env.global_batch_size"),
    ("gbs-not-dividing", [QWEN, "env.global_batch_size=96"], "env.global_batch_size"),
    ("steps-not-dividing", [QWEN, "args.num_steps_per_rollout=3"], "args.num_steps_per_rollout"),
    ("steps-vs-gbs", [QWEN, "args.num_steps_per_rollout=2"], "env.global_batch_size"),
    ("missing-rollout-batch", ["env.rollout_batch_size=null"], "env.rollout_batch_size"),
    ("missing-length", ["env.num_rollout=null"], "env.num_rollout"),
    ("missing-gbs", ["env.global_batch_size=null"], "env.global_batch_size"),
    ("zero-samples", ["env.n_samples_per_prompt=0"], "env.n_samples_per_prompt"),
    ("over-sampling-small", [QWEN, "args.over_sampling_batch_size=8"], "args.over_sampling_batch_size"),
    ("micro-batch", [QWEN, "model.use_dynamic_batch_size=false", "args.micro_batch_size=3"], "global_batch_size"),
    ("negative-lr", ["args.lr=-1.0"], "args.lr"),
    # missing mandatory paths
    ("no-hf-checkpoint", [QWEN, "model.hf_checkpoint=null"], "model.hf_checkpoint"),
    ("no-prompt-data", [QWEN, "env.prompt_data=null"], "env.prompt_data"),
    ("kl-without-ref", [QWEN, "model.ref_load=null"], "algo.use_kl_loss"),
    ("reward-kl-without-ref", ["algo.kl_coef=0.1"], "algo.kl_coef"),
    # conflicting options
    ("two-kls", [QWEN, "algo.kl_coef=0.1", "algo.kl_loss_coef=0.1"], "algo.kl_coef"),
    ("debug-modes", [QWEN, "args.debug_rollout_only=true", "args.debug_train_only=true"], "debug_train_only"),
    ("rpp-unnormalised", [QWEN, "algo=reinforce_plus_plus", "algo.normalize_advantages=false"],
     "algo.advantage_estimator"),
    ("tis-vs-logprobs", [QWEN, "args.use_rollout_logprobs=true", "args.use_tis=true"], "args.use_tis"),
    ("wandb-no-group", [QWEN, "args.use_wandb=true", "args.wandb_group=null"], "args.use_wandb"),
    ("eval-odd", ["env.eval_prompt_data=[a,/b,c]"], "env.eval_prompt_data"),
    ("eval-without-data", ["env.eval_prompt_data=null"], "env.eval_interval"),
    ("zero-temperature", ["args.rollout_temperature=0.0"], "args.rollout_temperature"),
    ("dynamic-batch-no-budget", [QWEN, "model.max_tokens_per_gpu=null"], "model.use_dynamic_batch_size"),
    ("async-colocate", [QWEN, "slime.entrypoint=train_async.py"], "cluster.colocate"),
    ("dp-without-dp-attention", [QWEN, "args.sglang_dp_size=2"], "args.sglang_dp_size"),
    ("exclusive-engines", [QWEN, "args.sglang_config=/x.yaml", "args.prefill_num_servers=2"], "args.prefill_num_servers"),
    ("epochs-without-dataset", ["env.num_rollout=null", "args.num_epoch=2", "args.rollout_global_dataset=false"],
     "args.num_epoch"),
    ("opd-without-use", [QWEN, "args.opd_teacher_load=/t"], "args.opd_teacher_load"),
    ("flops-without-dynamic", ["args.balance_by_flops=true"], "args.balance_by_flops"),
    ("secret-in-config", [QWEN, "args.use_wandb=true", "args.wandb_group=g", "args.wandb_key=abc123"], "args.wandb_key"),
    ("bad-run-id", ["run_id=a/b"], "run_id"),
    ("tiny-too-big", ["model=qwen3-8B"], "model"),
    ("tiny-ppo", ["algo=ppo"], "advantage_estimator"),
    # accepted until the trainer (or the renewal thread) failed
    ("empty-key", ["=5"], "no key before '='"),
    ("empty-runs-root", ["paths.runs_root="], "paths.runs_root"),
    ("empty-data-root", ["paths.data_root=' '"], "paths.data_root"),
    ("allow-changes-unknown", ["resume.allow_changes=[lr,lrr]"], "resume.allow_changes"),
    ("allow-changes-suggests", ["resume.allow_changes=[num_rollouts]"], "did you mean num_rollout"),
    ("lease-ttl-overflow", ["resume.lease_ttl_s=1e308"], "resume.lease_ttl_s"),
    ("grace-overflow", ["resume.grace_s=1e300"], "resume.grace_s"),
    ("hub-retry-overflow", ["hub.repo_id=a/b", "hub.retry_max_s=1e300"], "hub.retry_max_s"),
    ("url-credentials", ["args.wandb_host=https://user:pw@wandb.example"], "args.wandb_host"),
    # issue #36: launcher settings with a domain (the dry run said ok)
    ("lium-gpu-count", [*LIUM, "cluster.lium.pod.gpu_count=-8"], "cluster.lium.pod.gpu_count"),
    ("lium-price-inf", [*LIUM, "cluster.lium.pod.max_price_per_hour=1e400"], "cluster.lium.pod.max_price_per_hour"),
    ("lium-spend-negative", [*LIUM, "cluster.lium.spend_limit=-5"], "cluster.lium.spend_limit"),
    ("lium-port", [*LIUM, "cluster.lium.commander_port=70000"], "cluster.lium.commander_port"),
    ("lium-url", [*LIUM, "cluster.lium.commander_url=not-a-url"], "cluster.lium.commander_url"),
    ("lium-image-capitals", [*LIUM, "cluster.lium.pod.image=You/Trainstack:0.1"], "cluster.lium.pod.image"),
    ("lium-country", [*LIUM, "cluster.lium.pod.countries=[USA]"], "cluster.lium.pod.countries"),
    ("slurm-partition-empty", [*SLURM, "cluster.slurm.partition=''"], "cluster.slurm.partition"),
    ("slurm-sbatch-time", [*SLURM, "+cluster.slurm.sbatch.time=-5"], "cluster.slurm.sbatch.time"),
    ("slurm-mem-word", [*SLURM, "cluster.slurm.mem_per_gpu=lots"], "cluster.slurm.mem_per_gpu"),
    ("slurm-requeues", [*SLURM, "cluster.slurm.max_requeues=-1"], "cluster.slurm.max_requeues"),
    ("ray-port", ["cluster.launcher=ray_job", "cluster.ray_job.address=http://10.0.0.5:99999"],
     "cluster.ray_job.address"),
    # issue #36: slime dests with a domain (the run hung or crashed)
    ("concurrency-zero", ["args.sglang_server_concurrency=0"], "args.sglang_server_concurrency"),
    ("env-vars-word", ["args.train_env_vars=hello"], "args.train_env_vars"),
    ("env-vars-list", ["args.train_env_vars=[]"], "args.train_env_vars"),
    ("chat-kwargs-list", ["args.apply_chat_template_kwargs=[1,2]"], "args.apply_chat_template_kwargs"),
    ("seed-negative", ["args.seed=-1"], "args.seed"),
    ("port-too-big", ["args.sglang_router_port=70000"], "args.sglang_router_port"),
    ("int-2-70", ["args.rollout_seed=1180591620717411303424"], "args.rollout_seed"),
    ("eval-len-negative", ["args.eval_max_response_len=-1"], "args.eval_max_response_len"),
    ("eval-top-p-zero", ["args.eval_top_p=0"], "args.eval_top_p"),
    ("eval-temperature-negative", ["args.eval_temperature=-1"], "args.eval_temperature"),
    # issue #36: meta blocks typed
    ("env-meta-scalar", ["env.meta=5"], "env.meta"),
    ("model-meta-scalar", ["model.meta=5"], "model.meta"),
    ("meta-key-typo", ["+env.meta.htp_env.url=http://127.0.0.1:1"], "did you mean 'env.meta.http_env'"),
    ("meta-params-negative", ["model.meta.params=-5"], "model.meta.params"),
    ("meta-data-repo", ["env=dapo_math", "env.meta.data=[{repo: nope, files: {a.jsonl: a.jsonl}}]"], "env.meta.data[0].repo"),
    # issue #36: a derived run id's fault is its name's
    ("name-slash", ["name=a/b"], "error: name: contains '/'"),
    ("name-too-long", ["name=" + "n" * 130], "error: name:"),
    ("meta-prepare-not-dotted", ["env.meta.prepare='not a path'"], "env.meta.prepare"),
]


@pytest.mark.parametrize("case_id,overrides,needle", CORPUS, ids=[c[0] for c in CORPUS])
def test_bad_input(case_id, overrides, needle, in_tmp, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["render", *overrides])
    assert exc.value.code == 2
    out = capsys.readouterr()
    assert out.out == ""
    assert "Traceback" not in out.err
    assert needle in out.err, out.err
    assert out.err.startswith("trainstack: ") and "error: " in out.err and "fix" in out.err
    assert files_under(in_tmp) == []
    if case_id == "secret-in-config":
        assert "abc123" not in out.err


def test_corpus_is_large_enough():
    assert len(CORPUS) >= 60


# The same pipeline through the real entry point: exit 2, nothing written (no outputs/, no .hydra/).
@pytest.mark.parametrize("overrides", [
    ["args.rollout_batchsize=64", "dry_run=true"],
    ["model=qwen3-4b", "dry_run=true"],
    [QWEN, "env.global_batch_size=512", "dry_run=true"],
    [QWEN, "model.tensor_model_parallel_size=3", "dry_run=true", "output=cmd.json"],
    ["args.lr=[1", "dry_run=true"],
    ["-m", "algo.lr=1e-6,2e-6", "args.kl_loss_coeff=1", "dry_run=true"],
], ids=["typo", "preset", "batch", "layout-with-output", "syntax", "sweep-typo"])
def test_run_py_bad_input(overrides, tmp_path):
    res = run_py(*overrides, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "error: " in res.stderr
    assert res.stdout == ""
    assert files_under(tmp_path) == []


# What only Hydra/YAML composition used to report, with a traceback and exit 1.
BROKEN_FILES = {
    "duplicate-key": ("experiment/dup.yaml", "# @package _global_\nalgo:\n  lr: 1.0e-3\n  lr: 2.0e-3\n",
                      ["experiment=dup"], "duplicate key"),
    "recursive-anchor": ("algo/loop.yaml", "a: &a [1, *a]\n", ["algo=loop"], "recursive anchor"),
    "recursive-map": ("experiment/loop.yaml", "# @package _global_\nalgo: &x\n  foo: *x\n", ["experiment=loop"],
                      "recursive anchor"),
    "no-package-line": ("experiment/nopkg.yaml", "name: mine\nalgo:\n  lr: 5.0e-4\n", ["experiment=nopkg"],
                        "no `# @package _global_` line"),
    "bad-interpolation-in-file": ("experiment/interp.yaml", "# @package _global_\nalgo:\n  lr: ${nowhere.lr}\n",
                                  ["experiment=interp"], "algo.lr"),
}


def test_errors_only_composition_finds_go_through_hydras_reporter(tmp_path):
    """A broken file selected by an experiment's defaults list (not by the command line, so the
    override pre-check does not read it): Hydra's composition hits it; trainstack/config/hydra_errors.py turns
    the error into one message naming the file. Also a --config-dir that does not exist."""
    conf = tmp_path / "my_conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "algo" / "loop.yaml").write_text("a: &a [1, *a]\n")
    (conf / "experiment" / "uses_loop.yaml").write_text("# @package _global_\ndefaults:\n  - override /algo: loop\n")
    work = tmp_path / "work"
    work.mkdir()
    res = run_py("--config-dir", str(conf), "experiment=uses_loop", "dry_run=true", cwd=work)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{conf}/algo/loop.yaml:1" in res.stderr and "recursive anchor" in res.stderr
    res = run_py("--config-dir", str(tmp_path / "nowhere"), "dry_run=true", cwd=work)
    assert res.returncode == 2 and "Traceback" not in res.stderr and "error: --config-dir:" in res.stderr and "nowhere is not a directory" in res.stderr, res.stderr
    assert files_under(work) == []


@pytest.mark.parametrize("case", sorted(BROKEN_FILES))
def test_broken_config_files_are_one_message(case, tmp_path):
    rel, text, overrides, needle = BROKEN_FILES[case]
    conf = tmp_path / "my_conf"
    (conf / rel).parent.mkdir(parents=True)
    (conf / rel).write_text(text)
    work = tmp_path / "work"
    work.mkdir()
    for extra in (["dry_run=true"], []):  # the dry run and the launch alike
        res = run_py("--config-dir", str(conf), *overrides, *extra, cwd=work)
        assert res.returncode == 2, (case, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and res.stderr.startswith("trainstack: ") and needle in res.stderr, \
            res.stderr[-2000:]
        assert files_under(work) == []


@pytest.mark.parametrize("overrides,needle", [
    (["model=null"], "every run needs a model preset"),
    (["env="], "every run needs an env preset"),
    (["algo.lr=${nope}"], "algo.lr: cannot resolve"),
    (["run_id=${paths.nowhere}"], "run_id: cannot resolve"),
    (["output=.", "dry_run=true"], "output: . is a directory"),
    (["output=f/x.json", "dry_run=true"], "is a file, so f/x.json cannot be created"),
])
def test_bad_values_only_hydra_saw_before(overrides, needle, tmp_path):
    (tmp_path / "f").write_text("a file")
    res = run_py(*overrides, cwd=tmp_path)
    assert res.returncode == 2 and "Traceback" not in res.stderr and needle in res.stderr, res.stderr[-2000:]
    assert files_under(tmp_path) == ["f"]


@pytest.mark.parametrize("argv,needle", [
    (["render", "-o", "."], "--output: . is a directory"),
    (["render", "-o", "f/x.json"], "is a file, so f/x.json cannot be created"),
    (["compare", "r1", "--plot", "."], "--plot: . is a directory"),
    (["compare", "r1", "--plot", "plot.xyz"], "unsupported file type .xyz"),
    (["compare", "r1", "--csv", "f/t.csv"], "--csv: f is a file"),
])
def test_output_paths_are_checked_before_anything_is_written(argv, needle, in_tmp, capsys):
    (in_tmp / "f").write_text("a file")
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and "Traceback" not in err, err
    assert files_under(in_tmp) == ["f"]


# Bad input by class, through the real entry point: one message naming the key (or file) and the fix,
# exit 2, never a traceback, nothing written.
@pytest.mark.parametrize("case", ["equals-five", "binary-config", "output-proc", "runs-root-loop", "data-root-file",
                                  "data-root-refuses", "logs-is-a-file", "lease-ttl-overflow"])
def test_bad_input_classes_through_run_py(case, tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    argv, needle = {
        "equals-five": (["=5"], "no key before '='"),
        "binary-config": (["--config-dir", str(tmp_path / "conf"), "env=blob"], "not a UTF-8 text file"),
        "output-proc": (["output=/proc/x", "dry_run=true"], "output: no file can be created in /proc"),
        "runs-root-loop": (["paths.runs_root=loop1"], "paths.runs_root: /"),
        "data-root-file": (["paths.data_root=afile"], "error: paths.data_root: "),
        "data-root-refuses": (["paths.data_root=/proc/ts-data"], "error: paths.data_root: /proc: "),
        "logs-is-a-file": (["run_id=r1"], "logs: is a file where the run keeps its logs directory"),
        "lease-ttl-overflow": (["resume.lease_ttl_s=1e308"], "error: resume.lease_ttl_s: "),
    }[case]
    (tmp_path / "conf" / "env").mkdir(parents=True)
    (tmp_path / "conf" / "env" / "blob.yaml").write_bytes(bytes(range(256)) * 4)
    (work / "loop1").symlink_to("loop2")
    (work / "loop2").symlink_to("loop1")
    (work / "afile").write_text("not a directory")
    (work / "runs" / "r1").mkdir(parents=True)
    (work / "runs" / "r1" / "logs").write_text("a file where a directory goes")
    before = files_under(work)
    res = run_py(*argv, cwd=work)
    assert res.returncode == 2, (case, res.stdout[-1000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr and needle in res.stderr and "fix" in res.stderr, res.stderr[-2000:]
    assert files_under(work) == before


def test_refused_sweep_leaves_nothing(tmp_path):
    res = run_py("-m", "algo.lr=1e-3,2e-3", "args.rollout_batch_size=abc", cwd=tmp_path)
    assert res.returncode == 2 and "args.rollout_batch_size" in res.stderr, res.stderr[-2000:]
    assert files_under(tmp_path) == []  # no empty multirun/ either


@pytest.mark.parametrize("argv,expected", [
    (["run_id=123"], ("run_id", "123")),
    (["name=2024"], ("name", "2024")),
    (["args.rollout_sample_hook_path=trainstack.tiny.arithmetic.reward"],
     ("rollout_sample_hook_path", ["trainstack.tiny.arithmetic.reward"])),
    (["args.router_prefill=http://127.0.0.1:30000"], ("router_prefill", [["http://127.0.0.1:30000"]])),
])
def test_values_refused_by_mistake_are_accepted(argv, expected, in_tmp):
    """An int-looking run id is a name (the string), and one value for an append dest is one occurrence."""
    from trainstack.render.pipeline import build_from_overrides

    run, cmd = build_from_overrides(argv)
    key, value = expected
    got = getattr(run, key, None) if key in ("run_id", "name") else run.args[key]
    assert got == value, got
    if key == "run_id":
        assert run.run_dir.endswith("/123")


def test_int_looking_run_id_in_a_config_file_is_a_name(tmp_path):
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "num.yaml").write_text("# @package _global_\nrun_id: 4711\nname: 2024\n")
    res = run_py("--config-dir", str(tmp_path / "conf"), "experiment=num", "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "run dir " + str(tmp_path / "runs" / "4711") in res.stdout
