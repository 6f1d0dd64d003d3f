"""`python run.py --help` is rendered without composing the config, and reads exactly like the
page Hydra renders from conf/hydra/help/trainstack.yaml."""
from __future__ import annotations

from conftest import run_py

from trainstack.help_page import config_groups, render
from trainstack.resolve import CONF_DIR


def test_fast_help_is_hydras_page():
    fast = run_py("--help")
    hydra = run_py("--help", "dry_run=true")  # anything next to --help: Hydra renders the page
    assert fast.returncode == 0 and hydra.returncode == 0, hydra.stderr
    assert fast.stdout == hydra.stdout
    assert fast.stdout.startswith("trainstack: compose a slime")


def test_groups_follow_the_conf_tree(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(CONF_DIR, conf)
    (conf / "model" / "zz-mine.yaml").write_text("hidden_size: 8\n")
    (conf / "newgroup").mkdir()
    (conf / "newgroup" / "a.yaml").write_text("{}\n")
    groups = config_groups(conf)
    assert "hydra" not in groups and groups["model"][-1] == "zz-mine" and groups["newgroup"] == ["a"]
    page = render(conf)
    assert "newgroup: a\n" in page and "zz-mine" in page and "$APP_CONFIG_GROUPS" not in page
    assert 'eval "$(python run.py -sc install=bash)"' in page  # `$$` in the template is a literal $
