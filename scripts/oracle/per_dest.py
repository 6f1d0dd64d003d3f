"""Record the per-dest oracle: every slime dest set by a user, judged by slime's real parser.

    python scripts/oracle/per_dest.py plan      # probes per base, exclusions (no slime needed)
    python scripts/oracle/per_dest.py record    # (make oracle) -> tests/oracle/per_dest_oracle.json
    python scripts/oracle/per_dest.py retrack   # re-judge trainstack's column only (a rule changed)
    python scripts/oracle/per_dest.py refresh   # re-parse only the entries whose argv or env drifted

The probes and bases are in devtools/trainstack_dev/per_dest.py. slime's parser takes ~1 s per
argv, so probes are batched, BATCH of one base per argv. A batch that trainstack accepts and slime
accepts with every intended dest landing covers all its probes with one parse. Otherwise it is
split: the probes trainstack's errors (or slime's not-as-intended report) name stand alone, or the
batch is halved, until the probes responsible stand alone, recorded as single entries with both
verdicts. slime's parser runs once, preloaded, as a server (scripts/oracle/real_parse.py --serve)
under $SLIME_PARSE_HOME/venv/bin/python, with SLIME_PARSE_TOOL naming the checker.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "devtools")]  # trainstack_dev (the oracle's judge) is not installed

from trainstack_dev.oracle import Judgement, write_oracle  # noqa: E402
from trainstack_dev.per_dest import (  # noqa: E402
    BASES, ENV_PROBES, PER_DEST_PATH, Probe, excluded, judge_probes, probes, refused_dests,
)

BATCH = 48


class Slime:
    """slime's real parser, preloaded once in its own environment; one argv per request."""

    def __init__(self) -> None:
        home = os.environ.get("SLIME_PARSE_HOME") or str(ROOT / ".cache" / "slime-parse")
        env = {**os.environ, "SLIME_PARSE_HOME": home}
        self.proc = subprocess.Popen(
            [f"{home}/venv/bin/python", str(ROOT / "scripts" / "oracle" / "real_parse.py"), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, cwd="/tmp")
        self.parses = 0
        self.seconds = 0.0
        t = time.time()
        self.versions = self._read()["ready"]
        self.preload_s = time.time() - t

    def _read(self) -> dict:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("@@"):
                return json.loads(line[2:])
        raise SystemExit(f"slime's parser server exited ({self.proc.wait()})")

    def ask(self, j: Judgement, eid: str) -> dict:
        assert self.proc.stdin is not None
        row = {"id": eid, "argv": j.argv, "env": j.env, "intended": j.intended, "launch_files": j.launch_files}
        self.proc.stdin.write(json.dumps(row) + "\n")
        self.proc.stdin.flush()
        v = self._read()
        self.parses += 1
        self.seconds += v.pop("seconds", 0.0)
        return v

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def upstream_ok(v: dict) -> bool:
    return bool(v.get("pass")) and (v.get("transformer_config") or {"ok": True})["ok"]


def split(slime: "Slime", base: str, batch: list[Probe], named: set[str], out: list[dict]) -> None:
    """The probes a verdict names stand alone and the rest go on together; with none named (or all), halves."""
    culprits = [p for p in batch if p.dest in named]
    if culprits and len(culprits) < len(batch):
        for p in culprits:
            settle(slime, base, [p], out)
        settle(slime, base, [p for p in batch if p.dest not in named], out)
    else:
        half = len(batch) // 2
        settle(slime, base, batch[:half], out)
        settle(slime, base, batch[half:], out)


def settle(slime: Slime, base: str, batch: list[Probe], out: list[dict]) -> None:
    """Judge a batch; split it until every probe is covered by an entry both sides agree is clean,
    or stands alone."""
    j = judge_probes(base, batch)
    if len(batch) > 1 and not j.accepted:
        split(slime, base, batch, refused_dests(j), out)
        return
    eid = f"{base}/{len(out):04d}"
    v = slime.ask(j, eid)
    clean = upstream_ok(v) and not v.get("not_as_intended")
    if len(batch) > 1 and not clean:
        bad = {x["dest"] for x in v.get("not_as_intended") or []} if v.get("pass") else set()
        split(slime, base, batch, bad, out)
        return
    out.append(entry(eid, base, batch, [], j, v))
    tc = v.get("transformer_config") or {}
    print(f"{'ok ' if clean else 'NO '}{'ts-ok ' if j.accepted else 'ts-NO '}{eid} {len(batch)} probes"
          + ("" if clean and j.accepted else f"  {[p.key for p in batch]} {j.rules} "
             f"{str(v.get('error') or v.get('problems') or v.get('not_as_intended') or tc.get('error'))[:200]}"),
          file=sys.stderr)


def clean(e: dict) -> bool:
    """Both sides accept the entry and every dest landed: its probes can share an argv."""
    return e["trainstack"]["accepted"] and upstream_ok(e["slime"]) and not e["slime"].get("not_as_intended")


def consolidate(slime: Slime, out: list[dict]) -> list[dict]:
    """Bisection leaves clean fragments (a half that passed): merge them per base into full
    batches again (re-parsed; an interaction splits as before), so CI re-judges fewer argvs."""
    keep = [e for e in out if not clean(e) or not e["probes"]]
    by_key = {p.key: p for p in probes()}
    merged: list[dict] = []
    for base in dict.fromkeys(e["base"] for e in out):
        ps = [by_key[f"{d}/{c}"] for e in out if clean(e) and e["base"] == base and e["probes"] for d, c, _ in e["probes"]]
        for i in range(0, len(ps), BATCH):
            settle(slime, base, ps[i:i + BATCH], merged)
    entries = keep + merged
    for i, e in enumerate(entries):
        e["id"] = f"{e['base']}/{i:04d}"
    return entries


def entry(eid: str, base: str, batch: list[Probe], env_overrides: list[str], j: Judgement, v: dict) -> dict:
    return {"id": eid, "base": base, "probes": [[p.dest, p.case, p.override] for p in batch],
            "env_overrides": env_overrides, "argv": j.argv, "env": j.env,
            "intended": {p.dest: j.intended.get(p.dest) for p in batch},
            "trainstack": {"accepted": j.accepted, "rules": j.rules, "error_keys": j.error_keys}, "slime": v}


def record() -> None:
    t0 = time.time()
    slime = Slime()
    print(f"slime's parser preloaded in {slime.preload_s:.1f} s", file=sys.stderr)
    by_base: dict[str, list[Probe]] = {}
    for p in probes():
        by_base.setdefault(p.base, []).append(p)
    out: list[dict] = []
    for base, ps in by_base.items():
        for i in range(0, len(ps), BATCH):
            settle(slime, base, ps[i:i + BATCH], out)
    from trainstack_dev.oracle import judge

    for base, env_ov in ENV_PROBES.items():  # environment values a user sets, one entry per base
        j = judge([*BASES[base], *env_ov])
        eid = f"{base}/env"
        out.append(entry(eid, base, [], env_ov, j, slime.ask(j, eid)))
    first = slime.parses
    out = consolidate(slime, out)
    print(f"consolidated: {len(out)} entries ({slime.parses - first} parses)", file=sys.stderr)
    slime.close()
    from trainstack.upstream.argtable import load_table

    meta = {**slime.versions, "slime_commit_table": load_table().slime_commit, "bases": BASES,
            "parses": slime.parses, "parse_seconds": round(slime.seconds, 1),
            "seconds_per_argv": round(slime.seconds / max(1, slime.parses), 2),
            "preload_seconds": round(slime.preload_s, 1), "total_seconds": round(time.time() - t0, 1)}
    write(meta, out)


def retrack() -> None:
    """Re-judge trainstack's column of every recorded entry (a rule added or changed that leaves every
    argv as recorded; slime's verdicts stand). Refuses when an argv or env drifted."""
    from trainstack_dev.oracle import judge

    oracle = json.loads(PER_DEST_PATH.read_text(encoding="utf-8"))
    by_key = {p.key: p for p in probes()}
    for e in oracle["entries"]:
        batch = [by_key[f"{d}/{c}"] for d, c, _ in e["probes"]]
        j = judge_probes(e["base"], batch) if batch else judge([*BASES[e["base"]], *e["env_overrides"]])
        if j.argv != e["argv"] or j.env != e["env"]:
            raise SystemExit(f"{e['id']}: the argv or env drifted; run `make oracle` instead")
        e["trainstack"] = {"accepted": j.accepted, "rules": j.rules, "error_keys": j.error_keys}
    write(oracle["meta"], oracle["entries"])


def refresh() -> None:
    """Re-judge every entry; the ones whose argv or env drifted (a render or identity change) go to slime's
    parser again, one argv each, keeping their probes and id; the others keep slime's recorded verdict."""
    from trainstack_dev.oracle import judge

    oracle = json.loads(PER_DEST_PATH.read_text(encoding="utf-8"))
    planned = probes()
    by_key = {p.key: p for p in planned}
    recorded = {f"{d}/{c}" for e in oracle["entries"] for d, c, _ in e["probes"]}
    # a probe whose case changed (its value's kind) replaces the recorded one of the same dest
    renamed = {d: [p for p in planned if p.dest == d and p.key not in recorded]
               for e in oracle["entries"] for d, c, _ in e["probes"] if f"{d}/{c}" not in by_key}
    slime: Slime | None = None
    for i, e in enumerate(oracle["entries"]):
        batch = [by_key.get(f"{d}/{c}") or renamed[d].pop(0) for d, c, _ in e["probes"]]
        j = judge_probes(e["base"], batch) if batch else judge([*BASES[e["base"]], *e["env_overrides"]])
        if j.argv == e["argv"] and j.env == e["env"]:
            e["trainstack"] = {"accepted": j.accepted, "rules": j.rules, "error_keys": j.error_keys}
            continue
        slime = slime or Slime()
        oracle["entries"][i] = entry(e["id"], e["base"], batch, e["env_overrides"], j, slime.ask(j, e["id"]))
        print(f"re-parsed {e['id']}", file=sys.stderr)
    if slime is not None:
        slime.close()
    write(oracle["meta"], oracle["entries"])


def write(meta: dict, entries: list[dict]) -> None:
    write_oracle(PER_DEST_PATH, meta, entries)
    print(f"wrote {PER_DEST_PATH.relative_to(ROOT)}: {len(entries)} entries, {meta['parses']} parses "
          f"({meta['parse_seconds']} s, {meta['seconds_per_argv']} s per argv), {meta['total_seconds']} s in all",
          file=sys.stderr)


def plan() -> None:
    ps = probes()
    print(f"{len(ps)} probes over {len({p.dest for p in ps})} dests; {len(excluded())} dests excluded; by base: "
          f"{dict(Counter(p.base for p in ps))}; by case: {dict(Counter(p.case for p in ps))}")


def main(argv: list[str]) -> int:
    if argv == ["plan"]:
        plan()
        return 0
    if argv == ["record"]:
        record()
        return 0
    if argv == ["retrack"]:
        retrack()
        return 0
    if argv == ["refresh"]:
        refresh()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
