"""``python -m trainstack.tiny.train <slime argv>``: the CPU stand-in for ``slime/train.py``.

Loop per rollout (slime train.py order, with eval moved before the save so a kill between
them cannot lose an eval point): slime's rollout (rollout.py: generate, rewards, train data)
-> train (num_steps_per_rollout optimizer steps) -> eval (slime's cadence:
``should_run_periodic_action`` without ``num_rollout``, so no extra eval after the last
rollout) -> save -> log. All randomness of rollout ``i`` derives from
(seed, i), and the data cursor, optimizer, scheduler and RNG states are checkpointed, so an
interrupted run resumed with ``--load`` ends bit-identical to an uninterrupted one.
"""
from __future__ import annotations

from typing import Any

import gc
import os
import random
import signal
import sys
import time
from dataclasses import dataclass

from trainstack.errors import ConfigError, ConfigErrors, report_and_exit

from .failures import EXIT_FAILURE_RATE

EXIT_LOAD_FAILED = 1  # a checkpoint that would not load: a failure of this launch, recorded for the next


def _say(msg: str) -> None:
    print(f"[tiny] {msg}", file=sys.stderr, flush=True)


@dataclass
class Policy:
    model: Any  # torch modules and optimizers: imported lazily, so typed loosely here
    ref: Any
    optimizer: Any
    scheduler: Any
    start_rollout_id: int


def _load_weights(model, path: str, step, flag: str) -> None:
    from .checkpoint import load_checkpoint

    try:
        _, st = load_checkpoint(path, step, load_optim=False, load_rng=False)
    except FileNotFoundError as e:
        raise ConfigErrors([ConfigError(flag, f"cannot load initial weights: {e}", value=path, source="command line",
                                        fix="create them with `python -m trainstack.tiny.init_model --save DIR ...`")]) from None
    want = model.config.arch()
    if st.meta.get("arch") != want:
        raise ConfigErrors([ConfigError(flag, "checkpoint architecture differs from the model flags", value=path,
                                        related={"checkpoint": st.meta.get("arch"), "flags": want})])
    model.load_state_dict(st.model)


class LoadFailed(Exception):
    """A published, verified checkpoint the trainer could not load (recorded for the next plan)."""


def _load_failed(save_dir: str, step, error: BaseException) -> LoadFailed:
    """Record the failure next to the checkpoints (trainstack/storage/checkpoints.py `record_load_failure`): the
    launcher sets that checkpoint aside and resumes from the previous intact one, once."""
    from trainstack.storage import checkpoints as ck

    it = step if step is not None else ck.read_tracker(save_dir)
    why = f"{type(error).__name__}: {error}"
    if isinstance(it, int) or (isinstance(it, str) and it.isdigit()):
        try:
            ck.record_load_failure(save_dir, int(it), why)
        except OSError:
            pass
        from trainstack.storage.layout import LOAD_FAILURES

        return LoadFailed(f"cannot load checkpoint iter_{int(it):07d} from {save_dir}: {why}; recorded in "
                          f"{LOAD_FAILURES}: the launcher sets it aside and resumes from the previous intact one (once)")
    return LoadFailed(f"cannot load the checkpoint in {save_dir}: {why}")


def build_policy(args, train_iters: int) -> Policy:

    from .checkpoint import load_checkpoint, restore_rng
    from .model import ModelConfig, build_model
    from .optim import Scheduler, build_optimizer
    from .tokenizer import CharTokenizer

    cfg = ModelConfig.from_args(args, CharTokenizer().vocab_size)
    model = build_model(cfg, args.seed)
    optimizer = build_optimizer(args, model)
    scheduler = Scheduler.from_args(args, train_iters)
    start = 0
    if args.resume:
        step = args.ckpt_step
        try:
            loaded, st = load_checkpoint(args.load, step, load_optim=not args.no_load_optim,
                                         load_rng=not args.no_load_rng)
        except FileNotFoundError as e:
            raise ConfigErrors([ConfigError("--load", f"cannot resume: {e}", value=args.load, source="command line",
                                            fix="point --ckpt-step at a complete iter_* (one the tracker has named)")]) from None
        except Exception as e:  # noqa: BLE001 - verified, published, and still unloadable: say so, never loop on it
            raise _load_failed(args.load, step, e) from None
        if st.meta.get("arch") != cfg.arch():
            raise ConfigErrors([ConfigError("--load", "checkpoint architecture differs from the model flags",
                                            value=args.load, related={"checkpoint": st.meta.get("arch")})])
        try:
            model.load_state_dict(st.model)
            if st.optimizer is not None:
                optimizer.load_state_dict(st.optimizer)
            if st.scheduler is not None:
                scheduler.load_state_dict(st.scheduler)
            if st.rng is not None:
                restore_rng(st.rng)
        except Exception as e:  # noqa: BLE001 - a state that does not fit what it was saved from
            raise _load_failed(args.load, loaded, e) from None
        start = int(loaded) + 1
        _say(f"{'loaded' if args.num_rollout == 0 else 'resumed from'} {args.load} iter {int(loaded):07d}")
    elif args.load:  # no tracker: initial weights from --ref-load (slime's load := ref_load)
        _load_weights(model, args.load, args.ckpt_step, "--ref-load")
        _say(f"initial weights from {args.load}")
    if args.start_rollout_id is not None:
        start = args.start_rollout_id
    ref = None
    if args.use_kl_loss:
        ref = build_model(cfg, args.seed)
        _load_weights(ref, args.ref_load, args.ref_ckpt_step, "--ref-load")
        ref.eval()
        for p in ref.parameters():
            p.requires_grad_(False)
    return Policy(model, ref, optimizer, scheduler, start)


def _reseed(seed: int, rollout_id: int) -> None:
    """Global RNGs per rollout, for plugins that use ``random``/numpy/torch directly."""
    import numpy as np
    import torch

    from .generate import derive_seed

    s = derive_seed(seed, rollout_id, "global")
    random.seed(s)
    np.random.seed(s % (2**32))
    torch.manual_seed(s)


def train_rollout(args, pol: Policy, td: dict, rollout_id: int, metrics) -> dict:
    """num_steps_per_rollout optimizer steps over slime's train data in order (gbs counts samples).

    ``td`` is ``RolloutManager._convert_samples_to_train_data``'s dict: ``rewards`` are already
    post-processed (group-normalised) by slime, ``raw_reward`` are the rewards as computed."""
    import torch

    from .loss import advantages, logprobs_and_entropy, make_batch, policy_loss

    b = make_batch(td)
    adv = advantages(args, td["rewards"], b)
    pol.model.eval()  # log-probs are a forward-only pass (no dropout), as in slime
    with torch.no_grad():
        old_all = b.rollout_logp if (args.use_rollout_logprobs and b.rollout_logp is not None) else \
            logprobs_and_entropy(pol.model, b, args.rollout_temperature)[0]
        ref_all = logprobs_and_entropy(pol.ref, b, args.rollout_temperature)[0] if pol.ref is not None else None
    gbs = args.global_batch_size
    pol.model.train()
    last = {}
    for step in range(args.num_steps_per_rollout):
        sl = slice(step * gbs, (step + 1) * gbs)
        sub = make_batch(td, sl)
        R = sub.mask.shape[1]
        logp, ent = logprobs_and_entropy(pol.model, sub, args.rollout_temperature)
        out = policy_loss(args, logp, ent, old_all[sl, :R], adv[sl, :R], sub.mask,
                          ref_all[sl, :R] if ref_all is not None else None,
                          b.rollout_logp[sl, :R] if b.rollout_logp is not None else None)
        lr = pol.scheduler.apply(pol.optimizer)
        pol.optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        clip = args.clip_grad if args.clip_grad and args.clip_grad > 0 else float("inf")
        grad_norm = float(torch.nn.utils.clip_grad_norm_(pol.model.parameters(), clip))
        pol.optimizer.step()
        pol.scheduler.step()
        train_step = rollout_id * args.num_steps_per_rollout + step
        last = {f"train/{k}": v for k, v in out.stats.items()}
        last.update({"train/grad_norm": grad_norm, "train/lr-pg_0": lr, "train/global_batch_size": gbs})
        metrics.log("train/step", train_step, last)
    mask_sum = b.mask.sum().clamp(min=1)
    return {
        "rollout/rewards": float(torch.tensor(td["rewards"], dtype=torch.float32).mean()),  # normalised, as slime
        "rollout/advantages": float((adv * b.mask).sum() / mask_sum),
        "rollout/log_probs": float((old_all * b.mask).sum() / mask_sum),
        **last,
    }


def _rollout_stats(args, td: dict) -> dict:
    """The keys trainstack reads (status, compare, benchmarks), from slime's train data."""
    n = max(len(td["tokens"]), 1)
    return {
        "rollout/raw_reward": sum(float(r) for r in td["raw_reward"]) / n,
        "rollout/response_lengths": sum(td["response_lengths"]) / n,
        "rollout/total_lengths": sum(len(t) for t in td["tokens"]) / n,
        "rollout/truncated": sum(td["truncated"]) / n,
    }


def evaluate(args, rollouts, rollout_id: int, metrics) -> dict:
    out = rollouts.evaluate(rollout_id)
    metrics.log("eval/step", rollout_id, out)
    return out


def _periodic(rollout_id: int, interval, per_epoch, num_rollout=None) -> bool:
    """slime's ``should_run_periodic_action`` (train.py passes ``num_rollout`` for saves, not for evals)."""
    from slime.utils.misc import should_run_periodic_action

    return should_run_periodic_action(rollout_id, interval, per_epoch, num_rollout)


def save_rollout_data(template: str, rollout_id: int, samples) -> None:
    """--save-debug-rollout-data: slime's dump of one rollout ({rollout_id, samples: [Sample.to_dict()]})."""
    from .checkpoint import atomic_torch_save

    atomic_torch_save({"rollout_id": rollout_id, "samples": [s.to_dict() for s in samples]},
                      template.format(rollout_id=rollout_id))


def save_hf(template: str, pol: Policy, rollout_id: int) -> None:
    """--save-hf: the weights as a Hugging Face model directory (hf_model.py: Qwen3ForCausalLM's files, the
    tokenizer, config.json last, so a directory with a config.json is complete)."""
    from . import hf_model

    hf_model.write(template.format(rollout_id=rollout_id), pol.model,
                   extra_config={"trainstack": {"rollout_id": rollout_id}})


def save(args, pol: Policy, rollouts, rollout_id: int) -> None:
    """Publish a checkpoint (weights, optimizer, scheduler, RNG, data cursor) if this process still
    holds the run's lease; raises Fenced, publishing nothing, if it does not."""
    from trainstack.fencing.fence import Fence

    from .checkpoint import TrainState, capture_rng, save_checkpoint, torch_bytes
    from .model import FORMAT

    if args.save_hf:  # before the checkpoint: a tracker naming this rollout means its export is complete too
        save_hf(args.save_hf, pol, rollout_id)
    meta = {"rollout_id": rollout_id, "arch": pol.model.config.arch(), "format": FORMAT}
    state = TrainState(model=pol.model.state_dict(),
                       optimizer=None if args.no_save_optim else pol.optimizer.state_dict(),
                       scheduler=pol.scheduler.state_dict(), rng=capture_rng(), meta=meta)
    cursor = rollouts.save_state()
    save_checkpoint(args.save, rollout_id, state, cursor=None if cursor is None else torch_bytes(cursor),
                    fence=Fence.from_env())


def run(args, ignored: list[str]) -> int:
    import torch  # noqa: F401  (heavy imports start here)

    from .failures import FailureWatch
    from .metrics import Metrics
    from .model import setup_determinism
    from .rollout import SlimeRollouts

    setup_determinism(int(os.environ.get("TRAINSTACK_TINY_THREADS", "1")))
    if ignored:
        _say("ignored by the tiny backend: " + " ".join(ignored))
    holder: dict[str, Any] = {}
    rollouts = SlimeRollouts(args, lambda: holder["policy"].model)
    try:
        return _loop(args, rollouts, holder, Metrics, FailureWatch.from_env())
    finally:
        rollouts.close()


def _loop(args, rollouts, holder: dict, Metrics, watch) -> int:
    per_epoch = None
    if args.num_epoch is not None and args.rollout_global_dataset:
        per_epoch = max(len(rollouts) // args.rollout_batch_size, 1)
        if args.num_rollout is None:
            args.num_rollout = args.num_epoch * per_epoch
    pol = holder["policy"] = build_policy(args, args.num_rollout * args.num_steps_per_rollout)
    start = pol.start_rollout_id
    eval_only = args.num_rollout == 0 and args.eval_interval is not None
    if eval_only:  # slime's train.py: evaluate the loaded checkpoint once, train nothing, save nothing
        _say("--num-rollout 0 with --eval-interval: eval-only run (as slime)"
             + (f" of the checkpoint of rollout {start - 1}" if args.resume else ""))
    elif args.num_rollout <= start:
        bar = "!" * 78
        _say(f"\n{bar}\nnothing to train: checkpoint at rollout {start - 1} already covers --num-rollout "
             f"{args.num_rollout}; raise --num-rollout to continue\n{bar}")
        return 0
    if args.resume:
        rollouts.load(start - 1)
    metrics = Metrics(args, first_rollout=start)
    # everything imported and built so far lives for the whole run: out of the collector's sight, so a
    # full collection (slime's rollout makes plenty of garbage) does not walk torch's, transformers' and
    # slime's module objects each time (0.1-0.2 s per collection on 2 cores)
    gc.freeze()
    eval_str = "-"
    stop = _StopRequest()
    try:
        if eval_only and args.resume:
            # slime evaluates with rollout_id 0, and its eval sampling seeds do not depend on it (rollout_seed + j);
            # the tiny server seeds eval requests by rollout id, so the loaded checkpoint's own id is passed: the
            # numbers are those of the training run's eval of that checkpoint, logged at its eval/step
            only = evaluate(args, rollouts, start - 1, metrics)
            _say(f"eval of the checkpoint of rollout {start - 1}: {_eval_line(only)}")
            return 0
        if args.eval_interval is not None and start == 0 and (args.num_rollout == 0 or not args.skip_eval_before_train):
            first_ev = evaluate(args, rollouts, 0, metrics)
            eval_str = _eval_line(first_ev)
            _say(f"eval before training: {eval_str}")
        for rollout_id in range(start, args.num_rollout):
            t0 = time.perf_counter()
            _reseed(args.seed, rollout_id)
            res = rollouts.generate(rollout_id)
            if args.save_debug_rollout_data:
                save_rollout_data(args.save_debug_rollout_data, rollout_id, res.samples)
            t_rollout = time.perf_counter() - t0
            stats = {**res.metrics, **_rollout_stats(args, res.train_data)}
            t1 = time.perf_counter()
            train_stats = train_rollout(args, pol, res.train_data, rollout_id, metrics)
            stats.update({k: v for k, v in train_stats.items() if k.startswith("rollout/")})
            t_train = time.perf_counter() - t1
            step_time = time.perf_counter() - t0
            metrics.log("rollout/step", rollout_id, {**stats, "perf/rollout_time": t_rollout,
                                                     "perf/train_time": t_train, "perf/step_time": step_time})
            ev: dict | None = None  # slime train.py: eval after the weight update (here before the save)
            if _periodic(rollout_id, args.eval_interval, per_epoch):
                ev = evaluate(args, rollouts, rollout_id, metrics)
                eval_str = _eval_line(ev)
            saved = ""  # saved last: everything logged for this rollout is covered by the checkpoint
            if args.save and _periodic(rollout_id, args.save_interval, per_epoch, args.num_rollout):
                save(args, pol, rollouts, rollout_id)
                saved = f"  saved iter_{rollout_id:07d}"
            failed = stats["rollout/failed_frac"]
            _say(f"rollout {rollout_id + 1}/{args.num_rollout}  reward {stats['rollout/raw_reward']:.3f}  "
                 f"resp_len {stats['rollout/response_lengths']:.2f}  loss {_loss(train_stats.get('train/loss', 0))}  "
                 f"gnorm {train_stats.get('train/grad_norm', 0):.3f}  "
                 f"eval {eval_str if ev else '-'}  failed {failed:.2f}  step {step_time:.2f}s{saved}")
            verdict = watch.observe(rollout_id, failed, last=rollout_id + 1 == args.num_rollout)
            if verdict is not None:
                _say(verdict)
                return EXIT_FAILURE_RATE
            if stop.signum is not None and rollout_id + 1 < args.num_rollout:
                if args.save and not saved:  # the launcher's grace period is for this final checkpoint
                    save(args, pol, rollouts, rollout_id)
                _say(f"stopping on {signal.Signals(stop.signum).name} after rollout {rollout_id + 1}"
                     + (f"; checkpoint iter_{rollout_id:07d} saved" if args.save else ""))
                return 128 + stop.signum
    finally:
        stop.restore()
        metrics.close()
    return 0


def _loss(value: float) -> str:
    """The loss as the rollout line shows it. GRPO's loss with no entropy or KL term is ~0 by construction
    (group-normalised advantages sum to 0 and the first step is on-policy: ratio 1), so `+0.0000` on every
    rollout said nothing: a value that small shows its magnitude (`-3.1e-09`), and the line carries the
    gradient norm, which is what moves the policy."""
    return f"{value:+.4f}" if abs(value) >= 1e-3 else f"{value:+.1e}"  # (an exact 0: +0.0e+00, its magnitude too)


def _eval_line(ev: dict) -> str:
    """`arithmetic=0.812`: each eval set's mean reward (not its per-set details, eval/<set>/...)."""
    return " ".join(f"{k[5:]}={v:.3f}" for k, v in ev.items() if "/" not in k[5:] and "truncated" not in k)


class _StopRequest:
    """SIGTERM/SIGINT: finish the current rollout, checkpoint it, exit 128+signum (like Megatron's
    --exit-signal-handler), so a preempted or Ctrl-C'd run loses no finished work."""

    def __init__(self):
        self.signum: int | None = None
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGTERM, signal.SIGINT)}

    def _handle(self, signum, _frame) -> None:
        self.signum = signum

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def main(argv: list[str] | None = None) -> int:
    from trainstack.fencing.fence import EXIT_FENCED, Fenced

    os.environ.setdefault("TQDM_DISABLE", "1")  # slime draws a progress bar per rollout; read when tqdm is imported

    from .validate import main_parse

    parsed = None
    try:
        parsed = main_parse(argv)
        return run(parsed.args, parsed.ignored)
    except ConfigErrors as e:
        report_and_exit(e)
    except (OSError, RuntimeError) as e:  # a full disk, a read-only volume: one message, exit 5 (docs/resume.md)
        from trainstack.storage import faults as storage

        save = getattr(getattr(parsed, "args", None), "save", None)
        where = os.path.dirname(os.path.abspath(save)) if save else os.getcwd()
        if not storage.hits(e, where):
            raise
        problem, fix = storage.message(e, where)
        _say(f"the run's storage failed: {problem}\n  fix   : {fix}")
        return storage.EXIT_STORAGE
    except Fenced as e:
        _say(f"stopping without publishing a checkpoint: {e}")
        return EXIT_FENCED
    except LoadFailed as e:
        _say(str(e))
        return EXIT_LOAD_FAILED


if __name__ == "__main__":
    sys.exit(main())
