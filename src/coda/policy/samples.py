"""Episodes -> chunked training samples held as tensors, and the batches the policy trains on.

BC samples: at every observation t < T of a successful demonstration, the target is the next H executed
actions a_{t:t+H}; past the episode's end the last action is repeated (the padding means 'hold still', a
valid target near the goal). Rows that carry an expert label chunk (corrective data) use that label
instead, and corrective rows without a label give no BC sample. All targets are stored RELATIVE to the
gripper pose at s_t.

Critic samples: at every t < T of every episode (failures included), the executed chunk, its n-step reward
sum, discount gamma^k, terminal flag, the index of s_{t+k} and the potentials (see `coda.policy.targets`).

Wordings: an episode may carry other instructions for the same goal (`Episode.wordings`); a BC batch
built with `paraphrase_rate` p shows a sample with one of them (uniformly) instead of the recorded
instruction with probability p, so the policy learns that the wording does not change the task. A dataset
built with `unfamiliar_variants` K also holds, per episode, K copies of its recorded instruction with some words
replaced by words no scene uses (`coda.policy.text.unfamiliar_variants`); a batch built with `unfamiliar_rate`
q shows one of them instead with probability q (after the paraphrase draw), so a word the policy cannot place
does not move its choice.

Data weights: episodes may be tagged with a *source* (e.g. "replay", "expert", "corrective") and each source
given a weight; a BC batch then draws from source s with probability w_s / Σ w (over the sources present),
uniformly within it, so a small set of targeted demonstrations can take a fixed share of every batch however
much older data there is. With `max_oversample` c, no source is drawn more than c times as often as uniform
sampling over all BC samples would draw it (share_s <= c * n_s / N); what a capped source gives up goes to the
others by their weights. The cap keeps a handful of episodes (a round's few corrective demos) from being
replayed dozens of times per round and memorised. Without weights BC samples are drawn uniformly. Critic
samples are always uniform.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

from coda.policy.data import Episode
from coda.policy.errors import DatasetError
from coda.policy.features import (
    ACTION_DIM,
    FRAMES,
    NormStats,
    ObsBatch,
    ObsDims,
    chunk_in_frame,
    gripper_pose,
    inputs_in_frame,
    pad_tokens,
    task_frame,
    to_relative,
    validate_obs,
)
from coda.policy.targets import nstep_chunks
from coda.policy.text import TextEmbedder, unfamiliar_variants


class BCBatch(NamedTuple):
    """Behaviour-cloning samples."""

    obs: ObsBatch  # B observations
    chunk: Tensor  # (B, H, A) target chunk relative to the gripper pose, raw units
    goal_rows: Tensor | None = None  # (B, R) entity rows the goal names per role (-1: none), for grounding
    goal_value: Tensor | None = None  # (B,) the goal's number (NaN: none), for grounding
    layout_scale: Tensor | None = None  # (B,) factor on each sample's gradient to the pointers' layout logits (None: 1)


class CriticBatch(NamedTuple):
    """Chunk transitions (s_t, a_{t:t+k}, R, s_{t+k})."""

    obs: ObsBatch  # B observations s_t
    chunk: Tensor  # (B, H, A) executed chunk relative to the gripper pose at s_t
    reward_sum: Tensor  # (B,) sum_{i<k} gamma^i r_{t+i}
    discount: Tensor  # (B,) gamma^k
    done: Tensor  # (B,) bool, s_{t+k} is terminal
    next_obs: ObsBatch  # B observations s_{t+k}
    phi: Tensor  # (B,) weighted potential w * Phi(s_t) (0 without potentials)
    phi_next: Tensor  # (B,) w * Phi(s_{t+k}) (raw: the terminal convention is applied in the target)
    goal_rows: Tensor | None = None  # (B, R) entity rows the goal names per role (-1: none), for the task frame


@dataclass
class TrainBatch:
    """What `ChunkPolicy.forward` consumes; `critic` is None when no critic is trained."""

    bc: BCBatch
    critic: CriticBatch | None = None


def _source(sources: Sequence[str] | None, i: int, spec_id: str) -> str:
    if sources is None:
        return ""
    if i >= len(sources):
        raise DatasetError(f"sources has {len(sources)} entries but episode {i} ('{spec_id}') needs one")
    return str(sources[i])


def source_shares(counts: Mapping[str, int], weights: Mapping[str, float],
                  max_oversample: float | None = None) -> dict[str, float]:
    """Share of the BC batch per source: w_s / Σ w over the sources present, each capped at
    `max_oversample` · n_s / N when given, the capped sources' excess shared by the others' weights."""
    for s in counts:
        if s not in weights:
            raise DatasetError(f"source_weights has no weight for source '{s}' (weights given: {sorted(weights)})")
        w = weights[s]
        if not (np.isfinite(w) and w >= 0):
            raise DatasetError(f"source_weights['{s}'] = {w!r}; weights must be finite and >= 0")
    if max_oversample is not None and not (np.isfinite(max_oversample) and max_oversample >= 1):
        raise DatasetError(f"max_oversample = {max_oversample!r}; it must be >= 1 (1: uniform over all samples)")
    total = sum(weights[s] for s in counts)
    if total <= 0:
        raise DatasetError(f"source_weights {dict(weights)} give weight 0 to every source present {sorted(counts)}")
    if max_oversample is None:
        return {s: weights[s] / total for s in counts}
    n = sum(counts.values())
    cap = {s: max_oversample * counts[s] / n for s in counts}
    fixed: dict[str, float] = {}
    while True:  # water-filling: fix the sources over their cap, share the rest by weight
        free = [s for s in counts if s not in fixed]
        left = 1.0 - sum(fixed.values())
        w_free = sum(weights[s] for s in free)
        if w_free <= 0:  # every weighted source is capped: they fill the batch in proportion to their caps
            k = sum(fixed.values())
            return {s: fixed.get(s, 0.0) / k for s in counts}
        share = {s: left * weights[s] / w_free for s in free}
        over = [s for s in free if share[s] > cap[s] + 1e-12]
        if not over:
            return {**fixed, **share}
        fixed |= {s: cap[s] for s in over}


def _bc_probabilities(bc_src: Sequence[str], weights: Mapping[str, float],
                      max_oversample: float | None = None) -> tuple[Tensor, dict[str, float]]:
    """Per-BC-sample probabilities (each source's `source_shares`, uniform within it) and the shares."""
    counts: dict[str, int] = {}
    for s in bc_src:
        counts[s] = counts.get(s, 0) + 1
    shares = source_shares(counts, weights, max_oversample)
    prob = [shares[s] / counts[s] for s in bc_src]
    return torch.tensor(prob, dtype=torch.float64), shares


def _pad_chunk(actions: np.ndarray, start: int, h: int) -> np.ndarray:
    """actions[start:start+h] (K, A) padded by repeating the last row to (h, A)."""
    chunk = actions[start : start + h]
    if len(chunk) < h:
        chunk = np.concatenate([chunk, np.repeat(actions[-1:], h - len(chunk), axis=0)])
    return chunk


@dataclass
class _EpisodeRows:
    """What `ChunkDataset` gathers episode by episode before it becomes tensors: one row per observation, the
    strings they mention (ids in first-seen order, "" = 0), BC samples and chunk transitions."""

    strings: dict[str, int] = field(default_factory=lambda: {"": 0})  # string -> id
    proprio: list[np.ndarray] = field(default_factory=list)  # per row (P,)
    objects: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)  # per row (M, F) and mask (M,)
    obj_text: list[list[int]] = field(default_factory=list)  # per row, string id of each entity
    instr: list[int] = field(default_factory=list)  # per row, string id of the instruction
    row_episode: list[int] = field(default_factory=list)  # per row, its episode
    wordings: list[list[int]] = field(default_factory=list)  # per episode, string ids of its other wordings
    n_unfamiliar: int = 0  # unfamiliar-word variants kept per episode
    unfamiliar: list[list[int]] = field(default_factory=list)  # per episode, string ids of those variants
    goal_rows: list[tuple[int, ...]] = field(default_factory=list)  # per episode
    goal_values: list[float] = field(default_factory=list)  # per episode
    valued: dict[int, float] = field(default_factory=dict)  # string id of an instruction (or wording) -> goal value
    bc_row: list[int] = field(default_factory=list)
    bc_chunk: list[np.ndarray] = field(default_factory=list)  # (H, A) absolute chunks
    bc_src: list[str] = field(default_factory=list)
    cr_row: list[int] = field(default_factory=list)
    cr_next: list[int] = field(default_factory=list)
    cr_chunk: list[np.ndarray] = field(default_factory=list)  # (H, A) absolute chunks
    cr_r: list[np.ndarray] = field(default_factory=list)  # per episode (T,)
    cr_disc: list[np.ndarray] = field(default_factory=list)  # per episode (T,)
    cr_done: list[np.ndarray] = field(default_factory=list)  # per episode (T,)
    cr_phi: list[float] = field(default_factory=list)
    cr_phi_next: list[float] = field(default_factory=list)
    row0: int = 0  # the next episode's first row
    dims: tuple[int, int] | None = None  # (P, F) of every episode
    n_episodes: int = 0

    def _sid(self, s: str) -> int:
        return self.strings.setdefault(s, len(self.strings))

    def add(self, ep: Episode, src: str, h: int, gamma: float, shaping_weight: float) -> None:
        """Gather one episode's rows, BC samples (tagged `src`) and chunk transitions of length `h`."""
        self.n_episodes += 1
        parts = [validate_obs(o, f"episode '{ep.spec_id}' observation {t}") for t, o in enumerate(ep.observations)]
        d = (parts[0][0].shape[0], parts[0][1].shape[1])
        if self.dims is None:
            self.dims = d
        elif d != self.dims:
            raise DatasetError(f"episode '{ep.spec_id}' has (P, F) = {d}, earlier episodes {self.dims}")
        self.wordings.append([self._sid(w) for w in ep.wordings if w])
        self.goal_rows.append(tuple(ep.goal_rows))
        self.goal_values.append(float(ep.goal_value))
        recorded = str(ep.observations[0]["instruction"])
        said = {self._sid(recorded), *self.wordings[-1]}
        self.unfamiliar.append([self._sid(v) for v in unfamiliar_variants(recorded, self.n_unfamiliar)])
        if np.isfinite(ep.goal_value):
            for sid in said:
                self.valued.setdefault(sid, float(ep.goal_value))
        for pr, ob, mk, tx, ins in parts:
            self.proprio.append(pr)
            self.objects.append((ob, mk))
            self.obj_text.append([self._sid(s if k else "") for s, k in zip(tx, mk)])
            self.instr.append(self._sid(ins))
            self.row_episode.append(self.n_episodes - 1)
        self._add_bc(ep, src, h)
        self._add_critic(ep, h, gamma, shaping_weight)
        self.row0 += ep.length + 1

    def _add_bc(self, ep: Episode, src: str, h: int) -> None:
        """BC samples: the expert label chunk where there is one, else (successful non-corrective episodes)
        the next `h` executed actions."""
        for t in range(ep.length):
            label = ep.label_chunks[t] if ep.label_chunks is not None else None
            if label is not None:
                self.bc_row.append(self.row0 + t)
                self.bc_chunk.append(_pad_chunk(np.asarray(label, np.float32).reshape(-1, ACTION_DIM), 0, h))
                self.bc_src.append(src)
            elif ep.success and not ep.corrective:
                self.bc_row.append(self.row0 + t)
                self.bc_chunk.append(_pad_chunk(ep.actions, t, h))
                self.bc_src.append(src)

    def _add_critic(self, ep: Episode, h: int, gamma: float, shaping_weight: float) -> None:
        """Chunk transitions at every step, with n-step returns and potentials scaled by `shaping_weight`."""
        t_len = ep.length
        r_sum, disc, done, nxt = nstep_chunks(ep.rewards, ep.terminated, h, gamma)
        pots = ep.potentials if ep.potentials is not None else np.zeros(t_len + 1, np.float32)
        pots = np.nan_to_num(pots.astype(np.float32), nan=0.0) * shaping_weight
        for t in range(t_len):
            self.cr_row.append(self.row0 + t)
            self.cr_next.append(self.row0 + int(nxt[t]))
            self.cr_chunk.append(_pad_chunk(ep.actions, t, h))
            self.cr_phi.append(pots[t])
            self.cr_phi_next.append(pots[nxt[t]])
        self.cr_r.append(r_sum)
        self.cr_disc.append(disc)
        self.cr_done.append(done)


class ChunkDataset:
    """Observations, BC samples and critic samples of a set of episodes, as tensors.

    Args:
        episodes: recorded episodes (all with the same P and F).
        text: the sentence embedder (descriptions and instructions are embedded once per distinct string).
        chunk_len: H.
        gamma: per-step discount for the critic targets.
        shaping_weight: scale w of the potentials.
        sources: one source name per episode (same order), for `source_weights`.
        source_weights: sampling weight per source name (see the module docstring); needs `sources`.
        max_oversample: cap on any source's share relative to uniform sampling (see the module docstring).
        unfamiliar_variants: K, the unfamiliar-word variants of each episode's instruction to hold (0: none).
        natural_prior: with `source_weights`, scale each BC sample's gradient to the role pointers' layout
            logits by (uniform draw probability / its draw probability): the layout prior (where targets
            usually are) learns the targets' frequencies in the episodes as collected, while the words learn
            from the weighted batches. Generated scenes are oversampled because they were made to break that
            prior; drawn at their weight they would flatten it, and an instruction whose words the text model
            cannot read would then be decided by noise.
        prior_sources: with `natural_prior`, the sources whose samples the layout prior learns from (uniformly
            over their samples; the others' gradient to it is 0); None: every source.
    Raises:
        DatasetError: no BC samples, episodes with different dims, or sources/weights that do not fit.
    """

    def __init__(
        self,
        episodes: Iterable[Episode],
        text: TextEmbedder,
        chunk_len: int,
        gamma: float = 0.99,
        shaping_weight: float = 1.0,
        sources: Sequence[str] | None = None,
        source_weights: Mapping[str, float] | None = None,
        max_oversample: float | None = None,
        unfamiliar_variants: int = 0,
        natural_prior: bool = False,
        prior_sources: Sequence[str] | None = None,
    ) -> None:
        if source_weights is not None and sources is None:
            raise DatasetError("source_weights given without sources: tag each episode with its source")
        self.chunk_len = chunk_len
        rows = _EpisodeRows(n_unfamiliar=unfamiliar_variants)
        for ep in episodes:
            rows.add(ep, _source(sources, rows.n_episodes, ep.spec_id), chunk_len, gamma, shaping_weight)
        self.n_episodes = rows.n_episodes
        if rows.dims is None or not rows.bc_row:
            raise DatasetError(
                f"no behaviour-cloning samples: {self.n_episodes} episodes given, none successful or labelled"
            )
        self._set_observations(rows, text)
        self._set_goals(rows)
        self._set_samples(rows)
        self.dims = ObsDims(proprio=rows.dims[0], object_features=rows.dims[1], text=self.text_table.shape[1],
                            action=ACTION_DIM)
        if sources is not None and len(sources) != self.n_episodes:
            raise DatasetError(f"sources has {len(sources)} entries for {self.n_episodes} episodes")
        self.bc_source = rows.bc_src  # source name per BC sample ("" when untagged)
        self.bc_prob: Tensor | None = None  # per-BC-sample draw probability (None: uniform)
        self.bc_shares: dict[str, float] | None = None  # share of the BC batches per source present
        if source_weights is not None:
            self.bc_prob, self.bc_shares = _bc_probabilities(rows.bc_src, source_weights, max_oversample)
        # per BC sample: the factor on its gradient to the pointers' layout logits (None: 1)
        self.bc_layout_scale: Tensor | None = None
        if natural_prior and self.bc_prob is not None:
            drawn = self.bc_prob > 0  # a sample never drawn needs no factor
            n = self.n_bc
            if prior_sources is not None:  # only these sources' samples, uniformly
                drawn &= torch.tensor([src in prior_sources for src in rows.bc_src], dtype=torch.bool)
                n = max(1, int(drawn.sum()))
            self.bc_layout_scale = torch.where(drawn, 1.0 / (n * self.bc_prob.clamp_min(1e-300)), 0.0).to(torch.float32)

    def _set_observations(self, rows: _EpisodeRows, text: TextEmbedder) -> None:
        """Observation tensors of every row, the string table and its embeddings."""
        assert rows.dims is not None
        m_max = max(1, max(len(m) for _, m in rows.objects))
        n = len(rows.proprio)
        self.proprio = torch.from_numpy(np.stack(rows.proprio))  # (N, P)
        obj = np.zeros((n, m_max, rows.dims[1]), np.float32)
        mask = np.zeros((n, m_max), bool)
        text_id = np.zeros((n, m_max), np.int64)
        for i, ((ob, mk), ids) in enumerate(zip(rows.objects, rows.obj_text)):
            obj[i, : len(mk)], mask[i, : len(mk)], text_id[i, : len(mk)] = ob, mk, ids
        self.objects = torch.from_numpy(obj)  # (N, M, F)
        self.object_mask = torch.from_numpy(mask)  # (N, M)
        self.object_text_id = torch.from_numpy(text_id)  # (N, M) into text_table
        self.instruction_id = torch.tensor(rows.instr, dtype=torch.long)  # (N,)
        self.strings = list(rows.strings)
        self.text_table = torch.from_numpy(text.encode(self.strings))  # (S, E), row 0 = "" = zeros
        tok, tok_mask = pad_tokens(text.encode_tokens(self.strings), self.text_table.shape[1])
        self.token_table = torch.from_numpy(tok)  # (S, Lmax, E) word pieces of every string
        self.token_len = torch.from_numpy(tok_mask.sum(1))  # (S,)
        self.row_episode = torch.tensor(rows.row_episode, dtype=torch.long)  # (N,)
        self.text_model_id = text.model_id

    def _set_goals(self, rows: _EpisodeRows) -> None:
        """Per-episode wordings, goal rows and goal values, and the instructions whose goal has a value."""
        n_words = max([1, *(len(w) for w in rows.wordings)])
        self.wording_ids = torch.zeros((self.n_episodes, n_words), dtype=torch.long)  # (episodes, W) string ids
        self.wording_count = torch.tensor([len(w) for w in rows.wordings], dtype=torch.long)  # (episodes,)
        for i, w in enumerate(rows.wordings):
            self.wording_ids[i, : len(w)] = torch.tensor(w, dtype=torch.long)
        n_roles = max([1, *(len(g) for g in rows.goal_rows)])
        self.goal_rows = torch.full((self.n_episodes, n_roles), -1, dtype=torch.long)  # (episodes, R)
        for i, g in enumerate(rows.goal_rows):
            if g:
                self.goal_rows[i, : len(g)] = torch.tensor(g, dtype=torch.long)
        self.goal_value = torch.tensor(rows.goal_values, dtype=torch.float32)  # (episodes,), NaN = none
        self.unfamiliar_ids = torch.tensor(rows.unfamiliar, dtype=torch.long).reshape(self.n_episodes, -1)  # (episodes, K)
        self._valued = sorted(rows.valued.items())

    def _set_samples(self, rows: _EpisodeRows) -> None:
        """BC samples and chunk transitions as tensors, chunks relative to the gripper pose of their row."""
        pose = gripper_pose(self.proprio)  # (N, 4)
        self.bc_row = torch.tensor(rows.bc_row, dtype=torch.long)
        self.bc_chunk = to_relative(torch.from_numpy(np.stack(rows.bc_chunk)), pose[self.bc_row])  # (Nb, H, A)
        self.cr_row = torch.tensor(rows.cr_row, dtype=torch.long)
        self.cr_next = torch.tensor(rows.cr_next, dtype=torch.long)
        self.cr_chunk = to_relative(torch.from_numpy(np.stack(rows.cr_chunk)), pose[self.cr_row])  # (Nc, H, A)
        self.cr_reward = torch.from_numpy(np.concatenate(rows.cr_r))
        self.cr_discount = torch.from_numpy(np.concatenate(rows.cr_disc))
        self.cr_done = torch.from_numpy(np.concatenate(rows.cr_done))
        self.cr_phi = torch.tensor(np.asarray(rows.cr_phi, np.float32))
        self.cr_phi_next = torch.tensor(np.asarray(rows.cr_phi_next, np.float32))

    def goal_memory(self) -> tuple[Tensor, Tensor]:
        """Every distinct instruction and wording whose goal has a value: embeddings (K, E) and values (K,)."""
        ids = torch.tensor([i for i, _ in self._valued], dtype=torch.long)
        return self.text_table[ids], torch.tensor([v for _, v in self._valued], dtype=torch.float32)

    @property
    def n_bc(self) -> int:
        """Number of BC samples."""
        return len(self.bc_row)

    @property
    def n_critic(self) -> int:
        """Number of chunk transitions."""
        return len(self.cr_row)

    def stats(self, frame: str = "gripper") -> NormStats:
        """Normalisation statistics of the observations and the BC target chunks, read in `frame` ("task": each
        observation in its goal's task frame, `coda.policy.features.task_frame`)."""
        if frame == "gripper":
            return NormStats.compute(self.proprio, self.objects, self.object_mask, self.bc_chunk)
        if frame != "task":
            raise DatasetError(f"frame = {frame!r}; expected one of {list(FRAMES)}")
        if not bool((self.goal_rows[:, 0] >= 0).any()):
            raise DatasetError(
                f"policy.frame = 'task' needs episodes whose goal names the entity it moves (goal_rows); "
                f"none of the {self.n_episodes} episodes does (set policy.frame = 'gripper')"
            )
        rows = self.goal_rows[self.row_episode]
        if rows.shape[1] < 2:
            rows = torch.cat([rows, rows.new_full((rows.shape[0], 2 - rows.shape[1]), -1)], dim=1)
        f = task_frame(self.objects, self.object_mask, rows[:, :2])
        proprio, objects = inputs_in_frame(self.proprio, self.objects, self.object_mask, f)
        chunks = chunk_in_frame(self.bc_chunk, f.index(self.bc_row))
        return NormStats.compute(proprio, objects, self.object_mask, chunks)

    def _tokens(self, ids: Tensor) -> tuple[Tensor, Tensor]:
        """Word pieces (..., L, E) and mask (..., L) of string ids (...), L = the longest among them."""
        lengths = self.token_len[ids]
        n = max(1, int(lengths.max())) if lengths.numel() else 1
        table = self.token_table[:, :n]  # the same rows as `table[ids]`, gathered in a fifth of its time
        pieces = table.index_select(0, ids.reshape(-1)).view(*ids.shape, n, table.shape[-1])
        return pieces, torch.arange(n) < lengths.unsqueeze(-1)

    def obs(self, rows: Tensor, instruction_ids: Tensor | None = None) -> ObsBatch:
        """Observations at dataset rows (B,), entity slots trimmed to the batch's largest scene.

        `instruction_ids` (B,) string ids replace the recorded instructions (see `wordings_for`)."""
        mask = self.object_mask[rows]
        slots = torch.arange(1, mask.shape[1] + 1)
        m = max(1, int((mask * slots).max()))  # slots past every real entity cost attention time only
        text_id = self.object_text_id[rows, :m]
        ins_id = self.instruction_id[rows] if instruction_ids is None else instruction_ids
        obj_tok, obj_tok_mask = self._tokens(text_id)
        ins_tok, ins_tok_mask = self._tokens(ins_id)
        return ObsBatch(
            self.proprio[rows],
            self.objects[rows, :m],
            mask[:, :m],
            self.text_table[text_id],
            self.text_table[ins_id],
            obj_tok,
            obj_tok_mask & mask[:, :m].unsqueeze(-1),
            ins_tok,
            ins_tok_mask,
        )

    def wordings_for(self, rows: Tensor, rate: float, generator: torch.Generator) -> Tensor | None:
        """Instruction string ids (B,) for dataset rows: with probability `rate` one of the episode's other
        wordings (uniformly), else the recorded one; None when no row could change."""
        if rate <= 0 or not bool((self.wording_count > 0).any()):
            return None
        return self._swap_in(rows, self.instruction_id[rows], self.wording_ids, self.wording_count, rate, generator)

    def unfamiliar_for(self, rows: Tensor, ins: Tensor | None, rate: float, generator: torch.Generator) -> Tensor | None:
        """Instruction string ids (B,) for dataset rows: with probability `rate` one of the episode's
        unfamiliar-word variants (uniformly), else `ins` (None: the recorded ones); no draw when `rate` is 0 or
        the dataset holds no variants."""
        k = self.unfamiliar_ids.shape[1]
        if rate <= 0 or k == 0:
            return ins
        base = self.instruction_id[rows] if ins is None else ins
        count = torch.full((self.n_episodes,), k, dtype=torch.long)
        return self._swap_in(rows, base, self.unfamiliar_ids, count, rate, generator)

    def _swap_in(self, rows: Tensor, base: Tensor, table: Tensor, count: Tensor, rate: float,
                 generator: torch.Generator) -> Tensor:
        """`base` string ids (B,) with each row's, with probability `rate`, replaced by one of the first
        `count[episode]` ids of its episode's row of `table` (episodes, W), uniformly; rows of episodes with
        none keep theirs."""
        ep = self.row_episode[rows]
        n = count[ep]
        u = torch.rand((len(rows), 2), generator=generator)
        pick = (u[:, 1] * n).long().clamp(max=table.shape[1] - 1)
        return torch.where((u[:, 0] < rate) & (n > 0), table[ep, pick], base)

    def bc_batch(self, idx: Tensor, paraphrase_rate: float = 0.0, generator: torch.Generator | None = None,
                 token_dropout: float = 0.0, unfamiliar_rate: float = 0.0) -> BCBatch:
        """BC samples `idx` (B,). With a generator: `paraphrase_rate` > 0 shows some samples another wording,
        `unfamiliar_rate` > 0 some an unfamiliar-word variant, `token_dropout` > 0 hides that share of
        instruction word pieces (every instruction keeps one)."""
        rows = self.bc_row[idx]
        ins = None
        if generator is not None:
            ins = self.wordings_for(rows, paraphrase_rate, generator)
            ins = self.unfamiliar_for(rows, ins, unfamiliar_rate, generator)
        obs = self.obs(rows, ins)
        if generator is not None and token_dropout > 0:
            mask = obs.instruction_token_mask
            keep = mask & (torch.rand(mask.shape, generator=generator) >= token_dropout)
            keep = torch.where(keep.any(dim=1, keepdim=True), keep, mask)
            obs = obs._replace(instruction_token_mask=keep)
        ep = self.row_episode[rows]
        scale = None if self.bc_layout_scale is None else self.bc_layout_scale[idx]
        return BCBatch(obs, self.bc_chunk[idx], self.goal_rows[ep], self.goal_value[ep], scale)

    def critic_batch(self, idx: Tensor) -> CriticBatch:
        """Chunk transitions `idx` (B,)."""
        return CriticBatch(
            self.obs(self.cr_row[idx]),
            self.cr_chunk[idx],
            self.cr_reward[idx],
            self.cr_discount[idx],
            self.cr_done[idx],
            self.obs(self.cr_next[idx]),
            self.cr_phi[idx],
            self.cr_phi_next[idx],
            self.goal_rows[self.row_episode[self.cr_row[idx]]],
        )

    def bc_indices(self, batch_size: int, generator: torch.Generator) -> Tensor:
        """Indices of a BC batch (with replacement): uniform, or by the source weights."""
        if self.bc_prob is None:
            return torch.randint(self.n_bc, (batch_size,), generator=generator)
        return torch.multinomial(self.bc_prob, batch_size, replacement=True, generator=generator)

    def sample(self, batch_size: int, generator: torch.Generator, critic: bool = False,
               paraphrase_rate: float = 0.0, token_dropout: float = 0.0, unfamiliar_rate: float = 0.0) -> TrainBatch:
        """A random batch (with replacement) of BC samples (instruction augmentation as in `bc_batch`) and,
        if `critic`, of chunk transitions."""
        bc = self.bc_batch(self.bc_indices(batch_size, generator), paraphrase_rate, generator, token_dropout,
                           unfamiliar_rate)
        cr = self.critic_batch(torch.randint(self.n_critic, (batch_size,), generator=generator)) if critic else None
        return TrainBatch(bc, cr)
