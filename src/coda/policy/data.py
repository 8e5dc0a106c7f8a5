"""Demonstration datasets on disk: Parquet shards of steps plus a JSON index of episodes.

Format (`coda-demos`, version 1), one directory:

    index.json              dims, shard list, one record per episode (length, success, flags, scene id)
    shard-00000.parquet     one row per observation: T+1 rows for an episode of T actions
    ...

Why Parquet: it is columnar, compressed and typed, holds variable-length lists of floats and of strings
(any number of entities and their descriptions, no padding on disk), carries its schema, and opens without
CoDA in pandas, polars, DuckDB or Hugging Face datasets; `.npz` cannot hold strings without pickle and has
no schema. The JSON index lists episodes and their flags without opening a shard.

Row columns: `episode` int64, `step` int32, `proprio` list<f32> (P), `objects` list<f32> (M*F, row-major),
`object_mask` list<i8> (M), `object_text` list<str> (M), `instruction` str, `action` list<f32> (A; null on
the last row, which holds the final observation), `reward` f32 (null on the last row), `potential` f32
(NaN if none), `label_chunk` list<f32> (K*A expert label chunk, null if the row is unlabelled). An episode's index record may
list `wordings`: other instructions with the same meaning, which training can put in place of the recorded one,
and `goal_rows` / `goal_value`: the entity rows the goal names (what is moved, where it goes) and its number
(a drawer's opening fraction), which training can use to supervise the policy's grounding.

A demonstration's BC targets are its own next actions. A corrective episode (flag `corrective`) is a
failed trajectory of another policy whose rows carry the expert's label chunk at that state; its BC targets
are those labels and its executed actions still serve as transitions for the critic.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from coda.policy.errors import DatasetError
from coda.policy.features import ACTION_DIM, validate_obs

FORMAT = "coda-demos"
FORMAT_VERSION = 1
INDEX_FILE = "index.json"

SCHEMA = pa.schema(
    [
        ("episode", pa.int64()),
        ("step", pa.int32()),
        ("proprio", pa.list_(pa.float32())),
        ("objects", pa.list_(pa.float32())),
        ("object_mask", pa.list_(pa.int8())),
        ("object_text", pa.list_(pa.string())),
        ("instruction", pa.string()),
        ("action", pa.list_(pa.float32())),
        ("reward", pa.float32()),
        ("potential", pa.float32()),
        ("label_chunk", pa.list_(pa.float32())),
    ]
)


@dataclass
class Episode:
    """One recorded episode: T actions between T+1 observations.

    `label_chunks[t]` is the expert's chunk (K, A) at observation t, or None; demonstrations need none.
    """

    observations: list[Mapping[str, Any]]  # T+1 env observations
    actions: np.ndarray  # (T, A) executed absolute targets
    rewards: np.ndarray  # (T,)
    terminated: bool  # ended in a terminal state (not a time limit)
    success: bool
    potentials: np.ndarray | None = None  # (T+1,) Phi(s_t), raw (terminal included)
    label_chunks: list[np.ndarray | None] | None = None  # T+1 entries (K, A) or None
    corrective: bool = False
    spec_id: str = ""
    family: str = ""
    split: str = ""
    wordings: tuple[str, ...] = ()  # other instructions for the same goal (training may swap them in)
    goal_rows: tuple[int, ...] = ()  # entity rows the goal names, in role order (moved, destination); -1 = none
    goal_value: float = float("nan")  # the goal's number (a drawer's opening fraction), NaN when it has none

    def __post_init__(self) -> None:
        self.actions = np.asarray(self.actions, dtype=np.float32).reshape(len(self.actions), -1)
        self.rewards = np.asarray(self.rewards, dtype=np.float32).reshape(-1)
        t = len(self.actions)
        if t < 1:
            raise DatasetError(f"episode '{self.spec_id}' field 'actions' is empty: an episode needs >= 1 action")
        if len(self.observations) != t + 1:
            raise DatasetError(
                f"episode '{self.spec_id}' has {len(self.observations)} observations for {t} actions (want {t + 1})"
            )
        if self.actions.shape[1] != ACTION_DIM:
            raise DatasetError(f"episode '{self.spec_id}' field 'actions' has shape {self.actions.shape}, want (T, {ACTION_DIM})")
        if self.rewards.shape != (t,):
            raise DatasetError(f"episode '{self.spec_id}' field 'rewards' has shape {self.rewards.shape}, want ({t},)")
        if self.potentials is not None:
            self.potentials = np.asarray(self.potentials, dtype=np.float32).reshape(-1)
            if self.potentials.shape != (t + 1,):
                raise DatasetError(
                    f"episode '{self.spec_id}' field 'potentials' has shape {self.potentials.shape}, want ({t + 1},)"
                )
        if self.label_chunks is not None and len(self.label_chunks) != t + 1:
            raise DatasetError(f"episode '{self.spec_id}' field 'label_chunks' has {len(self.label_chunks)} entries, want {t + 1}")

    @property
    def length(self) -> int:
        """Number of actions T."""
        return len(self.actions)


# ---- writing ---------------------------------------------------------------------------------------


class DemoWriter:
    """Appends episodes to a dataset directory, a shard at a time, keeping `index.json` consistent.

    Args:
        out_dir: dataset directory (created).
        episodes_per_shard: episodes buffered before a shard is written.
        append: add to an existing dataset instead of refusing a non-empty directory.
    Raises:
        DatasetError: the directory already holds a dataset and `append` is False, or dims disagree.
    """

    def __init__(self, out_dir: str | Path, episodes_per_shard: int = 100, append: bool = False) -> None:
        self.dir = Path(out_dir)
        self.episodes_per_shard = max(1, episodes_per_shard)
        self.dir.mkdir(parents=True, exist_ok=True)
        if (self.dir / INDEX_FILE).exists():
            if not append:
                raise DatasetError(f"dataset directory '{self.dir}' already holds a dataset (pass append=True to add)")
            self.index = read_index(self.dir)
        else:
            self.index = {"format": FORMAT, "version": FORMAT_VERSION, "dims": None, "shards": [], "episodes": []}
        self._buffer: list[tuple[int, Episode]] = []

    def add(self, ep: Episode) -> int:
        """Queue an episode; returns its id. Validates every observation against the env contract."""
        dims = _episode_dims(ep)
        if self.index["dims"] is None:
            self.index["dims"] = dims
        elif self.index["dims"] != dims:
            raise DatasetError(f"episode '{ep.spec_id}' has dims {dims} but dataset '{self.dir}' has {self.index['dims']}")
        ep_id = len(self.index["episodes"]) + len(self._buffer)
        self._buffer.append((ep_id, ep))
        if len(self._buffer) >= self.episodes_per_shard:
            self.flush()
        return ep_id

    def flush(self) -> None:
        """Write buffered episodes as one shard and rewrite the index (atomically)."""
        if not self._buffer:
            return
        name = f"shard-{len(self.index['shards']):05d}.parquet"
        rows: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
        for ep_id, ep in self._buffer:
            _episode_rows(ep_id, ep, rows)
        table = pa.Table.from_pydict(rows, schema=SCHEMA)
        tmp = self.dir / (name + ".tmp")
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, self.dir / name)
        self.index["shards"].append({"file": name, "episodes": len(self._buffer), "rows": table.num_rows})
        for ep_id, ep in self._buffer:
            self.index["episodes"].append(
                {
                    "id": ep_id, "shard": name, "length": ep.length, "success": bool(ep.success),
                    "terminated": bool(ep.terminated), "corrective": bool(ep.corrective),
                    "has_potentials": ep.potentials is not None, "spec_id": ep.spec_id,
                    "family": ep.family, "split": ep.split, "wordings": list(ep.wordings),
                    "goal_rows": [int(r) for r in ep.goal_rows],
                    "goal_value": None if math.isnan(ep.goal_value) else float(ep.goal_value),
                }
            )
        self._buffer = []
        _write_json_atomic(self.dir / INDEX_FILE, self.index)

    def close(self) -> Path:
        """Flush and return the dataset directory."""
        self.flush()
        if not (self.dir / INDEX_FILE).exists():
            _write_json_atomic(self.dir / INDEX_FILE, self.index)
        return self.dir

    def __enter__(self) -> "DemoWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _episode_dims(ep: Episode) -> dict[str, int]:
    proprio, objects, _, _, _ = validate_obs(ep.observations[0], f"episode '{ep.spec_id}' observation 0")
    return {"proprio": int(proprio.shape[0]), "object_features": int(objects.shape[1]), "action": ACTION_DIM}


def _episode_rows(ep_id: int, ep: Episode, rows: dict[str, list[Any]]) -> None:
    t_len = ep.length
    for t, obs in enumerate(ep.observations):
        proprio, objects, mask, text, instruction = validate_obs(obs, f"episode '{ep.spec_id}' observation {t}")
        label = ep.label_chunks[t] if ep.label_chunks is not None else None
        if label is not None:
            label = np.asarray(label, dtype=np.float32).reshape(-1, ACTION_DIM)
        rows["episode"].append(ep_id)
        rows["step"].append(t)
        rows["proprio"].append(proprio)
        rows["objects"].append(objects.reshape(-1))
        rows["object_mask"].append(mask.astype(np.int8))
        rows["object_text"].append(text)
        rows["instruction"].append(instruction)
        rows["action"].append(ep.actions[t] if t < t_len else None)
        rows["reward"].append(float(ep.rewards[t]) if t < t_len else None)
        rows["potential"].append(float(ep.potentials[t]) if ep.potentials is not None else float("nan"))
        rows["label_chunk"].append(label.reshape(-1) if label is not None else None)


def _write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


# ---- reading ---------------------------------------------------------------------------------------


def read_index(path: str | Path) -> dict[str, Any]:
    """Read and check a dataset's index.json. Raises DatasetError naming the file and the problem."""
    p = Path(path) / INDEX_FILE
    if not p.is_file():
        raise DatasetError(f"dataset '{Path(path)}' has no {INDEX_FILE} (not a demo dataset directory)")
    try:
        index = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise DatasetError(f"dataset index '{p}' is not valid JSON: {e.msg} at line {e.lineno}") from None
    if not isinstance(index, dict) or index.get("format") != FORMAT:
        raise DatasetError(f"dataset index '{p}' field 'format' must be '{FORMAT}'")
    if index.get("version") != FORMAT_VERSION:
        raise DatasetError(f"dataset index '{p}' field 'version' = {index.get('version')!r}, this CoDA reads {FORMAT_VERSION}")
    return index


class DemoDataset:
    """A dataset directory opened for reading.

    Raises:
        DatasetError: missing or malformed index or shard.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.index = read_index(self.path)

    def __len__(self) -> int:
        return len(self.index["episodes"])

    @property
    def dims(self) -> dict[str, int] | None:
        return self.index["dims"]

    def episodes(self, where: Callable[[dict[str, Any]], bool] | None = None) -> Iterator[Episode]:
        """Yield episodes in id order, optionally only those whose index record satisfies `where`."""
        records = {e["id"]: e for e in self.index["episodes"] if where is None or where(e)}
        for shard in self.index["shards"]:
            ids = [i for i, e in records.items() if e["shard"] == shard["file"]]
            if not ids:
                continue
            table = self._read_shard(shard["file"])
            cols = table.to_pydict()
            by_episode: dict[int, list[int]] = {}
            for r, e in enumerate(cols["episode"]):
                by_episode.setdefault(e, []).append(r)
            for ep_id in sorted(ids):
                if ep_id not in by_episode:
                    raise DatasetError(f"dataset '{self.path}' shard '{shard['file']}' lacks episode {ep_id}")
                yield _rows_to_episode(cols, sorted(by_episode[ep_id], key=lambda r: cols["step"][r]), records[ep_id], self.dims)

    def _read_shard(self, name: str) -> pa.Table:
        p = self.path / name
        try:
            table = pq.read_table(p)
        except (OSError, pa.ArrowInvalid) as e:
            raise DatasetError(f"dataset shard '{p}' is unreadable: {str(e).splitlines()[0]}") from None
        if not table.schema.equals(SCHEMA):
            raise DatasetError(f"dataset shard '{p}' has schema {table.schema.names}, want {SCHEMA.names}")
        return table


def _rows_to_episode(cols: dict[str, list[Any]], rows: list[int], rec: dict[str, Any], dims: dict[str, int] | None) -> Episode:
    assert dims is not None
    f_dim = dims["object_features"]
    obs: list[dict[str, Any]] = []
    labels: list[np.ndarray | None] = []
    for r in rows:
        m = len(cols["object_mask"][r])
        obs.append(
            {
                "proprio": np.asarray(cols["proprio"][r], np.float32),
                "objects": np.asarray(cols["objects"][r], np.float32).reshape(m, f_dim),
                "object_mask": np.asarray(cols["object_mask"][r], np.int8),
                "object_text": tuple(cols["object_text"][r]),
                "instruction": cols["instruction"][r],
            }
        )
        lab = cols["label_chunk"][r]
        labels.append(None if lab is None else np.asarray(lab, np.float32).reshape(-1, ACTION_DIM))
    pots = np.asarray([cols["potential"][r] for r in rows], np.float32)
    return Episode(
        observations=obs,
        actions=np.stack([np.asarray(cols["action"][r], np.float32) for r in rows[:-1]]),
        rewards=np.asarray([cols["reward"][r] for r in rows[:-1]], np.float32),
        terminated=rec["terminated"],
        success=rec["success"],
        potentials=pots if rec.get("has_potentials") else None,
        label_chunks=labels if any(lab is not None for lab in labels) else None,
        corrective=rec["corrective"],
        spec_id=rec.get("spec_id", ""),
        family=rec.get("family", ""),
        split=rec.get("split", ""),
        wordings=tuple(str(w) for w in rec.get("wordings", ())),
        goal_rows=tuple(int(r) for r in rec.get("goal_rows", ())),
        goal_value=float("nan") if rec.get("goal_value") is None else float(rec["goal_value"]),
    )


# ---- collection -------------------------------------------------------------------------------------


@dataclass
class CollectReport:
    """What `collect_demos` did."""

    path: Path
    attempted: int
    succeeded: int
    written: int
    steps: int
    failed_specs: list[str] = field(default_factory=list)


def _first_action(chunk: Any) -> np.ndarray:
    a = np.asarray(chunk, dtype=np.float32)
    return a.reshape(-1, a.shape[-1])[0] if a.ndim > 1 else a


def run_expert_episode(env: Any, spec: Any, expert: Any, max_steps: int | None = None,
                       states: list[Any] | None = None) -> Episode:
    """Roll a scripted expert out in `env` from `spec`, re-planning every step, and record the episode.

    The expert contract is `act(state) -> action chunk (K, A)` (or one action (A,)); the first action is
    executed so the expert stays closed-loop. `env.reset_to(spec)` returns `(obs, info)`. When `states` is a
    list, the T + 1 privileged states the episode passed through are appended to it.
    """
    obs, info = env.reset_to(spec)
    if hasattr(expert, "reset"):
        expert.reset()
    observations, actions, rewards = [obs], [], []
    terminated = truncated = False
    success = bool(info.get("success", False))
    while not (terminated or truncated):
        state = env.state()
        if states is not None:
            states.append(state)
        action = _first_action(expert.act(state))
        obs, reward, terminated, truncated, info = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(float(reward))
        success = bool(info.get("success", False))
        if max_steps is not None and len(actions) >= max_steps:
            break
    if states is not None:
        states.append(env.state())
    return Episode(
        observations=observations,
        actions=np.stack(actions),
        rewards=np.asarray(rewards, np.float32),
        terminated=bool(terminated),
        success=success,
        spec_id=str(getattr(spec, "spec_id", "")),
        family=str(getattr(spec, "family", "")),
        split=str(getattr(getattr(spec, "provenance", None), "split", "") or ""),
    )


def corrective_episode(
    env: Any, spec: Any, actions: np.ndarray, expert: Any, label_every: int = 1, label_len: int | None = None,
    states: list[Any] | None = None,
) -> Episode:
    """Relabel a (failed) trajectory with expert chunks: replay `actions` from `spec` and, every
    `label_every` steps, store the expert's chunk at that state.

    The label is what the expert *does* from the state, the way demonstrations are recorded: when the env can
    snapshot and restore its state (`get_state`/`set_state`), the expert is rolled out closed loop for
    `label_len` steps (re-planning every step, as in `run_expert_episode`) from a snapshot, its executed
    actions are the label, and the snapshot is restored before the replay goes on. Without snapshots the
    label is the expert's planned chunk `expert.act(state)`, which is *not* what it would execute (it
    re-plans every step, and a re-planned target leads the gripper by a roughly constant distance while one
    plan's targets run ahead of it); mixing the two kinds of target for the same states teaches a
    policy contradictory chunks.

    Replaying works because the env is deterministic: the same spec and actions give the same states.
    The result is flagged `corrective`; its executed actions and rewards are the replayed ones.

    Args:
        expert: the labeller; None with `label_every = 0`.
        label_every: steps between labels; 0 labels nothing (see `replayed_episode`).
        label_len: steps of each label (default: the expert's `horizon`, else 8).
        states: when a list, the privileged states of the replay (T + 1, read before each label) are
            appended to it.
    """
    if label_every < 0:
        raise DatasetError(f"label_every = {label_every!r} must be >= 0 (0: no labels)")
    if label_every and expert is None:
        raise DatasetError(f"label_every = {label_every} needs an expert to label with")
    length = int(label_len or getattr(expert, "horizon", 8))
    if length < 1:
        raise DatasetError(f"label_len = {label_len!r} must be >= 1")
    branch = hasattr(env, "get_state") and hasattr(env, "set_state")

    def label() -> np.ndarray:
        if not branch:
            return np.asarray(expert.act(env.state()), np.float32).reshape(-1, ACTION_DIM)
        snap = env.get_state()
        out = []
        try:
            for _ in range(length):
                a = _first_action(expert.act(env.state()))
                out.append(a)
                _, _, term, trunc, _ = env.step(a)
                if term or trunc:
                    break
        finally:
            env.set_state(snap)
        return np.stack(out).astype(np.float32)

    acts = np.asarray(actions, dtype=np.float32).reshape(-1, ACTION_DIM)
    obs, info = env.reset_to(spec)
    observations, rewards, labels = [obs], [], []
    terminated = False
    success = bool(info.get("success", False))
    for t, a in enumerate(acts):
        if states is not None:
            states.append(env.state())
        labels.append(label() if label_every and t % label_every == 0 else None)
        obs, reward, terminated, truncated, info = env.step(a)
        observations.append(obs)
        rewards.append(float(reward))
        success = bool(info.get("success", False))
        if terminated or truncated:
            acts = acts[: t + 1]
            break
    if states is not None:
        states.append(env.state())
    labels.append(None)  # the final observation has no action to label
    return Episode(
        observations=observations, actions=acts, rewards=np.asarray(rewards, np.float32), terminated=bool(terminated),
        success=success, label_chunks=labels, corrective=True, spec_id=str(getattr(spec, "spec_id", "")),
        family=str(getattr(spec, "family", "")),
        split=str(getattr(getattr(spec, "provenance", None), "split", "") or ""),
    )


def replayed_episode(env: Any, spec: Any, actions: np.ndarray, states: list[Any] | None = None) -> Episode:
    """A policy's own episode re-created by replaying its actions, with no expert label.

    It gives the chunk critic the policy's outcomes (its failures included) and no behaviour-cloning sample:
    an unlabelled corrective episode (see `ChunkDataset`).
    """
    return corrective_episode(env, spec, actions, None, label_every=0, states=states)


def collect_demos(
    env: Any,
    specs: Sequence[Any],
    expert_factory: Callable[[Any], Any],
    out_dir: str | Path,
    *,
    keep_failures: bool = False,
    max_steps: int | None = None,
    potential_fn: Callable[[Any, Sequence[Any]], np.ndarray] | None = None,
    wordings_fn: Callable[[Any], Sequence[str]] | None = None,
    goal_fn: Callable[[Any], tuple[Sequence[int], float]] | None = None,
    append: bool = False,
    progress: bool = False,
) -> CollectReport:
    """Record one expert episode per scene into a dataset directory.

    Args:
        env: an Env (`reset_to`, `step`, `state`).
        specs: ScenarioSpecs to solve.
        expert_factory: spec -> expert with `act(state)`.
        out_dir: dataset directory.
        keep_failures: also write episodes the expert failed (flagged success = False).
        max_steps: cap on steps per episode (default: the env's own time limit).
        potential_fn: optional (spec, states) -> (T+1,) potentials stored with the episode, where `states`
            are the T + 1 privileged states the expert's episode passed through (no replay needed).
        wordings_fn: optional spec -> other instructions for the same goal, stored with the episode.
        goal_fn: optional spec -> (entity rows its goal names, goal value), stored with the episode.
        append: add to an existing dataset.
        progress: show a progress bar.
    Returns:
        CollectReport with counts; scenes the expert failed are listed by spec id.
    """
    from rich.progress import track

    report = CollectReport(path=Path(out_dir), attempted=0, succeeded=0, written=0, steps=0)
    with DemoWriter(out_dir, append=append) as writer:
        it = track(specs, description="collecting demos", disable=not progress, transient=True)
        for spec in it:
            states: list[Any] | None = [] if potential_fn is not None else None
            ep = run_expert_episode(env, spec, expert_factory(spec), max_steps, states=states)
            report.attempted += 1
            if ep.success:
                report.succeeded += 1
            else:
                report.failed_specs.append(ep.spec_id)
            if ep.success or keep_failures:
                if potential_fn is not None:
                    ep = dataclasses.replace(ep, potentials=np.asarray(potential_fn(spec, states), np.float32))
                if wordings_fn is not None:
                    ep = dataclasses.replace(ep, wordings=tuple(wordings_fn(spec)))
                if goal_fn is not None:
                    rows, value = goal_fn(spec)
                    ep = dataclasses.replace(ep, goal_rows=tuple(int(r) for r in rows), goal_value=float(value))
                writer.add(ep)
                report.written += 1
                report.steps += ep.length
    return report
