"""LIBERO / LIBERO-PRO suites and tasks: names, BDDL text, instructions and official initial states.

A task is addressed by (suite, task id); ids follow the default task order of `libero_task_map`, which is
the order LIBERO's benchmark classes use with `task_order_index=0`. The instruction of a task is the BDDL
`(:language ...)` field, never the file name: LIBERO-PRO's `_lan` (paraphrase) and `_task` (another task in
the same scene) suites keep the original file names, so `Task.language` of LIBERO's benchmark API is wrong
for them.

Only files shipped in the installed package are read; nothing is downloaded or written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from coda.sim.libero.errors import LiberoError, LiberoUnavailableError

BASE_SUITES = ("libero_spatial", "libero_object", "libero_goal", "libero_10")
PRO_VARIANTS = ("swap", "lan", "task", "object")  # position, paraphrase, another task, object replacement

# Control steps of the usual evaluation horizon per suite family (as in the OpenVLA LIBERO evaluation).
MAX_STEPS = {"libero_spatial": 220, "libero_object": 280, "libero_goal": 300, "libero_10": 520, "libero_90": 400}
SETTLE_STEPS = 10  # no-op control steps after setting an initial state, so objects come to rest


def _libero():
    """The `libero.libero` package and its task map, or LiberoUnavailableError."""
    try:
        from libero.libero import get_libero_path
        from libero.libero.benchmark.libero_suite_task_map import libero_task_map
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise LiberoUnavailableError.from_import(e) from e
    return get_libero_path, libero_task_map


@dataclass(frozen=True)
class LiberoTask:
    """One task of a suite, with the paths of its BDDL file and official initial states."""

    suite: str  # "libero_object", "libero_spatial_lan", ...
    task_id: int  # index in the suite's default task order
    name: str  # file stem, e.g. "pick_up_the_alphabet_soup_and_place_it_in_the_basket"
    bddl_path: Path  # the official BDDL file (inside the installed package; read only)
    init_states_path: Path  # the official initial states (.npz)

    @property
    def file_language(self) -> str:
        """The instruction derived from the file name (what LIBERO's `Task.language` holds); often wrong."""
        return file_name_language(self.name)

    def bddl_text(self) -> str:
        """The task's official BDDL text."""
        return self.bddl_path.read_text(encoding="utf-8")

    def instruction(self) -> str:
        """The task's real instruction, from the BDDL `(:language ...)` field."""
        return bddl_language(self.bddl_text())

    def max_steps(self) -> int:
        """The evaluation horizon (control steps) of the task's suite family."""
        return max_steps(self.suite)


def file_name_language(name: str) -> str:
    """LIBERO's instruction-from-file-name rule (scene prefixes dropped, underscores to spaces)."""
    if "SCENE" in name:
        i = name.find("SCENE")
        name = name[i + 8 :] if name[i + 5 : i + 7].isdigit() else name[i + 7 :]
    return " ".join(name.split("_"))


def max_steps(suite: str) -> int:
    """The evaluation horizon of `suite`'s family (`libero_object_swap` -> that of `libero_object`)."""
    for family in sorted(MAX_STEPS, key=len, reverse=True):
        if suite == family or suite.startswith(family + "_"):
            return MAX_STEPS[family]
    raise LiberoError(f"suite = {suite!r} has no known horizon; families with one: {sorted(MAX_STEPS)}")


@lru_cache(maxsize=1)
def _task_map() -> dict[str, tuple[str, ...]]:
    _, task_map = _libero()
    return {suite: tuple(names) for suite, names in task_map.items()}


def _root(key: str) -> Path:
    get_libero_path, _ = _libero()
    return Path(get_libero_path(key))


def _task_files(suite: str, name: str) -> tuple[Path, Path]:
    return (
        _root("bddl_files") / suite / f"{name}.bddl",
        _root("init_states") / suite / f"{name}.pruned_init.npz",
    )


def list_suites(complete_only: bool = True) -> list[str]:
    """Suite names, sorted. With `complete_only`, only suites whose every task has its BDDL file and its
    official initial states in the installed package (the `_env`, `_temp` and `*_ood` suites have none)."""
    out = []
    for suite, names in _task_map().items():
        if not names:
            continue
        if complete_only and not all(p.is_file() for n in names for p in _task_files(suite, n)):
            continue
        out.append(suite)
    return sorted(out)


def list_tasks(suite: str) -> list[LiberoTask]:
    """The tasks of `suite` in their default order. Raises LiberoError for an unknown suite."""
    names = _task_map().get(suite)
    if names is None:
        raise LiberoError(f"Unknown LIBERO suite '{suite}'. Available: {list_suites(complete_only=False)}")
    return [LiberoTask(suite, i, n, *_task_files(suite, n)) for i, n in enumerate(names)]


def get_task(suite: str, task_id: int) -> LiberoTask:
    """Task `task_id` of `suite`. Raises LiberoError for an unknown suite or an id out of range."""
    tasks = list_tasks(suite)
    if not isinstance(task_id, int) or isinstance(task_id, bool) or not 0 <= task_id < len(tasks):
        raise LiberoError(f"task_id ({task_id!r}) is out of range for suite '{suite}' ({len(tasks)} tasks)")
    return tasks[task_id]


def init_states(suite: str, task_id: int) -> np.ndarray:
    """The official initial states of a task: float64 (N, D) flattened MuJoCo states (N = 50 usually).

    Raises LiberoError when the suite ships no initial states for the task.
    """
    task = get_task(suite, task_id)
    if not task.init_states_path.is_file():
        raise LiberoError(f"suite '{suite}' task {task_id} has no official initial states ({task.init_states_path})")
    with np.load(task.init_states_path, allow_pickle=False) as f:
        states = np.asarray(f["states"], dtype=np.float64)
    if states.ndim != 2 or not len(states):
        raise LiberoError(f"initial states of suite '{suite}' task {task_id} have shape {states.shape}, expected (N, D)")
    return states


# ---- BDDL text ----------------------------------------------------------------------------------------

_COMMENT = re.compile(r";.*$", flags=re.MULTILINE)
_TOKEN = re.compile(r"[()]|[^\s()]+")


def bddl_tokens(text: str) -> list:
    """BDDL text as nested lists of lower-case tokens (comments removed), like `bddl.parsing.scan_tokens`.

    Raises LiberoError on unbalanced parentheses.
    """
    stack: list[list] = []
    tokens: list = []
    for t in _TOKEN.findall(_COMMENT.sub("", text).lower()):
        if t == "(":
            stack.append(tokens)
            tokens = []
        elif t == ")":
            if not stack:
                raise LiberoError("BDDL text has a ')' without a matching '('")
            inner, tokens = tokens, stack.pop()
            tokens.append(inner)
        else:
            tokens.append(t)
    if stack:
        raise LiberoError(f"BDDL text has {len(stack)} unclosed '('")
    if len(tokens) != 1 or not isinstance(tokens[0], list) or not tokens[0] or tokens[0][0] != "define":
        raise LiberoError("BDDL text must be one '(define ...)' form")
    return tokens[0]


def bddl_section(text: str, key: str) -> list:
    """The tokens of the top-level section `key` (e.g. ":language", ":objects") without the key.

    Raises LiberoError when the section is missing.
    """
    for group in bddl_tokens(text)[1:]:
        if isinstance(group, list) and group and group[0] == key:
            return group[1:]
    raise LiberoError(f"BDDL text has no '({key} ...)' section")


def bddl_language(text: str) -> str:
    """The instruction of a BDDL problem: its `(:language ...)` field, lower case, single spaces, as the
    environment reports it (`ControlEnv.language_instruction`). Raises LiberoError if it is missing or empty."""
    words = bddl_section(text, ":language")
    if not words or any(isinstance(w, list) for w in words):
        raise LiberoError(f"BDDL field ':language' must be plain words, got {words!r}")
    return " ".join(words)


def bddl_objects(text: str) -> dict[str, str]:
    """Object instance -> category of the `(:objects ...)` section ("alphabet_soup_1" -> "alphabet_soup")."""
    return _typed_names(bddl_section(text, ":objects"), ":objects")


def bddl_fixtures(text: str) -> dict[str, str]:
    """Fixture instance -> category of the `(:fixtures ...)` section (empty if there is none)."""
    try:
        section = bddl_section(text, ":fixtures")
    except LiberoError:
        return {}
    return _typed_names(section, ":fixtures")


def bddl_goal(text: str) -> list[list[str]]:
    """The goal as a list of atomic predicates, e.g. [["in", "alphabet_soup_1", "basket_1_contain_region"]].

    Only conjunctions are supported (as in LIBERO's `_check_success`). Raises LiberoError otherwise.
    """
    goal = bddl_section(text, ":goal")
    if len(goal) != 1 or not isinstance(goal[0], list) or not goal[0]:
        raise LiberoError(f"BDDL ':goal' must hold one expression, got {goal!r}")
    expr = goal[0]
    atoms = expr[1:] if expr[0] == "and" else [expr]
    for a in atoms:
        if not isinstance(a, list) or not a or any(isinstance(x, list) for x in a):
            raise LiberoError(f"BDDL ':goal' must be a conjunction of atomic predicates, got {expr!r}")
    return [list(a) for a in atoms]


_REGION = re.compile(r"\(\s*([A-Za-z0-9_]+)\s*\(\s*:target\s+([A-Za-z0-9_]+)\s*\)")


def bddl_region_pairs(text: str) -> list[tuple[str, str]]:
    """(region name, target entity) of each BDDL region, in order: `(contain_region (:target basket_1) ...)`
    gives ("contain_region", "basket_1")."""
    return _REGION.findall(text)


def bddl_regions(text: str) -> dict[str, dict[str, str]]:
    """The BDDL regions as LIBERO's parser keys them: `basket_1_contain_region` -> {"target": "basket_1"}."""
    return {f"{target}_{name}": {"target": target} for name, target in bddl_region_pairs(text)}


def bddl_obj_of_interest(text: str) -> list[str]:
    """The `(:obj_of_interest ...)` names (empty if the section is missing)."""
    try:
        return [str(x) for x in bddl_section(text, ":obj_of_interest") if not isinstance(x, list)]
    except LiberoError:
        return []


def _typed_names(tokens: list, field: str) -> dict[str, str]:
    out: dict[str, str] = {}
    pending: list[str] = []
    it = iter(tokens)
    for t in it:
        if isinstance(t, list):
            raise LiberoError(f"BDDL '{field}' must be 'name ... - category' lists, got {t!r}")
        if t == "-":
            category = next(it, None)
            if category is None or isinstance(category, list):
                raise LiberoError(f"BDDL '{field}' has a '-' without a category after {pending!r}")
            out.update({n: str(category) for n in pending})
            pending = []
        else:
            pending.append(str(t))
    if pending:
        raise LiberoError(f"BDDL '{field}' names {pending!r} have no '- category'")
    return out
