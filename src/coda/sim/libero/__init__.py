"""`coda.sim.libero` — LIBERO / LIBERO-PRO as a CoDA simulator backend (see README.md).

Importing this package imports neither LIBERO nor MuJoCo; `coda.sim.libero.env` does.
"""

from coda.sim.libero.errors import LiberoError, LiberoUnavailableError

__all__ = ["LiberoError", "LiberoUnavailableError"]
