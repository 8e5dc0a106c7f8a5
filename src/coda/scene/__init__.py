"""The scene language: what a tabletop scene is and how scenes are generated.

- `spec`        ScenarioSpec, the typed, versioned scene contract (JSON round-trip)
- `regions`     named table regions, footprints, the seeded placement sampler (PlacementError)
- `layout`      cheap geometric pre-checks (overlaps, table edges, blocked push paths, goal conventions)
- `language`    descriptions, vocabulary tiers (canonical / train / heldout), instruction templates, paraphrase
- `generators`  `sample_base(family, rng, params)`: one base scene per family, pure given the rng
- `operators`   registered scene edits `(rng, spec, **args) -> spec` with typed arguments (the registry and the
                helpers every operator shares in `operator_base`)
- `programs`    `GenerationProgram` (data) and `run_program(program)`, pure given the seed
- `splits`      the benchmark's sft and OOD splits, validity-filtered builds, versioned JSONL files

Submodules are imported explicitly (`from coda.scene.splits import make_split`); importing this package
imports nothing heavy.
"""
