"""Megatron-style optimizer and LR schedule for the tiny policy.

AdamW (Megatron's Adam uses decoupled weight decay) with no decay on biases/norms, and
OptimizerParamScheduler's warmup + constant/linear/cosine decay as a pure function of the
step count, so its whole state is one integer that checkpoints trivially.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


def build_optimizer(args, model) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    if args.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=args.lr, momentum=args.sgd_momentum or 0.0)
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.adam_beta1, args.adam_beta2), eps=args.adam_eps,
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
