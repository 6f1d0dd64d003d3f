"""The issue's case: a run given its env server with `+env.meta.http_env.url=...` prints resume/more
commands that keep the plus (as `++`, which adds or overrides), so pasting them runs the same run."""
from __future__ import annotations

import io
import shlex

from trainstack.reports.display import print_summary
from trainstack.render.pipeline import build_from_overrides
from trainstack.run.spec import RunSpec

URL = "+env.meta.http_env.url=http://10.0.0.7:18080"
GIVEN = ["experiment=cpu-agentic", "~env.meta.http_env.serve", URL, "env.num_rollout=2", "run_id=paste-url"]


def test_printed_commands_keep_the_plus_of_the_env_server_url(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run, cmd = build_from_overrides(GIVEN)
    out = io.StringIO()
    print_summary(RunSpec.from_run(run, cmd), 0, file=out)
    lines = {ln.split()[0]: ln.split(None, 1)[1].split("  #")[0].strip()
             for ln in out.getvalue().splitlines() if ln.strip()}
    resume = shlex.split(lines["resume"])
    more = shlex.split(lines["more"].replace("<N>", "5"))
    assert "+" + URL in resume and "+" + URL in more  # ++env.meta.http_env.url=...
    for argv, rollouts in ((resume, 2), (more, 5)):
        again, _ = build_from_overrides(argv[2:])
        assert again.run_id == "paste-url" and again.args["num_rollout"] == rollouts
        assert again.meta["env"]["http_env"]["url"] == "http://10.0.0.7:18080"
