"""The symbolic rendering of the deep-research world: one token per name, relation and value.

Small models trained from scratch on a CPU cannot copy multi-token invented names out
of natural-language pages (docs/RESULTS.md). This rendering keeps the world's shape
(entities with relations and a year, multi-hop questions, puzzles for the reason tool,
pages to visit) but writes every entity name, relation, year, number and page id as
one symbol of the agents' tokenizer (`vocabulary.symbols()` become SentencePiece
user-defined symbols). Every world, training or held-out, draws its entities from one
shared pool of name symbols and has its own random graph: the test world's facts are
unseen, so the tools are needed, while every symbol's embedding has been trained.

Modules: `vocabulary` (the symbol pools), `world` (seeded graphs and compact pages),
`questions` (chains, differences, puzzles), `language` (sub-task and report grammar),
`oracle` (scripted M and S with systematic mistakes), `judge` (the expert score).
`tasks.renderings` selects this package with `world.render = "symbolic"`.
"""
