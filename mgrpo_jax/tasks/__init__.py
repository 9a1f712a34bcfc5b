"""The offline deep-research world (docs/WORLD.md).

Modules: `schema` (types, relations, attributes and their phrasing), `names` (syllable
names), `world` (seeded knowledge graph), `pages` (one article per entity),
`questions` (path-based question synthesis, stage mixtures, the low-success filter),
`statements` (M <-> S sub-task and report sentences), `judges` (answer judge and the
programmatic expert score), `oracle` (scripted M and S policies, clean and noisy),
`datasets` / `tfds_builder` / `build` (ArrayRecord datasets and search indexes),
`loaders` (GAIA and generic benchmark files), `world_setup` (the run's `world` settings
resolved once, `WorldSetup`), `world_data` (the run's world built once and read as
questions), `train_worlds` (RL's training questions over the built and generated
worlds).

`tasks` may import `tools` (the search index and the reason evaluator) and `utils` (file
locks, derived seeds); it imports nothing from models or training. `tfds_builder` and
`build` import tensorflow_datasets; the rest needs only numpy and the standard library.
"""
