"""Eval-only runs of a run's checkpoints (docs/eval.md).

`trainstack eval RUN` stores one run per evaluated checkpoint (its own spec and run dir, so it is
resumable, visible in `trainstack status` and executable with `trainstack exec`) whose command is
the source run's with slime's eval-only settings: `--num-rollout 0`, the source's save dir as
`--load` with `--ckpt-step N`, its own `--save`. The results are appended to the source run's
`evals.jsonl` as `eval/<set>...` metrics at eval step N, where `trainstack compare` and the metric
readers find them. `eval.every=K` on a training run starts such runs in the background as its
checkpoints appear. Nothing is ever written into the source run's checkpoints.
"""
