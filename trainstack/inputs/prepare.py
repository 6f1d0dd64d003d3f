"""Prepare a run's inputs on the host that executes it: resolve, check disk, download, transform,
convert, link. Also the input plan a dry run prints (no network unless asked).

Why here and not in a launcher: `trainstack exec` (SLURM jobs, Lium pods, Ray) and local launches
all run the lifecycle, and the lifecycle calls this before the trainer; the cache (cache.py) makes
the second run, and a concurrent one, prepare nothing.
"""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from trainstack.errors import ConfigError, ConfigErrors
from trainstack.inputs import cache
from trainstack.inputs.sources import DatasetSource, ModelSource, Sources, pinned, read
from trainstack.storage.hf_xet import bound_xet_memory
from trainstack.terminal.phase import phase

REFS = "refs"
DISK_MARGIN = 1.05  # a download needs its size plus 5 %
Log = Callable[[str], None]


def _endpoint() -> str | None:
    """HF_ENDPOINT as it is now (huggingface_hub reads it once, at import)."""
    return os.environ.get("HF_ENDPOINT") or None


def _stderr(msg: str) -> None:
    print(f"trainstack prepare: {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# the conversion command (rendered by trainstack, run by slime's tool or the tiny converter)
# ------------------------------------------------------------------------------------------
# Model-layer dests that are training settings, not the architecture the converter needs.
NOT_ARCH = frozenset({"hf_checkpoint", "ref_load", "load", "save", "lr", "min_lr", "seed"})


def _training_dests() -> frozenset[str]:
    from trainstack.upstream.model_meta import MISC, perf

    return frozenset(perf(2, pp=2, first=1, last=1, offload=True, engine=1)) | frozenset(MISC) | NOT_ARCH


@dataclass(frozen=True)
class Converter:
    """How this run converts HF weights to torch_dist: slime's tool under torchrun, or the tiny one."""

    backend: str
    model_flags: tuple[str, ...]
    slime_root: str
    megatron_root: str
    nproc: int
    slime_commit: str

    def argv(self, hf: str, out: str) -> list[str]:
        if self.backend == "tiny":
            head = [sys.executable, "-m", "trainstack.inputs.convert_tiny"]
        else:
            # torchrun, as the interpreter that runs trainstack (the image's python, with torch): the
            # `torchrun` script on PATH may belong to another python, or be missing from PATH
            head = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={self.nproc}",
                    os.path.join(self.slime_root, "tools", "convert_hf_to_torch_dist.py")]
        return [*head, *self.model_flags, "--hf-checkpoint", hf, "--save", out]

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.backend != "tiny":
            env["PYTHONPATH"] = os.pathsep.join(p for p in (self.megatron_root, self.slime_root,
                                                            env.get("PYTHONPATH", "")) if p)
        return env

    def key(self) -> list[Any]:
        """What the conversion's output depends on (paths left out: the same conversion anywhere)."""
        return [self.backend, list(self.model_flags), self.slime_commit if self.backend != "tiny" else "tiny"]


def converter_for(config: Mapping[str, Any], args: Mapping[str, Any], backend: str, gpus_per_node: int,
                  slime_commit: str) -> Converter:
    from trainstack.render.command import render_dest
    from trainstack.upstream.argtable import load_table
    from trainstack.upstream.slime_root import resolve as resolve_slime_root

    table = load_table()
    skip = _training_dests()
    model = config.get("model") or {}
    flags: list[str] = []
    for dest in model:
        if dest == "meta" or dest in skip or dest not in table.specs or args.get(dest) is None:
            continue
        flags += render_dest(table.specs[dest], args[dest])
    slime = config.get("slime") or {}
    layers = args.get("num_layers")
    nproc = max(1, min(gpus_per_node, layers if isinstance(layers, int) and layers > 0 else gpus_per_node))
    return Converter(backend, tuple(flags), resolve_slime_root(slime.get("root"), os.getcwd()),
                     str(slime.get("megatron_root") or ""), nproc, slime_commit)


# ------------------------------------------------------------------------------------------
# what the steps report
# ------------------------------------------------------------------------------------------
@dataclass
class Item:
    """One input: what it is, where it goes, and what preparing it does (or did)."""

    kind: str  # model | torch_dist | dataset
    source: str  # repo@revision
    path: str
    state: str  # cached | download | convert | local | prepared
    sha: str | None = None
    bytes: int | None = None
    command: list[str] | None = None
    seconds: float = 0.0
    detail: str = ""

    def line(self) -> str:
        size = f", {_size(self.bytes)}" if self.bytes else ""
        sha = f" (commit {self.sha[:12]})" if self.sha else ""
        text = f"{self.kind} {self.source}{sha} -> {self.path}: {self.state}{size}"
        if self.detail:
            text += f"; {self.detail}"
        return text


@dataclass
class Result:
    items: list[Item] = field(default_factory=list)
    seconds: float = 0.0

    def record(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 3), "items": [vars(i) for i in self.items]}

    def did(self, state: str) -> list[Item]:
        return [i for i in self.items if i.state == state]


def _size(n: float | None) -> str:
    if n is None:
        return "size unknown"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""


# ------------------------------------------------------------------------------------------
# revisions
# ------------------------------------------------------------------------------------------
def _ref_file(root: str, kind: str, repo: str, revision: str) -> str:
    return os.path.join(root, cache.CACHE_DIR, REFS, kind, cache.slug(repo), cache.slug(revision))


def last_resolved(root: str, kind: str, repo: str, revision: str) -> str | None:
    """The sha a floating revision resolved to last time on this volume (for offline plans)."""
    if pinned(revision):
        return revision
    try:
        with open(_ref_file(root, kind, repo, revision), encoding="utf-8") as f:
            sha = f.read().strip()
        return sha if pinned(sha) else None
    except OSError:
        return None


def _token() -> str | None:
    """The Hub token as huggingface_hub finds it (HF_TOKEN, else the file `hf auth login` wrote)."""
    token = os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    if token:
        return token
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    try:
        with open(os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token"), encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def hub_sha(repo: str, revision: str, repo_type: str, timeout: float = 30) -> str:
    """One GET of the Hub's revision API (what HfApi.repo_info asks), without importing
    huggingface_hub: a run whose inputs are all cached pays one request, not the client's import."""
    import urllib.parse
    import urllib.request

    endpoint = (_endpoint() or "https://huggingface.co").rstrip("/")
    url = f"{endpoint}/api/{repo_type}s/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    req = urllib.request.Request(url, headers={"User-Agent": "trainstack"})
    token = _token()
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 (the Hub endpoint)
        sha = json.loads(r.read()).get("sha")
    if not isinstance(sha, str) or not pinned(sha):
        raise ValueError(f"the Hub answered no commit sha for {repo}@{revision}")
    return sha


def resolve_revision(root: str, kind: str, repo: str, revision: str, repo_type: str, key: str) -> str:
    """A commit sha: a pinned revision as is; a branch or tag asked of the Hub (HF_ENDPOINT, token
    from the environment) and remembered; offline (HF_HUB_OFFLINE=1, or the Hub unreachable): what
    it resolved to last on this volume."""
    if pinned(revision):
        return revision
    import urllib.error

    try:
        if os.environ.get("HF_HUB_OFFLINE", "") in ("1", "true", "True"):
            raise OSError("HF_HUB_OFFLINE is set")
        sha = hub_sha(repo, revision, repo_type)
    except urllib.error.HTTPError as ex:  # the Hub answered: no such repo/revision, or no access
        raise ConfigErrors([ConfigError(key, f"the Hub answered {ex.code} for {repo}@{revision} ({ex.reason})",
                                        "check the repo id and revision, and HF_TOKEN for a private or gated "
                                        "repo", value=f"{repo}@{revision}")]) from None
    except (OSError, ValueError) as ex:
        known = last_resolved(root, kind, repo, revision)
        if known:
            return known
        raise ConfigErrors([ConfigError(key, f"cannot resolve {repo}@{revision} to a commit ({type(ex).__name__}: "
                                        f"{str(ex).splitlines()[0][:200] if str(ex) else ''})",
                                        "check HF_ENDPOINT and the network, or pin the revision to a commit sha "
                                        "that is cached here", value=f"{repo}@{revision}")]) from None
    assert sha is not None
    ref = _ref_file(root, kind, repo, revision)
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    tmp = f"{ref}.tmp.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(sha + "\n")
    os.replace(tmp, ref)
    return sha


# ------------------------------------------------------------------------------------------
# downloads
# ------------------------------------------------------------------------------------------
def _remote_sizes(repo: str, sha: str, repo_type: str, only: set[str] | None = None) -> dict[str, int]:
    from huggingface_hub import HfApi

    out = {}
    for entry in HfApi(endpoint=_endpoint()).list_repo_tree(repo, revision=sha, repo_type=repo_type, recursive=True):
        size = getattr(entry, "size", None)
        if size is not None and (only is None or entry.path in only):
            out[entry.path] = int(size)
    return out


def _download(repo: str, sha: str, repo_type: str, names: list[str], local_dir: str) -> None:
    """The files, 8 at a time, into local_dir: what `snapshot_download` does after listing the repo,
    from the listing the disk check already made (one listing, not two). Each file is
    huggingface_hub's resumable, verified `hf_hub_download`, with its progress bar."""
    from concurrent.futures import ThreadPoolExecutor

    from huggingface_hub import hf_hub_download

    bound_xet_memory()

    def one(name: str) -> None:
        hf_hub_download(repo, name, revision=sha, repo_type=repo_type, local_dir=local_dir, endpoint=_endpoint())

    with ThreadPoolExecutor(max_workers=min(8, max(1, len(names)))) as pool:
        list(pool.map(one, names))


def _check_disk(path: str, sizes: Mapping[str, int], key: str, what: str) -> int:
    """Bytes still to fetch; refuse before downloading when the volume has no room for them."""
    need = sum(size for name, size in sizes.items()
               if not (os.path.isfile(os.path.join(path, name)) and os.path.getsize(os.path.join(path, name)) == size))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "."
    free = shutil.disk_usage(probe).free
    if need * DISK_MARGIN > free:
        raise ConfigErrors([ConfigError(key, f"{what} needs {_size(need)} more on {probe}, which has {_size(free)} "
                                        "free", f"free space there, or move {key} to a larger volume", value=path)])
    return need


@contextlib.contextmanager
def _fetching(key: str, what: str) -> Iterator[None]:
    """A failed download (network, auth, a vanished revision) is one clear message; what was fetched
    stays in the entry (no marker) and the next prepare resumes it."""
    try:
        yield
    except ConfigErrors:
        raise
    except Exception as ex:  # huggingface_hub's and httpx's errors, OSError
        first = (str(ex).strip().splitlines() or [""])[0][:300]
        raise ConfigErrors([ConfigError(key, f"downloading {what} failed ({type(ex).__name__}: {first})",
                                        "check the network, HF_ENDPOINT and HF_TOKEN, then launch again: the "
                                        "partial download is kept and resumed", value=what,
                                        outside="getting the run's inputs")]) from None


def _model_entry(src: ModelSource, sha: str) -> cache.Entry:
    return cache.Entry.at(src.models_root, "models", src.repo, "model", src.repo, sha)


def _convert_entry(src: ModelSource, sha: str, conv: Converter) -> cache.Entry:
    name = f"{src.repo}-torch_dist"
    return cache.Entry.at(src.models_root, "torch_dist", name, "torch_dist", src.repo, sha, conv.key())


def _dataset_entry(src: DatasetSource, sha: str) -> cache.Entry:
    return cache.Entry.at(src.data_root, "datasets", src.repo, "dataset", src.repo, sha, sorted(src.files))


def _transform_entry(src: DatasetSource, sha: str, file: str) -> cache.Entry:
    return cache.Entry.at(src.data_root, "transformed", f"{src.repo}-{file}", "transformed", src.repo, sha, file,
                          src.transform, sorted(src.keys.items()))


def prepare_model(src: ModelSource, conv: Converter | None, log: Log, recorded: Mapping[str, str]) -> list[Item]:
    items = []
    _check_converter(src, conv)
    if not cache.managed(src.hf_dir):
        items.append(Item("model", f"{src.repo}@{src.revision}", src.hf_dir, "local",
                          detail="an existing directory trainstack did not make: used as it is"))
        hf_path = src.hf_dir
        sha = None
    else:
        t0 = time.monotonic()
        sha = recorded.get(src.repo) or resolve_revision(src.models_root, "model", src.repo, src.revision, "model",
                                                         "model.meta.revision")
        entry = _model_entry(src, sha)
        state, nbytes = "cached", None
        if entry.complete() is None:
            with entry.lock() as waited:
                if entry.complete() is None:
                    with _fetching("model.meta.hf_repo", f"{src.repo}@{sha}"):
                        sizes = _remote_sizes(src.repo, sha, "model")
                        nbytes = _check_disk(entry.path, sizes, "paths.models_root", f"{src.repo}@{sha[:12]}")
                        with phase(f"downloading {src.repo}@{sha[:12]} ({_size(nbytes)}) into {entry.path}", log,
                                   announce=True, prefix=""):
                            _download(src.repo, sha, "model", sorted(sizes), entry.path)
                    entry.mark_complete(repo=src.repo, revision=src.revision, sha=sha, bytes=sum(sizes.values()))
                    state = "download"
                elif waited:
                    state = "cached"
        cache.link(entry.path, src.hf_dir)
        hf_path = entry.path
        items.append(Item("model", f"{src.repo}@{src.revision}", src.hf_dir, state, sha, nbytes,
                          seconds=time.monotonic() - t0))
    if src.torch_dist_dir and conv is not None:
        items.append(_convert(src, sha, hf_path, conv, log))
    return items


def _check_converter(src: ModelSource, conv: Converter | None) -> None:
    """Before a long download: the conversion after it must be able to start on this host."""
    if conv is None or not src.torch_dist_dir or not cache.managed(src.torch_dist_dir):
        return
    import importlib.util

    argv = conv.argv("HF", "OUT")
    problem = None
    if conv.backend != "tiny" and importlib.util.find_spec("torch") is None:
        problem = f"torch (torch.distributed.run), which {sys.executable} cannot import"
    elif conv.backend != "tiny" and not os.path.isfile(argv[4]):
        problem = f"slime's converter {argv[4]} does not exist on this host"
    if problem:
        raise ConfigErrors([ConfigError("model.ref_load", f"converting {src.repo} to torch_dist needs {problem}",
                                        "install torch (torchrun) and point slime.root at a slime checkout on the "
                                        "host that runs the trainer, or set model.ref_load to an existing torch_dist "
                                        "directory", value=src.torch_dist_dir)])


def _convert(src: ModelSource, sha: str | None, hf_path: str, conv: Converter, log: Log) -> Item:
    out_path = src.torch_dist_dir
    assert out_path is not None
    if not cache.managed(out_path):
        return Item("torch_dist", f"{src.repo}@{src.revision}", out_path, "local",
                    detail="an existing directory trainstack did not make: used as it is")
    t0 = time.monotonic()
    entry = _convert_entry(src, sha or hf_path, conv)
    state = "cached"
    argv = conv.argv(hf_path, entry.path)
    if entry.complete() is None:
        with entry.lock():
            if entry.complete() is None:
                if os.path.exists(entry.path):  # a killed conversion: redone from scratch, never used
                    log(f"removing an incomplete conversion {entry.path}")
                    shutil.rmtree(entry.path)
                logfile = f"{entry.path}.log"
                log(f"converting (log: {logfile}): " + " ".join(argv))
                with open(logfile, "w", encoding="utf-8") as out, phase(f"converting {src.repo} to torch_dist", log,
                                                                         prefix=""):
                    code = subprocess.call(argv, env=conv.env(), stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=False)
                if code != 0:
                    with open(logfile, encoding="utf-8", errors="replace") as f:
                        tail = f.read()[-2000:]
                    raise ConfigErrors([ConfigError("model.ref_load", f"converting {src.repo} to torch_dist failed "
                                                    f"(exit {code}); log {logfile}:\n{tail}",
                                                    "fix the model flags or the converter's environment "
                                                    "(slime.root, slime.megatron_root), then launch again",
                                                    value=out_path)])
                entry.mark_complete(repo=src.repo, sha=sha, argv=argv)
                state = "convert"
    cache.link(entry.path, out_path)
    return Item("torch_dist", f"{src.repo}@{src.revision}", out_path, state, sha, command=argv,
                seconds=time.monotonic() - t0)


def prepare_dataset(src: DatasetSource, log: Log, recorded: Mapping[str, str]) -> list[Item]:
    targets = {f: p for f, p in src.files.items() if cache.managed(p)}
    items = [Item("dataset", f"{src.repo}@{src.revision}:{f}", p, "local",
                  detail="an existing file trainstack did not make: used as it is")
             for f, p in src.files.items() if f not in targets]
    if not targets:
        return items
    t0 = time.monotonic()
    sha = recorded.get(src.repo) or resolve_revision(src.data_root, "dataset", src.repo, src.revision, "dataset",
                                                     "env.meta.data")
    entry = _dataset_entry(src, sha)
    state, nbytes = "cached", None
    if entry.complete() is None:
        with entry.lock():
            if entry.complete() is None:
                with _fetching("env.meta.data", f"{src.repo}@{sha}"):
                    sizes = _remote_sizes(src.repo, sha, "dataset", set(src.files))
                    missing = sorted(set(src.files) - set(sizes))
                    if missing:
                        raise ConfigErrors([ConfigError("env.meta.data", f"{src.repo}@{sha[:12]} has no {missing[0]}",
                                                        "name files the dataset repo has", value=missing)])
                    nbytes = _check_disk(entry.path, sizes, "paths.data_root", f"{src.repo}@{sha[:12]}")
                    with phase(f"downloading {src.repo}@{sha[:12]} ({_size(nbytes)}) into {entry.path}", log,
                               announce=True, prefix=""):
                        _download(src.repo, sha, "dataset", sorted(src.files), entry.path)
                entry.mark_complete(repo=src.repo, sha=sha, files=sorted(src.files))
                state = "download"
    for name, target in targets.items():
        made = os.path.join(entry.path, name)
        item_state = state
        if src.transform:
            out = _transform_entry(src, sha, name)
            produced = os.path.join(out.path, os.path.basename(target))
            if out.complete() is None:
                with out.lock():
                    if out.complete() is None:
                        from trainstack.inputs.transforms import apply

                        shutil.rmtree(out.path, ignore_errors=True)
                        os.makedirs(out.path)
                        log(f"transforming {name} ({src.transform}) -> {produced}")
                        apply(src.transform, made, produced, src.keys)
                        out.mark_complete(repo=src.repo, sha=sha, file=name, transform=src.transform)
                        item_state = "download" if state == "download" else "transform"
            made = produced
        cache.link(made, target)
        items.append(Item("dataset", f"{src.repo}@{src.revision}:{name}", target, item_state, sha, nbytes,
                          seconds=time.monotonic() - t0,
                          detail=f"transform {src.transform}" if src.transform else ""))
    return items


def prepare(sources: Sources, conv: Converter | None, log: Log = _stderr,
            recorded: Mapping[str, str] | None = None) -> Result:
    """Make every input of `sources` present, each exactly once per volume. `recorded`: repo -> sha a
    run resolved before (a resume uses the very commits its first launch used)."""
    t0 = time.monotonic()
    result = Result()
    recorded = recorded or {}
    if sources.model:
        result.items += prepare_model(sources.model, conv, log, recorded)
    for d in sources.datasets:
        result.items += prepare_dataset(d, log, recorded)
    result.seconds = time.monotonic() - t0
    return result


# ------------------------------------------------------------------------------------------
# the plan (dry run): from the cache alone, no network
# ------------------------------------------------------------------------------------------
def plan(sources: Sources, conv: Converter | None, lookup: bool = False) -> list[Item]:
    """What preparing would do, from the cache alone; `lookup`: ask the Hub too (revisions, sizes)."""
    items: list[Item] = []
    src = sources.model
    if src:
        sha = last_resolved(src.models_root, "model", src.repo, src.revision)
        if lookup:
            sha = resolve_revision(src.models_root, "model", src.repo, src.revision, "model", "model.meta.revision")
        when = "" if pinned(src.revision) else f" (the launch resolves {src.revision!r} first)"
        if not cache.managed(src.hf_dir):
            items.append(Item("model", f"{src.repo}@{src.revision}", src.hf_dir, "local",
                              detail="an existing directory trainstack did not make: used as it is"))
            hf = src.hf_dir
        else:
            entry = _model_entry(src, sha) if sha else None
            done = entry.complete() if entry else None
            nbytes = done.get("bytes") if done else None
            if lookup and sha and not done:
                with _fetching("model.meta.hf_repo", f"{src.repo}@{sha}"):
                    nbytes = sum(_remote_sizes(src.repo, sha, "model").values())
            items.append(Item("model", f"{src.repo}@{src.revision}", src.hf_dir, "cached" if done else "download",
                              sha, nbytes, detail="" if lookup else when.strip(" ()")))
            hf = entry.path if entry else src.hf_dir
        if src.torch_dist_dir and conv is not None:
            if not cache.managed(src.torch_dist_dir):
                items.append(Item("torch_dist", f"{src.repo}@{src.revision}", src.torch_dist_dir, "local",
                                  detail="an existing directory trainstack did not make: used as it is"))
            else:
                centry = _convert_entry(src, sha or hf, conv) if (sha or not cache.managed(src.hf_dir)) else None
                done = centry.complete() if centry else None
                argv = conv.argv(hf, centry.path if centry else src.torch_dist_dir)
                items.append(Item("torch_dist", f"{src.repo}@{src.revision}", src.torch_dist_dir,
                                  "cached" if done else "convert", sha, command=argv))
    for d in sources.datasets:
        sha = last_resolved(d.data_root, "dataset", d.repo, d.revision)
        if lookup:
            sha = resolve_revision(d.data_root, "dataset", d.repo, d.revision, "dataset", "env.meta.data")
        entry = _dataset_entry(d, sha) if sha else None
        sizes: dict[str, int] = {}
        if lookup and sha and entry and entry.complete() is None:
            with _fetching("env.meta.data", f"{d.repo}@{sha}"):
                sizes = _remote_sizes(d.repo, sha, "dataset", set(d.files))
        for name, target in d.files.items():
            if not cache.managed(target):
                state = "local"
            elif entry and entry.complete() and (not d.transform or _transform_entry(d, sha or "", name).complete()):
                state = "cached"
            else:
                state = "download"
            items.append(Item("dataset", f"{d.repo}@{d.revision}:{name}", target, state, sha, sizes.get(name),
                              detail=f"transform {d.transform}" if d.transform else ""))
    return items


# ------------------------------------------------------------------------------------------
# from a stored spec or a resolved run
# ------------------------------------------------------------------------------------------
def for_run(config: Mapping[str, Any], args: Mapping[str, Any], cluster: Any,
            slime_commit: str) -> tuple[Sources, Converter | None]:
    sources, errors = read(config, args)
    if errors:
        raise ConfigErrors(errors)
    conv = None
    if sources.model and sources.model.torch_dist_dir:
        conv = converter_for(config, args, cluster.backend, int(getattr(cluster, "gpus_per_node", 1) or 1),
                             slime_commit)
    return sources, conv
