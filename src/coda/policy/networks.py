"""Networks: the set encoder over observation tokens, the chunk actor head and the chunk critic.

Tokens: a readout token, one proprio token, one token per entity and one instruction token. An entity token
sums a projection of its normalised features (with its position relative to the gripper), the projection
of its description embedding and what the instruction says about it (`TokenGrounding`); the instruction
token is the projection of the instruction embedding through the SAME text projection. Transformer blocks
with a padding mask run over the set, so any number of entities works; the readout token's output
summarises the observation.

Grounding (`policy.grounding`):
- "tokens": cross-attention from each entity's description to the instruction's word pieces. The attention
  logits are the text model's own cosine similarities between description and instruction word pieces
  (sharpened by a learned temperature), so a synonym the text model knows lands on the same words; the
  attended values are learned projections of the instruction's contextual word pieces plus a learned
  position embedding, so the entity learns *how* it is mentioned (moved, destination, first or second).
  Two normalised matching features go with it: the entity's share of a softmax over the scene's entities of
  its match score, and its learned-temperature gap to the best match.
- "sentence": the first build's features, cos(instruction, description) and its gap to the best match, raw.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from coda.policy.features import PROPRIO_MOTION, Frame, NormStats, ObsBatch, ObsDims, obs_in_frame, task_frame

GROUNDING_FEATURES = 2  # per entity: match share and gap to the best match ("tokens"), or raw cosines ("sentence")
LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0
MAX_POSITIONS = 32  # instruction word-piece positions with a learned embedding (coda.policy.text.MAX_TOKENS)
ROLES = 2  # pointers over entities: what the instruction moves, and where it goes
VALUE_BINS = (0.0, 0.25, 0.5, 0.75, 1.0)  # the goal numbers a policy can be asked for (a drawer's opening)
SAME_TEXT = 0.9999  # a remembered instruction this close to the query is its own wording (left out in training)
KNOWN_WORDING = 100.0  # logit a remembered wording gives its own value in use (decides over the evidence and prior)


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def sentence_grounding(obs: ObsBatch) -> Tensor:
    """(B, M, 2): cosine(instruction, description) and its gap to the scene's best match (0 for padding)."""
    cos = torch.einsum("bme,be->bm", obs.object_emb, obs.instruction_emb)
    best = cos.masked_fill(~obs.object_mask, -2.0).amax(dim=1, keepdim=True)
    feats = torch.stack([cos, cos - best], dim=-1)
    return feats * obs.object_mask.unsqueeze(-1)


def token_alignment(obs: ObsBatch) -> tuple[Tensor, Tensor]:
    """Cosines between every description word piece and every instruction word piece.

    Returns:
        cos (B, M, J, L) and a validity mask (B, M, J, L) (real description piece x real instruction piece).
    """
    cos = torch.einsum("bmje,ble->bmjl", obs.object_tokens, obs.instruction_tokens)
    valid = obs.object_token_mask.unsqueeze(-1) & obs.instruction_token_mask[:, None, None, :]
    return cos, valid


class TokenGrounding(nn.Module):
    """What the instruction says about each entity: (B, M, hidden) attended values and (B, M, 2) features.

    Args:
        text_dim: E. hidden: output width.
    """

    def __init__(self, text_dim: int, hidden: int) -> None:
        super().__init__()
        self.log_tau = nn.Parameter(torch.tensor(math.log(10.0)))  # alignment sharpness over word pieces
        self.log_tau_match = nn.Parameter(torch.tensor(math.log(20.0)))  # match sharpness over entities
        self.value = nn.Linear(text_dim, hidden)
        self.position = nn.Parameter(torch.randn(MAX_POSITIONS, hidden) * 0.02)

    def forward(self, obs: ObsBatch) -> tuple[Tensor, Tensor]:
        cos, valid = token_alignment(obs)  # (B, M, J, L)
        tau, tau_m = self.log_tau.exp(), self.log_tau_match.exp()
        logits = (tau * cos).masked_fill(~valid, float("-inf"))
        att = torch.nan_to_num(logits.softmax(dim=-1))  # rows without any valid piece -> 0
        pieces = obs.object_token_mask.float()  # (B, M, J)
        n_pieces = pieces.sum(-1).clamp_min(1.0)
        att = (att * pieces.unsqueeze(-1)).sum(2) / n_pieces.unsqueeze(-1)  # (B, M, L): mean over description pieces
        best_piece = cos.masked_fill(~valid, -2.0).amax(dim=-1).clamp_min(-1.0)  # (B, M, J)
        match = (best_piece * pieces).sum(-1) / n_pieces  # (B, M): how well the instruction covers the description
        real = obs.object_mask & obs.object_token_mask.any(-1)
        score = (tau_m * match).masked_fill(~real, float("-inf"))
        share = torch.nan_to_num(score.softmax(dim=1))
        gap = (score - score.amax(dim=1, keepdim=True)).clamp(min=-10.0) / 10.0
        feats = torch.stack([share, torch.nan_to_num(gap, nan=0.0, neginf=0.0)], dim=-1) * real.unsqueeze(-1)
        n = obs.instruction_tokens.shape[1]
        values = self.value(obs.instruction_tokens) + self.position[:n]  # (B, L, hidden)
        return att @ values, feats


class SetAttentionBlock(nn.Module):
    """Pre-norm transformer block over a padded token set (no positional encoding: a set has no order).

    Written out instead of `nn.TransformerEncoderLayer`: with ~10 tokens per set, plain masked softmax
    attention runs in fewer, cheaper CPU ops than the fused kernels built for long sequences.
    """

    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(hidden)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden)
        self.ff = _mlp([hidden, 2 * hidden, hidden])

    def forward(self, x: Tensor, pad: Tensor, blocked: Tensor | None = None) -> Tensor:
        """x (B, T, hidden), pad (B, T) bool (True = ignore as a key), blocked (T, T) bool (query i may not
        read key j) -> (B, T, hidden)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        # k laid out contiguously first: on the strided view, CPU batched matmul sums a set of up to 12 tokens
        # in an order that depends on the set's place in the batch (a row's bits would depend on its block)
        scores = (q @ k.contiguous().transpose(-1, -2)) * (d // self.heads) ** -0.5  # (B, heads, T, T)
        hide = pad[:, None, None, :] if blocked is None else (pad[:, None, None, :] | blocked)
        att = scores.masked_fill(hide, float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class GoalValue(nn.Module):
    """The goal's number (how far to open a drawer) as one of VALUE_BINS, logits = language + prior.

    Language: for each bin, a learned temperature times the best cosine between the instruction's sentence
    embedding and a remembered training instruction whose goal has that value (`set_memory`: every distinct
    wording in the training data with a value), its own wording left out, so training sees the evidence an
    unseen wording of a known goal gives; a wording far from everything remembered says little. Prior: from
    the entity the first role points at (its features, e.g. how open the drawer is now), never the words.
    Where the words are clear they decide; where they are not, the value falls back on what such scenes asked.
    In use (eval mode) a wording that is itself remembered answers with its remembered value: MiniLM puts
    "open the white drawer halfway" at 0.94 of "open the white drawer", too close for the evidence of its
    neighbours to outweigh a prior fitted to fully opened drawers.
    """

    def __init__(self, text_dim: int, entity_dim: int, hidden: int) -> None:
        super().__init__()
        self.register_buffer("memory", torch.zeros(0, text_dim))  # (K, E) remembered instructions
        self.register_buffer("memory_bin", torch.zeros(0, dtype=torch.long))  # (K,) their value's bin
        self.log_tau = nn.Parameter(torch.tensor(math.log(20.0)))
        self.prior = _mlp([entity_dim, hidden, len(VALUE_BINS)])

    def set_memory(self, embeddings: Tensor, values: Tensor) -> None:
        """Remember instructions (K, E) with their goal values (K,) (replaces what was remembered)."""
        bins = torch.tensor(VALUE_BINS)
        self.memory = embeddings.detach().to(torch.float32).clone()
        self.memory_bin = (values.to(torch.float32).unsqueeze(1) - bins).abs().argmin(dim=1)

    def forward(self, instruction_emb: Tensor, entity: Tensor) -> Tensor:
        """Logits (B, len(VALUE_BINS)) from the instruction (B, E) and the pointed-to entity's features (B, D)."""
        prior = self.prior(entity)
        if self.memory.shape[0] == 0:
            return prior
        cos = instruction_emb @ self.memory.T  # (B, K)
        own = cos > SAME_TEXT
        per_bin = cos.new_zeros((cos.shape[0], len(VALUE_BINS)))  # a bin nothing remembered supports: cosine 0
        per_bin = per_bin.scatter_reduce(1, self.memory_bin.expand_as(cos), cos.masked_fill(own, 0.0), reduce="amax",
                                         include_self=True)
        logits = self.log_tau.exp() * per_bin + prior
        if self.training:  # a sample's own wording would give its answer away: training sees unseen wordings
            return logits
        known = per_bin.new_zeros(per_bin.shape).scatter_reduce(1, self.memory_bin.expand_as(cos), own.to(cos.dtype),
                                                                 reduce="amax", include_self=True)
        return logits + KNOWN_WORDING * known  # in use, a wording remembered with its value answers for itself


def value_of(logits: Tensor) -> Tensor:
    """The goal value (B, 1) of the most likely bin."""
    return torch.tensor(VALUE_BINS, dtype=logits.dtype)[logits.argmax(dim=1)].unsqueeze(1)


class TextRead(NamedTuple):
    """What the encoder reads from the words alone: they do not change within an episode, so a rollout reads
    them at its first chunk and passes them back (`ObsEncoder.encode(text=...)`) instead of reading again."""

    desc: Tensor  # (B, M, hidden) the entities' description projections
    instruction: Tensor  # (B, hidden) the instruction's projection
    said: Tensor | None = None  # (B, M, ROLES) the role pointers' language logits ("tokens" grounding)


class Encoded(NamedTuple):
    """An observation encoding and what the instruction was grounded to."""

    z: Tensor  # (B, hidden)
    pointer: Tensor | None = None  # (B, M, ROLES) role pointer logits over entities, -inf on padding
    goal_value: Tensor | None = None  # (B, len(VALUE_BINS)) logits of the goal's number over VALUE_BINS
    frame: Frame | None = None  # the task frame the observation was read in (frame "task")
    rows: Tensor | None = None  # (B, ROLES) the entity rows that set the frame (frame "task")


def frame_rows(picked: Tensor, given: Tensor | None) -> Tensor:
    """The entity rows (B, 2) that set an observation's task frame: `given` (the goal's own rows, training)
    where it names a moved entity, with a missing destination meaning none; else the pointers' picks."""
    if given is None:
        return picked
    g = given[:, :ROLES]
    if g.shape[1] < ROLES:
        g = torch.cat([g, g.new_full((g.shape[0], ROLES - g.shape[1]), -1)], dim=1)
    return torch.where((g[:, :1] >= 0), g, picked)


def destination_or_self(goal_rows: Tensor) -> Tensor:
    """Goal rows (B, R) with a missing destination (-1) replaced by the moved entity's row: the destination
    pointer of a goal without one learns to point at the moved entity, which gives the world's axes."""
    if goal_rows.shape[1] < ROLES:
        return goal_rows
    out = goal_rows.clone()
    out[:, 1] = torch.where(out[:, 1] < 0, out[:, 0], out[:, 1])
    return out


def hard_pointer(logits: Tensor, rows: Tensor | None = None) -> Tensor:
    """One-hot of each role's most likely entity (B, M, R), or of `rows` (B, R) where >= 0, with the softmax's
    gradient (straight-through): the network reads exactly one entity per role, never a blend of two that lies
    between them."""
    soft = torch.nan_to_num(logits.softmax(dim=1))
    pick = soft.argmax(dim=1)
    if rows is not None:
        pick = torch.where(rows >= 0, rows, pick)
    hard = F.one_hot(pick, soft.shape[1]).transpose(1, 2).to(soft.dtype)  # (B, M, R)
    return hard + soft - soft.detach()


class ObsEncoder(nn.Module):
    """Set transformer over proprio, entity, role and instruction tokens -> (B, hidden) summary.

    With "tokens" grounding the words reach the entities only through the role pointers: each entity token
    carries its pointer probabilities (is it what the instruction moves, is it where it goes), and one token
    per role is the pointer-weighted mix of the entity tokens; the pointed-to entities' own features also
    reach the output directly. Wording that the text model finds unfamiliar therefore changes at most which
    entity a role points to, not the rest of what the network sees. The instruction's sentence token stays
    for what no entity carries (how far to open a drawer).
    """

    def __init__(self, dims: ObsDims, hidden: int, layers: int, heads: int, grounding: str = "tokens",
                 read_motion: bool = False, frame: str = "gripper") -> None:
        super().__init__()
        if frame == "task" and grounding != "tokens":
            raise ValueError(f"frame 'task' needs grounding 'tokens' (its role pointers set the frame), not {grounding!r}")
        self.read_motion = read_motion
        self.frame = frame
        self.grounding = TokenGrounding(dims.text, hidden) if grounding == "tokens" else None
        entity_extra = ROLES + 1 if self.grounding is not None else GROUNDING_FEATURES
        self.proprio_in = nn.Linear(dims.proprio, hidden)
        self.entity_in = nn.Linear(dims.object_features + 3 + entity_extra, hidden)
        self.text_proj = nn.Linear(dims.text, hidden)  # shared by descriptions and instruction
        self.type_emb = nn.Parameter(torch.zeros(4, hidden))  # readout, proprio, entity, instruction
        self.readout = nn.Parameter(torch.randn(hidden) * 0.02)
        if self.grounding is not None:
            # Role pointers over entities: p_r(e) = softmax_e(language_r(e) + layout_r(e)). The language
            # logits see what the instruction says about an entity and its description, never its position;
            # the layout logits see its features and position, never the words. Where the words are clear they
            # decide; where they are not (unfamiliar words) the pointer falls back on where targets usually are.
            # That prior learns from the demos as collected, not as a round oversamples its generated scenes
            # (`ChunkDataset` natural_prior): those were made to break it, and at their weight they flatten it.
            self.pointer = _mlp([2 * hidden + GROUNDING_FEATURES, hidden, ROLES])
            self.layout_pointer = _mlp([dims.object_features + 3, hidden, ROLES])
            self.role_emb = nn.Parameter(torch.randn(ROLES, hidden) * 0.02)
            self.role_out = nn.Linear(ROLES * (dims.object_features + 3) + 1, hidden)
            self.goal = GoalValue(dims.text, dims.object_features + 3, hidden)
        self.blocks = nn.ModuleList(SetAttentionBlock(hidden, heads) for _ in range(layers))
        self.out_norm = nn.LayerNorm(hidden)

    def forward(self, obs: ObsBatch, stats: NormStats) -> Tensor:
        """Encode raw observations (normalised here with `stats`) -> (B, hidden)."""
        return self.encode(obs, stats).z

    def read_text(self, obs: ObsBatch) -> TextRead:
        """The encoding's parts that read only the words: description and instruction projections and the
        role pointers' language logits."""
        desc = self.text_proj(obs.object_emb)  # (B, M, hidden)
        said = None
        if self.grounding is not None:
            att, feats = self.grounding(obs)
            said = self.pointer(torch.cat([att, desc, feats], dim=-1))
        return TextRead(desc, self.text_proj(obs.instruction_emb), said)

    def pointer_logits(self, obs: ObsBatch, text: TextRead, ob: Tensor, rp: Tensor,
                       layout_scale: Tensor | None = None) -> Tensor:
        """Role pointer logits (B, M, ROLES) over entities, -inf on padding: the language logits of `text`
        plus layout logits from the entities' features `ob` and positions `rp`. `layout_scale` (B,)
        (training) scales each sample's gradient to the layout logits (their values stay as they are)."""
        assert self.grounding is not None and text.said is not None
        lang = text.said
        layout = self.layout_pointer(torch.cat([ob, rp], dim=-1))
        if layout_scale is not None:
            fixed = layout.detach()
            layout = fixed + layout_scale[:, None, None] * (layout - fixed)
        logits = lang + layout
        return logits.masked_fill(~obs.object_mask.unsqueeze(-1), float("-inf"))

    def encode(self, obs: ObsBatch, stats: NormStats, rows: Tensor | None = None,
               values: Tensor | None = None, layout_scale: Tensor | None = None,
               text: TextRead | None = None) -> "Encoded":
        """The (B, hidden) summary with what the instruction was grounded to (None without "tokens").

        With frame "task" the pointers read the observation as given; the rest of the network reads it in the
        task frame of the rows `frame_rows` chooses (`rows` (B, R): the goal's own, in training). `values`
        (B,) are the goals' own numbers where known (NaN: none; training): the network reads them in place of
        its own reading of the number, as it reads the goal's rows, so it learns to act on the number it is
        given while `goal_value` learns to read it. `layout_scale` (B,): see `pointer_logits`. `text`: what
        `read_text` gave for these observations' words (read here when None)."""
        pr, ob, rp = stats.normalize_obs(obs)
        if text is None:
            text = self.read_text(obs)
        desc = text.desc
        frame = used = None
        if self.frame == "task":
            world_logits = self.pointer_logits(obs, text, ob, rp, layout_scale)
            used = frame_rows(world_logits.argmax(dim=1), rows)
            frame = task_frame(obs.objects, obs.object_mask, used)
            obs = obs_in_frame(obs, frame)
            pr, ob, rp = stats.normalize_obs(obs)
        if not self.read_motion:  # behaviour cloning could copy its own motion instead of reading the scene
            pr = pr.clone()
            pr[:, PROPRIO_MOTION] = 0.0
        b, m = ob.shape[0], ob.shape[1]
        instruction = text.instruction  # (B, hidden)
        logits = None
        if frame is not None:
            logits = world_logits
        elif self.grounding is not None:
            logits = self.pointer_logits(obs, text, ob, rp, layout_scale)
        if logits is not None:
            p = hard_pointer(logits, used)  # (B, M, R); frame "task": the entities that set the frame
            raw = p.transpose(1, 2) @ torch.cat([rp, ob], dim=-1)  # (B, R, 3 + F): the pointed-to entities' features
            value_logits = self.goal(obs.instruction_emb, raw[:, 0].detach())
            value = value_of(value_logits)  # (B, 1)
            if values is not None:  # the given number, at its bin (as the network's own reading would be)
                bins = torch.tensor(VALUE_BINS, dtype=value.dtype)
                given = bins[(torch.nan_to_num(values.to(value.dtype)).unsqueeze(1) - bins).abs().argmin(dim=1)]
                value = torch.where(torch.isfinite(values).unsqueeze(1), given.unsqueeze(1), value)
            extra = torch.cat([p, value.unsqueeze(1).expand(b, m, 1)], dim=-1)
        else:
            extra = sentence_grounding(obs)
        ent = self.entity_in(torch.cat([ob, rp, extra], dim=-1)) + desc + self.type_emb[2]  # (B, M, hidden)
        parts = [
            (self.readout + self.type_emb[0]).expand(b, 1, -1),
            (self.proprio_in(pr) + self.type_emb[1]).unsqueeze(1),
            ent,
            (instruction + self.type_emb[3]).unsqueeze(1),
        ]
        if logits is not None:
            parts.append(p.transpose(1, 2) @ ent + self.role_emb)  # (B, R, hidden): the entity each role names
        tokens = torch.cat(parts, dim=1)
        keep = torch.ones(b, tokens.shape[1], dtype=torch.bool, device=ob.device)
        keep[:, 2 : 2 + m] = obs.object_mask
        pad = ~keep
        for block in self.blocks:
            tokens = block(tokens, pad)
        z = self.out_norm(tokens[:, 0])
        if logits is None:
            return Encoded(z)
        return Encoded(z + self.role_out(torch.cat([raw.flatten(1), value], dim=-1)), logits, value_logits, frame, used)


class ChunkActorHead(nn.Module):
    """Gaussian chunk head: mean and log-std of the normalised relative chunk (B, H, A).

    Only the mean trains the shared features; the log-std is a linear read-out of detached features.
    """

    def __init__(self, hidden: int, chunk_len: int, action_dim: int) -> None:
        super().__init__()
        self.shape = (chunk_len, action_dim)
        self.trunk = _mlp([hidden, 2 * hidden, 2 * hidden])
        self.act = nn.GELU()
        self.mean = nn.Linear(2 * hidden, chunk_len * action_dim)
        self.log_std = nn.Linear(2 * hidden, chunk_len * action_dim)

    def forward(self, z: Tensor) -> tuple[Tensor, Tensor]:
        """(B, hidden) -> mean (B, H, A), log_std (B, H, A) in normalised action units."""
        h = self.act(self.trunk(z))
        mean = self.mean(h).view(-1, *self.shape)
        # the spread is read off detached features: its NLL gradients, huge once the fit is tight, must
        # never reach the features behaviour cloning relies on
        log_std = self.log_std(h.detach()).view(-1, *self.shape).clamp(LOG_STD_MIN, LOG_STD_MAX)
        return mean, log_std


class ChunkCriticNet(nn.Module):
    """Q(s, chunk) (twin heads) and V(s) on top of the critic's own observation encoder.

    The critic does not share the actor's encoder: TD targets are noisy and would disturb the features
    behaviour cloning relies on, and a separate encoder lets the Polyak target copy the whole critic.
    """

    def __init__(self, dims: ObsDims, hidden: int, layers: int, heads: int, chunk_len: int,
                 grounding: str = "tokens", frame: str = "gripper") -> None:
        super().__init__()
        self.encoder = ObsEncoder(dims, hidden, layers, heads, grounding, frame=frame)  # motion not read, as the actor
        chunk_in = chunk_len * dims.action
        self.q1 = _mlp([hidden + chunk_in, 2 * hidden, 2 * hidden, 1])
        self.q2 = _mlp([hidden + chunk_in, 2 * hidden, 2 * hidden, 1])
        self.v = _mlp([hidden, 2 * hidden, 2 * hidden, 1])

    def encode(self, obs: ObsBatch, stats: NormStats, rows: Tensor | None = None) -> Encoded:
        """The critic's encoding (its `z` (B, hidden) the features), with frame "task" read in the frame of
        `rows` (B, R) where given (the actor's, so a chunk means the same to both), else its own pointers'."""
        return self.encoder.encode(obs, stats, rows)

    def q_from(self, z: Tensor, chunk: Tensor) -> tuple[Tensor, Tensor]:
        """Twin Q values (B,), (B,) from features (B, hidden) and a normalised relative chunk (B, H, A)."""
        x = torch.cat([z, chunk.flatten(1)], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def v_from(self, z: Tensor) -> Tensor:
        """V(s) (B,) from features (B, hidden)."""
        return self.v(z).squeeze(-1)
