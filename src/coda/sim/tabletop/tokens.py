"""The tabletop's mode tokens: a verified scene factor as a scene-independent token (`SimBackend.mode_tokens`).

A failure mode's key (`coda.engine.modes`) is its failure mode plus one token per verified factor. Tokens
are ``kind[@role]:value`` and carry over between scenes: entities are named by their role (`role_of`:
``target`` is the object the goal moves — or the drawer —, ``goal`` its destination, ``alt`` a container or
region outside the goal, ``other`` any other entity; the role is left out when it is ``target``):

| factor kind              | token                                  | from the factor's value                     |
| ------------------------ | -------------------------------------- | ------------------------------------------- |
| position, region         | ``position[@role]:<region>``           | a region name; ``x,y`` maps to its grid cell |
| position (gripper start) | ``position:robot_start``               | ``robot_start``                             |
| instruction              | ``instruction``                        | (the phrase varies per scene; not kept)     |
| task                     | ``task``                               | (the requested target varies per scene)     |
| object_attribute         | ``object[@role]:<attr>=<word>``        | ``color=red``, ``size=small``, ``shape=...`` |
| distractor               | ``distractor``                         | (the distractor varies per scene)           |
| physics                  | ``physics:<name>=low|high``, ``physics:damping`` | ``friction_scale=0.4`` → low (< 1)   |

`check_token` says whether a token is one of these; a factor or token outside them raises
`coda.scene.factors.FactorError` naming the field and the value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from coda.scene.factors import FactorError, SceneFactor
from coda.scene.regions import REGIONS, grid_region_of
from coda.scene.spec import ScenarioSpec, entity_kinds
from coda.sim.tabletop.factors import ROLES, role_of

TOKEN_KINDS = ("position", "object", "instruction", "task", "distractor", "physics")
OBJECT_ATTRS = ("color", "size", "shape")
PHYSICS_NAMES = ("friction", "mass", "damping")
TOKEN = re.compile(r"^(?P<kind>[a-z_]+)(?:@(?P<role>[a-z_]+))?(?::(?P<value>[a-z0-9_.=-]+))?$")
_WORD = re.compile(r"[^a-z0-9_.-]+")


def _word(text: str) -> str:
    return _WORD.sub("_", text.strip().lower()).strip("_")


def _physics_token(value: str, where: str) -> str:
    name, _, num = value.partition("=")
    key = _word(name).removesuffix("_scale")
    if key not in PHYSICS_NAMES:
        raise FactorError(f"{where}.value = {value!r}: physics factor must name one of {list(PHYSICS_NAMES)}")
    if key == "damping":
        return "physics:damping"
    try:
        v: float | None = float(num.strip())
    except ValueError:
        v = None
    # without a number, the direction factor_ops assumes: low friction, heavy objects
    direction = ("low" if key == "friction" else "high") if v is None or v <= 0 else ("low" if v < 1.0 else "high")
    return f"physics:{key}={direction}"


def factor_token(factor: SceneFactor, spec: ScenarioSpec | None = None, where: str = "factor") -> str:
    """The scene-independent token of a factor (see the module docstring).

    Args:
        factor: the factor.
        spec: the scene the factor was diagnosed in; needed when the factor names an entity whose role
            matters (position, object_attribute).
        where: how error messages name the factor, e.g. ``verdicts[2].verified_factors[0]``.

    Raises:
        FactorError: a value the operators cannot express, or an entity without its scene.
    """

    def role() -> str:
        if factor.entity is None:
            return ""
        if spec is None:
            raise FactorError(f"{where}.entity = {factor.entity!r}: no scene given for its episode to resolve its role")
        if factor.entity not in entity_kinds(spec):
            raise FactorError(f"{where}.entity = {factor.entity!r} is not an entity of the episode's scene")
        r = role_of(factor.entity, spec)
        return "" if r == "target" else f"@{r}"

    if factor.kind in ("position", "region"):
        value = factor.value.strip().lower()
        if value == "robot_start":
            return "position:robot_start"
        if value not in REGIONS:
            try:
                x, y = (float(p) for p in value.split(","))
            except ValueError:
                raise FactorError(
                    f"{where}.value = {factor.value!r} is neither a region name ({sorted(REGIONS)}) nor 'x,y' in metres"
                ) from None
            value = grid_region_of(x, y)
        return f"position{role()}:{value}"
    if factor.kind in ("instruction", "task", "distractor"):
        return str(factor.kind)
    if factor.kind == "object_attribute":
        attr, _, val = factor.value.partition("=")
        attr = {"colour": "color"}.get(_word(attr), _word(attr))
        if attr not in OBJECT_ATTRS or not _word(val):
            raise FactorError(f"{where}.value = {factor.value!r} must be attribute=word with attribute in {list(OBJECT_ATTRS)}")
        return f"object{role()}:{attr}={_word(val)}"
    return _physics_token(factor.value, where)


def mode_tokens(factors: Sequence[SceneFactor], spec: ScenarioSpec | None, where: str = "factors") -> tuple[str, ...]:
    """The tokens of a diagnosis's verified factors, sorted and unique (`where[j]` names the j-th in errors)."""
    return tuple(sorted({factor_token(f, spec, f"{where}[{j}]") for j, f in enumerate(factors)}))


def check_token(token: str, where: str = "token") -> None:
    """Raise FactorError (naming `where` and the token) when `token` is not a tabletop mode token."""
    m = TOKEN.match(token)
    if not m:
        raise FactorError(f"{where} token {token!r} is not kind[@role][:value]")
    kind, role, value = m.group("kind"), m.group("role"), m.group("value")
    if kind not in TOKEN_KINDS:
        raise FactorError(f"{where} token {token!r}: kind {kind!r} is not one of {list(TOKEN_KINDS)}")
    if role is not None and (role not in ROLES or role == "target" or kind not in ("position", "object")):
        raise FactorError(f"{where} token {token!r}: role {role!r} must be one of {list(ROLES[1:])} on position/object")
    if kind in ("instruction", "task", "distractor"):
        if value is not None:
            raise FactorError(f"{where} token {token!r}: '{kind}' takes no value")
        return
    if value is None:
        if kind == "physics":
            raise FactorError(f"{where} token {token!r}: physics needs a value (friction=low, mass=high, damping)")
        raise FactorError(f"{where} token {token!r}: '{kind}' needs a value")
    if kind == "position" and value not in REGIONS and value != "robot_start":
        raise FactorError(f"{where} token {token!r}: region {value!r} is not one of {sorted(REGIONS)} or robot_start")
    if kind == "object":
        attr, eq, word = value.partition("=")
        if attr not in OBJECT_ATTRS or not eq or not word:
            raise FactorError(f"{where} token {token!r}: object value must be attribute=word, attribute in {list(OBJECT_ATTRS)}")
    if kind == "physics" and value != "damping":
        name, _, direction = value.partition("=")
        if name not in ("friction", "mass") or direction not in ("low", "high"):
            raise FactorError(f"{where} token {token!r}: physics value must be friction|mass=low|high or damping")


__all__ = ["OBJECT_ATTRS", "PHYSICS_NAMES", "TOKEN", "TOKEN_KINDS", "check_token", "factor_token", "mode_tokens"]
