"""The commander's HTTP API (FastAPI). Every endpoint needs a token (`Authorization: Bearer ...`,
compared in constant time): the admin token (the launcher, `trainstack status/cancel/logs`) or a
run's worker token (only that run's lease endpoints). Every change is committed before the answer.

Workers:   POST /v1/runs/{id}/lease/acquire | renew | report   (fenced: epoch + holder)
Admin:     POST /v1/runs (register), GET /v1/runs[?sweep=], GET /v1/runs/{id}, GET /v1/runs/{id}/events,
           GET /v1/leases, GET /v1/events, POST /v1/runs/{id}/cancel[?purge=] | pause | resume[?from_scratch=]
           (resume's body: new spend limits),
           POST /v1/runs/{id}/lease/force-release, GET /v1/runs/{id}/logs, GET /v1/runs/{id}/metrics[?offset=],
           PUT /v1/sweeps/{sweep}
"""
from __future__ import annotations

import hmac
import time
from typing import Any, Callable, Optional

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from trainstack.commander.reconciler import CommanderConfig, worker_log_path
from trainstack.commander.store import TERMINAL_PHASES, Store
from trainstack.commander.provider import PodRequest
from trainstack.fencing.fence import epoch_superseded
from trainstack.metrics import relay
from trainstack.run.rundir.progress import ReportedProgress


class Register(BaseModel):
    run_id: str = Field(min_length=1, max_length=128)
    spec: dict[str, Any]
    settings: dict[str, Any] = Field(default_factory=dict)
    sweep: Optional[str] = None
    restart_limit: int = Field(default=5, ge=0, le=1000)
    capacity_wait_s: float = Field(default=3600.0, ge=0)
    spend_limit: Optional[float] = Field(default=None, gt=0)
    sweep_spend_limit: Optional[float] = Field(default=None, gt=0)


class Acquire(BaseModel):
    epoch: int
    holder: str = Field(min_length=1, max_length=200)
    pod_id: Optional[str] = None


class Renew(BaseModel):
    epoch: int
    holder: str
    progress: dict[str, Any] = Field(default_factory=dict)
    metrics: Optional[dict[str, Any]] = None  # what the pod's metrics.jsonl gained (trainstack/metrics/relay.py)


class Report(BaseModel):
    epoch: int
    holder: str
    state: str = Field(pattern="^(finished|failed|preempted|stopped|released)$")
    exit_code: Optional[int] = None
    message: Optional[str] = Field(default=None, max_length=4000)
    progress: dict[str, Any] = Field(default_factory=dict)
    log_tail: Optional[str] = Field(default=None, max_length=70000)
    metrics: Optional[dict[str, Any]] = None


class SweepLimit(BaseModel):
    spend_limit: Optional[float] = Field(default=None, gt=0)


class Resume(BaseModel):
    """What a resume may change: the limits that paused the run (a spend-limit pause resumed with the
    same limit would pause again at once)."""

    spend_limit: Optional[float] = Field(default=None, gt=0)
    sweep_spend_limit: Optional[float] = Field(default=None, gt=0)


def _above(cost: float) -> str:
    """A limit comfortably above what was spent (what the refusal suggests)."""
    return f"{max(cost * 2, cost + 1.0):.2f}"


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode(), b.encode())


def create_app(store: Store, config: CommanderConfig, admin_token: str, worker_token: Callable[[str], str],
               reconciler: Any = None) -> FastAPI:
    app = FastAPI(title="trainstack commander", docs_url=None, redoc_url=None, openapi_url=None)

    def bearer(request: Request) -> str:
        auth = request.headers.get("authorization", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise HTTPException(401, "missing token (Authorization: Bearer ...)")
        return token

    def admin(token: str = Depends(bearer)) -> None:
        if not _same(token, admin_token):
            raise HTTPException(403, "admin token required")

    def worker_of(run_id: str, token: str = Depends(bearer)) -> None:
        if not (_same(token, worker_token(run_id)) or _same(token, admin_token)):
            raise HTTPException(403, "not a token of this run")

    def get_run(run_id: str):
        rec = store.run(run_id)
        if rec is None:
            raise HTTPException(404, f"no run {run_id}")
        return rec

    def progress_fields(progress: dict[str, Any]) -> dict[str, Any]:
        reported = ReportedProgress.from_json(progress)
        out: dict[str, Any] = {"progress": progress}
        if reported.last_checkpoint is not None:
            out["last_checkpoint"] = reported.last_checkpoint
        if reported.hub_commit:
            out["last_hub_commit"] = reported.hub_commit
        return out

    @app.exception_handler(HTTPException)
    async def _http_error(_request: Request, exc: HTTPException):
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code)

    @app.get("/v1/health", dependencies=[Depends(admin)])
    def health() -> dict[str, Any]:
        return {"ok": True, "runs": store.count(), "time": time.time()}

    # ------------------------------------------------------------------ runs (admin)
    @app.post("/v1/runs", dependencies=[Depends(admin)])
    def register(body: Register) -> dict[str, Any]:
        from trainstack import hooks

        refused = [why for check in hooks.get(hooks.REGISTER_CHECK) if (why := check(body.spec))]
        if refused:  # e.g. Hub sync with no token for the pods: every push would fail 401 (trainstack/hub)
            raise HTTPException(422, "; ".join(refused))
        now = time.time()
        settings = PodRequest.from_dict(body.settings).to_dict()
        with store.tx() as db:
            row = db.execute("SELECT phase, desired, spec FROM runs WHERE run_id=?", (body.run_id,)).fetchone()
            if row is not None and row["phase"] not in TERMINAL_PHASES:
                import json

                same = json.loads(row["spec"]) == body.spec
                if not same:
                    raise HTTPException(409, f"run {body.run_id} is active ({row['phase']}) with a different spec; "
                                             "cancel it first")
                return {"run_id": body.run_id, "registered": False, "phase": row["phase"]}
            fields: dict[str, Any] = dict(sweep=body.sweep, spec=body.spec, settings=settings, desired="running", phase="pending",
                          restarts=0, strikes=0, strike_checkpoint=None, capacity_since=None, purge=0, ended=None,
                          capacity_wait_s=body.capacity_wait_s, restart_limit=body.restart_limit, next_attempt=0.0, deadline=None,
                          spend_limit=body.spend_limit, exit_code=None, message=None, lease_holder=None,
                          lease_expires=None, pod_id=None)
            if row is None:
                import json

                db.execute("INSERT INTO runs(run_id, spec, settings, desired, phase, created, updated) "
                           "VALUES (?,?,?,?,?,?,?)", (body.run_id, json.dumps(body.spec), json.dumps(settings),
                                                      "running", "pending", now, now))
            Store.update(db, body.run_id, **fields)
            Store.event(db, body.run_id, "registered", None, sweep=body.sweep, again=row is not None)
            if body.sweep and body.sweep_spend_limit is not None:
                db.execute("INSERT INTO sweeps(sweep, spend_limit) VALUES (?,?) ON CONFLICT(sweep) DO UPDATE SET "
                           "spend_limit=excluded.spend_limit", (body.sweep, body.sweep_spend_limit))
        return {"run_id": body.run_id, "registered": True, "phase": "pending"}

    @app.get("/v1/runs", dependencies=[Depends(admin)])
    def list_runs(sweep: Optional[str] = None) -> Response:
        """Every run's public record, as SQLite writes it (store.listing_json): building and encoding a
        thousand records in Python held the interpreter while the workers waited to renew."""
        return Response(store.listing_json(sweep), media_type="application/json")

    @app.get("/v1/runs/{run_id}", dependencies=[Depends(admin)])
    def read_run(run_id: str) -> dict[str, Any]:
        return get_run(run_id).public()

    @app.get("/v1/runs/{run_id}/spec", dependencies=[Depends(admin)])
    def read_spec(run_id: str) -> dict[str, Any]:
        return get_run(run_id).spec

    @app.get("/v1/runs/{run_id}/events", dependencies=[Depends(admin)])
    def run_events(run_id: str, after: int = 0) -> list[dict[str, Any]]:
        get_run(run_id)
        return store.events(run_id, after=after)

    @app.get("/v1/events", dependencies=[Depends(admin)])
    def all_events(after: int = 0) -> list[dict[str, Any]]:
        return store.events(None, after=after)

    @app.get("/v1/leases", dependencies=[Depends(admin)])
    def leases() -> list[dict[str, Any]]:
        now = time.time()
        return [{"run_id": r.run_id, "epoch": r.epoch, "holder": r.lease_holder, "expires": r.lease_expires,
                 "live": r.lease_live(now), "phase": r.phase} for r in store.runs()]

    def set_desired(run_id: str, desired: str) -> dict[str, Any]:
        with store.tx() as db:
            row = db.execute("SELECT phase, epoch FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise HTTPException(404, f"no run {run_id}")
            if desired == "running":
                if row["phase"] not in ("paused",):
                    raise HTTPException(409, f"run {run_id} is {row['phase']}; only a paused run can be resumed")
                Store.update(db, run_id, desired="running", phase="pending", next_attempt=0.0, restarts=0, strikes=0,
                             strike_checkpoint=None, capacity_since=None, message=None)
            elif row["phase"] in TERMINAL_PHASES:
                return {"run_id": run_id, "phase": row["phase"], "changed": False}
            else:
                Store.update(db, run_id, desired=desired)
            Store.event(db, run_id, f"desired_{desired}", row["epoch"])
        return {"run_id": run_id, "desired": desired, "changed": True}

    @app.post("/v1/runs/{run_id}/cancel", dependencies=[Depends(admin)])
    def cancel(run_id: str, purge: bool = False) -> dict[str, Any]:
        """`purge=true`: the run's volume (one the commander made) is deleted once its pods are gone, also
        for a run that has ended; without it, an ended run's volume is kept `--volume-retention-days`."""
        out = set_desired(run_id, "cancelled")
        if purge:
            with store.tx() as db:
                Store.update(db, run_id, purge=1)
                Store.event(db, run_id, "purge_requested", None)
        return {**out, "purge": purge}

    @app.post("/v1/runs/{run_id}/pause", dependencies=[Depends(admin)])
    def pause(run_id: str) -> dict[str, Any]:
        return set_desired(run_id, "paused")

    def spent_problem(run_id: str, limit: Optional[float], sweep_limit: Optional[float]) -> Optional[str]:
        """Why resuming now would pause the run again at once (its spend, or its sweep's, at the limit)."""
        rec = get_run(run_id)
        if limit is not None and rec.cost_usd >= limit:
            return (f"run {run_id} has spent ${rec.cost_usd:.4f} of its ${limit:.4f} spend limit: resumed as it is, "
                    f"it would be paused again at once; raise the limit: trainstack resume {run_id} --spend-limit "
                    f"{_above(rec.cost_usd)}")
        if rec.sweep and sweep_limit is not None:
            cost = store.sweep_cost(rec.sweep)
            if cost >= sweep_limit:
                return (f"the sweep of {run_id} has spent ${cost:.4f} of its ${sweep_limit:.4f} spend limit: resumed "
                        f"as it is, the run would be paused again at once; raise it: trainstack resume {run_id} "
                        f"--sweep-spend-limit {_above(cost)}")
        return None

    @app.post("/v1/runs/{run_id}/resume", dependencies=[Depends(admin)])
    def resume(run_id: str, from_scratch: bool = False, body: Optional[Resume] = None) -> dict[str, Any]:
        """`from_scratch=true`: the user accepts training again from rollout 0 (a lost volume without a Hub
        copy pauses the run; the commander forgets the checkpoint it saw only when told so). A body with
        `spend_limit` / `sweep_spend_limit` sets new limits first; a run whose spend is still at a limit is
        refused (409) instead of being resumed and paused again."""
        body = body or Resume()
        rec = get_run(run_id)
        if rec.phase != "paused":
            raise HTTPException(409, f"run {run_id} is {rec.phase}; only a paused run can be resumed")
        limit = body.spend_limit if body.spend_limit is not None else rec.spend_limit
        sweep_limit = body.sweep_spend_limit if body.sweep_spend_limit is not None else (
            store.sweep_limit(rec.sweep) if rec.sweep else None)
        if body.sweep_spend_limit is not None and not rec.sweep:
            raise HTTPException(409, f"run {run_id} is not part of a sweep; use spend_limit")
        why = spent_problem(run_id, limit, sweep_limit)
        if why:
            raise HTTPException(409, why)
        with store.tx() as db:
            if body.spend_limit is not None:
                Store.update(db, run_id, spend_limit=body.spend_limit)
                Store.event(db, run_id, "spend_limit_set", None, spend_limit=body.spend_limit)
        if body.sweep_spend_limit is not None and rec.sweep:
            store.set_sweep_limit(rec.sweep, body.sweep_spend_limit)
        out = set_desired(run_id, "running")
        if from_scratch:
            with store.tx() as db:
                Store.update(db, run_id, last_checkpoint=None)
                Store.event(db, run_id, "from_scratch", None)
        return {**out, "spend_limit": limit, "sweep_spend_limit": sweep_limit}

    @app.put("/v1/sweeps/{sweep:path}", dependencies=[Depends(admin)])
    def sweep_limit(sweep: str, body: SweepLimit) -> dict[str, Any]:
        store.set_sweep_limit(sweep, body.spend_limit)
        return {"sweep": sweep, "spend_limit": body.spend_limit, "cost_usd": store.sweep_cost(sweep)}

    @app.post("/v1/runs/{run_id}/lease/force-release", dependencies=[Depends(admin)])
    def force_release(run_id: str) -> dict[str, Any]:
        """Admin only: drop the lease now (its worker is fenced out at its next write)."""
        with store.tx() as db:
            row = db.execute("SELECT epoch, lease_holder FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise HTTPException(404, f"no run {run_id}")
            Store.update(db, run_id, lease_holder=None, lease_expires=None, phase="lost",
                         message="lease force-released by an admin")
            Store.event(db, run_id, "lease_forced", row["epoch"], holder=row["lease_holder"])
        return {"run_id": run_id, "released": row["lease_holder"]}

    @app.get("/v1/runs/{run_id}/logs", dependencies=[Depends(admin)])
    def logs(run_id: str, which: str = "trainer", offset: int = 0, limit: int = 1 << 20) -> dict[str, Any]:
        rec = get_run(run_id)
        req = PodRequest.from_dict(rec.settings)
        from trainstack.storage import layout

        path = (f"{req.run_dir(run_id)}/{layout.LOGS}/{layout.TRAINER_LOG}" if which == "trainer"
                else worker_log_path(req, run_id, rec.epoch))
        live = rec.pod_id and rec.phase in ("starting", "running", "stopping") and reconciler is not None
        if live:
            try:
                data = reconciler.provider.read(rec.pod_id, path, offset=offset, limit=limit)
            except Exception as ex:  # noqa: BLE001 - the pod may be going away
                raise HTTPException(503, f"cannot read {path} on pod {rec.pod_id}: {ex}") from None
            text = "" if data is None else data.decode("utf-8", "replace")
            return {"source": "pod", "pod_id": rec.pod_id, "path": path, "offset": offset + len(data or b""),
                    "text": text, "phase": rec.phase}
        return {"source": "commander", "pod_id": None, "path": path, "offset": offset, "phase": rec.phase,
                "text": (rec.log_tail or "") if offset == 0 else ""}

    @app.get("/v1/runs/{run_id}/metrics", dependencies=[Depends(admin)])
    def metrics(run_id: str, offset: int = 0) -> dict[str, Any]:
        """The run's metrics.jsonl as its workers sent it, from byte `offset` (relay.py): while it runs and after
        its pod is gone."""
        get_run(run_id)
        with store.tx() as db:
            text = relay.stored_text(db, run_id)
        return {"offset": offset, "size": len(text), "text": text[offset:] if 0 <= offset <= len(text) else ""}

    # ------------------------------------------------------------------ lease (worker)
    @app.post("/v1/runs/{run_id}/lease/acquire")
    def acquire(run_id: str, body: Acquire, _auth: None = Depends(worker_of)) -> dict[str, Any]:
        now = time.time()
        with store.tx() as db:
            row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
            if row is None:
                raise HTTPException(404, f"no run {run_id}")
            if why := epoch_superseded(body.epoch, row["epoch"]):
                raise HTTPException(409, why)
            if row["desired"] != "running" or row["phase"] not in ("provisioning", "starting", "running"):
                raise HTTPException(409, f"run is {row['phase']} (desired {row['desired']}); nothing to train")
            holder, expires = row["lease_holder"], row["lease_expires"] or 0
            if holder and holder != body.holder and expires > now:
                raise HTTPException(409, f"lease held by {holder}")
            Store.update(db, run_id, epoch=body.epoch, lease_holder=body.holder,
                         lease_expires=now + config.lease_ttl_s, phase="running", deadline=None)
            Store.event(db, run_id, "lease_acquired", body.epoch, holder=body.holder, pod_id=body.pod_id)
        return {"run_id": run_id, "epoch": body.epoch, "ttl_s": config.lease_ttl_s, "heartbeat_s": config.heartbeat_s,
                "deadline_s": config.worker_deadline_s, "desired": "running"}

    def _holding(db, run_id: str, epoch: int, holder: str, now: float):
        row = db.execute("SELECT * FROM runs WHERE run_id=?", (run_id,)).fetchone()
        if row is None:
            raise HTTPException(404, f"no run {run_id}")
        if why := epoch_superseded(epoch, row["epoch"]):
            raise HTTPException(409, why)
        if row["lease_holder"] != holder:
            raise HTTPException(409, "not the lease holder")
        if (row["lease_expires"] or 0) <= now:
            raise HTTPException(409, "lease expired")
        return row

    @app.post("/v1/runs/{run_id}/lease/renew")
    def renew(run_id: str, body: Renew, _auth: None = Depends(worker_of)) -> dict[str, Any]:
        now = time.time()
        with store.tx() as db:
            row = _holding(db, run_id, body.epoch, body.holder, now)
            Store.update(db, run_id, epoch=body.epoch, lease_expires=now + config.lease_ttl_s,
                         **progress_fields(body.progress))
            last = row["last_checkpoint"]
            ck = ReportedProgress.from_json(body.progress).last_checkpoint
            if ck is not None and ck != last:
                Store.event(db, run_id, "checkpoint", body.epoch, iteration=ck)
            metrics_bytes = relay.receive(db, run_id, body.metrics)
        return {"desired": row["desired"], "ttl_s": config.lease_ttl_s, "expires_in": config.lease_ttl_s,
                "metrics_bytes": metrics_bytes}

    @app.post("/v1/runs/{run_id}/lease/report")
    def report(run_id: str, body: Report, _auth: None = Depends(worker_of)) -> dict[str, Any]:
        """The worker's last word for its epoch; the lease is released."""
        now = time.time()
        with store.tx() as db:
            row = _holding(db, run_id, body.epoch, body.holder, now)
            desired = row["desired"]
            phase = {"finished": "finished", "failed": "failed", "preempted": "lost"}.get(body.state)
            if phase is None:  # stopped / released: what the run should be doing decides
                phase = desired if desired in ("cancelled", "paused") else "lost"
            message = row["message"] if body.state == "stopped" and row["message"] else body.message  # keep why
            Store.update(db, run_id, epoch=body.epoch, lease_holder=None, lease_expires=None, phase=phase,
                         exit_code=body.exit_code, message=message, log_tail=body.log_tail,
                         **progress_fields(body.progress))
            Store.event(db, run_id, f"worker_{body.state}", body.epoch, exit_code=body.exit_code,
                        message=body.message, last_checkpoint=ReportedProgress.from_json(body.progress).last_checkpoint)
            relay.receive(db, run_id, body.metrics)
        if reconciler is not None:
            reconciler.refresh()
        return {"run_id": run_id, "phase": phase}

    return app
