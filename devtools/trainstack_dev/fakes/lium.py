"""A local fake of the Lium REST API (lium.io 0.32), for tests and for trying the Lium flow offline.

The real `lium.io` SDK and CLI talk to it unchanged (`LIUM_BASE_URL`, `LIUM_API_KEY`): the
endpoints below are the ones they call for nodes, SSH keys, templates, renting (with
`Idempotency-Key`), pods and volumes, with `X-API-KEY` auth on every one (401 otherwise). Each
rented pod is a loopback sshd in its own namespaces (devtools/trainstack_dev/fakes/lium_pods.py); each volume
a directory that the pod attaching it sees at `/mnt`. Renting is billed like the service: a
pod's `price` is dollars per hour of its executor, until it is removed.

Fault injection (the `/_fake/...` admin endpoints, same key; or the `FakeLium` methods in-process):
kill a pod (its sshd and every process started through it; the pod then disappears from the
listing or shows FAILED), freeze/thaw it (SIGSTOP/SIGCONT of all its processes), a removal that
leaves the pod's processes running (a node the platform lost contact with), the next rents
failing with 5xx or 429 (before or after creating the pod), pods that never become ready, slow pods,
pods left out of listings, 429 (with Retry-After) / 5xx answers on any route (`faults.api`), and no
capacity (`faults.sold_out_until`: every node lists 0 free GPUs and refuses rents).
As on the service: a rented GPU is not rentable (`available_gpu_count`); `termination_hours` removes
the pod that long after the rent (`hour_s` seconds an hour, so tests can wait for it); `image=`
rents make a one-time template (`POST /templates`), deleted with its pod.

    python -m trainstack_dev.fakes.lium serve --root DIR [--port 0] [--api-key KEY]
    scripts/lium-local.sh up|down|status
"""
from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import secrets
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urlparse

from trainstack_dev.fakes.lium_pods import PodProcess, free_port, has_trainstack, image_bin, missing_requirements

DEFAULT_API_KEY = "fake-lium-key"
USER_ID = "00000000-0000-4000-8000-000000000001"


def _now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def default_executors() -> list[dict[str, Any]]:
    """Two 8xH100 nodes (two countries, two prices) and two cheap 1-GPU nodes (for lium_cpu)."""
    def node(uid: str, machine: str, count: int, price: float, country: str) -> dict[str, Any]:
        return {"id": uid, "machine_name": machine, "gpu_count": count, "price_per_gpu": price,
                "executor_ip_address": "127.0.0.1", "status": "available", "location": {"country": country},
                "specs": {"gpu": {"count": count, "details": [{"name": machine, "capacity": 81559}] * count},
                          "cpu": {"count": 16 * count}, "ram": {"total": 128 * 1024 * count},
                          "available_port_count": 20},
                "max_cuda_version": 12.8, "available_gpu_count": count, "min_gpu_count_for_rental": 1}
    return [node("6f0c5a7e-0d4f-4a53-9a55-8f0f8b2a0001", "NVIDIA H100 80GB HBM3", 8, 2.10, "US"),
            node("6f0c5a7e-0d4f-4a53-9a55-8f0f8b2a0002", "NVIDIA H100 80GB HBM3", 8, 1.95, "DE"),
            node("6f0c5a7e-0d4f-4a53-9a55-8f0f8b2a0003", "NVIDIA GeForce RTX 4090", 1, 0.30, "US"),
            node("6f0c5a7e-0d4f-4a53-9a55-8f0f8b2a0004", "NVIDIA GeForce RTX 4090", 1, 0.35, "CA")]


def default_templates() -> list[dict[str, Any]]:
    return [{"id": "7a1f0000-0000-4000-8000-000000000001", "name": "PyTorch 2.8 (CUDA 12.8)",
             "docker_image": "pytorch/pytorch", "docker_image_tag": "2.8.0-cuda12.8-cudnn9-devel",
             "category": "PYTORCH", "status": "VERIFY_SUCCESS", "user_id": None, "is_private": False,
             "supports_volume_encryption": False, "volumes": ["/workspace"], "internal_ports": [22]}]


@dataclass
class Faults:
    """What goes wrong next (each list is consumed front first)."""

    rent: list[dict[str, Any]] = field(default_factory=list)  # {"status": 503|429, "after_create": bool}
    never_ready: int = 0  # the next N pods never leave PENDING
    ready_delay_s: float = 0.0  # extra seconds before a pod is RUNNING (slow pods)
    delete_leaves_running: int = 0  # the next N removals drop the pod from the API but leave it running
    omit_from_listing: dict[str, int] = field(default_factory=dict)  # pod id or name -> next N GET /pods omit it
    # any route: {"status": 429|5xx, "times": N, "retry_after": s, "method": "GET", "path": "regex"} (the next N
    # requests that match answer that status, before doing anything; method/path default: every route)
    api: list[dict[str, Any]] = field(default_factory=list)
    sold_out_until: float = 0.0  # epoch seconds: until then every node lists 0 free GPUs and refuses rents (capacity)


@dataclass
class FakePod:
    id: str
    name: str
    executor: dict[str, Any]
    template_id: str | None
    volume_id: str | None
    keys: list[str]
    created_at: str
    created_ts: float
    gpu_count: int
    process: PodProcess | None = None
    status: str = "PENDING"
    ready_after: float = 0.0
    never_ready: bool = False
    failed: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    removal_at: float | None = None  # epoch seconds: the service removes the pod then (termination_hours)

    @property
    def price(self) -> float:
        return round(float(self.executor["price_per_gpu"]) * self.gpu_count, 4)

    def row(self) -> dict[str, Any]:
        ready = self.status == "RUNNING" and self.process is not None
        return {"id": self.id, "pod_name": self.name, "status": self.status,
                "ssh_connect_cmd": f"ssh root@127.0.0.1 -p {self.process.port}" if ready and self.process else None,
                "ports_mapping": {"22": self.process.port} if ready and self.process else {},
                "created_at": self.created_at, "updated_at": self.created_at,
                "executor": {k: v for k, v in self.executor.items() if k != "price_per_gpu"},
                "template": {"id": self.template_id}, "price": self.price, "gpu_count": self.gpu_count,
                "volume_id": self.volume_id, "removal_scheduled_at": None if self.removal_at is None else
                _dt.datetime.fromtimestamp(self.removal_at, _dt.timezone.utc).isoformat(timespec="seconds")}


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None, code: str | None = None):
        super().__init__(message)
        self.status, self.message, self.headers, self.code = status, message, headers or {}, code


class FakeLium:
    """The fake's state and behaviour; `serve()` puts it behind HTTP."""

    def __init__(self, root: str | Path, api_key: str = DEFAULT_API_KEY, python: str | None = None,
                 executors: list[dict[str, Any]] | None = None, hour_s: float = 3600.0):
        problem = missing_requirements()
        if problem:
            raise RuntimeError(problem)
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.api_key = api_key
        self.python = python or sys.executable
        self.executors = executors or default_executors()
        self.templates = default_templates()
        self.hour_s = float(hour_s)  # seconds in a `termination_hours` hour (tests shrink it)
        self.ssh_keys: list[dict[str, Any]] = []
        self.pods: dict[str, FakePod] = {}
        self.volumes: dict[str, dict[str, Any]] = {}
        self.idempotency: dict[str, str] = {}  # Idempotency-Key -> pod id
        self.faults = Faults()
        self.requests: list[dict[str, Any]] = []  # method, path, query, body (no key)
        self.removed: list[dict[str, Any]] = []  # pods removed, with their lifetime (billing)
        self.lingering: list[PodProcess] = []  # removed from the API but still running (fault)
        self.lock = threading.RLock()
        self._ports_taken: set[int] = set()
        self._image: Path | None = None
        self._stop = threading.Event()
        self._watch = threading.Thread(target=self._watch_pods, name="fake-lium-pods", daemon=True)
        self._watch.start()
        # Pods are started from this one long-lived thread: PR_SET_PDEATHSIG fires when the thread
        # that forked the pod exits, and HTTP handler threads exit after each request.
        from concurrent.futures import ThreadPoolExecutor

        self._spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="fake-lium-spawn")
        self.server: ThreadingHTTPServer | None = None

    # ---------------------------------------------------------------- lifecycle of the fake
    @property
    def image(self) -> Path:
        with self.lock:
            if self._image is None:
                self._image = image_bin(self.root, self.python)
            return self._image

    def image_of(self, pod: FakePod) -> Path:
        """The pod's image: trainstack's (`.../trainstack...` images) or a stock one without it (Lium's
        default PyTorch template: what `template_id: null` rents)."""
        with self.lock:
            tpl = next((t for t in self.templates if t["id"] == pod.template_id), None)
        if tpl is None or not has_trainstack(str(tpl.get("docker_image") or "")):
            return image_bin(self.root, self.python, trainstack=False)
        return self.image

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Start the HTTP server in a thread; returns the base URL (what LIUM_BASE_URL takes)."""
        fake = self

        class Handler(_Handler):
            pass

        Handler.fake = fake
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="fake-lium-http", daemon=True).start()
        return self.url

    @property
    def url(self) -> str:
        assert self.server is not None
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def close(self) -> None:
        """Stop serving and kill every pod (listed or lingering)."""
        self._stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        with self.lock:
            procs = [p.process for p in self.pods.values() if p.process] + self.lingering
            self.pods.clear()
            self.lingering = []
        for proc in procs:
            proc.kill()
        self._spawner.shutdown(wait=False)

    # ---------------------------------------------------------------- what tests look at
    def live_pods(self) -> list[FakePod]:
        """Pods the API lists that have not failed (what a user would still be billed for)."""
        with self.lock:
            return list(self.pods.values())

    def running_processes(self) -> list[int]:
        """Host PIDs of every process in every pod, listed or lingering (0 = nothing left anywhere)."""
        with self.lock:
            procs = [p.process for p in self.pods.values() if p.process] + list(self.lingering)
        return [pid for proc in procs for pid in proc.pids()]

    def pod_by_name(self, name: str) -> FakePod | None:
        with self.lock:
            return next((p for p in self.pods.values() if p.name == name), None)

    def volume_dir(self, volume_id: str) -> Path:
        return self.root / "volumes" / volume_id

    # ---------------------------------------------------------------- fault injection
    def kill_pod(self, pod_id: str, listed: str = "gone") -> dict[str, Any]:
        """The node died: every process of the pod is killed; the pod is then not listed
        (`listed="gone"`) or listed as FAILED (`"failed"`)."""
        with self.lock:
            pod = self._pod(pod_id)
            if listed == "gone":
                self._forget(pod, reason="node lost")
            else:
                pod.status, pod.failed = "FAILED", True
                pod.events.append({"error": "node lost", "at": _now_iso()})
        if pod.process is not None:
            pod.process.kill()
        return {"killed": pod_id, "listed": listed}

    def freeze_pod(self, pod_id: str) -> int:
        with self.lock:
            proc = self._process_of(pod_id)
        return proc.freeze()

    def thaw_pod(self, pod_id: str) -> int:
        with self.lock:
            proc = self._process_of(pod_id)
        return proc.thaw()

    def set_faults(self, **changes: Any) -> Faults:
        with self.lock:
            for k, v in changes.items():
                if not hasattr(self.faults, k):
                    raise ApiError(400, f"unknown fault {k!r}")
                setattr(self.faults, k, v)
            return self.faults

    def _process_of(self, pod_id: str) -> PodProcess:
        pod = self.pods.get(pod_id)
        if pod is not None and pod.process is not None:
            return pod.process
        for proc in self.lingering:
            if proc.pod_id == pod_id:
                return proc
        raise ApiError(404, f"pod {pod_id} has no processes")

    # ---------------------------------------------------------------- API operations
    def _pod(self, pod_id: str) -> FakePod:
        pod = self.pods.get(pod_id)
        if pod is None:
            raise ApiError(404, f"Pod {pod_id} not found")
        return pod

    def _free_gpus(self, executor: dict[str, Any]) -> int:
        """GPUs of the node no live pod holds: a rented GPU is not rentable (GPU splitting)."""
        if time.time() < self.faults.sold_out_until:  # capacity refusal: everything is rented by others
            return 0
        with self.lock:
            used = sum(p.gpu_count for p in self.pods.values() if p.executor["id"] == executor["id"] and not p.failed)
        return max(0, int(executor["gpu_count"]) - used)

    def _listed(self, executor: dict[str, Any]) -> dict[str, Any]:
        return {**executor, "available_gpu_count": self._free_gpus(executor)}

    def _executor(self, executor_id: str) -> dict[str, Any]:
        for e in self.executors:
            if e["id"] == executor_id:
                return self._listed(e)
        raise ApiError(404, f"Executor {executor_id} not found")

    def list_executors(self, query: dict[str, list[str]]) -> list[dict[str, Any]]:
        out = [self._listed(e) for e in self.executors]
        names = (query.get("machine_names") or [""])[0]
        if names:
            wanted = set(names.split(","))
            out = [e for e in out if e["machine_name"] in wanted]
        if query.get("gpu_count_gte"):
            out = [e for e in out if e["gpu_count"] >= int(query["gpu_count_gte"][0])]
        if query.get("gpu_count_lte"):
            out = [e for e in out if e["gpu_count"] <= int(query["gpu_count_lte"][0])]
        return out

    def rent(self, executor_id: str, body: dict[str, Any], idem_key: str | None) -> tuple[dict[str, Any], dict]:
        with self.lock:
            executor = self._executor(executor_id)
            if idem_key and idem_key in self.idempotency:
                return {"success": True, "pod_id": self.idempotency[idem_key]}, {"Idempotent-Replayed": "true"}
            fault = self.faults.rent.pop(0) if self.faults.rent else None
            if fault and not fault.get("after_create"):
                raise _fault_error(fault)
            keys = body.get("user_public_key") or []
            if not keys:
                raise ApiError(400, "user_public_key is required")
            volume_id = body.get("volume_id")
            if volume_id:
                if volume_id not in self.volumes:
                    raise ApiError(404, f"Volume {volume_id} not found")
                holder = next((p for p in self.pods.values() if p.volume_id == volume_id and not p.failed), None)
                if holder is not None:
                    raise ApiError(409, f"Volume {volume_id} is attached to pod {holder.id}", code="volume_in_use")
            template_id = body.get("template_id")
            if template_id and not any(t["id"] == template_id for t in self.templates):
                raise ApiError(404, f"Template {template_id} not found")
            hours = body.get("termination_hours")
            if hours is not None and (not isinstance(hours, int) or isinstance(hours, bool) or not 1 <= hours <= 720):
                raise ApiError(422, f"termination_hours must be an integer from 1 to 720, got {hours!r}")
            pod_id = str(uuid.uuid4())
            free = int(executor["available_gpu_count"])
            gpu_count = int(body.get("gpu_count") or free)  # no count: every GPU free now, as on the service
            if free < 1 or gpu_count > free:
                raise ApiError(400, f"Executor {executor_id} has {free} free GPUs; {gpu_count} requested",
                               code="insufficient_gpus")
            if gpu_count < executor["gpu_count"] and executor.get("min_gpu_count_for_rental") is None:
                raise ApiError(400, f"Executor {executor_id} rents whole only ({executor['gpu_count']} GPUs)")
            pod = FakePod(id=pod_id, name=str(body.get("pod_name") or "Your Pod"), executor=executor,
                          template_id=template_id, volume_id=volume_id, keys=list(keys), created_at=_now_iso(),
                          created_ts=time.time(), gpu_count=gpu_count,
                          ready_after=time.monotonic() + float(self.faults.ready_delay_s),
                          removal_at=None if hours is None else time.time() + hours * self.hour_s)
            if self.faults.never_ready > 0:
                self.faults.never_ready -= 1
                pod.never_ready = True
            self.pods[pod_id] = pod
            if idem_key:
                self.idempotency[idem_key] = pod_id
            pod.events.append({"event": "created", "at": pod.created_at})
        if not pod.never_ready:  # the pod boots in the background, as on the service: PENDING until sshd answers
            threading.Thread(target=self._start, args=(pod,), name=f"fake-lium-boot-{pod_id[:8]}", daemon=True).start()
        if fault:  # the pod exists, but the answer is lost
            raise _fault_error(fault)
        return {"success": True, "pod_id": pod_id}, {}

    def _start(self, pod: FakePod) -> None:
        try:
            self._boot(pod)
        except Exception as ex:  # noqa: BLE001 - a pod that cannot boot is FAILED, with the reason
            with self.lock:
                pod.status, pod.failed = "FAILED", True
                pod.events.append({"error": f"boot failed: {ex!r}", "at": _now_iso()})
            print(f"fake lium: pod {pod.id} failed to boot: {ex!r}", file=sys.stderr, flush=True)

    def _boot(self, pod: FakePod) -> None:
        vol = self.volume_dir(pod.volume_id) if pod.volume_id else None
        for _attempt in range(3):
            with self.lock:  # never hand one port to two pods (free_port only says it is free now)
                used = {p.process.port for p in self.pods.values() if p.process} | {p.port for p in self.lingering}
                port = free_port()
                while port in used or port in self._ports_taken:
                    port = free_port()
                self._ports_taken.add(port)
            proc = PodProcess(pod.id, self.root / "pods" / pod.id, port, vol)
            self._spawner.submit(proc.start, pod.keys, self.image_of(pod)).result()
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and proc.alive() and not proc.answers():
                time.sleep(0.05)
            time.sleep(0.1)  # an sshd that lost the port to another server exits right after binding fails
            if proc.alive() and proc.answers():
                with self.lock:
                    pod.process = proc
                return
            proc.kill()  # port taken meanwhile, or sshd refused its config: try another port
        with self.lock:
            pod.status, pod.failed = "FAILED", True
            pod.events.append({"error": f"sshd did not start; see {proc.log}", "at": _now_iso()})

    def _watch_pods(self) -> None:
        """PENDING -> RUNNING once sshd answers (and the slow-pod delay passed); a pod whose
        sshd died on its own is FAILED."""
        while not self._stop.wait(0.1):
            with self.lock:
                pods = list(self.pods.values())
            for pod in pods:
                if pod.removal_at is not None and time.time() >= pod.removal_at and pod.id in self.pods:
                    self._remove(pod, reason="scheduled removal (termination_hours)")
                    continue
                if pod.failed or pod.never_ready or pod.process is None or pod.id not in self.pods:
                    continue
                if pod.status == "PENDING" and time.monotonic() >= pod.ready_after and pod.process.answers():
                    pod.status = "RUNNING"
                    pod.events.append({"event": "running", "at": _now_iso()})
                elif pod.status in ("PENDING", "RUNNING") and not pod.process.alive():
                    pod.status, pod.failed = "FAILED", True
                    pod.events.append({"error": "container exited", "at": _now_iso()})

    def _forget(self, pod: FakePod, reason: str) -> None:
        self.pods.pop(pod.id, None)
        self.templates = [t for t in self.templates if not (t.get("one_time_template") and t["id"] == pod.template_id
                                                            and not any(p.template_id == t["id"] for p in self.pods.values()))]
        self.removed.append({"id": pod.id, "name": pod.name, "price": pod.price, "created": pod.created_ts,
                             "removed": time.time(), "reason": reason})

    def list_pods(self) -> list[dict[str, Any]]:
        """GET /pods; a pod named in `faults.omit_from_listing` is left out of that many answers (a
        listing glitch: the pod and its processes are untouched)."""
        out = []
        with self.lock:
            omit = self.faults.omit_from_listing
            for p in self.live_pods():
                key = p.id if omit.get(p.id, 0) > 0 else p.name if omit.get(p.name, 0) > 0 else None
                if key is None:
                    out.append(p.row())
                    continue
                omit[key] -= 1
                if omit[key] <= 0:
                    del omit[key]
        return out

    def delete_pod(self, pod_id: str) -> dict[str, Any]:
        with self.lock:
            pod = self._pod(pod_id)
        self._remove(pod, reason="removed")
        return {"success": True, "message": f"Pod {pod_id} removed"}

    def _remove(self, pod: FakePod, reason: str) -> None:
        with self.lock:
            if pod.id not in self.pods:
                return
            self._forget(pod, reason=reason)
            linger = self.faults.delete_leaves_running > 0 and pod.process is not None
            if linger:
                self.faults.delete_leaves_running -= 1
                assert pod.process is not None
                self.lingering.append(pod.process)
        if pod.process is not None and not linger:
            pod.process.kill()

    def schedule_removal(self, pod_id: str, body: dict[str, Any] | None) -> dict[str, Any]:
        """POST /pods/{id}/schedule-removal (`removal_scheduled_at`, ISO 8601); DELETE cancels it."""
        with self.lock:
            pod = self._pod(pod_id)
            if body is None:
                pod.removal_at = None
                return {"success": True}
            at = str(body.get("removal_scheduled_at") or "")
            try:
                when = _dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
            except ValueError:
                raise ApiError(422, f"removal_scheduled_at is not an ISO 8601 time: {at!r}") from None
            pod.removal_at = when
            return {"success": True, "removal_scheduled_at": at}

    def create_template(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST /templates as lium.io 0.32's `create_template` sends it (`up(image=...)` makes a private
        one-time template with port 22; it is deleted with the last pod that uses it)."""
        image = str(body.get("docker_image") or "")
        if not image or not str(body.get("name") or ""):
            raise ApiError(422, "name and docker_image are required")
        name, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "")
        row = {"id": str(uuid.uuid4()), "name": str(body["name"]), "docker_image": name or image,
               "docker_image_tag": str(body.get("docker_image_tag") or tag or "latest"),
               "docker_image_digest": str(body.get("docker_image_digest") or ""),
               "category": str(body.get("category") or "UBUNTU"), "status": "VERIFY_SUCCESS", "user_id": USER_ID,
               "is_private": bool(body.get("is_private", True)), "one_time_template": bool(body.get("one_time_template")),
               "internal_ports": list(body.get("internal_ports") or [22]), "volumes": list(body.get("volumes") or []),
               "startup_commands": str(body.get("startup_commands") or ""), "supports_volume_encryption": False}
        with self.lock:
            self.templates.append(row)
        return row

    def delete_template(self, tid: str) -> dict[str, Any]:
        with self.lock:
            if not any(t["id"] == tid for t in self.templates):
                raise ApiError(404, f"Template {tid} not found")
            if any(p.template_id == tid for p in self.pods.values()):
                raise ApiError(409, f"Template {tid} is used by a pod")
            self.templates = [t for t in self.templates if t["id"] != tid]
        return {"success": True}

    def _injected(self, method: str, path: str) -> ApiError | None:
        """The next `faults.api` entry matching this request, consumed (429 with Retry-After, 5xx)."""
        with self.lock:
            for f in self.faults.api:
                if f.get("times", 1) <= 0:
                    continue
                if f.get("method") and f["method"].upper() != method:
                    continue
                if f.get("path") and not re.search(f["path"], path):
                    continue
                f["times"] = f.get("times", 1) - 1
                self.faults.api = [g for g in self.faults.api if g.get("times", 1) > 0]
                return _fault_error(f)
        return None

    def create_volume(self, body: dict[str, Any]) -> dict[str, Any]:
        name = str(body.get("name") or "")
        if not name:
            raise ApiError(422, "name is required")
        vid = str(uuid.uuid4())
        self.volume_dir(vid).mkdir(parents=True, exist_ok=True)
        vol = {"id": vid, "name": name, "description": str(body.get("description") or ""), "created_at": _now_iso(),
               "updated_at": None, "current_size_bytes": 0, "current_file_count": 0, "current_size_gb": 0.0,
               "current_size_mb": 0.0}
        with self.lock:
            self.volumes[vid] = vol
        return vol

    def delete_volume(self, vid: str) -> dict[str, Any]:
        with self.lock:
            if vid not in self.volumes:
                raise ApiError(404, f"Volume {vid} not found")
            if any(p.volume_id == vid for p in self.pods.values()):
                raise ApiError(409, f"Volume {vid} is attached to a pod", code="volume_in_use")
            self.volumes.pop(vid)
        import shutil

        shutil.rmtree(self.volume_dir(vid), ignore_errors=True)
        return {"success": True}

    # ---------------------------------------------------------------- routing
    def route(self, method: str, path: str, query: dict[str, list[str]], body: Any,
              headers: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"]:
            parts = parts[1:]
        key = headers.get("x-api-key", "")
        if not secrets.compare_digest(key.encode(), self.api_key.encode()):
            raise ApiError(401, "Invalid API key")
        with self.lock:
            self.requests.append({"method": method, "path": "/" + "/".join(parts), "query": query, "body": body,
                                  "idempotency_key": headers.get("idempotency-key"), "time": time.time()})
        if parts[:1] != ["_fake"]:
            injected = self._injected(method, "/".join(parts))
            if injected is not None:
                with self.lock:
                    self.requests[-1]["injected"] = injected.status
                raise injected
        for (m, pattern), handler in self._routes().items():
            if m != method:
                continue
            match = re.fullmatch(pattern, "/".join(parts))
            if match:
                out = handler(*match.groups(), query=query, body=body, headers=headers)
                if isinstance(out, tuple):
                    return 200, out[0], out[1]
                return 200, out, {}
        raise ApiError(404, f"No route {method} /{'/'.join(parts)}")

    def _routes(self) -> dict[tuple[str, str], Callable[..., Any]]:
        ID = r"([A-Za-z0-9-]+)"
        return {
            ("GET", "version"): lambda **_: {"version": "fake", "features": []},
            ("GET", "users/me"): lambda **_: {"id": USER_ID, "email": "fake@lium.local", "balance": 1000.0},
            ("GET", "executors"): lambda query, **_: self.list_executors(query),
            ("GET", "machines"): lambda **_: [{"name": n} for n in sorted({e["machine_name"] for e in self.executors})],
            ("GET", "executors/default-docker-image"): lambda **_: [
                {"docker_image": t["docker_image"], "docker_image_tag": t["docker_image_tag"]} for t in self.templates],
            ("GET", "executors/deployment-estimate"): lambda **_: _raise(ApiError(404, "no estimate")),
            ("GET", f"executors/{ID}"): lambda eid, **_: self._executor(eid),
            ("POST", f"executors/{ID}/rent"): lambda eid, body, headers, **_: self.rent(
                eid, body or {}, headers.get("idempotency-key")),
            ("GET", "ssh-keys"): lambda **_: list(self.ssh_keys),
            ("POST", "ssh-keys"): lambda body, **_: self._add_key(body or {}),
            ("GET", "templates"): lambda **_: list(self.templates),
            ("POST", "templates"): lambda body, **_: self.create_template(body or {}),
            ("DELETE", f"templates/{ID}"): lambda tid, **_: self.delete_template(tid),
            ("POST", f"pods/{ID}/schedule-removal"): lambda pid, body, **_: self.schedule_removal(pid, body or {}),
            ("DELETE", f"pods/{ID}/schedule-removal"): lambda pid, **_: self.schedule_removal(pid, None),
            ("GET", f"templates/{ID}"): lambda tid, **_: next(
                (t for t in self.templates if t["id"] == tid), None) or _raise(ApiError(404, "template not found")),
            ("GET", "pods"): lambda **_: self.list_pods(),
            ("GET", f"pods/{ID}"): lambda pid, **_: self._pod(pid).row(),
            ("GET", f"pods/{ID}/events"): lambda pid, **_: list(self._pod(pid).events),
            ("DELETE", f"pods/{ID}"): lambda pid, **_: self.delete_pod(pid),
            ("GET", "volumes"): lambda **_: list(self.volumes.values()),
            ("POST", "volumes"): lambda body, **_: self.create_volume(body or {}),
            ("GET", f"volumes/{ID}"): lambda vid, **_: self.volumes.get(vid) or _raise(ApiError(404, "volume not found")),
            ("DELETE", f"volumes/{ID}"): lambda vid, **_: self.delete_volume(vid),
            # admin (fault injection and inspection)
            ("GET", "_fake/state"): lambda **_: self.state(),
            ("GET", "_fake/requests"): lambda **_: list(self.requests),
            ("POST", "_fake/faults"): lambda body, **_: self.set_faults(**(body or {})).__dict__,
            ("POST", f"_fake/pods/{ID}/kill"): lambda pid, body, **_: self.kill_pod(
                pid, (body or {}).get("listed", "gone")),
            ("POST", f"_fake/pods/{ID}/freeze"): lambda pid, **_: {"stopped": self.freeze_pod(pid)},
            ("POST", f"_fake/pods/{ID}/thaw"): lambda pid, **_: {"continued": self.thaw_pod(pid)},
        }

    def _add_key(self, body: dict[str, Any]) -> dict[str, Any]:
        row = {"id": str(uuid.uuid4()), "name": str(body.get("name") or ""),
               "public_key": str(body.get("public_key") or ""), "created_at": _now_iso()}
        with self.lock:
            self.ssh_keys.append(row)
        return row

    def state(self) -> dict[str, Any]:
        with self.lock:
            return {"pods": [{**p.row(), "port": p.process.port if p.process else None,
                              "workspace": str(p.process.workspace) if p.process else None} for p in self.pods.values()],
                    "volumes": {vid: str(self.volume_dir(vid)) for vid in self.volumes},
                    "removed": list(self.removed), "lingering": [p.pod_id for p in self.lingering],
                    "faults": dict(self.faults.__dict__)}


def _raise(ex: Exception) -> Any:
    raise ex


def _fault_error(fault: dict[str, Any]) -> ApiError:
    status = int(fault.get("status", 503))
    headers = {"Retry-After": str(fault["retry_after"])} if status in (429, 503) and "retry_after" in fault else {}
    return ApiError(status, "injected fault", headers)


class _Handler(BaseHTTPRequestHandler):
    fake: FakeLium
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _handle(self, method: str) -> None:
        url = urlparse(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            status, payload, extra = self.fake.route(method, url.path, parse_qs(url.query), body, headers)
        except ApiError as ex:
            status, extra = ex.status, ex.headers
            payload = {"detail": ex.message, **({"code": ex.code} if ex.code else {})}
        except Exception as ex:  # noqa: BLE001 - a fake bug is a 500 with its message, not a dead server
            status, payload, extra = 500, {"detail": f"fake error: {ex!r}"}, {}
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in extra.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def do_DELETE(self) -> None:
        self._handle("DELETE")


def client_env(url: str, api_key: str, home: str | Path | None = None,
               ssh_key: str | Path | None = None) -> dict[str, str]:
    """The environment that points the real SDK/CLI at a fake."""
    env = {"LIUM_BASE_URL": url, "LIUM_API_KEY": api_key, "LIUM_TELEMETRY": "0", "LIUM_SSH_PERSIST": "0",
           "LIUM_NONINTERACTIVE": "1"}
    if home is not None:
        env["HOME"] = str(home)
    if ssh_key is not None:
        env["LIUM_SSH_KEY_PATH"] = str(ssh_key)
    return env


def ensure_ssh_key(path: Path) -> Path:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        import subprocess

        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "trainstack-fake-lium", "-f", str(path)],
                       check=True)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainstack_dev.fakes.lium", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="serve the fake until SIGTERM; writes <root>/fake.json with the URL")
    p.add_argument("--root", required=True, help="where pods' workspaces, volumes and the SSH key live")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--api-key", default=os.environ.get("LIUM_FAKE_API_KEY") or DEFAULT_API_KEY)
    p.add_argument("--hour-s", type=float, default=3600.0, help="seconds in a termination_hours hour (default 3600)")
    ns = parser.parse_args(argv)
    import signal

    try:
        fake = FakeLium(ns.root, api_key=ns.api_key, hour_s=ns.hour_s)
    except RuntimeError as ex:
        print(f"fake lium: {ex}", file=sys.stderr)
        return 2
    url = fake.serve(ns.host, ns.port)
    key = ensure_ssh_key(Path(ns.root) / "ssh" / "id_ed25519")
    info = {"url": url, "pid": os.getpid(), "ssh_key": str(key), "root": str(fake.root), "api_key": ns.api_key}
    tmp = Path(ns.root) / ".fake.json.tmp"
    tmp.write_text(json.dumps(info))
    os.replace(tmp, Path(ns.root) / "fake.json")
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    print(f"fake lium: serving {url} (root {fake.root})", file=sys.stderr, flush=True)
    while not done.wait(1.0):
        pass
    fake.close()
    (Path(ns.root) / "fake.json").unlink(missing_ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
