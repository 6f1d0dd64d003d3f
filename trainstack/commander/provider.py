"""Pods through the Lium Python SDK (`lium.io`; never the CLI's output): what the reconciler needs.

`PodRequest` is what a run asks for (from `cluster.lium.pod` of its preset); `LiumProvider`
picks a node, rents with an idempotency key, waits until the pod is ready, puts files, starts
the worker detached (secrets only through the exec environment, which the SDK sends over the
SSH session's stdin: never argv, never a file), reads logs and removes pods.
"""
from __future__ import annotations

import hashlib
import posixpath
import random
import shlex
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# Keys of `cluster.lium.pod` (refused at compose time otherwise: trainstack/launch/lium.py LiumSettings).
@dataclass
class PodRequest:
    """The pod a run needs and where things live on it."""

    gpu_type: str | None = None  # e.g. H100 (Lium's short name); None: any
    gpu_count: int = 1  # GPUs the node must have
    executor_id: str | None = None  # pin one node (UUID or HUID)
    template_id: str | None = None  # a Lium template with trainstack's image (docs/lium.md)
    image: str | None = None  # or a Docker image (one-time template made by Lium)
    max_price_per_hour: float | None = None  # USD per hour for the whole pod
    countries: list[str] = field(default_factory=list)  # ISO codes; empty: anywhere
    volume: str | None = "auto"  # auto: one volume per run (trainstack-<run_id>); None: none; else an id
    volume_mount: str = "/mnt"  # where the template mounts the volume
    workdir: str = "/workspace/trainstack"  # pod-local scratch (logs of the worker, data)
    python: str = "python3"  # the image's interpreter with trainstack installed
    slime_root: str = "/root/slime"  # the image's slime checkout: its $TRAINSTACK_SLIME_ROOT (docker/Dockerfile)
    ready_timeout_s: float = 900.0
    termination_hours: int | None = None  # Lium removes the pod after this many hours, whatever happens

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> "PodRequest":
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in (d or {}).items() if k in known})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def run_dir(self, run_id: str) -> str:
        """The run directory on the pod: on the volume when there is one (it outlives the pod)."""
        base = posixpath.join(self.volume_mount, "trainstack") if self.volume else self.workdir
        return posixpath.join(base, "runs", run_id)


@dataclass
class PodRef:
    id: str
    name: str
    price_per_hour: float = 0.0
    status: str = ""


class NoNode(RuntimeError):
    """No node matches the request right now (retried with backoff)."""


# Lium's API answers 429 (rate limit, with Retry-After) and 5xx at times: each provider call retries them
# with backoff for this long before the reconciler sees a failure (which counts as a restart).
API_RETRY_S = 120.0
API_BACKOFF_S = (0.5, 15.0)  # first pause, longest pause (doubling, with jitter)


def transient_wait(ex: BaseException) -> float | None:
    """How long the API asked us to wait before a retry of what raised `ex` (0: it did not say); None:
    not a transient failure (a refusal, not found, bad request) and retrying would not help."""
    from lium.sdk.exceptions import LiumRateLimitError, LiumRentOutcomeUnknownError, LiumServerError

    if isinstance(ex, LiumRateLimitError):
        return float(ex.retry_after or 0.0)
    if isinstance(ex, (LiumServerError, LiumRentOutcomeUnknownError)):  # a rent retried with its key is one pod
        return 0.0
    import requests

    if isinstance(ex, (requests.ConnectionError, requests.Timeout)):
        return 0.0
    return None


def with_backoff(fn, what: str, budget_s: float | None = None, sleep=time.sleep):
    """`fn()`, retried on transient API failures (429 honouring Retry-After, 5xx, connection errors) with
    exponential backoff and jitter until `budget_s` has passed; then the last failure is raised."""
    budget = API_RETRY_S if budget_s is None else budget_s
    deadline = time.monotonic() + budget
    pause, longest = API_BACKOFF_S
    while True:
        try:
            return fn()
        except Exception as ex:  # noqa: BLE001 - classified below; anything else is raised as it was
            asked = transient_wait(ex)
            if asked is None:
                raise
            wait = max(asked, pause * random.uniform(0.5, 1.0))
            if time.monotonic() + wait > deadline:
                raise
            print(f"trainstack commander: {what}: {type(ex).__name__}: {ex}; retrying in {wait:.1f} s", flush=True)
            sleep(wait)
            pause = min(pause * 2, longest)


def free_gpus(node: Any) -> int:
    """GPUs of a node free to rent now (`available_gpu_count`; the whole node when the API omits it)."""
    avail = getattr(node, "available_gpu_count", None)
    return int(node.gpu_count if avail is None else avail)


def pod_name(run_id: str, epoch: int) -> str:
    """`ts-<run_id>-<hash>-e<epoch>`: readable in `lium ps`, unique per (run, epoch), < 64 chars."""
    digest = hashlib.sha1(run_id.encode()).hexdigest()[:6]
    return f"ts-{run_id[:40]}-{digest}-e{epoch}"


def idempotency_key(run_id: str, epoch: int) -> str:
    """One key per (run, epoch): a retried rent (or one after a commander restart) makes no second pod."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"trainstack:{run_id}:{epoch}"))


class LiumProvider:
    """The Lium SDK, configured from the environment (LIUM_API_KEY, LIUM_BASE_URL, LIUM_SSH_KEY_PATH)."""

    def _lium(self):
        from lium import Lium

        return Lium()

    @staticmethod
    def _info(lium, pod_id: str):
        for p in with_backoff(lium.ps, "list pods"):
            if p.id == pod_id:
                return p
        from lium.sdk.exceptions import LiumNotFoundError

        raise LiumNotFoundError(f"pod {pod_id} is not listed")

    # ---------------------------------------------------------------- nodes, volumes, pods
    def choose_node(self, lium, req: PodRequest, exclude: frozenset[str] = frozenset()):
        if req.executor_id:
            node = lium.get_executor(req.executor_id)
            if node is None:
                raise NoNode(f"executor {req.executor_id} is not listed")
            return node
        nodes = [n for n in lium.ls(gpu_type=req.gpu_type) if n.id not in exclude and free_gpus(n) >= req.gpu_count
                 and not (n.whole_host_only and free_gpus(n) < n.gpu_count)]
        if req.max_price_per_hour is not None:
            nodes = [n for n in nodes if n.price_per_hour <= req.max_price_per_hour]
        if req.countries:
            wanted = {c.upper() for c in req.countries}
            nodes = [n for n in nodes if str((n.location or {}).get("country", "")).upper() in wanted]
        if not nodes:
            raise NoNode(f"no node with {req.gpu_count}x {req.gpu_type or 'any GPU'}"
                         + (f" at <= ${req.max_price_per_hour}/h" if req.max_price_per_hour is not None else "")
                         + (f" in {','.join(req.countries)}" if req.countries else ""))
        return min(nodes, key=lambda n: (n.price_per_gpu * req.gpu_count if not n.whole_host_only
                                          else n.price_per_hour, n.id))

    def ensure_volume(self, name: str) -> str:
        def once() -> str:  # listed first: a create whose answer was lost made it already
            with self._lium() as lium:
                for v in lium.volumes():
                    if v.name == name:
                        return v.id
                return lium.volume_create(name, description="trainstack run volume").id

        return with_backoff(once, f"volume {name}")

    def delete_volume(self, volume_id: str) -> None:
        """Delete a volume (its data is gone); one already gone is fine."""
        from lium.sdk.exceptions import LiumNotFoundError

        def once() -> None:
            with self._lium() as lium:
                try:
                    lium.volume_delete(volume_id)
                except LiumNotFoundError:
                    return

        with_backoff(once, f"delete volume {volume_id}")

    def rent(self, req: PodRequest, name: str, key: str, volume_id: str | None) -> PodRef:
        """Rent on the cheapest matching node; retried on transient API failures with the same idempotency key
        (and the SDK finds a pod of that name first), so a retry never makes a second pod."""
        return with_backoff(lambda: self._rent_once(req, name, key, volume_id), f"rent {name}")

    def _rent_once(self, req: PodRequest, name: str, key: str, volume_id: str | None) -> PodRef:
        with self._lium() as lium:
            exclude: set[str] = set()
            while True:
                node = self.choose_node(lium, req, frozenset(exclude))
                try:
                    return self._rent_on(lium, node, req, name, key, volume_id)
                except Exception as ex:
                    # another rent (another run's) took the node's GPUs since it was listed: try the next node
                    # (the same idempotency key: a pod our failed call made after all is found, not doubled)
                    if transient_wait(ex) is not None or req.executor_id or len(exclude) >= 8 or \
                            not self._taken(lium, node.id, req.gpu_count):
                        raise
                    exclude.add(node.id)

    @staticmethod
    def _taken(lium, node_id: str, gpus: int) -> bool:
        try:
            now = lium.get_executor(node_id)
        except Exception:  # noqa: BLE001 - cannot tell: the rent's own error is the one to report
            return False
        return now is None or free_gpus(now) < gpus

    @staticmethod
    def _rent_on(lium, node, req: PodRequest, name: str, key: str, volume_id: str | None) -> PodRef:
        # exactly the GPUs the run's argv uses (cluster.gpus_per_node): without a count Lium gives every
        # GPU free on the node, which on a partly rented node can be fewer; a whole-only node takes all
        count = None if node.whole_host_only else req.gpu_count
        created = lium.up(executor_id=node.id, name=name, template_id=req.template_id, image=req.image,
                          volume_id=volume_id, idempotency_key=key, enable_backups=False,
                          termination_hours=req.termination_hours, gpu_count=count)
        price = float(node.price_per_gpu) * count if count else float(node.price_per_hour)
        return PodRef(id=str(created["id"]), name=name, price_per_hour=round(price, 6))

    def wait_ready(self, pod_id: str, timeout: float) -> bool:
        end = time.monotonic() + timeout

        def once() -> bool:
            with self._lium() as lium:
                return lium.wait_ready(pod_id, timeout=int(max(1, end - time.monotonic()))) is not None

        return with_backoff(once, f"wait for pod {pod_id}", budget_s=max(1.0, timeout))

    _quiet_until = 0.0  # monotonic time before which the listing is not asked again (a 429's Retry-After)

    def list_pods(self) -> dict[str, PodRef]:
        """The pods listed now. Never retried in place (the reconciler's tick must not stall: a failed listing
        decides nothing, and the next comes a probe interval later); after a 429 no listing is sent before
        its Retry-After has passed."""
        from lium.sdk.exceptions import LiumRateLimitError

        wait = self._quiet_until - time.monotonic()
        if wait > 0:
            raise RuntimeError(f"Lium asked us to wait {wait:.1f} s more before listing pods again (Retry-After)")
        try:
            with self._lium() as lium:
                return {p.id: PodRef(p.id, p.name, status=(p.status or "").upper()) for p in lium.ps()}
        except LiumRateLimitError as ex:
            self._quiet_until = time.monotonic() + float(ex.retry_after or API_BACKOFF_S[0])
            raise

    def remove(self, pod_id: str) -> None:
        """Remove the pod (billing stops); retried on transient failures: a pod left billing is money."""
        from lium.sdk.exceptions import LiumNotFoundError

        def once() -> None:
            with self._lium() as lium:
                try:
                    lium.rm(self._info(lium, pod_id))
                except LiumNotFoundError:
                    return

        with_backoff(once, f"remove pod {pod_id}", budget_s=30.0)  # in the reconciler's tick: bounded

    # ---------------------------------------------------------------- on a pod
    def put_file(self, pod_id: str, remote: str, data: bytes) -> None:
        """Write a file on the pod: upload next to it, then rename (a reader never sees half)."""
        with self._lium() as lium, tempfile.TemporaryDirectory() as tmp:
            pod = self._info(lium, pod_id)
            local = Path(tmp) / posixpath.basename(remote)
            local.write_bytes(data)
            partial = f"{remote}.upload"
            mk = lium.exec(pod, command=f"mkdir -p {shlex.quote(posixpath.dirname(remote))}", timeout=60)
            if mk["exit_code"] != 0:
                raise RuntimeError(f"mkdir on pod {pod_id} failed: {mk['stderr'].strip()}")
            lium.upload(pod, local=str(local), remote=partial)
            mv = lium.exec(pod, command=f"mv -f {shlex.quote(partial)} {shlex.quote(remote)}", timeout=60)
            if mv["exit_code"] != 0:
                raise RuntimeError(f"rename on pod {pod_id} failed: {mv['stderr'].strip()}")

    def start(self, pod_id: str, argv: list[str], env: dict[str, str], log_path: str) -> int:
        """Start argv detached (setsid, survives the SSH session); env goes over stdin, not argv."""
        with self._lium() as lium:
            pod = self._info(lium, pod_id)
            out = lium.exec(pod, command=shlex.join(argv), env=env, detach=True, log_path=log_path, timeout=60)
            return int(out["pid"])

    def image_problem(self, pod_id: str, python: str) -> str | None:
        """Why the pod's image cannot run the worker (no trainstack for `python`, no `trainstack` command), or
        None. A stock image (a template without trainstack) is found here, before the worker is started."""
        q = shlex.quote(python)
        probe = (f"{q} -c 'import trainstack.launch.lium_worker' 2>/dev/null && exit 0; command -v trainstack >/dev/null && exit 0; "
                 f"echo \"$({q} --version 2>&1 | head -c 200)\"; exit 3")
        with self._lium() as lium:
            out = lium.exec(self._info(lium, pod_id), command=probe, timeout=120)
        if out["exit_code"] == 0:
            return None
        return (f"the pod's image has no trainstack ({python} cannot import it: {out['stdout'].strip() or 'no python'}; "
                f"no trainstack command)")

    def read(self, pod_id: str, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes | None:
        """Bytes of a file on the pod from `offset` (None when the file does not exist)."""
        with self._lium() as lium:
            pod = self._info(lium, pod_id)
            q = shlex.quote(path)
            out = lium.exec(pod, command=f"test -f {q} || exit 3; tail -c +{int(offset) + 1} {q} | head -c {int(limit)}",
                            timeout=60)
            if out["exit_code"] == 3:
                return None
            return out["stdout"].encode()
