"""Networks: the set encoder over observation tokens, the chunk actor head and the chunk critic.

Tokens: a readout token, one proprio token, one token per entity and one instruction token. An entity token
sums a projection of its normalised features (with its position relative to the gripper) and the projection
of its description embedding; the instruction token is the projection of the instruction embedding through
the SAME text projection, so instruction and descriptions live in one space and attention can match them.
Each entity also gets its cosine similarity to the instruction (raw and relative to the best match) as an
explicit grounding feature. Transformer blocks with a padding mask run over the set, so any number of
entities works; the readout token's output summarises the observation.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from coda.policy.features import NormStats, ObsBatch, ObsDims

GROUNDING_FEATURES = 2  # cosine to the instruction, and that minus the best cosine in the scene
LOG_STD_MIN, LOG_STD_MAX = -5.0, 1.0


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


def grounding_features(obs: ObsBatch) -> Tensor:
    """(B, M, 2): cosine(instruction, description) and its gap to the scene's best match (0 for padding)."""
    cos = torch.einsum("bme,be->bm", obs.object_emb, obs.instruction_emb)
    best = cos.masked_fill(~obs.object_mask, -2.0).amax(dim=1, keepdim=True)
    feats = torch.stack([cos, cos - best], dim=-1)
    return feats * obs.object_mask.unsqueeze(-1)


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

    def forward(self, x: Tensor, pad: Tensor) -> Tensor:
        """x (B, T, hidden), pad (B, T) bool (True = ignore as a key) -> (B, T, hidden)."""
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = (q @ k.transpose(-1, -2)) * (d // self.heads) ** -0.5  # (B, heads, T, T)
        att = scores.masked_fill(pad[:, None, None, :], float("-inf")).softmax(dim=-1)
        x = x + self.proj((att @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.ff(self.norm2(x))


class ObsEncoder(nn.Module):
    """Set transformer over proprio, entity and instruction tokens -> (B, hidden) summary."""

    def __init__(self, dims: ObsDims, hidden: int, layers: int, heads: int) -> None:
        super().__init__()
        self.proprio_in = nn.Linear(dims.proprio, hidden)
        self.entity_in = nn.Linear(dims.object_features + 3 + GROUNDING_FEATURES, hidden)
        self.text_proj = nn.Linear(dims.text, hidden)  # shared by descriptions and instruction
        self.type_emb = nn.Parameter(torch.zeros(4, hidden))  # readout, proprio, entity, instruction
        self.readout = nn.Parameter(torch.randn(hidden) * 0.02)
        self.blocks = nn.ModuleList(SetAttentionBlock(hidden, heads) for _ in range(layers))
        self.out_norm = nn.LayerNorm(hidden)

    def forward(self, obs: ObsBatch, stats: NormStats) -> Tensor:
        """Encode raw observations (normalised here with `stats`) -> (B, hidden)."""
        pr, ob, rp = stats.normalize_obs(obs)
        b, m = ob.shape[0], ob.shape[1]
        ent = self.entity_in(torch.cat([ob, rp, grounding_features(obs)], dim=-1))
        ent = ent + self.text_proj(obs.object_emb) + self.type_emb[2]
        tokens = torch.cat(
            [
                (self.readout + self.type_emb[0]).expand(b, 1, -1),
                (self.proprio_in(pr) + self.type_emb[1]).unsqueeze(1),
                ent,
                (self.text_proj(obs.instruction_emb) + self.type_emb[3]).unsqueeze(1),
            ],
            dim=1,
        )
        keep = torch.ones(b, m + 3, dtype=torch.bool, device=ob.device)
        keep[:, 2 : 2 + m] = obs.object_mask
        pad = ~keep
        for block in self.blocks:
            tokens = block(tokens, pad)
        return self.out_norm(tokens[:, 0])


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

    def __init__(self, dims: ObsDims, hidden: int, layers: int, heads: int, chunk_len: int) -> None:
        super().__init__()
        self.encoder = ObsEncoder(dims, hidden, layers, heads)
        chunk_in = chunk_len * dims.action
        self.q1 = _mlp([hidden + chunk_in, 2 * hidden, 2 * hidden, 1])
        self.q2 = _mlp([hidden + chunk_in, 2 * hidden, 2 * hidden, 1])
        self.v = _mlp([hidden, 2 * hidden, 2 * hidden, 1])

    def encode(self, obs: ObsBatch, stats: NormStats) -> Tensor:
        """(B, hidden) critic features."""
        return self.encoder(obs, stats)

    def q_from(self, z: Tensor, chunk: Tensor) -> tuple[Tensor, Tensor]:
        """Twin Q values (B,), (B,) from features (B, hidden) and a normalised relative chunk (B, H, A)."""
        x = torch.cat([z, chunk.flatten(1)], dim=-1)
        return self.q1(x).squeeze(-1), self.q2(x).squeeze(-1)

    def v_from(self, z: Tensor) -> Tensor:
        """V(s) (B,) from features (B, hidden)."""
        return self.v(z).squeeze(-1)
