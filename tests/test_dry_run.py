"""Dry run and `trainstack render`: everything printed, nothing written but the asked-for file,
secrets redacted everywhere."""
import json

from conftest import files_under, run_py
from tests.fakes import fake_gpu_host
from trainstack.cli import main as cli

# one checkpoint of Qwen3-4B without optimizer state is 8 GB: the free-space check must pass on CI disks
QWEN = ["experiment=qwen3-4B-grpo-dapo", "args.no_save_optim=true"]


def test_dry_run_prints_tree_groups_env_command_and_writes_nothing(tmp_path):
    made = fake_gpu_host(tmp_path, QWEN)
    before = files_under(tmp_path)
    res = run_py(*QWEN, "dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for section in ("resolved config", "megatron arguments", "sglang arguments", "slime arguments", "runtime env",
                    "command"):
        assert f"── {section}" in out, section
    assert "--sglang-mem-fraction-static" in out and "conf/model/qwen3-4B.yaml" in out
    assert "conf/experiment/qwen3-4B-grpo-dapo.yaml" in out  # where --lr came from
    *_, command, verdict = out.rstrip().splitlines()  # the command, then the verdict
    assert verdict.startswith("ok: ready to launch qwen3-4B-grpo-dapo-") and verdict.endswith(" on ray_job")
    assert command.startswith("ray job submit --address=http://127.0.0.1:8265 ")
    assert "/train.py --tensor-model-parallel-size 2" in command
    assert "pkill" not in out and "ray stop" not in out
    assert f"slime checkout: {tmp_path}/slime (train.py present on this machine)" in out
    assert "the trainer runs on this machine" in out and "fresh start" in out
    assert files_under(tmp_path) == before and len(made) == 5


def test_dry_run_output_file_is_the_only_thing_written(tmp_path):
    fake_gpu_host(tmp_path, ["experiment=qwen3-4B-base-sft", "args.no_save_optim=true"])
    before = files_under(tmp_path)
    res = run_py("experiment=qwen3-4B-base-sft", "args.no_save_optim=true", "dry_run=true", "output=cmd.json",
                 cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert files_under(tmp_path) == sorted([*before, "cmd.json"])
    data = json.loads((tmp_path / "cmd.json").read_text())
    assert data["entrypoint"][-1].endswith("/train_async.py") and "--debug-train-only" in data["argv"]


def test_secrets_in_config_are_refused_without_echoing_them(tmp_path):
    res = run_py("runtime_env.env_vars.WANDB_API_KEY=sekret-123", "runtime_env.env_vars.HF_TOKEN=hf-456",
                 "dry_run=true", cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert "runtime_env.env_vars.WANDB_API_KEY" in res.stderr and "export WANDB_API_KEY=" in res.stderr
    assert "sekret-123" not in res.stdout + res.stderr and "hf-456" not in res.stdout + res.stderr
    assert files_under(tmp_path) == []


def test_secrets_from_the_environment_are_never_printed_or_rendered(tmp_path, capsys, monkeypatch):
    env = {"WANDB_API_KEY": "sekret-123", "HF_TOKEN": "hf-456"}
    res = run_py("dry_run=true", cwd=tmp_path, env=env)
    assert res.returncode == 0, res.stderr
    assert "sekret-123" not in res.stdout + res.stderr and "hf-456" not in res.stdout + res.stderr
    assert "WANDB_API_KEY" not in res.stdout.rstrip().splitlines()[-2]  # the runnable command takes it from the env
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["render", "-o", str(tmp_path / "r.json")]) == 0
    text = (tmp_path / "r.json").read_text() + capsys.readouterr().out
    assert "sekret-123" not in text and "hf-456" not in text


def test_default_dry_run_is_the_cpu_smoke_run_on_the_tiny_trainer(tmp_path):
    res = run_py("dry_run=true", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "-m trainstack.tiny.train" in res.stdout.splitlines()[-2]
    from trainstack.render.pipeline import build_from_overrides

    a, _ = build_from_overrides([])
    b, _ = build_from_overrides(["experiment=cpu-smoke"])
    assert a.args == {**b.args, "save": a.args["save"], "load": a.args["load"]}  # same run, other name


def test_render_json_for_tools(tmp_path, capsys):
    assert cli.main(["render", "experiment=qwen3-4B-grpo-dapo"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["run_id"].startswith("qwen3-4B-grpo-dapo-")
    assert set(data["groups"]) == {"megatron", "sglang", "slime"}
    assert data["argv"] == data["groups"]["megatron"] + data["groups"]["sglang"] + data["groups"]["slime"]
    assert data["ray_submit"][:3] == ["ray", "job", "submit"]


def test_hub_tokens_are_never_config_and_never_echoed(tmp_path):
    """The Hub token comes from HF_TOKEN or the token cache only: a token typed into the hub section (or
    under any secret-named key there) is refused without its value; HF_TOKEN in the environment never
    shows up in the dry run."""
    for override in ("hub.token=hf_abcdefghijklmnop1234", "hub.hf_token=hf_abcdefghijklmnop1234"):
        res = run_py("hub.repo_id=alice/ckpts", override, "dry_run=true", cwd=tmp_path)
        assert res.returncode == 2, res.stderr
        assert "hf_abcdefghijklmnop1234" not in res.stdout + res.stderr and "<redacted>" in res.stderr
    res = run_py("hub.repo_id=alice/ckpts", "dry_run=true", cwd=tmp_path, env={"HF_TOKEN": "hf_zyxwvutsrqponm9876"})
    assert res.returncode == 0 and "hf_zyxwvutsrqponm9876" not in res.stdout + res.stderr
    assert files_under(tmp_path) == []
