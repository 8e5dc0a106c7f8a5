"""The shared memory: open it, write a phase atomically, read records back.

    memory = open_memory(run_dir)                      # SQLite file RUN_DIR/memory.sqlite (WAL)
    memory = open_memory(run_dir, "postgresql+psycopg://user:pw@host/db")   # same code path
    memory.create_run("run-1", config=cfg_json, seed=0, strategy="coda", exist_ok=True)
    if not memory.phase_done("run-1", 2, "evaluate"):
        with memory.phase("run-1", 2, "evaluate") as tx:
            sc = tx.add(Scenario.from_spec(spec, split="probe"))
            tx.add(Episode(scenario_id=sc.id, policy="policy", success=False, episode_return=0.0, length=80))

Everything added through `tx`, plus the phase marker, commits in one transaction or not at all: a run killed
at any point (SIGKILL included) leaves either the whole phase or nothing, and resuming re-runs exactly the
phases without a marker. Reads (`get`, `list`, `counts`, ...) each see one consistent snapshot; use
`memory.snapshot()` to make several reads against the same one.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as dt
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar, overload

from sqlalchemy import Engine, func, select
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from coda.errors import CodaError
from coda.errors import first_line as _first_line_of
from coda.memory.artifacts import ArtifactStore
from coda.memory.errors import (
    DuplicateRecordError,
    InvalidRecordError,
    MemoryStoreError,
    PhaseCommittedError,
    QueryError,
    RecordNotFoundError,
)
from coda.memory.models import RECORD_KINDS, Base, PhaseMarker, Run, utcnow
from coda.memory.validate import validate_record
from coda.registry import Registry

R = TypeVar("R", bound=Base)

# Record kinds by public name; `KINDS.get("x")` fails with the list of known kinds.
KINDS: Registry[type[Base]] = Registry("record kind")
for _model in RECORD_KINDS:
    KINDS.register(_model.__kind__, _model)

RUN_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
PHASE_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_STAMPED = ("run_id", "round", "phase")  # filled in by the phase transaction


def resolve_kind(kind: str | type[R]) -> type[Base]:
    """The model for a kind name ("episode") or the model class itself.

    Raises:
        RegistryError: unknown kind name, listing the known ones.
    """
    if isinstance(kind, str):
        return KINDS.get(kind)
    if isinstance(kind, type) and issubclass(kind, Base) and kind in RECORD_KINDS:
        return kind
    raise QueryError(f"record kind {kind!r} is not a memory record kind; known: {KINDS.names()}")


def first_line(exc: BaseException) -> str:
    """The first non-empty line of a (driver) exception's message: the database's own, under SQLAlchemy's."""
    return _first_line_of(exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc)


def check_run_id(run_id: object) -> str:
    """Return `run_id` if it is a valid run name. Raises InvalidRecordError naming the value."""
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise InvalidRecordError(
            f"run id {run_id!r} is invalid: use 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return run_id


def _check_round(round_idx: object) -> int:
    if not isinstance(round_idx, int) or isinstance(round_idx, bool) or round_idx < 0:
        raise InvalidRecordError(f"round {round_idx!r} is invalid: expected an integer >= 0")
    return round_idx


def _check_phase(phase: object) -> str:
    if not isinstance(phase, str) or not PHASE_RE.match(phase):
        raise InvalidRecordError(f"phase name {phase!r} is invalid: use lower-case letters, digits and '_'")
    return phase


@contextlib.contextmanager
def db_errors(where: str, action: str) -> Iterator[None]:
    """Turn a driver error (server gone, lock timeout, ...) into a one-line MemoryStoreError."""
    try:
        yield
    except CodaError:
        raise
    except SQLAlchemyError as e:
        raise MemoryStoreError(f"memory {where}: {action} failed: {first_line(e)}") from e


# MemoryView and Memory define a method named `list`: annotations inside them spell the type `builtins.list`.
class MemoryView:
    """Reads against one session: a consistent snapshot, or the open transaction of a phase."""

    def __init__(self, session: Session, where: str) -> None:
        self._session = session
        self._where = where

    # ---- runs --------------------------------------------------------------------------------------

    def runs(self) -> builtins.list[Run]:
        """All runs, oldest first."""
        return list(self._session.scalars(select(Run).order_by(Run.created, Run.id)))

    def get_run(self, run_id: str) -> Run:
        """The run named `run_id`. Raises RecordNotFoundError listing the runs that exist."""
        run = self._session.get(Run, run_id)
        if run is None:
            known = [r for (r,) in self._session.execute(select(Run.id).order_by(Run.id).limit(20))]
            raise RecordNotFoundError(f"no run '{run_id}' in memory {self._where}; runs: {known}")
        return run

    # ---- records -----------------------------------------------------------------------------------

    @overload
    def get(self, kind: type[R], record_id: Any) -> R: ...
    @overload
    def get(self, kind: str, record_id: Any) -> Base: ...
    def get(self, kind: str | type[Base], record_id: Any) -> Base:
        """One record by kind and id (a run's id is its name).

        Raises:
            RegistryError: unknown kind. RecordNotFoundError: no such id.
        """
        model = resolve_kind(kind)
        if model is Run:
            return self.get_run(str(record_id))
        if not isinstance(record_id, int) or isinstance(record_id, bool):
            raise QueryError(f"{model.__kind__} id {record_id!r} is invalid: expected an integer")
        rec = self._session.get(model, record_id)
        if rec is None:
            raise RecordNotFoundError(f"no {model.__kind__} with id {record_id} in memory {self._where}")
        return rec

    def _select(self, model: type[Base], run_id: str | None, round_idx: int | None, filters: dict[str, Any]) -> Any:
        stmt = select(model)
        cols = model.__table__.c
        if run_id is not None:
            stmt = stmt.where(cols["id" if model is Run else "run_id"] == run_id)
        if round_idx is not None:
            if "round" not in cols:
                raise QueryError(f"{model.__kind__} records have no round")
            stmt = stmt.where(cols["round"] == round_idx)
        for name, value in filters.items():
            if name not in cols:
                raise QueryError(f"{model.__kind__} has no field '{name}'; fields: {sorted(cols.keys())}")
            stmt = stmt.where(cols[name].is_(None) if value is None else cols[name] == value)
        return stmt

    @overload
    def list(
        self, kind: type[R], run_id: str | None = ..., round_idx: int | None = ..., *, limit: int | None = ...,
        **filters: Any,
    ) -> builtins.list[R]: ...
    @overload
    def list(
        self, kind: str, run_id: str | None = ..., round_idx: int | None = ..., *, limit: int | None = ...,
        **filters: Any,
    ) -> builtins.list[Base]: ...
    def list(
        self,
        kind: str | type[Base],
        run_id: str | None = None,
        round_idx: int | None = None,
        *,
        limit: int | None = None,
        **filters: Any,
    ) -> builtins.list[Any]:
        """Records of one kind, in insertion (id) order, optionally of one run / round / field values.

        Args:
            kind: kind name ("episode") or model class (Episode).
            run_id: only this run's records.
            round_idx: only records written in this round.
            limit: at most this many.
            **filters: field == value (None matches NULL), e.g. `success=False`.

        Raises:
            RegistryError: unknown kind. QueryError: unknown field.
        """
        model = resolve_kind(kind)
        stmt = self._select(model, run_id, round_idx, filters)
        stmt = stmt.order_by(model.__table__.c["created" if model is Run else "id"])
        if limit is not None:
            stmt = stmt.limit(limit)
        return list(self._session.scalars(stmt))

    def count(self, kind: str | type[Base], run_id: str | None = None, round_idx: int | None = None, **filters: Any) -> int:
        """How many records `list` would return (without loading them)."""
        model = resolve_kind(kind)
        sub = self._select(model, run_id, round_idx, filters).subquery()
        return int(self._session.execute(select(func.count()).select_from(sub)).scalar_one())

    def counts(self, run_id: str, round_idx: int | None = None) -> dict[str, int]:
        """Records per kind for one run (every kind except "run"), optionally for one round.

        Raises:
            RecordNotFoundError: no such run.
        """
        self.get_run(run_id)
        out: dict[str, int] = {}
        for model in RECORD_KINDS:
            if model is Run:
                continue
            stmt = select(func.count()).select_from(model).where(model.__table__.c.run_id == run_id)
            if round_idx is not None:
                stmt = stmt.where(model.__table__.c.round == round_idx)
            out[model.__kind__] = int(self._session.execute(stmt).scalar_one())
        return out

    # ---- phases ------------------------------------------------------------------------------------

    def completed_phases(self, run_id: str) -> builtins.list[tuple[int, str]]:
        """`(round, phase)` of every committed phase of the run, in commit order."""
        stmt = select(PhaseMarker.round, PhaseMarker.phase).where(PhaseMarker.run_id == run_id).order_by(PhaseMarker.id)
        return [(int(r), str(p)) for r, p in self._session.execute(stmt)]

    def phase_done(self, run_id: str, round_idx: int, phase: str) -> bool:
        """Whether that phase of that round committed."""
        return self._marker(run_id, round_idx, phase) is not None

    def phase_seconds(self, run_id: str) -> builtins.dict[tuple[int, str], float]:
        """Seconds from start to commit of every committed phase of the run: {(round, phase): seconds}."""
        stmt = select(PhaseMarker).where(PhaseMarker.run_id == run_id).order_by(PhaseMarker.id)
        return {(int(m.round), str(m.phase)): max(0.0, (m.committed_at - m.started_at).total_seconds())
                for m in self._session.scalars(stmt)}

    def _marker(self, run_id: str, round_idx: int, phase: str) -> PhaseMarker | None:
        stmt = select(PhaseMarker).where(
            PhaseMarker.run_id == run_id, PhaseMarker.round == round_idx, PhaseMarker.phase == phase
        )
        return self._session.scalars(stmt).first()


class PhaseTx(MemoryView):
    """The open transaction of one phase. Records added here commit with the phase marker, or not at all.

    Reads through a PhaseTx see its own uncommitted writes. Records read through it are attached to the
    transaction: changing their attributes (e.g. `FailureMode.last_round`) is written when the phase commits.
    """

    def __init__(self, session: Session, where: str, run_id: str, round_idx: int, phase: str) -> None:
        super().__init__(session, where)
        self.run_id = run_id
        self.round = round_idx
        self.phase = phase
        self._open = True

    @property
    def session(self) -> Session:
        """The underlying SQLAlchemy session, for queries the read API does not cover."""
        return self._session

    def add(self, record: R, *, exist_ok: bool = False) -> R:
        """Validate and add one record; fills run_id, round and phase; returns it with its id set.

        Args:
            record: a new record of any kind except Run and PhaseMarker.
            exist_ok: if a record with the same natural key exists, return the stored one instead of failing.

        Raises:
            InvalidRecordError: a field is missing / mistyped / not finite / not JSON, a reference points at no
                record or at another run's record, or run_id / round / phase contradict the transaction.
            DuplicateRecordError: the natural key exists (and not `exist_ok`).
            MemoryStoreError: the transaction is closed, or the database failed.
        """
        if not self._open:
            raise MemoryStoreError(f"phase '{self.phase}' of round {self.round} is closed; add records inside it")
        model = type(record)
        if model in (Run, PhaseMarker) or model not in RECORD_KINDS:
            raise InvalidRecordError(
                f"cannot add a {model.__name__} in a phase; runs come from create_run, markers from the phase itself"
            )
        kind = model.__kind__
        for name, want in zip(_STAMPED, (self.run_id, self.round, self.phase)):
            have = getattr(record, name)
            if have is None:
                setattr(record, name, want)
            elif have != want:
                raise InvalidRecordError(f"{kind} field '{name}' = {have!r} but this phase writes {name} {want!r}")
        if record.id is not None:
            raise InvalidRecordError(f"{kind} field 'id' = {record.id!r}: ids are assigned by the memory")
        validate_record(record)
        self._check_references(record)
        with db_errors(self._where, f"adding {kind}"):
            existing = self._find(record)
            if existing is not None:
                if exist_ok:
                    return existing  # type: ignore[return-value]
                raise DuplicateRecordError(
                    f"{kind} with {record.natural_key()} already exists (id {existing.id}) in run '{self.run_id}'"
                )
            self._session.add(record)
            try:
                self._session.flush()
            except IntegrityError as e:  # a concurrent writer; the transaction is now unusable
                raise DuplicateRecordError(f"cannot add {kind} {record.natural_key()}: {first_line(e)}") from e
        return record

    def add_all(self, records: Iterable[R], *, exist_ok: bool = False) -> builtins.list[R]:
        """`add` each record in order; returns them with ids set."""
        return [self.add(r, exist_ok=exist_ok) for r in records]

    def _find(self, record: Base) -> Base | None:
        model = type(record)
        cols = model.__table__.c
        stmt = select(model).where(*(cols[k] == getattr(record, k) for k in model.__natural_key__))
        return self._session.scalars(stmt).first()

    def _check_references(self, record: Base) -> None:
        kind = record.__kind__
        for col in record.__table__.columns:
            value = getattr(record, col.key)
            if value is None or not col.foreign_keys or col.key == "run_id":
                continue
            (fk,) = col.foreign_keys
            target = next(m for m in RECORD_KINDS if m.__table__ is fk.column.table)
            ref = self._session.get(target, value)
            if ref is None:
                raise InvalidRecordError(f"{kind} field '{col.key}' = {value!r}: no {target.__kind__} with that id")
            if getattr(ref, "run_id", self.run_id) != self.run_id:
                raise InvalidRecordError(
                    f"{kind} field '{col.key}' = {value!r}: that {target.__kind__} belongs to run "
                    f"'{ref.run_id}', not '{self.run_id}'"  # type: ignore[attr-defined]
                )


class Memory:
    """A handle on the shared memory of one or more runs. Create it with `open_memory`.

    Attributes:
        url: the database URL with the password hidden.
        backend: "sqlite" or "postgresql".
        run_dir: the run directory (artifacts live there).
        artifacts: the ArtifactStore of `run_dir`.
        readonly: whether writes are refused.
    """

    def __init__(self, engine: Engine, url: str, run_dir: Path, readonly: bool, read_options: dict[str, Any]) -> None:
        self._engine = engine
        self._read_engine = engine.execution_options(**read_options)
        self.url = url
        self.backend = engine.dialect.name
        self.run_dir = run_dir
        self.readonly = readonly
        self.artifacts = ArtifactStore(run_dir)
        self._open_phase: str | None = None  # the phase now open through this handle, if any

    def __repr__(self) -> str:
        return f"Memory({self.url!r})"

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Release the database connections."""
        self._engine.dispose()

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine (for tools; records should go through `phase`)."""
        return self._engine

    @property
    def read_engine(self) -> Engine:
        """The engine with the read options: one snapshot per transaction, read-only on PostgreSQL."""
        return self._read_engine

    def _writable(self) -> None:
        if self.readonly:
            raise MemoryStoreError(f"memory {self.url} is open read-only")

    # ---- reading -----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def snapshot(self) -> Iterator[MemoryView]:
        """A read-only view on which every read sees the same committed state."""
        with Session(self._read_engine, expire_on_commit=False) as session:
            # Closing (not rolling back) ends the read transaction without expiring the loaded records.
            with db_errors(self.url, "reading"):
                yield MemoryView(session, self.url)

    def runs(self) -> builtins.list[Run]:
        """All runs, oldest first."""
        with self.snapshot() as v:
            return v.runs()

    def get_run(self, run_id: str) -> Run:
        """The run named `run_id`. Raises RecordNotFoundError."""
        with self.snapshot() as v:
            return v.get_run(run_id)

    @overload
    def get(self, kind: type[R], record_id: Any) -> R: ...
    @overload
    def get(self, kind: str, record_id: Any) -> Base: ...
    def get(self, kind: str | type[Base], record_id: Any) -> Base:
        """One record by kind and id. See MemoryView.get."""
        with self.snapshot() as v:
            return v.get(kind, record_id)

    def list(
        self,
        kind: str | type[R],
        run_id: str | None = None,
        round_idx: int | None = None,
        *,
        limit: int | None = None,
        **filters: Any,
    ) -> builtins.list[Any]:
        """Records of one kind; see MemoryView.list."""
        with self.snapshot() as v:
            return v.list(kind, run_id, round_idx, limit=limit, **filters)

    def count(self, kind: str | type[Base], run_id: str | None = None, round_idx: int | None = None, **filters: Any) -> int:
        """Number of records `list` would return."""
        with self.snapshot() as v:
            return v.count(kind, run_id, round_idx, **filters)

    def counts(self, run_id: str, round_idx: int | None = None) -> dict[str, int]:
        """Records per kind for one run; see MemoryView.counts."""
        with self.snapshot() as v:
            return v.counts(run_id, round_idx)

    def completed_phases(self, run_id: str) -> builtins.list[tuple[int, str]]:
        """`(round, phase)` of every committed phase of the run, in commit order."""
        with self.snapshot() as v:
            return v.completed_phases(run_id)

    def phase_done(self, run_id: str, round_idx: int, phase: str) -> bool:
        """Whether that phase of that round committed (the engine skips it on resume)."""
        with self.snapshot() as v:
            return v.phase_done(run_id, round_idx, phase)

    def phase_seconds(self, run_id: str) -> builtins.dict[tuple[int, str], float]:
        """Seconds from start to commit of every committed phase of the run: {(round, phase): seconds}."""
        with self.snapshot() as v:
            return v.phase_seconds(run_id)

    # ---- writing -----------------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        config: dict[str, Any],
        seed: int,
        strategy: str,
        exist_ok: bool = False,
    ) -> Run:
        """Record a new run (its own transaction).

        Args:
            run_id: the run's name (letters, digits, '.', '_', '-').
            config: the resolved configuration as JSON data.
            seed: the master seed.
            strategy: the strategy name.
            exist_ok: if the run exists, return it unchanged (resume) instead of failing.

        Raises:
            InvalidRecordError: bad id or field. DuplicateRecordError: the run exists and not `exist_ok`.
        """
        self._writable()
        check_run_id(run_id)
        run = Run(id=run_id, created=utcnow(), config=config, seed=seed, strategy=strategy, status="running")
        validate_record(run)
        with Session(self._engine, expire_on_commit=False) as session, db_errors(self.url, "creating a run"):
            existing = session.get(Run, run_id)
            if existing is not None:
                if exist_ok:
                    return existing
                raise DuplicateRecordError(f"run '{run_id}' already exists in memory {self.url}")
            session.add(run)
            try:
                session.commit()
            except IntegrityError as e:
                raise DuplicateRecordError(f"run '{run_id}' already exists in memory {self.url}") from e
        return run

    def set_run_status(self, run_id: str, status: str) -> Run:
        """Change a run's status ("running", "done", "failed", ...) in its own transaction.

        Raises:
            RecordNotFoundError: no such run. InvalidRecordError: bad status.
        """
        self._writable()
        with Session(self._engine, expire_on_commit=False) as session, db_errors(self.url, "updating a run"):
            run = MemoryView(session, self.url).get_run(run_id)
            run.status = status
            validate_record(run)
            session.commit()
            return run

    @contextlib.contextmanager
    def phase(self, run_id: str, round_idx: int, phase: str, started_at: dt.datetime | None = None) -> Iterator[PhaseTx]:
        """Open the transaction of one phase of one round; it commits with its marker on normal exit.

        An exception inside the block (or the process dying) rolls everything back: no record of the phase
        and no marker become visible.

        Args:
            run_id: an existing run.
            round_idx: the round (>= 0).
            phase: the phase name (evaluate, diagnose, verify, compile, generate, train, measure, ...).
            started_at: when the phase's work began (UTC), stored in its marker so that `phase_seconds`
                gives its duration; default now (the commit's start).

        Raises:
            PhaseCommittedError: the phase already committed (the engine must skip it).
            RecordNotFoundError: no such run. InvalidRecordError: bad round or phase name.
        """
        self._writable()
        check_run_id(run_id)
        _check_round(round_idx)
        _check_phase(phase)
        if self._open_phase is not None:
            # On SQLite a second writer would wait for the first one's lock until the busy timeout: say why now.
            raise MemoryStoreError(f"phase '{phase}' of round {round_idx} opened inside {self._open_phase}; phases do not nest")
        started = started_at if started_at is not None else utcnow()
        session = Session(self._engine, expire_on_commit=False)
        tx = PhaseTx(session, self.url, run_id, round_idx, phase)
        self._open_phase = f"phase '{phase}' of round {round_idx}"
        try:
            with db_errors(self.url, f"opening phase '{phase}' of round {round_idx}"):
                tx.get_run(run_id)
                marker = tx._marker(run_id, round_idx, phase)
            if marker is not None:
                raise PhaseCommittedError(
                    f"phase '{phase}' of round {round_idx} of run '{run_id}' already committed at "
                    f"{marker.committed_at.isoformat()}; skip it"
                )
            yield tx
            tx._open = False
            session.add(PhaseMarker(run_id=run_id, round=round_idx, phase=phase, started_at=started, committed_at=utcnow()))
            try:
                with db_errors(self.url, f"committing phase '{phase}' of round {round_idx}"):
                    session.commit()
            except MemoryStoreError as e:
                if isinstance(e.__cause__, IntegrityError):
                    raise PhaseCommittedError(
                        f"phase '{phase}' of round {round_idx} of run '{run_id}' was committed by another writer"
                    ) from e
                raise
        except BaseException:
            session.rollback()
            raise
        finally:
            tx._open = False
            self._open_phase = None
            session.close()

