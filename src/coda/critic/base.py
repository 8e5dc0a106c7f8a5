"""What a critic sees (`EpisodeRecord`), the `Critic` protocol, fallback between critics, and the registry.

Critics are built from a `CriticConfig` by name through `CRITICS`; each factory imports its implementation
lazily, so importing this module never imports the `openai` client or MuJoCo.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from coda.critic.config import CriticConfig
from coda.critic.diagnosis import CriticResult
from coda.errors import CodaError
from coda.registry import Registry
from coda.scene.spec import ScenarioSpec

log = logging.getLogger(__name__)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class CriticUnavailable(CodaError):
    """A critic could not produce an answer at all (endpoint unreachable, timed out, refused the request).

    The engine catches it: it either falls back to another configured critic or records the episode as
    undiagnosed with this message. Bad *answers* are not this error: they become `DiagnosisRejected`.
    """


class EpisodeError(CodaError, ValueError):
    """An EpisodeRecord is malformed; the message names the field and value."""


Keyframe = np.ndarray | bytes  # (H, W, 3|4) uint8 RGB(A), or PNG-encoded bytes


@dataclass(frozen=True)
class EpisodeRecord:
    """One finished episode as a critic sees it.

    Attributes:
        episode_id: unique id of the episode (memory key).
        spec: the scenario it ran in.
        success: whether the goal held at the end.
        steps: control steps taken.
        keyframes: images in time order, (H, W, 3|4) uint8 arrays or PNG bytes.
        keyframe_steps: the step index of each keyframe (same length as keyframes, or empty).
        states: privileged simulator state per step (for the privileged critic and the verifier; may be empty).
        summary: compact trace summary in words (gripper path, contacts, grasps, final poses).
        outcome: how it ended: "success", "timeout", "dropped", ... (free text, one word preferred).
        instruction: the instruction the policy was given; defaults to `spec.instruction`.
    """

    episode_id: str
    spec: ScenarioSpec
    success: bool
    steps: int
    keyframes: tuple[Keyframe, ...] = ()
    keyframe_steps: tuple[int, ...] = ()
    states: tuple[Any, ...] = ()
    summary: str = ""
    outcome: str = ""
    instruction: str = field(default="")

    def __post_init__(self) -> None:
        if not self.episode_id:
            raise EpisodeError("episode field 'episode_id' must be a non-empty string")
        if self.steps < 0:
            raise EpisodeError(f"episode field 'steps' = {self.steps} must be >= 0")
        if not self.instruction:
            text = self.spec.instruction  # a ScenarioSpec field, a LiberoScenario method (read from its BDDL)
            object.__setattr__(self, "instruction", text() if callable(text) else text)
        object.__setattr__(self, "keyframes", tuple(self.keyframes))
        object.__setattr__(self, "keyframe_steps", tuple(int(s) for s in self.keyframe_steps))
        object.__setattr__(self, "states", tuple(self.states))
        for i, k in enumerate(self.keyframes):
            _check_keyframe(i, k)
        if self.keyframe_steps and len(self.keyframe_steps) != len(self.keyframes):
            raise EpisodeError(
                f"episode field 'keyframe_steps' has {len(self.keyframe_steps)} entries for "
                f"{len(self.keyframes)} keyframes"
            )


def _check_keyframe(i: int, k: Any) -> None:
    if isinstance(k, (bytes, bytearray)):
        if not bytes(k[:8]) == PNG_SIGNATURE:
            raise EpisodeError(f"episode field 'keyframes.{i}' is bytes but not a PNG (signature {bytes(k[:8])!r})")
        return
    if not isinstance(k, np.ndarray):
        raise EpisodeError(f"episode field 'keyframes.{i}' must be a uint8 array or PNG bytes, got {type(k).__name__}")
    if k.dtype != np.uint8 or k.ndim != 3 or k.shape[2] not in (3, 4) or min(k.shape[:2]) < 1:
        raise EpisodeError(
            f"episode field 'keyframes.{i}' has dtype {k.dtype} shape {k.shape}; expected uint8 (H, W, 3) or (H, W, 4)"
        )


@runtime_checkable
class Critic(Protocol):
    """Diagnoses a failed episode.

    `diagnose` returns a validated `Diagnosis`, or a `DiagnosisRejected` record when the critic's answer is
    unusable. It raises `CriticUnavailable` only when no answer could be obtained at all.
    """

    name: str

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """Diagnose one episode."""
        ...


class FallbackCritic:
    """Tries critics in order; moves to the next only when one raises `CriticUnavailable`.

    The result carries a note naming every critic that was unavailable and why, so a fallback is never
    silent. If all are unavailable, raises `CriticUnavailable` listing each reason.
    """

    def __init__(self, critics: Sequence[Critic]) -> None:
        if not critics:
            raise CodaError("FallbackCritic needs at least one critic")
        self.critics = tuple(critics)
        self.name = self.critics[0].name

    def diagnose(self, episode: EpisodeRecord) -> CriticResult:
        """Diagnose with the first critic that is available (see class docstring)."""
        failures: list[str] = []
        for c in self.critics:
            try:
                result = c.diagnose(episode)
            except CriticUnavailable as e:
                log.warning("critic '%s' unavailable for episode %s: %s", c.name, episode.episode_id, e)
                failures.append(f"critic '{c.name}' unavailable: {e}")
                continue
            if failures:
                note = "; ".join(failures) + f"; used '{c.name}'"
                return result.model_copy(update={"notes": (*result.notes, note)})
            return result
        raise CriticUnavailable(" | ".join(failures))


CriticFactory = Callable[[CriticConfig], Critic]

#: Registered critics: name → factory taking the critic config section.
CRITICS: Registry[CriticFactory] = Registry("critic")


#: The critic that reads a simulator backend's own state traces, where it is not the tabletop's `privileged`.
PRIVILEGED_CRITICS: dict[str, str] = {"libero": "libero-privileged"}


def make_critic(cfg: CriticConfig, name: str | None = None, *, backend: str | None = None) -> Critic:
    """Build the critic `name` (default `cfg.name`), wrapped with `cfg.fallback` when one is configured.
    `backend`: the simulator the episodes come from; there `privileged` (the critic, its fallback, the noisy
    critic's base) is the critic that reads that simulator's traces (`PRIVILEGED_CRITICS`).

    Raises:
        RegistryError: unknown critic name (lists the available ones).
    """
    own = PRIVILEGED_CRITICS.get(backend or "")
    if own is not None:
        def swap(n: str | None) -> str | None:
            return own if n == "privileged" else n

        cfg = cfg.model_copy(update={"name": swap(cfg.name), "fallback": swap(cfg.fallback),
                                     "noisy_base": swap(cfg.noisy_base)})
        name = swap(name)
    primary = CRITICS.get(name or cfg.name)(cfg)
    if name is None and cfg.fallback is not None:
        return FallbackCritic([primary, CRITICS.get(cfg.fallback)(cfg)])
    return primary


def make_verifier(cfg: CriticConfig, shaping: Any, *, sim: Any, env: Any, seed: int) -> Any:
    """The verifier of diagnoses of `sim`'s episodes (a `coda.sim.backends.SimBackend`), its expert demos in
    `env` (an env acting in targets, owned by the caller): LIBERO's (`coda.critic.libero_verify`, its checks
    read `LiberoState` traces), else the tabletop's (`coda.critic.verify`), which reaches any other simulator
    through the contract. Both run the one counterfactual check over `sim`'s factor vocabulary."""
    if sim.name == "libero":
        from coda.critic.libero_verify import LiberoVerifier

        return LiberoVerifier(cfg, shaping=shaping, seed=seed, env_factory=lambda: env.env, sim=sim)
    from coda.critic.verify import Verifier

    return Verifier(cfg, shaping, env_factory=lambda: env, seed=seed, sim=sim)


def _vlm(cfg: CriticConfig) -> Critic:
    from coda.critic.vlm import VLMCritic  # lazy: the openai client is imported only when used

    return VLMCritic(cfg)


def _privileged(cfg: CriticConfig) -> Critic:
    from coda.critic.privileged import PrivilegedCritic  # lazy: the simulator's predicates import MuJoCo

    return PrivilegedCritic()


def _libero_privileged(cfg: CriticConfig) -> Critic:
    from coda.critic.libero import LiberoPrivilegedCritic  # lazy: LIBERO's predicates import MuJoCo

    return LiberoPrivilegedCritic()


def _noisy(cfg: CriticConfig) -> Critic:
    from coda.critic.noisy import NoisyCritic

    return NoisyCritic(make_critic(cfg, cfg.noisy_base), rate=cfg.noise, seed=cfg.noise_seed)


CRITICS.register("privileged", _privileged)
CRITICS.register("vlm", _vlm)
CRITICS.register("noisy", _noisy)
CRITICS.register("libero-privileged", _libero_privileged)
