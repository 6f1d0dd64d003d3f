"""Megatron-style optimizer and LR schedule for the tiny policy.

AdamW (Megatron's Adam uses decoupled weight decay) with no decay on biases/norms, and
OptimizerParamScheduler's warmup + constant/linear/cosine decay as a pure function of the
step count, so its whole state is one integer that checkpoints trivially.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


class _Eager:
    """torch's optimizer methods minus their ``torch.compile`` guards.

    ``Optimizer.step`` (through ``_use_grad_for_differentiable``) and ``add_param_group`` /
    ``zero_grad`` / ``state_dict`` / ``load_state_dict`` (through ``torch._disable_dynamo``) import
    ``torch._dynamo`` on first call, only to mark a graph break or wrap themselves in a "don't compile
    me" that does nothing in eager mode: 1-2.5 s of every trainer start on 2 cores. Nothing here
    compiles, so these call torch's own undecorated functions (``__wrapped__``), under the grad mode
    ``step``'s decorator sets. Same kernels, same numbers (tests/tiny/test_train.py checks)."""

    def step(self, closure=None):
        with torch.set_grad_enabled(self.defaults["differentiable"]):  # type: ignore[attr-defined]
            return _undecorated(super().step)(self, closure)  # type: ignore[misc]

    def add_param_group(self, param_group) -> None:
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self):
        return _undecorated(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict) -> None:
        _undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)


def _undecorated(fn):
    """The function under torch's dynamo decorators (a bound method's function included)."""
    fn = getattr(fn, "__func__", fn)
    while getattr(fn, "__code__", None) is not None and fn.__code__.co_name in ("inner", "_use_grad", "wrapper") \
            and hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
    return fn


class AdamW(_Eager, torch.optim.AdamW):
    pass


class SGD(_Eager, torch.optim.SGD):
    pass


def build_optimizer(args, model) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "sgd":
        return SGD(groups, lr=args.lr, momentum=args.sgd_momentum or 0.0)
    return AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps,
                             foreach=False)


@dataclass
class Scheduler:
    max_lr: float
    min_lr: float
    style: str
    warmup_steps: int
    decay_steps: int
    num_steps: int = 0

    @staticmethod
    def from_args(args, train_iters: int) -> "Scheduler":
        decay = args.lr_decay_iters or train_iters
        warm = args.lr_warmup_iters or 0
        if args.lr_warmup_fraction is not None:
            warm = int(args.lr_warmup_fraction * decay)
        return Scheduler(args.lr, args.min_lr or 0.0, args.lr_decay_style, warm, max(decay, 1))

    def lr(self) -> float:
        n = self.num_steps
        if self.warmup_steps > 0 and n <= self.warmup_steps:
            return self.max_lr * n / self.warmup_steps
        if self.style == "constant":
            return self.max_lr
        if n > self.decay_steps:
            return self.min_lr
        ratio = (n - self.warmup_steps) / max(self.decay_steps - self.warmup_steps, 1)
        if self.style == "linear":
            coeff = 1.0 - ratio
        else:  # cosine
            coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return self.min_lr + coeff * (self.max_lr - self.min_lr)

    def apply(self, opt: torch.optim.Optimizer) -> float:
        lr = self.lr()
        for g in opt.param_groups:
            g["lr"] = lr
        return lr

    def step(self) -> None:
        self.num_steps += 1

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, d: dict) -> None:
        self.num_steps = int(d["num_steps"])
