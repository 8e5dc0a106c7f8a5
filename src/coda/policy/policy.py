"""ChunkPolicy: observation encoder, Gaussian chunk actor and chunk critic behind the Policy contract.

Contract: `forward(batch) -> (loss, metrics)`, `predict_chunk(obs) -> (H, A)`, `select_action(obs)` from a
queue refilled by `predict_chunk` (or ACT-style temporal ensembling), `reset()`, `value(obs, chunk)`.

Training losses:
- behaviour cloning of the mean chunk (L1 or MSE on normalised relative actions); with
  `improvement = "awr"` each sample is weighted by exp(A / beta) with A = Q(s, a) - V(s) from the target
  critic, normalised over the batch (`coda.policy.targets.awr_weights`; advantage-weighted regression),
  once the critic has been warmed on the run's data (`critic_warmup` critic-only steps, `train_policy`);
- the log-std head by Gaussian NLL around the detached mean, so sampling candidates never changes the
  mean that BC fits;
- with `train_critic`, twin Q(s, a_{t:t+h}) regress n-step chunk targets with optional potential shaping
  (see `coda.policy.targets`) and V(s) regresses an expectile of the target Q over dataset chunks (IQL
  style, so V needs no sampling from the policy). Targets use a Polyak-averaged copy of the critic.

Inference: the mean chunk, or with `value_guided_samples = N > 0`, N candidates (the mean and N-1 samples)
of which the one with the highest Q (min of the twins) is executed. `predict_chunks` takes many observations
at once (batched rollouts) and runs them in blocks of exactly `INFERENCE_ROWS` rows, each block padded to a
shape set by its rows' own sizes, so an observation's chunk is the same bits whatever else shares its batch;
each episode's candidates come from its own stream (`EpisodeActions.rng`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coda.policy.config import PolicyConfig
from coda.policy.errors import PolicyUsageError
from coda.policy.features import (
    Frame, NormStats, ObsBatch, ObsDims, chunk_from_frame, chunk_in_frame, gripper_pose, obs_to_batch, padded_sizes,
    resize_batch, to_absolute, to_relative,
)
from coda.policy.networks import (VALUE_BINS, ChunkActorHead, ChunkCriticNet, ObsEncoder, TextRead,
                                  destination_or_self, value_of)
from coda.policy.samples import CriticBatch, TrainBatch
from coda.policy.targets import awr_weights, chunk_targets, expectile_loss
from coda.policy.text import TextEmbedder, text_encoder_for

ARCH_VERSION = 2  # 2: word-piece grounding (TokenGrounding)
INFERENCE_ROWS = 16  # observations per inference forward pass; a batch is run in blocks of exactly this many
_LADDER = torch.tensor([4, 8, 8])  # inference pads entities, description and instruction tokens to multiples


def block_sizes(ob: ObsBatch) -> Tensor:
    """(B, 3) the entity, description-token and instruction-token extents each row is padded to for inference:
    its own (`padded_sizes`) rounded up to the ladder `_LADDER`."""
    return (padded_sizes(ob) + _LADDER - 1) // _LADDER * _LADDER


def _take(extra: Any, idx: Tensor) -> Any:
    """Rows `idx` of a per-row input of `ChunkPolicy._blocks`: a (B, ...) tensor, or a list of per-row values
    (tensors, or tuples of tensors) stacked into one."""
    if extra is None or isinstance(extra, Tensor):
        return None if extra is None else extra[idx]
    return _stack([extra[i] for i in idx.tolist()])


def _stack(rows: list[Any]) -> Any:
    first = rows[0]
    if first is None or isinstance(first, Tensor):
        return None if first is None else torch.stack(rows)
    return _rebuild(first, [_stack(list(field)) for field in zip(*rows)])


def _row(res: Any, j: int) -> Any:
    """Row j of a block's result: a tensor, or a (named) tuple of tensors and Nones."""
    if res is None or isinstance(res, Tensor):
        return None if res is None else res[j]
    return _rebuild(res, [_row(field, j) for field in res])


def _rebuild(like: tuple, fields: list[Any]) -> tuple:
    """A tuple of `like`'s type (plain or named) holding `fields`."""
    return type(like)(*fields) if hasattr(like, "_fields") else tuple(fields)


def _cat_obs(a: ObsBatch, b: ObsBatch) -> ObsBatch:
    """Concatenate two observation batches along B, padding entity slots (M) and token slots (J, L)."""
    m = max(a.objects.shape[1], b.objects.shape[1])
    j = max(a.object_tokens.shape[2], b.object_tokens.shape[2])
    n = max(a.instruction_tokens.shape[1], b.instruction_tokens.shape[1])
    a, b = resize_batch(a, m, j, n), resize_batch(b, m, j, n)
    return ObsBatch(*(torch.cat([x, y]) for x, y in zip(a, b)))


def pointer_loss(logits: Tensor, goal_rows: Tensor) -> tuple[Tensor | None, float]:
    """Cross-entropy of the role pointers (B, M, R) against the goal's entity rows (B, R'), over the roles
    a sample's goal has (row >= 0 and a real entity); (None, nan) when no sample has one."""
    r = min(logits.shape[2], goal_rows.shape[1])
    lg = logits[:, :, :r].transpose(1, 2).reshape(-1, logits.shape[1])  # (B * r, M)
    tgt = goal_rows[:, :r].reshape(-1)
    ok = (tgt >= 0) & (tgt < lg.shape[1])
    ok &= torch.isfinite(lg.gather(1, tgt.clamp(0, lg.shape[1] - 1).unsqueeze(1)).squeeze(1))
    if not bool(ok.any()):
        return None, float("nan")
    lg, tgt = lg[ok], tgt[ok]
    return F.cross_entropy(lg, tgt), float((lg.argmax(1) == tgt).float().mean())


class ChunkPolicy(nn.Module):
    """Action-chunk policy with a chunk critic.

    Args:
        cfg: the policy configuration.
        dims: input and action sizes (from the dataset or an observation).
        stats: normalisation statistics (from the dataset); stored as buffers, saved in checkpoints.
        text: the sentence embedder; default the one named by `cfg.text_model`.
    """

    def __init__(self, cfg: PolicyConfig, dims: ObsDims, stats: NormStats, text: TextEmbedder | None = None) -> None:
        super().__init__()
        self.cfg = cfg
        self.dims = dims
        self.text = text if text is not None else text_encoder_for(cfg.text_model)
        if self.text.dim != dims.text:
            raise PolicyUsageError(f"text embedder '{self.text.model_id}' has dim {self.text.dim}, dims.text = {dims.text}")
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)  # same seed + config -> same initial weights, global RNG untouched
            self.encoder = ObsEncoder(dims, cfg.hidden, cfg.layers, cfg.heads, cfg.grounding, cfg.read_motion, cfg.frame)
            self.actor = ChunkActorHead(cfg.hidden, cfg.chunk_len, dims.action)
            self.critic = ChunkCriticNet(dims, cfg.hidden, cfg.layers, cfg.heads, cfg.chunk_len, cfg.grounding, cfg.frame)
        self.critic_target = copy.deepcopy(self.critic)
        self.critic_target.requires_grad_(False)
        for k, v in stats.to_dict().items():
            self.register_buffer(f"stats_{k}", v)
        if tuple(self.stats.action_mean.shape) != (cfg.chunk_len, dims.action):
            raise PolicyUsageError(
                f"stats action_mean has shape {tuple(self.stats.action_mean.shape)}, want ({cfg.chunk_len}, {dims.action})"
            )
        self.register_buffer("critic_updates", torch.zeros((), dtype=torch.long))
        self._rng = torch.Generator().manual_seed(cfg.seed)
        self.train_rng: torch.Generator | None = None  # set by the training loop for the losses' own draws
        self.eval()  # inference mode unless a training loop says otherwise
        self.reset()

    @property
    def stats(self) -> NormStats:
        """The normalisation statistics (views of the `stats_*` buffers)."""
        return NormStats(**{k: getattr(self, f"stats_{k}") for k in NormStats.FIELDS})

    # ---- identity -------------------------------------------------------------------------------------

    def architecture(self) -> dict[str, Any]:
        """The fields that fix the parameter shapes; checkpoints must match them exactly."""
        return {
            "arch_version": ARCH_VERSION,
            "chunk_len": self.cfg.chunk_len,
            "hidden": self.cfg.hidden,
            "layers": self.cfg.layers,
            "heads": self.cfg.heads,
            "grounding": self.cfg.grounding,
            **({"frame": self.cfg.frame} if self.cfg.frame != "gripper" else {}),
            "text_model_id": self.text.model_id,
            **self.dims.as_dict(),
        }

    def remember_goals(self, embeddings: Tensor, values: Tensor) -> None:
        """Give the goal-value readers (actor and critic) the training data's instructions with values."""
        for enc in (self.encoder, self.critic.encoder, self.critic_target.encoder):
            if enc.grounding is not None:
                enc.goal.set_memory(embeddings, values)

    def fit_buffers(self, state_dict: Mapping[str, Tensor]) -> None:
        """Size the remembered-goal buffers like those of `state_dict` (a checkpoint's), so it loads exactly."""
        for name, buf in list(self.named_buffers()):
            if name.endswith((".goal.memory", ".goal.memory_bin")) and name in state_dict:
                module = self.get_submodule(name.rsplit(".", 1)[0])
                setattr(module, name.rsplit(".", 1)[1], torch.empty_like(state_dict[name]))

    def actor_parameters(self) -> list[nn.Parameter]:
        """Parameters trained by the actor losses (encoder and chunk head)."""
        return [*self.encoder.parameters(), *self.actor.parameters()]

    def gradient_groups(self) -> dict[str, list[nn.Parameter]]:
        """Parameters whose gradient norm is clipped together: the actor (encoder and chunk mean), its spread
        head, and the critic when it trains. The groups share no loss term, so one clip over all of them
        would let one group's gradient scale another's: a spread fitted tight in SFT meets a round's new
        data with NLL gradients thousands of times the BC gradient, and a joint clip then all but stops
        behaviour cloning for the round."""
        spread = list(self.actor.log_std.parameters())
        groups = {"actor": [q for q in self.actor_parameters() if all(q is not r for r in spread)], "spread": spread}
        if self.cfg.train_critic:
            groups["critic"] = list(self.critic.parameters())
        return groups

    # ---- training -------------------------------------------------------------------------------------

    def forward(self, batch: TrainBatch) -> tuple[Tensor, dict[str, float]]:  # type: ignore[override]
        """Total loss and float metrics for one batch (BC or AWR actor loss, std NLL, critic losses)."""
        cfg, stats = self.cfg, self.stats
        bc = batch.bc
        enc = self.encoder.encode(bc.obs, stats, bc.goal_rows, bc.goal_value, bc.layout_scale)
        target = stats.normalize_actions(self.chunk_in(bc.chunk, enc.frame))  # (B, H, A)
        mean, log_std = self.actor(enc.z)
        err = mean - target
        per_sample = err.abs().mean((1, 2)) if cfg.bc_loss == "l1" else err.pow(2).mean((1, 2))  # (B,)
        metrics: dict[str, float] = {}
        if cfg.improvement == "awr":
            with torch.no_grad():
                z = self.critic_target.encode(bc.obs, stats, enc.rows).z
                adv = torch.minimum(*self.critic_target.q_from(z, target)) - self._awr_baseline(z, mean, log_std)
                w, wm = awr_weights(adv, cfg.awr_beta, cfg.awr_max_weight)
            actor_loss = (w * per_sample).mean()
            metrics |= {"adv_mean": float(adv.mean()), "awr_weight_max": float(w.max()), **wm}
        else:
            actor_loss = per_sample.mean()
        # Gaussian NLL (constant dropped) around the detached mean trains the spread only
        nll = (0.5 * ((target - mean.detach()) * torch.exp(-log_std)).pow(2) + log_std).mean()
        loss = actor_loss + nll
        metrics |= {"bc": float(per_sample.mean().detach()), "actor": float(actor_loss.detach()), "std_nll": float(nll.detach())}
        if enc.pointer is not None and bc.goal_rows is not None and cfg.grounding_weight > 0:
            rows = destination_or_self(bc.goal_rows) if enc.frame is not None else bc.goal_rows
            g_loss, g_acc = pointer_loss(enc.pointer, rows)
            if g_loss is not None:
                loss = loss + cfg.grounding_weight * g_loss
                metrics |= {"grounding": float(g_loss.detach()), "grounding_acc": g_acc}
        if enc.goal_value is not None and bc.goal_value is not None and cfg.grounding_weight > 0:
            has = torch.isfinite(bc.goal_value)
            if bool(has.any()):
                bins = torch.tensor(VALUE_BINS)
                want = (bc.goal_value[has].unsqueeze(1) - bins).abs().argmin(dim=1)
                v_loss = F.cross_entropy(enc.goal_value[has], want)
                loss = loss + cfg.grounding_weight * v_loss
                metrics |= {"goal_value": float(v_loss.detach()),
                            "goal_value_acc": float((enc.goal_value[has].argmax(1) == want).float().mean())}
        if cfg.train_critic:
            if batch.critic is None:
                raise PolicyUsageError("train_critic = true but the batch has no critic samples")
            q_loss, v_loss, cm = self._critic_loss(batch.critic)
            loss = loss + q_loss + v_loss
            metrics |= cm
        metrics["loss"] = float(loss.detach())
        return loss, metrics

    def chunk_in(self, rel: Tensor, frame: Frame | None) -> Tensor:
        """Relative chunks (B, ..., H, A) in the world's axes -> the axes the network predicts in."""
        return rel if frame is None else chunk_in_frame(rel, frame)

    def _awr_baseline(self, z: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
        """What a demonstrated chunk's Q is compared with (B,): V(s), or ("policy") the mean twin-min Q of
        `awr_samples` chunks drawn from the actor's Gaussian at s. The second compares actions in the same state
        with the same Q head, so an error of the critic that is constant over a state's actions (a phase of
        the task valued too high or too low) cancels instead of reweighting whole phases."""
        if self.cfg.awr_baseline == "value":
            return self.critic_target.v_from(z)
        k, (b, h, a) = self.cfg.awr_samples, mean.shape
        noise = torch.randn((k, b, h, a), dtype=mean.dtype, generator=self.train_rng)
        cand = mean.detach() + log_std.detach().exp() * noise
        q = torch.minimum(*self.critic_target.q_from(z.repeat(k, 1), cand.reshape(k * b, h, a)))
        return q.view(k, b).mean(0)

    def critic_loss(self, cb: CriticBatch) -> tuple[Tensor, dict[str, float]]:
        """The chunk critic's losses alone (Q to its shaped n-step targets, V to an expectile of Q)."""
        q_loss, v_loss, metrics = self._critic_loss(cb)
        return q_loss + v_loss, metrics

    def _critic_loss(self, cb: CriticBatch) -> tuple[Tensor, Tensor, dict[str, float]]:
        stats, tgt = self.stats, self.critic_target
        rows = None if cb.goal_rows is None else torch.cat([cb.goal_rows, cb.goal_rows])
        with torch.no_grad():
            both = tgt.encode(_cat_obs(cb.obs, cb.next_obs), stats, rows)  # one pass for both
            z_t, z_next = both.z.chunk(2)
            v_next = tgt.v_from(z_next)
            y = chunk_targets(cb.reward_sum, cb.discount, cb.done, v_next, cb.phi, cb.phi_next)
        enc = self.critic.encode(cb.obs, stats, cb.goal_rows)
        chunk = stats.normalize_actions(self.chunk_in(cb.chunk, enc.frame))
        with torch.no_grad():
            q_t = torch.minimum(*tgt.q_from(z_t, chunk))
        z = enc.z
        q1, q2 = self.critic.q_from(z, chunk)
        q_loss = F.mse_loss(q1, y) + F.mse_loss(q2, y)
        v = self.critic.v_from(z)
        v_loss = expectile_loss(q_t - v, self.cfg.expectile)
        return q_loss, v_loss, {
            "q_loss": float(q_loss.detach()), "v_loss": float(v_loss.detach()), "q_mean": float(q1.detach().mean()),
            "v_mean": float(v.detach().mean()), "target_mean": float(y.mean()),
        }

    @torch.no_grad()
    def update_target(self) -> None:
        """Polyak-average the critic into its target copy; count one critic update."""
        targets, online = list(self.critic_target.parameters()), list(self.critic.parameters())
        torch._foreach_lerp_(targets, online, self.cfg.polyak)  # p_t <- p_t + tau (p - p_t), one kernel per list
        self.critic_updates += 1

    # ---- inference ------------------------------------------------------------------------------------

    def _batch(self, obs: Mapping[str, Any] | Sequence[Mapping[str, Any]] | ObsBatch,
               word_pieces: bool = True) -> ObsBatch:
        if isinstance(obs, ObsBatch):
            ob = obs
        else:
            ob = obs_to_batch([obs] if isinstance(obs, Mapping) else list(obs), self.text, word_pieces)
        if ob.proprio.shape[-1] != self.dims.proprio or ob.objects.shape[-1] != self.dims.object_features:
            raise PolicyUsageError(
                f"observation has P={ob.proprio.shape[-1]}, F={ob.objects.shape[-1]} but the policy was built for "
                f"P={self.dims.proprio}, F={self.dims.object_features}"
            )
        return ob

    def _require_critic(self, what: str) -> None:
        if int(self.critic_updates) == 0:
            raise PolicyUsageError(f"{what} needs a trained critic, but this policy's critic has 0 updates")

    def _blocks(self, fn: Any, ob: ObsBatch, *extra: Any, words_read: bool = False) -> Tensor:
        """`fn(block, *extra_rows)` over the rows of `ob`, concatenated back to B rows in their order (see
        `_block_rows`)."""
        return torch.stack(self._block_rows(fn, ob, *extra, words_read=words_read))

    def _block_rows(self, fn: Any, ob: ObsBatch, *extra: Any, words_read: bool = False) -> list[Any]:
        """`fn(block, *extra_rows)` over the rows of `ob`, each row's result in a list in their order: a tensor's
        row, or a tuple of rows where `fn` gives a tuple. An `extra` is a (B, ...) tensor, or a list of B
        per-row values (what an earlier call gave for these rows) stacked per block. Rows are
        grouped by their own padded extents rounded up to a fixed ladder (`padded_sizes`, entities to a
        multiple of 4, word pieces to a multiple of 8), each group padded to exactly that shape and run in
        blocks of exactly `INFERENCE_ROWS` (the last one filled with copies of its first row). A row's block
        shape then depends on that row alone, and so do its bits: CPU kernels sum in an order that depends on
        the shapes (rows, and the masked entity and token slots; how, differs between CPUs), not on the other
        rows' values. With `words_read` (`fn` is given what the words read as, `TextRead`, and reads no word
        piece) rows are grouped by their entity extent alone: the token slots are not computed on."""
        b, k = ob.proprio.shape[0], INFERENCE_ROWS
        sizes = block_sizes(ob)
        if words_read:
            sizes[:, 1], sizes[:, 2] = ob.object_tokens.shape[2], ob.instruction_tokens.shape[1]
        out: list[Tensor | None] = [None] * b
        for key in sorted({tuple(r) for r in sizes.tolist()}):
            rows = torch.nonzero((sizes == torch.tensor(key)).all(dim=1)).flatten()
            group = resize_batch(ob if rows.shape[0] == b else ob.index(rows), *key)  # all rows: in order
            for lo in range(0, rows.shape[0], k):
                idx = torch.arange(lo, min(lo + k, rows.shape[0]))
                real = idx.shape[0]
                idx = torch.cat([idx, idx[:1].expand(k - real)])
                block = group if real == k == rows.shape[0] else group.index(idx)  # a whole group of k: itself
                res = fn(block, *(_take(e, rows[idx]) for e in extra))
                for j, r in enumerate(rows[lo:lo + real].tolist()):
                    out[r] = _row(res, j)
        return out

    def _noise(self, b: int, n: int, generators: Sequence[torch.Generator] | None) -> Tensor:
        """(B, n-1, H, A) standard normal draws for sampled candidates, row i from `generators[i]` (all rows
        from the policy's own stream when None)."""
        shape = (max(n - 1, 0), self.cfg.chunk_len, self.dims.action)
        if generators is None:
            return torch.randn((b, *shape), generator=self._rng)
        if len(generators) != b:
            raise PolicyUsageError(f"generators holds {len(generators)} streams for {b} observations")
        return torch.stack([torch.randn(shape, generator=g) for g in generators])

    def _candidates(self, ob: ObsBatch, eps: Tensor, rows: Tensor | None = None,
                    values: Tensor | None = None, text: TextRead | None = None) -> tuple[Tensor, Any]:
        """Normalised candidates (B, n, H, A), the mean first, in the axes the actor predicts in (the task
        frame of `rows` where given, the goal's number `values` where given, the words read as `text` where
        given); and the actor's encoding (its frame and rows)."""
        enc = self.encoder.encode(ob, self.stats, rows, values=values, text=text)
        mean, log_std = self.actor(enc.z)
        samples = mean.unsqueeze(1) + self.cfg.sample_temperature * torch.exp(log_std).unsqueeze(1) * eps
        return torch.cat([mean.unsqueeze(1), samples], dim=1), enc

    @torch.no_grad()
    def candidate_chunks(self, obs: Mapping[str, Any] | ObsBatch, n: int) -> Tensor:
        """(B, n, H, A) normalised relative candidates: the mean first, then n-1 Gaussian samples (along the
        task frame's axes with frame "task")."""
        ob = self._batch(obs)
        return self._blocks(lambda o, e: self._candidates(o, e)[0], ob, self._noise(ob.proprio.shape[0], n, None))

    def _to_env(self, z: Tensor, ob: ObsBatch, frame: Frame | None) -> Tensor:
        """Normalised relative chunks (B, ..., H, A) (along `frame`'s axes when given) -> absolute env targets."""
        pose = gripper_pose(ob.proprio)
        pose = pose.view(pose.shape[0], *([1] * (z.dim() - 3)), 4)
        rel = self.stats.denormalize_actions(z)
        if frame is None:
            return to_absolute(rel, pose)
        return to_absolute(chunk_from_frame(rel, frame), pose, half_turn=frame.turned)

    def _sample_block(self, ob: ObsBatch, eps: Tensor) -> Tensor:
        cands, enc = self._candidates(ob, eps)
        return self._to_env(cands, ob, enc.frame)

    @torch.no_grad()
    def sample_chunks(self, obs: Mapping[str, Any], n: int) -> np.ndarray:
        """n candidate chunks (n, H, A) as absolute env targets; row 0 is the mean chunk."""
        ob = self._batch(obs)
        return self._blocks(self._sample_block, ob, self._noise(ob.proprio.shape[0], n, None))[0].numpy()

    def _chunk_block(self, ob: ObsBatch, eps: Tensor | None, rows: Tensor | None = None,
                     values: Tensor | None = None, text: TextRead | None = None) -> Tensor:
        """The executed chunk (B, H, A) in env targets: the mean, or the best of the candidates by Q; in the
        task frame of `rows` (B, R), with the goal's number `values` (B,) and the words read as `text` where
        given."""
        if eps is None:
            enc = self.encoder.encode(ob, self.stats, rows, values=values, text=text)
            best, _ = self.actor(enc.z)
        else:
            cands, enc = self._candidates(ob, eps, rows, values, text)
            best = cands[torch.arange(cands.shape[0]), self._q_normalised(ob, cands, enc.rows).argmax(dim=1)]
        return self._to_env(best, ob, enc.frame)

    @torch.no_grad()
    def predict_chunks(self, observations: Sequence[Mapping[str, Any]],
                       generators: Sequence[torch.Generator] | None = None, rows: Tensor | None = None,
                       values: Tensor | None = None, texts: Sequence[TextRead] | None = None) -> np.ndarray:
        """The next H absolute actions (B, H, A) for each observation (value-guided if configured), with
        observation i's candidates drawn from `generators[i]` (default: the policy's own stream), with
        frame "task" acting on the entity rows `rows[i]` (R,) where given (default: its own pointers' picks),
        and on the goal's number `values[i]` where given (default: its own reading); `texts[i]`: what the
        encoder read from observation i's words at its episode's first chunk (`chunks_for`; default: read now,
        the same bits either way). A row does not depend on which other observations share the batch."""
        n = self.cfg.value_guided_samples
        ob = self._batch(observations, word_pieces=n > 0 or texts is None)  # read words: no word piece is read again
        if n > 0:
            self._require_critic("value-guided selection")
            eps = self._noise(ob.proprio.shape[0], n, generators)
            return self._blocks(self._chunk_block, ob, eps, rows, values, texts).numpy()  # the critic reads the words
        return self._blocks(lambda o, r, v, t: self._chunk_block(o, None, r, v, t), ob, rows, values, texts,
                            words_read=texts is not None).numpy()

    @torch.no_grad()
    def ground(self, observations: Sequence[Mapping[str, Any]]) -> Tensor | None:
        """The entity rows (B, R) the role pointers pick at each observation (what is moved, where to); None
        for a policy without role pointers."""
        read = self.read_instruction(observations)
        return None if read is None else read[0]

    @torch.no_grad()
    def read_instruction(self, observations: Sequence[Mapping[str, Any]]) -> tuple[Tensor, Tensor] | None:
        """What the instruction is read to ask at each observation: the entity rows (B, R) the role pointers
        pick and the goal's number (B,) (its bin's value); None for a policy without role pointers."""
        if self.encoder.grounding is None:
            return None
        read = self._read_words(observations)
        return torch.stack([r for r, _, _ in read]), torch.stack([v for _, v, _ in read])

    def _read_words(self, observations: Sequence[Mapping[str, Any]]
                    ) -> list[tuple[Tensor | None, Tensor | None, TextRead]]:
        """Per observation: the rows (R,) the role pointers pick, the goal's number () (both None without role
        pointers), and what the actor's encoder reads from the words alone (its `TextRead` row, at the padded
        shape the observation's blocks always have)."""
        grounded = self.encoder.grounding is not None

        def read(o: ObsBatch) -> tuple[Tensor | None, Tensor | None, TextRead]:
            text = self.encoder.read_text(o)
            if not grounded:
                return None, None, text
            enc = self.encoder.encode(o, self.stats, text=text)
            rows = enc.rows if enc.rows is not None else enc.pointer.argmax(dim=1)  # type: ignore[union-attr]
            return rows, value_of(enc.goal_value)[:, 0], text

        return self._block_rows(read, self._batch(observations))

    @torch.no_grad()
    def chunks_for(self, observations: Sequence[Mapping[str, Any]], episodes: Sequence["EpisodeActions"]) -> np.ndarray:
        """The next chunk (B, H, A) of each running episode at its observation: candidates drawn from the
        episode's own stream, and what its instruction asked as read at its first chunk kept for the whole
        episode: the entities it named (`ground_once`, frame "task") and the goal's number (`value_once`).
        The words do not change within an episode, but the scene evidence beside them does: the layout the
        pointers add as the gripper moves, the state the number's prior reads as a drawer opens. Read again
        at every chunk, a pointer unsure of an unfamiliar word would switch its destination back and forth,
        and an unsure number would slide to whatever such scenes asked at the state the episode has reached
        (a drawer asked "all the way" in unfamiliar words stops half open). What the encoder reads from the
        words alone is read once too (`TextRead`; the same bits as reading it again)."""
        once_rows = self.cfg.ground_once and self.cfg.frame == "task" and self.encoder.grounding is not None
        once_value = self.cfg.value_once and self.encoder.grounding is not None
        fresh = [i for i, e in enumerate(episodes) if e.text is None]
        if fresh:
            for i, (rows_i, value_i, text) in zip(fresh, self._read_words([observations[i] for i in fresh])):
                episodes[i].text = text
                episodes[i].rows = rows_i if once_rows else None
                episodes[i].value = value_i if once_value else None
        rows = torch.stack([e.rows for e in episodes]) if once_rows else None  # type: ignore[misc]
        values = torch.stack([e.value for e in episodes]) if once_value else None  # type: ignore[misc]
        return self.predict_chunks(observations, [e.rng for e in episodes], rows=rows, values=values,
                                   texts=[e.text for e in episodes])  # type: ignore[misc]

    @torch.no_grad()
    def predict_chunk(self, obs: Mapping[str, Any]) -> np.ndarray:
        """The next H absolute actions (H, A) for one observation (value-guided if configured)."""
        return self.predict_chunks([obs], [self._rng])[0]

    def _q_normalised(self, ob: ObsBatch, cands: Tensor, rows: Tensor | None = None) -> Tensor:
        """min-twin Q (B, n) of normalised relative candidates (B, n, H, A), read by the critic in the task
        frame of `rows` (the actor's) where given."""
        b, n = cands.shape[:2]
        z = self.critic.encode(ob, self.stats, rows).z.repeat_interleave(n, dim=0)
        q = torch.minimum(*self.critic.q_from(z, cands.flatten(0, 1)))
        return q.view(b, n)

    @torch.no_grad()
    def q_values(self, ob: ObsBatch, chunks: Tensor) -> Tensor:
        """Q(s, chunk) (B,) of absolute env chunks (B, H, A) at observations `ob` (min of the twin heads), the
        critic reading them in the actor's task frame (frame "task")."""
        self._require_critic("q_values()")
        rel = to_relative(chunks.to(torch.float32), gripper_pose(ob.proprio))
        rows = self.encoder.encode(ob, self.stats).rows
        frame = self.critic.encode(ob, self.stats, rows).frame
        cands = self.stats.normalize_actions(self.chunk_in(rel, frame)).unsqueeze(1)
        return self._q_normalised(ob, cands, rows)[:, 0]

    @torch.no_grad()
    def state_values(self, ob: ObsBatch) -> Tensor:
        """V(s) (B,) at observations `ob`."""
        self._require_critic("state_values()")
        return self.critic.v_from(self.critic.encode(ob, self.stats, self.encoder.encode(ob, self.stats).rows).z)

    @torch.no_grad()
    def value(self, obs: Mapping[str, Any], chunk: np.ndarray | Tensor) -> float:
        """Q(s, chunk) for an absolute chunk (H, A) of env actions (min of the twin heads)."""
        self._require_critic("value()")
        ob = self._batch(obs)
        c = torch.as_tensor(np.asarray(chunk, dtype=np.float32)).reshape(1, self.cfg.chunk_len, self.dims.action)
        return float(self.q_values(ob, c)[0])

    @torch.no_grad()
    def state_value(self, obs: Mapping[str, Any]) -> float:
        """V(s) for one observation."""
        self._require_critic("state_value()")
        return float(self.state_values(self._batch(obs))[0])

    def reset(self, seed: int | None = None) -> None:
        """Start an episode: clear the action queue and ensembling buffer; optionally reseed sampling."""
        if seed is not None:
            self._rng.manual_seed(seed)
        self._episode = EpisodeActions(self.cfg, self._rng)

    def episode_actions(self, seed: int) -> "EpisodeActions":
        """A new episode's action schedule with its own sampling stream seeded `seed`, for rollouts that step
        several episodes at once (`predict_chunks` with each episode's `rng`)."""
        return EpisodeActions(self.cfg, torch.Generator().manual_seed(seed))

    @torch.no_grad()
    def select_action(self, obs: Mapping[str, Any]) -> np.ndarray:
        """One absolute action (A,) of the current episode (`EpisodeActions`), predicting a chunk when the
        schedule needs one."""
        ep = self._episode
        if ep.needs_chunk():
            ep.push(self.chunks_for([obs], [ep])[0])
        return ep.pop()


class EpisodeActions:
    """One episode's action schedule: the queue of the current chunk's first `n_action_steps` actions
    (refilled when empty), or with `temporal_ensemble = k` every chunk predicted so far that covers the
    step, averaged with weights exp(-k * age) (oldest weighted most, as in ACT). `rng` draws the
    episode's sampled candidates."""

    def __init__(self, cfg: PolicyConfig, rng: torch.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        self.rows: Tensor | None = None  # (R,) the entities the episode acts on, fixed at its first chunk (`ground_once`)
        self.value: Tensor | None = None  # () the goal's number it acts on, fixed at its first chunk (`value_once`)
        self.text: TextRead | None = None  # what the encoder read from its words (at its first chunk)
        self.queue: list[np.ndarray] = []
        self.ensemble: list[tuple[int, np.ndarray]] = []  # (start step, chunk (H, A))
        self.t = 0

    def needs_chunk(self) -> bool:
        """Whether the next action needs a new chunk (every step with ensembling)."""
        return self.cfg.temporal_ensemble is not None or not self.queue

    def push(self, chunk: np.ndarray) -> None:
        """A chunk (H, A) predicted at the current step."""
        if self.cfg.temporal_ensemble is None:
            self.queue = list(chunk[: self.cfg.n_action_steps])
        else:
            self.ensemble = [(s, c) for s, c in self.ensemble if self.t - s < self.cfg.chunk_len]
            self.ensemble.append((self.t, chunk))

    def pop(self) -> np.ndarray:
        """The current step's action (A,); the schedule moves one step on."""
        k = self.cfg.temporal_ensemble
        if k is None:
            self.t += 1
            return self.queue.pop(0)
        preds = np.stack([c[self.t - s] for s, c in self.ensemble])  # oldest first
        w = np.exp(-k * np.arange(len(preds)))
        w = w / w.sum()
        action = (w[:, None] * preds).sum(0)
        # yaw is averaged on the circle so +pi and -pi do not cancel
        action[3] = math.atan2(float((w * np.sin(preds[:, 3])).sum()), float((w * np.cos(preds[:, 3])).sum()))
        self.t += 1
        return action.astype(np.float32)
