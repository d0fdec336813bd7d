"""The streaming RL loop: multi-turn PPO ("ppo") or step-level GRPO with DART's curation ("grpo").

Each iteration: keep enough rollouts asked for that environments never wait on the trainer; take
finished episodes as they arrive, dropping those from policies more than `max_policy_lag` versions
behind (and whatever the algorithm deems stale); turn them into samples; run PPO-style epochs of
clipped policy updates (and critic updates); every `publish_every` iterations save a checkpoint and
publish it as the next policy version. Where PPO and GRPO differ, the algorithm chosen by name
(ppo.py, grpo.py) decides; runner.run calls `RLTrainer(spec, hooks).run(source)`.
"""

from __future__ import annotations

import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.data.trajectory import same_prompt
from agent_core.rl.curation import Curator, ExperiencePool, within_lag
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.rl.losses import explained_variance, kl_penalty, policy_loss, value_loss
from agent_core.training.algorithm import Algorithm
from agent_core.training.batching import Sample, gather, minibatches, pad_batch, scatter, token_logprobs
from agent_core.training.checkpoints import latest_checkpoint
from agent_core.training.errors import TrainingError
from agent_core.training.grpo import GRPO
from agent_core.training.lora import load_trainable_state, trainable_parameters, trainable_state
from agent_core.training.mismatch import Mismatch
from agent_core.training.model_io import critic_class, load_policy_model
from agent_core.training.ppo import PPO
from agent_core.training.rng import set_rng_state
from agent_core.training.trainer import Trainer
from agent_core.training.types import Hooks, RolloutSource, RunResult, RunSpec
from agent_core.training.untrained import why_untrained

ALGORITHMS: dict[str, Callable[[Mapping[str, Any]], Algorithm]] = {"ppo": PPO, "grpo": GRPO}
UNUSABLE_LIMIT = 4
"""An RL run fails once this many iterations' worth of unusable rollouts came in a row, each stale or
turnless episode counting one and each group that all scored alike counting one (not one per episode:
a task the policy mostly solves gives runs of all-solved groups that dynamic sampling must wait out;
counted per episode, 8 such groups of 8 in a row stopped a healthy run in bench/rl_eval.py): rollouts
that can never train the policy must not keep a worker busy for ever."""


@dataclass(frozen=True)
class _Minibatch:
    """A minibatch of samples as padded tensors (see batching.pad_batch) with its image tensors."""

    samples: list[Sample]
    ids: Any
    attn: Any
    mask: Any
    plen: list[int]
    images: dict[str, Any]


class RLTrainer(Trainer):
    """Multi-turn PPO (algorithm "ppo") or step-level GRPO with DART's curation ("grpo"), streaming.

    Each iteration: keep enough rollouts asked for that environments never wait on the trainer;
    take finished episodes as they arrive, dropping those from policies more than `max_policy_lag`
    versions behind (and, for GRPO, outside the latest K versions); update; every `publish_every`
    iterations save a checkpoint and publish it as the next policy version.
    """

    def __init__(self, spec: RunSpec, hooks: Hooks) -> None:
        if spec.algorithm not in ALGORITHMS:
            raise TrainingError(f"unknown RL algorithm {spec.algorithm!r}; valid: {', '.join(ALGORITHMS)}")
        super().__init__(spec, hooks)
        cfg = self.cfg
        self.algo = ALGORITHMS[spec.algorithm](cfg)
        self.version = int(self.state.get("version", 0))
        self.versions_seen: list[int] = list(self.state.get("versions_seen", [self.version]))
        self.value_pretrained = int(self.state.get("value_pretrained", 0))
        self.curator = Curator(
            min_rollouts=int(cfg.get("min_rollouts", 1)),
            max_rollouts=int(cfg.get("max_rollouts", 1)),
            window=int(cfg.get("success_window", 8)),
            max_steps=int(cfg["max_steps_per_episode"]),
            length_margin=int(cfg.get("length_margin", 0)),
            min_steps_cap=int(cfg.get("min_steps_cap", 1)),
        )
        self.pool = ExperiencePool(int(cfg.get("pool_size", 0)), max_age=int(cfg.get("pool_max_age", 2)))
        self.pool.advance(self.version)
        if "curator" in self.state:
            self.curator.load_state_dict(self.state["curator"])
        if "pool" in self.state:
            self.pool.load_state_dict(self.state["pool"])
        self.critic: Any = None
        self.critic_opt: Any = None
        if self.algo.critic:
            self._load_critic()
        self.ref: Any = None
        if float(cfg["kl_coef"]) > 0:
            self.ref = load_policy_model(Path(spec.base_model), device=self.device, dtype=cfg["dtype"])[1]
            self.ref.eval()
        # Rollouts still to come per group (task, seed), and the group's finished ones so far.
        self.wanted: dict[tuple[str, int], int] = {}
        self.buffers: dict[tuple[str, int], list[RLEpisode]] = defaultdict(list)
        self.next_task = 0
        self.dropped = 0
        # Turns the policy was updated on, over every attempt of the run: a run that trained none
        # fails with the reasons counted below, rather than passing its starting weights off as a result.
        self.turns_trained = int(self.state.get("turns_trained", 0))
        self.untrained: Counter[str] = Counter()
        self.unusable_run = 0  # unusable episodes and agreeing groups since the last usable group
        self.unusable_episodes = 0  # the episodes of that run (for the message)
        self.sampled = 0  # episodes that came back in this collection (DAPO's dynamic sampling)
        self.agreed: list[list[RLEpisode]] = []  # and its groups that had nothing to teach
        self.unpublished = 0  # turns trained since the last published version
        self.rebuild_differs = 0  # turns whose rebuilt prompt is not the one their sampler read
        self.mismatch = Mismatch()  # |π_old − π_rollout| by turn index, per iteration

    def _load_critic(self) -> None:
        """The value model, initialised from the starting policy's weights (or resumed), and its optimizer.

        A LoRA run's critic is the run's base model (the same frozen weights on every attempt) with an
        adapter of its own and its full head trainable; its trainer state keeps only those."""
        source = Path(self.spec.base_model) if self.lora else self.start_dir
        backbone = load_policy_model(source, device=self.device, dtype=self.cfg["dtype"], lora=self.lora)[1]
        self.critic = critic_class()(backbone).to(self.device)
        self.critic_opt = self.torch.optim.AdamW(
            trainable_parameters(self.critic), lr=float(self.cfg["critic_lr"])
        )
        if "critic" in self.state:
            if self.lora:
                load_trainable_state(self.critic, self.state["critic"])
            else:
                self.critic.load_state_dict(self.state["critic"])
            self.critic_opt.load_state_dict(self.state["critic_opt"])

    # --- state ---

    def extra_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "version": self.version,
            "versions_seen": self.versions_seen,
            "value_pretrained": self.value_pretrained,
            "turns_trained": self.turns_trained,
            "curator": self.curator.state_dict(),
            "pool": self.pool.state_dict(),
        }
        if self.critic is not None:
            state["critic"] = trainable_state(self.critic) if self.lora else self.critic.state_dict()
            state["critic_opt"] = self.critic_opt.state_dict()
        return state

    # --- rollouts ---

    def _top_up(self, source: RolloutSource, tasks: Sequence[str]) -> None:
        """Ask for rollouts until twice an iteration's worth is outstanding (environments stay busy)."""
        target = 2 * int(self.cfg["episodes_per_iteration"])
        while source.pending() < target:
            task = tasks[self.next_task % len(tasks)]
            self.next_task += 1
            n, cap = self.algo.rollouts(task, self.curator)
            seed = source.request(task, n, max_steps=cap)
            self.wanted[(task, seed)] = self.wanted.get((task, seed), 0) + n

    def _fresh(self, episodes: list[RLEpisode]) -> set[int]:
        """Ids of the episodes training may use: within the policy lag, and those the algorithm keeps."""
        lag = int(self.cfg["max_policy_lag"])
        kept = [ep for ep in episodes if within_lag(ep.policy_version, self.version, lag)]
        kept = self.algo.fresh(kept, version=self.version, versions_seen=self.versions_seen)
        return {id(ep) for ep in kept}

    def _collect(self, source: RolloutSource, tasks: Sequence[str]) -> list[list[RLEpisode]] | None:
        """Groups of finished episodes with something to teach (one episode per group for PPO), at least
        `episodes_per_iteration` episodes; None when a stop was asked. A group with nothing to teach
        (GRPO's, all scoring alike) does not count: sampling goes on (DAPO's dynamic sampling)."""
        want = int(self.cfg["episodes_per_iteration"])
        groups: list[list[RLEpisode]] = []
        got = 0
        self.sampled, self.agreed = 0, []
        while got < want:
            if self.hooks.should_stop():
                return None
            if self.unusable_run >= UNUSABLE_LIMIT * want:
                # Waiting on would never end: say why nothing can be trained instead of hanging.
                raise TrainingError(self._why_untrained(self.step, waiting=self.unusable_episodes))
            self._top_up(source, tasks)
            polled = source.poll(timeout=1.0)
            self.sampled += len(polled)
            fresh = self._fresh(polled)
            for ep in polled:
                group = self._receive(ep, fresh)
                if group:
                    groups.append(group)
                    got += len(group)
        return groups

    def _receive(self, ep: RLEpisode, fresh: set[int]) -> list[RLEpisode] | None:
        """Record a finished episode; its group (the rollouts of one request) once that is complete,
        if the group has something to teach (one that does not is counted, and kept for the metrics)."""
        if ep.turns:  # one with none was lost to the infrastructure: it says nothing of the task
            self.curator.record(ep.task_id, success=ep.success, steps=ep.steps)
        if ep.success:
            self.pool.add(ep)  # a stale success too: it may still rescue its own instance's group
        # A group is the rollouts of one request: one instance (seed) of the task.
        key = (ep.task_id, ep.seed)
        left = self.wanted.pop(key, 1)  # an episode nobody asked for is a group of its own
        if id(ep) not in fresh or not ep.turns:
            self.dropped += 1  # its group completes with one fewer
            self.untrained["stale" if ep.turns else "turnless"] += 1
            self.unusable_run += 1
            self.unusable_episodes += 1
        else:
            self.buffers[key].append(ep)
        if left > 1:
            self.wanted[key] = left - 1
            return None
        group = self.buffers.pop(key, [])
        if not group:
            return None
        if not self.algo.informative(group, self):
            solved = all(e.success for e in group)
            self.untrained["agreed_solved" if solved else "agreed_failed"] += 1
            self.agreed.append(group)
            self.unusable_run += 1
            self.unusable_episodes += len(group)
            return None
        self.unusable_run = self.unusable_episodes = 0
        return group

    # --- the update ---

    def encode_turn(self, turn: RLTurn, *, version: int | None = None) -> Sample | None:
        """The turn as a sample with its rollout log-probabilities; None when too long, or when the
        prompt rebuilt here is not the one its sampler read (its stamp says: `rebuild_differs`, counted
        and reported, never trained on: its log-probabilities would be of other tokens)."""
        sample = self._sample(turn.messages, turn.a11y, list(turn.response_ids))
        if sample is not None and same_prompt(turn.prompt, sample.prompt) is False:
            self.rebuild_differs += 1
            self.untrained["rebuild_differs"] += 1
            return None
        if sample is not None:
            sample.rollout_logprobs = list(turn.rollout_logprobs)[: len(sample.response)]
            sample.turn_index = turn.index
            sample.on_policy = version is None or version == self.version
        return sample

    def _minibatches(self, samples: list[Sample]) -> list[list[Sample]]:
        return minibatches(samples, int(self.cfg["minibatch_size"]))

    def score(self, samples: list[Sample], *, values: bool) -> None:
        """π_old log-probabilities and entropies (and critic values) of every sample, without gradients."""
        pad = int(self.tokenizer.pad_token_id)
        self.model.eval()
        with self.torch.no_grad():
            for mb in self._minibatches(samples):
                ids, attn, mask, plen = pad_batch(mb, pad, self.device)
                images = self._images(mb)
                lens = [len(s.response) for s in mb]
                # Under the distribution the rollouts sampled from (the run's temperature and top_p).
                logp, ent = token_logprobs(
                    self.model, ids, attn, mask=mask, entropy=True, images=images, sampling=self.cfg
                )
                ents = gather(ent, mask, plen, lens)
                vals = gather(self.critic(ids, attn, images)[:, :-1], mask, plen, lens) if values else None
                for i, (s, lp) in enumerate(zip(mb, gather(logp, mask, plen, lens), strict=True)):
                    s.old_logprobs = lp
                    self.mismatch.note(
                        s.turn_index, s.old_logprobs, s.rollout_logprobs, on_policy=s.on_policy
                    )
                    s.entropy = sum(ents[i]) / max(1, len(ents[i]))
                    if vals is not None:
                        s.old_values = vals[i]
        self.model.train()

    def _update(self, samples: list[Sample], metrics: dict[str, float]) -> int:
        """PPO epochs over minibatches; returns the tokens processed."""
        pretraining = self.algo.pretraining(self.value_pretrained)
        samples = self.algo.train_on(samples)
        stats: dict[str, list[float]] = defaultdict(list)
        tokens = 0
        rng = random.Random(int(self.cfg["seed"]) * 7919 + self.step)  # noqa: S311 - minibatch order
        for _ in range(int(self.cfg["ppo_epochs"])):
            order = samples[:]
            rng.shuffle(order)
            for mb in self._minibatches(order):
                tokens += self._train_minibatch(mb, stats, pretraining=pretraining)
        self._record_update(samples, stats, metrics, pretraining=pretraining)
        return tokens

    def _train_minibatch(self, mb: list[Sample], stats: dict[str, list[float]], *, pretraining: bool) -> int:
        """A critic step (where there is a critic), then a policy step unless pretraining; the tokens."""
        ids, attn, mask, plen = pad_batch(mb, int(self.tokenizer.pad_token_id), self.device)
        batch = _Minibatch(mb, ids, attn, mask, plen, self._images(mb))
        tokens = int(attn.sum())
        if self.critic is not None:
            self._critic_step(batch, stats)
        if not pretraining:
            self._policy_step(batch, stats)
        return tokens

    def _critic_step(self, b: _Minibatch, stats: dict[str, list[float]]) -> None:
        vals = self.critic(b.ids, b.attn, b.images)[:, :-1]
        returns = scatter([s.returns for s in b.samples], b.mask, b.plen)
        old_v = scatter([s.old_values for s in b.samples], b.mask, b.plen)
        clip = float(self.cfg["value_clip"])
        vloss = value_loss(vals, returns, b.mask, old_values=old_v if clip > 0 else None, clip=clip)
        self.critic_opt.zero_grad(set_to_none=True)
        vloss.backward()
        self._clip(trainable_parameters(self.critic))
        self.critic_opt.step()
        stats["value_loss"].append(float(vloss.detach()))
        stats["explained_var"].append(explained_variance(vals.detach(), returns, b.mask))

    def _policy_step(self, b: _Minibatch, stats: dict[str, list[float]]) -> None:
        cfg = self.cfg
        logp, _ = token_logprobs(
            self.model, b.ids, b.attn, mask=b.mask, images=b.images, stats=stats, sampling=cfg
        )
        old = scatter([s.old_logprobs for s in b.samples], b.mask, b.plen)
        adv = scatter([s.advantages for s in b.samples], b.mask, b.plen)
        weights = self.algo.is_weights(b.samples, old, b.mask, b.plen, stats)
        loss, pstats = policy_loss(str(cfg.get("ratio_level", "token")))(  # per token, or GSPO's per turn
            logp,
            old,
            adv,
            b.mask,
            eps_low=float(cfg["eps_low"]),
            eps_high=float(cfg["eps_high"]),
            dual_clip=self.algo.dual_clip,
            is_weights=weights,
        )
        if self.ref is not None:
            with self.torch.no_grad():
                ref_lp, _ = token_logprobs(
                    self.ref, b.ids, b.attn, mask=b.mask, images=b.images, sampling=cfg
                )
            kl = (kl_penalty(logp, ref_lp) * b.mask).sum() / b.mask.sum().clamp(min=1.0)
            loss = loss + float(cfg["kl_coef"]) * kl
            stats["kl_ref"].append(float(kl.detach()))
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        stats["grad_norm"].append(self._clip(self.params))
        self.optimizer.step()
        stats["policy_loss"].append(float(loss.detach()))
        for key in ("clip_frac", "approx_kl", "dual_clip_frac", "ratio_max"):
            if key in pstats:
                stats[key].append(float(pstats[key]))

    def _record_update(
        self,
        samples: list[Sample],
        stats: dict[str, list[float]],
        metrics: dict[str, float],
        *,
        pretraining: bool,
    ) -> None:
        """The update's counts, and its stats as metrics (means; maxima and minima where they say more)."""
        if pretraining:
            self.value_pretrained += 1
            metrics["rl/value_pretraining"] = 1.0
            self.untrained["value_pretraining"] += 1
        else:
            self.turns_trained += len(samples)
        for key, vals in stats.items():
            if vals:
                name = {"approx_kl": "rl/kl"}.get(key, f"rl/{key}")
                if key in ("is_weight_max", "ratio_max"):
                    metrics[name] = max(vals)
                elif key == "is_weight_min":
                    metrics[name] = min(vals)
                else:
                    metrics[name] = sum(vals) / len(vals)
        if samples:
            metrics["rl/entropy"] = sum(s.entropy for s in samples) / len(samples)
            metrics["rl/response_len"] = sum(len(s.response) for s in samples) / len(samples)
        metrics["rl/turns_trained"] = float(len(samples))

    # --- the loop ---

    def run(self, source: RolloutSource | None) -> RunResult:
        if source is None:
            raise TrainingError(f"a {self.spec.algorithm} run needs live rollouts (a rollout source)")
        tasks = list(source.tasks())
        if not tasks:
            raise TrainingError("there are no tasks to roll out on")
        total = int(self.cfg["iterations"])
        metrics: dict[str, float] = {}
        # Set back once more: the critic's, the reference's and the adapters' set-up drew from them.
        set_rng_state(self.state.get("rng"))
        self._start(source, tasks, total)
        while self.step < total:
            waited = time.monotonic()
            groups = self._collect(source, tasks)
            if groups is None:
                self.hooks.on_log(f"stop requested: saving iteration {self.step}")
                path = self.save(self.extra_state(), metrics)
                return RunResult("stopped", self.step, path, metrics)
            metrics = self._iteration(source, groups, time.monotonic() - waited, total)
            self._checkpoint(source, metrics, total)
        if self.turns_trained == 0:
            raise TrainingError(self._why_untrained(total))
        return RunResult("succeeded", self.step, latest_checkpoint(self.out_dir), metrics)

    def _start(self, source: RolloutSource, tasks: Sequence[str], total: int) -> None:
        """Publish the starting policy (saved as step 0 unless resumed) and start the utilisation window."""
        if self.spec.resume_from is None:
            current = self.save(self.extra_state(), {})  # step 0: the starting policy, published as v0
        else:
            current = Path(self.spec.resume_from)
        source.publish(self.version, current)
        self.hooks.on_log(
            f"{self.spec.algorithm.upper()} on {len(tasks)} task(s): {total} iterations of "
            f"{self.cfg['episodes_per_iteration']} episodes, policy v{self.version}, on {self.device}"
        )
        source.utilisation()  # starts its window

    def _iteration(
        self, source: RolloutSource, groups: list[list[RLEpisode]], wait_s: float, total: int
    ) -> dict[str, float]:
        """Train on one iteration's groups of episodes; its metrics (reported). Success and reward count
        the groups that had nothing to teach too: they measure the policy, not what trained it."""
        started = time.monotonic()
        episodes = [ep for g in groups for ep in g]
        metrics = self._episode_metrics(episodes + [ep for g in self.agreed for ep in g], wait_s)
        metrics["rl/episodes"] = float(len(episodes))
        metrics["rl/sampled_episodes"] = float(self.sampled)
        metrics["rl/groups_uninformative"] = float(len(self.agreed))
        before = self.turns_trained
        samples = self.algo.samples(groups, metrics, self)
        if self.too_long:  # turns over max_seq_len so far (an RL turn is never cut: trainer._sample)
            metrics["rl/skipped_too_long"] = float(self.too_long)
        self.mismatch.report(metrics, rebuild_differs=self.rebuild_differs)
        tokens = self._update(samples, metrics) if samples else 0
        trained = self.turns_trained - before  # turns the policy itself was updated on
        self.unpublished += trained
        metrics["rl/turns_trained"] = float(trained)
        self.step += 1
        elapsed = time.monotonic() - started
        metrics["train/step_time_s"] = elapsed
        metrics["train/tokens_per_s"] = tokens / max(elapsed, 1e-9)
        util = source.utilisation()
        if util is not None:
            metrics["rl/env_utilisation"] = util
        self.hooks.on_metrics(self.step, metrics)
        what = f"{trained} turns trained" if trained else "trained nothing, so no new version"
        if not trained and metrics.get("rl/value_pretraining"):
            what = "trained nothing of the policy (value pretraining: the critic only), so no new version"
        self.hooks.on_log(
            f"iteration {self.step}/{total}: success {metrics['rl/success']:.2f} over {len(episodes)} "
            f"episodes ({self.sampled} sampled, {len(self.agreed)} group(s) all alike), {what}, "
            f"{elapsed:.1f} s update, {wait_s:.1f} s waiting"
        )
        return metrics

    def _episode_metrics(self, episodes: list[RLEpisode], wait_s: float) -> dict[str, float]:
        metrics = {
            "rl/reward": sum(ep.reward for ep in episodes) / len(episodes),
            "rl/success": sum(ep.success for ep in episodes) / len(episodes),
            "rl/episodes": float(len(episodes)),
            "rl/policy_lag": sum(self.version - ep.policy_version for ep in episodes) / len(episodes),
            "rl/dropped_stale": float(self.dropped),
            "rl/wait_s": wait_s,
        }
        by_task: dict[str, list[float]] = defaultdict(list)
        for ep in episodes:
            by_task[ep.task_id].append(float(ep.success))
        for task, vals in by_task.items():
            metrics[f"rl/success/{task}"] = sum(vals) / len(vals)
        return metrics

    def _checkpoint(self, source: RolloutSource, metrics: dict[str, float], total: int) -> None:
        """Every `publish_every` iterations a new policy version, saved and published, if the policy trained
        since the last one (the same weights as a new version would only make rollouts look stale); a
        checkpoint also every `checkpoint_every` iterations and at the last."""
        publish = self.step % int(self.cfg["publish_every"]) == 0 and self.unpublished > 0
        if publish or self.step % int(self.cfg["checkpoint_every"]) == 0 or self.step == total:
            if publish:
                self.version += 1
                self.versions_seen.append(self.version)
                self.unpublished = 0
                self.pool.advance(self.version)
            path = self.save(self.extra_state(), metrics)
            if publish:
                source.publish(self.version, path)

    def _why_untrained(self, iterations: int, *, waiting: int = 0) -> str:
        """Why a run's policy was updated on no turn at all (or, `waiting`, why the next iteration
        cannot get episodes to train on), from what this attempt counted (see untrained.py)."""
        return why_untrained(
            self.spec.algorithm,
            self.untrained,
            too_long=self.too_long,
            max_seq_len=int(self.cfg["max_seq_len"]),
            iterations=iterations,
            waiting=waiting,
        )
