"""Errors the policy package raises on bad input; each names the field or file and the value."""

from __future__ import annotations

from coda.errors import CodaError


class ObservationError(CodaError, ValueError):
    """An observation does not follow the env contract (missing key, wrong shape or dtype)."""


class DatasetError(CodaError, ValueError):
    """A demonstration dataset on disk is missing, malformed or inconsistent."""


class CheckpointError(CodaError, ValueError):
    """A policy checkpoint is missing, corrupted, or from another architecture."""


class TrainingError(CodaError, RuntimeError):
    """Training stopped: a non-finite loss or gradient (the message names the step and the batch)."""


class PolicyUsageError(CodaError, ValueError):
    """The policy was asked for something its state cannot give (e.g. values from an untrained critic)."""
