"""The one declaration of every configuration key: default, type, allowed values, meaning.

`base_config()` builds the default `ml_collections.ConfigDict` from this table and
`validate()` checks any config against it, so a key exists in exactly one place.
Paper symbols (arXiv 2511.13288): B queries per step, K rollouts per query, D aligned
sub-trajectory slots per rollout, alpha_1/alpha_2 (R_M weights), beta_1..3 (R_S weights),
epsilon (clip range).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from mgrpo_jax.config.modes import MODES
from mgrpo_jax.core.alignment import MODES as ALIGNMENT_MODES
from mgrpo_jax.core.losses import AGGREGATIONS
from mgrpo_jax.core.rewards import SUB_REWARDS

# `mgrpo_jax.models.config.PRESETS`: shapes to train from scratch (tiny, small), and the
# published shapes of the pretrained families (weights from a folder; the planner sizes them).
MODEL_PRESETS = ("tiny", "small", "smollm2_135m", "smollm2_360m", "smollm2_1_7b",
                 "qwen3_0_6b", "qwen3_1_7b", "qwen3_4b", "qwen3_8b", "qwen3_14b", "qwen3_32b",
                 "qwen2_5_0_5b", "qwen2_5_1_5b", "qwen2_5_3b", "qwen2_5_7b", "qwen2_5_14b",
                 "qwen2_5_32b", "llama3_2_1b", "llama3_2_3b", "llama3_1_8b")
# Presets loaded with pretrained weights (the others start from a seeded init).
PRETRAINED_PRESETS = ("smollm2_135m",)
# The projections a LoRA adapter may target (`mgrpo_jax.models.config.LORA_TARGETS`).
LORA_TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
# The attention kernels a model may use (`mgrpo_jax.models.config.ATTENTION_IMPLEMENTATIONS`).
ATTENTION_IMPLEMENTATIONS = ("auto", "xla", "cudnn", "splash")


class _Names(Protocol):
  """A registry of named options (`core._registry.Registry`)."""

  def names(self) -> list[str]:
    ...


@dataclasses.dataclass(frozen=True)
class Field:
  """One configuration key.

  Attributes:
    default: the default value; its Python type is the key's type (an int default
      also accepts ints for float keys, never the reverse).
    doc: what the key means, with the paper symbol where there is one.
    choices: the allowed values, if the key is an enumeration: a tuple, or a registry
      of the core (`names()`) whose registered names are read when asked (`allowed`),
      so a name registered after this module is imported (a plugin's) is selectable.
    low: inclusive lower bound for numbers.
    high: inclusive upper bound for numbers.
    allow_empty: for strings, whether "" is allowed.
  """

  default: Any
  doc: str
  choices: tuple[Any, ...] | _Names | None = None
  low: float | None = None
  high: float | None = None
  allow_empty: bool = True

  @property
  def type(self) -> type:
    return type(self.default)

  @property
  def allowed(self) -> tuple[Any, ...] | None:
    """The allowed values now (None: any value of the type and range)."""
    if self.choices is None or isinstance(self.choices, tuple):
      return self.choices
    return tuple(self.choices.names())


def _agent_spec(role: str, preset: str) -> dict[str, Any]:
  """Keys shared by the main agent (M) and the sub-agent (S)."""
  return {
      "model": {
          "preset": Field(preset, f"Model shape preset of {role}, or a path to a GGUF file / "
                          "Hugging Face folder.", allow_empty=False),
          "init_checkpoint": Field("", f"Orbax checkpoint that {role}'s weights start from "
                                   "(empty: the preset's pretrained weights or a seeded init)."),
          "tokenizer": Field("", "Tokenizer: a SentencePiece model or GGUF file path (empty: the "
                             "pretrained model's own, else one trained on the world's corpus)."),
          "chat_template": Field("auto", f"How {role}'s chats are written: auto (the "
                                 "model's own Jinja chat template when its GGUF or Hugging "
                                 "Face tokenizer has one, e.g. Llama 3 and Qwen2; else "
                                 "ChatML), chatml, or a path to a template file (.jinja) or a "
                                 "tokenizer_config.json (`text/chat_template.py`).",
                                 allow_empty=False),
          "dtype": Field("float32", "Activation dtype.", choices=("float32", "bfloat16")),
          "scan_layers": Field(False, "Scan over layers (faster compiles for deep models)."),
          "attention": Field("auto", "Attention kernel: auto (cuDNN flash attention on a "
                             "GPU and Pallas splash attention on a TPU where their dtype and "
                             "shape rules allow, XLA elsewhere), xla, cudnn (GPU, bfloat16 "
                             "only), or splash (TPU: every full-sequence pass, whose length "
                             "must be a multiple of 128; calls over a KV cache use XLA).",
                             choices=ATTENTION_IMPLEMENTATIONS),
          "smeared_keys": Field(False, "Keys mix in the previous token's key (Olsson et al. "
                                "2022): small models trained from scratch learn to copy "
                                "names and numbers from their context within a few hundred "
                                "steps. Presets only (pretrained weights have no such "
                                "parameter)."),
          "logprob_chunk": Field(64, "Positions per LM-head chunk of the trainer's "
                                 "log-probs: only one chunk's logits [rows, chunk, vocab] "
                                 "exist at a time, in the forward and (recomputed) backward "
                                 "pass (0 = the full logits at once).", low=0),
          "remat": Field("none", "What each decoder block keeps for the trainer's backward "
                         "pass (RL's and the warm start's): none (everything autodiff needs), full (only its input; "
                         "the block is recomputed), dots (its weight matmuls' outputs; the "
                         "attention scores and elementwise work are recomputed).",
                         choices=("none", "full", "dots")),
      },
      "lora": {
          "rank": Field(0, f"Rank r of {role}'s LoRA adapters (`models/lora.py`): only "
                        "the adapters train, and the optimizer state and checkpoints hold "
                        "only them; the base weights stay frozen (0 = full fine-tuning).",
                        low=0),
          "alpha": Field(32.0, "The adapters' output is scaled by alpha / rank.", low=1e-6),
          "targets": Field("q,k,v,o,gate,up,down", "Comma-separated projections that carry "
                           "an adapter, among q, k, v, o, gate, up, down.",
                           allow_empty=False),
          "base_dtype": Field("float32", "Storage dtype of the frozen base weights under "
                              "LoRA (bfloat16 halves their memory; the adapters and their "
                              "optimizer state stay float32).",
                              choices=("float32", "bfloat16")),
      },
      "sampling": {
          "temperature": Field(1.0, "Sampling temperature (0 = greedy).", low=0.0, high=10.0),
          "top_k": Field(0, "Keep the k most likely tokens (0 = off).", low=0),
          "top_p": Field(1.0, "Nucleus sampling mass.", low=1e-6, high=1.0),
          "max_new_tokens": Field(128, "Tokens sampled per turn at most.", low=1),
      },
      "limits": {
          "max_turns": Field(8, f"Assistant turns of {role} per episode at most.", low=1),
          "max_context": Field(1024, f"Context budget of {role} in tokens.", low=16),
          "shortest_train_length": Field(
              0, f"With a value > 0, {role}'s RL batches are padded to the shortest of "
              "it, twice it, four times it, ... (capped at max_context) that holds their "
              "longest row, one compiled update per length used, so short rollouts do not "
              "pay for the whole context; 0 pads every batch to max_context (one update "
              "program; the float rounding the demo's results were measured with).", low=0),
      },
      "optim": {
          "learning_rate": Field(1e-5, "Peak AdamW learning rate.", low=0.0, high=1.0),
          "weight_decay": Field(0.1, "AdamW weight decay.", low=0.0, high=1.0),
          "b1": Field(0.9, "AdamW beta_1.", low=0.0, high=1.0),
          "b2": Field(0.98, "AdamW beta_2.", low=0.0, high=1.0),
          "eps": Field(1e-8, "AdamW epsilon.", low=1e-12, high=1.0),
          "grad_clip": Field(1.0, "Global-norm gradient clipping (0 = off).", low=0.0),
          "warmup_steps": Field(0, "Linear warm-up steps.", low=0),
          "schedule": Field("constant", "Learning-rate schedule after warm-up.",
                            choices=("constant", "cosine")),
          "micro_batch_size": Field(0, "Sequences per micro-batch of the agent's updates, "
                                    "the warm start's included (0 = whole batch at once); "
                                    "the same gradient up to float summation order, faster on "
                                    "CPUs where a smaller batch's activations fit the caches.",
                                    low=0),
          "iterations": Field(1, "mu: optimizer steps on each RL batch (GRPO's inner "
                              "iterations; the importance ratio and its clip are against "
                              "the sampler's log-probs).", low=1),
      },
      "loss": {
          "clip_low": Field(0.2, "epsilon_low: lower clip of the importance ratio.", low=0.0,
                            high=1.0),
          "clip_high": Field(0.28, "epsilon_high: upper clip of the importance ratio.", low=0.0,
                             high=10.0),
          "ratio": Field("token", "Importance ratio per token, per sequence (GSPO, length-"
                         "normalized), or per trajectory (the paper's product, Eq. 14).",
                         choices=("token", "sequence", "trajectory")),
          "clip_ratio_c": Field(0.0, "Dual-clip bound c > 1 for negative advantages (0 = off).",
                                low=0.0),
          "old_logp": Field("sampler", "pi_old: the sampler's log-probs, or recomputed by the "
                            "trainer's current weights (the released code).",
                            choices=("sampler", "recompute")),
          "aggregation": Field("seq_mean_token_mean", "How token losses are reduced "
                               "(`core.losses.AGGREGATIONS`).", choices=AGGREGATIONS),
          "kl_coef": Field(0.0, "Weight of the KL penalty to the frozen reference policy.",
                           low=0.0),
          "kl_estimator": Field("k3", "KL estimator.", choices=("k1", "k2", "k3")),
          "entropy_coef": Field(0.0, "The loss adds -entropy_coef x the policy's entropy at "
                                "the sampled tokens (reduced as the policy loss): > 0 "
                                "rewards entropy (exploration), < 0 penalizes it, which "
                                "sharpens the sampled policy toward its greedy choices.",
                                low=-1.0, high=1.0),
      },
      "mesh": {
          "data": Field(1, f"Data-parallel axis size of {role}'s mesh.", low=1),
          "fsdp": Field(1, f"FSDP axis size of {role}'s mesh.", low=1),
          "tensor": Field(1, f"Tensor-parallel axis size of {role}'s mesh.", low=1),
      },
  }


SPEC: dict[str, Any] = {
    "experiment": {
        "name": Field("mgrpo", "Human-readable experiment name.", allow_empty=False),
        "mode": Field("mgrpo", "Training mode (docs/ALGORITHM.md, \"Modes\").", choices=MODES),
        "seed": Field(0, "Seed of every random choice of the run.", low=0),
        "num_steps": Field(10, "RL steps to run.", low=1),
        "run_id": Field("run", "Names the run in the store and checkpoints.", allow_empty=False),
        "compilation_cache_dir": Field(
            "../jax_cache", "Persistent XLA compilation cache: a folder relative to the "
            "run's local folder (the default lies beside it, so the runs of one parent "
            "folder share it), absolute, or gs://... (empty: JAX's own setting, e.g. "
            "JAX_COMPILATION_CACHE_DIR). A program one process compiled is loaded by the "
            "later ones, of this run and of the next command (`training/compilation_cache.py`)."),
    },
    "world": {
        "size": Field("tiny", "Size of the generated world (the symbolic rendering has tiny "
                      "and small: 128 and 256 entities).",
                      choices=("tiny", "small", "medium", "large")),
        "render": Field("natural", "How the world is written: natural (encyclopedia "
                        "sentences, multi-token names: for pretrained models) or symbolic "
                        "(one token per name, relation, value and page id: for small models "
                        "trained from scratch; `tasks/symbolic`).",
                        choices=("natural", "symbolic")),
        "source": Field("generated", "Where the questions come from: the generated world's "
                        "(generated), or a user's file (jsonl, csv, gaia: GAIA's "
                        "metadata.jsonl, its questions with attached files left out; "
                        "webwalker: WebWalkerQA's JSON or JSONL rows) at "
                        "world.source_path, without gold paths; the tools search the "
                        "generated world unless tools.backend=web (docs/OWN_DATA.md).",
                        choices=("generated", "jsonl", "csv", "gaia", "webwalker")),
        "source_path": Field("", "The questions file of world.source (training questions)."),
        "test_source_path": Field("", "Held-out questions file of world.source (empty: the "
                                  "training file's questions are evaluated)."),
        "source_fields": Field("", "Field names of the questions file as "
                               "'id=...,question=...,answer=...' (optional level=, "
                               "file_name=); empty: id, question, answer (GAIA's for gaia; "
                               "unused by webwalker)."),
        "seed": Field(0, "Seed of the training world (train/validation splits).", low=0),
        "test_seed": Field(1, "Seed of the held-out test world (unseen entities).", low=0),
        "train_worlds": Field(1, "Worlds RL's training questions are spread over: the "
                              "training world and train_worlds - 1 generated from derived "
                              "seeds, each question's tools and r_expert in its own world, so "
                              "no world's facts can be remembered instead of read "
                              "(`tasks/train_worlds.py`; generated questions only).",
                              low=1),
        "stage": Field("stage2", "Question mixture: stage1 (1-2 hops) or stage2 (2-4 hops).",
                       choices=("stage1", "stage2")),
        "question_ids": Field("", "A JSON file of the training questions RL keeps: a list "
                              "of ids, or an object with a list 'kept' (the two-stage "
                              "curriculum's selection); empty: every training question."),
        "question_types": Field("", "Comma-separated question types of the stage to keep "
                                "(training, demonstrations, evaluation), e.g. "
                                "'lookup,puzzle'; empty: all of them."),
        "tokenizer_vocab_size": Field(1024, "Ids of the SentencePiece tokenizer trained on the "
                                      "world's corpus (models without their own tokenizer).",
                                      low=300),
    },
    "prompts": {
        "system": Field("full", "System prompts: the released code's (protocol plus the tools "
                        "as JSON) or a short one naming the tools (small models, CPU demos).",
                        choices=("full", "short")),
    },
    "tools": {
        "search_top_n": Field(5, "Hits a search returns.", low=1, high=50),
        "visit_chars": Field(1500, "Characters of a page a visit returns at most.", low=50),
        "backend": Field("offline", "What S's search and visit read: `offline` (the world's "
                         "SQLite FTS5 index) or `web` (a search API and real pages, "
                         "`tools.web.*`; docs/OWN_DATA.md). The warm start's scripted "
                         "demonstrations read the generated world either way.",
                         choices=("offline", "web")),
        "web": {
            "search_kind": Field("searxng", "The search API: `searxng` (a SearXNG instance's "
                                 "JSON API) or `http` (a generic JSON API described by the "
                                 "keys below).", choices=("searxng", "http")),
            "search_url": Field("", "The SearXNG instance (e.g. http://localhost:8888; "
                                "/search is added) or the generic API's endpoint."),
            "search_params": Field("", "More query parameters of every search, URL-encoded "
                                   "(e.g. 'language=en&count=10')."),
            "query_param": Field("q", "The generic API's query parameter.",
                                 allow_empty=False),
            "api_key_env": Field("", "The environment variable holding the search API's key "
                                 "(empty: no key); it is sent in api_key_header, never "
                                 "written to the cache."),
            "api_key_header": Field("Authorization", "The header carrying the API key, its "
                                    "value the variable's verbatim (e.g. 'Bearer ...').",
                                    allow_empty=False),
            "results_field": Field("results", "The generic API's list of hits in its JSON: "
                                   "a dotted path (e.g. 'data.items'); digits index lists.",
                                   allow_empty=False),
            "title_field": Field("title", "A hit's title, a dotted path within the hit.",
                                 allow_empty=False),
            "url_field": Field("url", "A hit's URL, a dotted path within the hit.",
                               allow_empty=False),
            "snippet_field": Field("content", "A hit's snippet, a dotted path within the hit.",
                                   allow_empty=False),
            "timeout_s": Field(10.0, "Seconds one request may take, body included.",
                               low=0.01),
            "max_bytes": Field(2_000_000, "The largest answer read; a larger one is a "
                               "`too_large` error.", low=1024),
            "retries": Field(2, "Attempts after the first for timeouts, lost connections, "
                             "5xx, 408 and 429.", low=0, high=10),
            "backoff_s": Field(0.5, "Seconds before the first retry; each later one waits "
                               "twice the one before.", low=0.0),
            "min_host_interval_s": Field(1.0, "Seconds between the starts of two requests to "
                                         "one host.", low=0.0),
            "cache_dir": Field("", "Folder recording every answer by request, to replay a "
                               "run (empty: no cache)."),
            "replay_only": Field(False, "Answer every request from tools.web.cache_dir, never "
                                 "the network: a miss is a `replay_miss` error observation."),
        },
    },
    "warm_start": {
        "enabled": Field(False, "Stage 1 before RL (`--slice=all`): supervised fine-tuning of "
                         "each trained agent on noisy-oracle demonstrations."),
        "dir": Field("", "Folder of the warm start's parameter checkpoints, relative to the "
                     "workdir (empty: <workdir>/warm_start); runs that share it share one "
                     "warm start."),
        "num_questions": Field(300, "Training questions the noisy oracles demonstrate.", low=1),
        "num_worlds": Field(1, "Training worlds the demonstrated questions are split over: "
                            "the run's own and num_worlds - 1 generated from derived seeds, "
                            "none with a test-world name (`warm_start/demonstration_worlds.py`)."
                            " Many worlds mean many distinct names: a model from scratch must "
                            "copy them instead of memorizing them.", low=1),
        "budget": Field("questions", "The single agent's demonstrations: `questions` "
                        "(num_questions, as every agent) or `team_tokens` (questions until "
                        "its demonstrated tokens reach those of M's and S's demonstrations of "
                        "num_questions questions together; the same epochs), so a single "
                        "agent that plays both roles is fine-tuned on the team's budget "
                        "(`warm_start/budget.py`). Other modes ignore it.",
                        choices=("questions", "team_tokens")),
        "epochs": Field(8, "Passes over the demonstrations.", low=1),
        "copy_steps": Field(0, "Steps of the copy curriculum before the demonstrations "
                            "(`warm_start/copy_curriculum.py`; 0: none). Models trained from "
                            "scratch with smeared keys learn there to copy names and numbers.",
                            low=0),
        "window_copy_steps": Field(0, "Steps after those of windows of the agent's own "
                                   "demonstrations with one span copied, the loss on every "
                                   "token (`copy_curriculum.window_sequences`): natural "
                                   "repeats stop the random-token circuit's copy loops.",
                                   low=0),
        "batch_rows": Field(16, "Sequences per supervised update.", low=1),
        "learning_rate": Field(3e-3, "Peak AdamW learning rate of the warm start.", low=0.0,
                               high=1.0),
        "schedule": Field("constant", "Learning rate after the warm-up steps: constant, or "
                          "a cosine decay to 0 over all of the warm start's steps (copy "
                          "curriculum and SFT together), so the fine-tuned policy ends near "
                          "the demonstrations' average instead of where its last batches "
                          "pushed it.", choices=("constant", "cosine")),
        "main_noise_rate": Field(0.6, "Rate of M's (and the single agent's) systematic "
                                 "mistakes in the demonstrations.", low=0.0, high=1.0),
        "sub_noise_rate": Field(0.6, "Rate of S's systematic mistakes in the demonstrations.",
                                low=0.0, high=1.0),
        "mistake_rates": Field("", "Per-mistake rates overriding the two above, "
                               "`name=rate` comma-separated (symbolic world: "
                               "wrong_relation, wrong_tool, neighbour_value; natural: vague, "
                               "wrong_tool, skip_visit, wrong_extraction, wrong_page)."),
    },
    "curriculum": {
        "stage2_steps": Field(0, "RL steps of the paper's stage 2 after this run's RL "
                              "(`--slice=all`): a child run in <workdir>/stage2 that starts "
                              "from this run's final agents and trains on the stage-2 "
                              "training questions they succeed on at most "
                              "success_threshold of the time (`slices/curriculum.py`); 0: "
                              "no stage 2.", low=0),
        "stage2_types": Field("", "Question types of stage 2 to keep, comma-separated "
                              "(empty: all of world.stage=stage2's)."),
        "success_samples": Field(4, "Sampled rollouts per stage-2 training question that "
                                 "measure its success rate under the stage-1 agents.", low=1),
        "success_threshold": Field(0.5, "Stage 2 keeps the training questions whose success "
                                   "rate is at most this (the paper's low-success filter).",
                                   low=0.0, high=1.0),
        "learning_rate_scale": Field(1.0, "Stage 2's peak learning rate of each trained "
                                     "agent, as a multiple of its <agent>.optim."
                                     "learning_rate (its schedule starts again: warm-up, "
                                     "then decay over stage2_steps).", low=0.0),
    },
    "eval": {
        "enabled": Field(False, "Evaluate on the held-out test world before and after RL "
                         "(`--slice=all`), with plots and a summary table."),
        "num_questions": Field(100, "Test questions evaluated (of the configured stage).",
                               low=1),
        "split": Field("test", "Which questions are evaluated: test (the held-out test "
                       "world's) or validation (the training world's validation split, "
                       "disjoint from its training questions: for choosing settings, so "
                       "that the test world is never tuned to).",
                       choices=("test", "validation")),
        "samples": Field(2, "Rollouts per test question (accuracy is their mean).", low=1),
        "temperature": Field(0.0, "Temperature of the sampled rollouts of the evaluation, "
                             "both agents (0: the agents' own `sampling.temperature`, as in "
                             "RL); the greedy pass is unchanged.", low=0.0, high=10.0),
        "top_p": Field(0.0, "Nucleus mass of the sampled rollouts of the evaluation, both "
                       "agents (0: the agents' own `sampling.top_p`, as in RL); the "
                       "greedy pass is unchanged.", low=0.0, high=1.0),
        "every": Field(0, "After RL, also evaluate the checkpoints of every this many RL "
                       "steps (greedy, one rollout per question): the held-out curve of "
                       "report/accuracy.png (0: none; the run keeps those checkpoints).",
                       low=0),
        "viewer_questions": Field(20, "Questions each evaluation shows in its trajectory "
                                  "page, report/eval_<label>.html (0: no page).",
                                  low=0),
    },
    "mgrpo": {
        "queries_per_step": Field(2, "B: queries per RL step.", low=1),
        "rollouts_per_query": Field(8, "K: rollouts (group size) per query.", low=2),
        "aligned_sub_calls": Field(8, "D: aligned sub-trajectory slots per rollout.", low=1),
        "alignment": Field("duplicate_drop", "How variable sub-call counts become D slots "
                           "(`core.alignment.MODES`).", choices=ALIGNMENT_MODES),
        "duplicate_weight": Field("slots", "A kept S call's weight in S's loss: 'slots' "
                                  "(the paper: its number of slots) or 'call' (1; its "
                                  "duplicates still enter the group's mean and std).",
                                  choices=("slots", "call")),
        "max_sub_calls": Field(16, "Sub-agent calls per rollout at most.", low=1),
        "advantage_std": Field("population", "Std of the group normalization.",
                               choices=("population", "unbiased")),
        "advantage_eps": Field(0.0, "Added to the group std.", low=0.0),
        "staleness": Field(0, "Steps the sub-agent's serving weights may lag its trainer.",
                           low=0),
        "queue_calls": Field(0, "experiment.mode=unsynchronized: S calls taken from the "
                             "front of S's FIFO per step (0: B*K, one per M rollout, as the "
                             "released code takes).", low=0),
        "queue_group": Field(0, "experiment.mode=unsynchronized: consecutive calls of the "
                             "FIFO normalized together as one group (0: K).", low=0),
    },
    "rewards": {
        "a1": Field(0.1, "alpha_1: weight of M's format reward.", low=0.0, high=1.0),
        "a2": Field(0.9, "alpha_2: weight of M's correctness reward.", low=0.0, high=1.0),
        "b1": Field(0.1, "beta_1: weight of S's format reward.", low=0.0, high=1.0),
        "b2": Field(0.4, "beta_2: weight of M's correctness in R_S.", low=0.0, high=1.0),
        "b3": Field(0.5, "beta_3: weight of the expert score in R_S.", low=0.0, high=1.0),
        "sub_reward": Field("paper", "R_S preset (`core.rewards.SUB_REWARDS`): the paper's "
                            "format * (b1 + b2 * correct_M + b3 * expert), or the released "
                            "code's format * (b1 + b2 * correct_M), which needs b3 = 0 (its "
                            "weights: b1 = 0.1, b2 = 0.9; preset released_code of "
                            "configs/default.py).", choices=SUB_REWARDS),
        "answer_judge": Field("exact", "r_correct of M's answers: exact (normalized string "
                              "or number match with the gold answer, `tasks/judges.py`) or "
                              "model (the judge model of rewards.judge.* asked whether the "
                              "answer matches the gold one; docs/OWN_DATA.md). A gin-bound "
                              "`mgrpo_jax.plugins.answer_judge.fn` replaces either.",
                              choices=("exact", "model")),
        "expert_judge": Field("gold_path", "r_expert of S's reports: gold_path (claims "
                              "checked against the world and the question's gold path) or "
                              "model (the judge model grades the report and the evidence S "
                              "read: 1, 0.5 or 0). A gin-bound "
                              "`mgrpo_jax.plugins.expert_judge.fn` replaces either.",
                              choices=("gold_path", "model")),
        "judge": {
            "preset": Field("smollm2_135m", "The judge model: a pretrained preset, a GGUF "
                            "file or Hugging Face folder, or a preset trained from scratch "
                            "(with rewards.judge.checkpoint).", allow_empty=False),
            "checkpoint": Field("", "Parameter checkpoint of the judge model (e.g. a warm "
                                "start's; needed by a preset trained from scratch)."),
            "tokenizer": Field("", "Tokenizer file of the judge model (empty: the pretrained "
                               "model's own, else the world's)."),
            "chat_template": Field("auto", "The judge's chat template, as an agent's "
                                   "model.chat_template: auto, chatml or a template file.",
                                   allow_empty=False),
            "dtype": Field("float32", "Activation dtype of the judge model.",
                           choices=("float32", "bfloat16")),
            "max_new_tokens": Field(64, "Tokens the judge generates per item at most.", low=1),
            "temperature": Field(0.0, "Sampling temperature of the judge (0 = greedy).",
                                 low=0.0, high=10.0),
            "top_k": Field(0, "Keep the judge's k most likely tokens (0 = off).", low=0),
            "top_p": Field(1.0, "Nucleus mass of the judge's sampling.", low=1e-6, high=1.0),
            "batch_size": Field(16, "Items per batch of the judge model.", low=1),
            "cache_dir": Field("../judge_cache", "Folder of the judge's reply cache, relative "
                               "to the run's local folder or absolute (the default lies "
                               "beside it: the runs of one parent folder share it).",
                               allow_empty=False),
            "failure_score": Field(0.0, "Score of an item whose reply has no well-formed "
                                   "verdict (a counted judge failure).", low=0.0, high=1.0),
            "evidence_chars": Field(2000, "Characters of S's tool observations the expert "
                                    "judge reads, cut beyond (0: none, a shorter prompt).",
                                    low=0),
            "verdict_format": Field("final_line", "How a judge reply is read "
                                    "(`tasks/verdicts.py`): final_line (a last line "
                                    "'VERDICT: <label>'; labels correct/incorrect and 1/0.5/0) "
                                    "or first_word (the reply's first word is the label: "
                                    "correct/incorrect and yes/partly/no; for small models).",
                                    choices=("final_line", "first_word")),
            "answer_prompt": Field("", "Prompt file of the answer judge with the "
                                   "placeholders {question}, {gold_answer}, {candidate} "
                                   "(empty: mgrpo_jax/tasks/judge_prompts/answer.txt, or "
                                   "answer_first_word.txt for first_word)."),
            "expert_prompt": Field("", "Prompt file of the expert judge with the "
                                   "placeholders {question}, {subtask}, {report}, {evidence} "
                                   "(empty: mgrpo_jax/tasks/judge_prompts/expert.txt, or "
                                   "expert_first_word.txt for first_word)."),
        },
    },
    "main": _agent_spec("the main agent M", "tiny"),
    "sub": _agent_spec("the sub-agent S", "tiny"),
    "serving": {
        "host": Field("127.0.0.1", "Address the sub-agent service listens on.",
                      allow_empty=False),
        "port": Field(0, "Port of the sub-agent service (0: a free port, published in the "
                      "run folder for the main slice).", low=0, high=65535),
        "token_env": Field("", "Environment variable holding a shared token the service "
                           "requires (empty: no token)."),
        "deadline_s": Field(120.0, "Seconds the main slice keeps retrying an unreachable "
                            "sub-agent service before failing.", low=0.1),
        "call_timeout_s": Field(600.0, "Seconds one batch of sub-agent calls may take.",
                                low=1.0),
        "colocate": Field(False, "Run both RL slices in one process sharing its devices "
                          "(`--slice=all`; `--slice=both` alone): chosen anyway on a TPU "
                          "host whose chips cannot be split between two processes, such as "
                          "one chip (`slices/colocated.py`)."),
        "max_request_mib": Field(4, "Largest request the service reads, in MiB (a batch "
                                 "of delegations: sub-tasks and their context).", low=1,
                                 high=2047),
        "max_part_kib": Field(64, "Largest part of a streamed request, in KiB: a batch "
                              "travels as one part per delegation, and gRPC holds one part "
                              "at a time (a delegation's two strings take up to 8 KiB).",
                              low=16, high=1024),
        "max_reply_mib": Field(256, "Largest reply, in MiB (S's records of a batch, token "
                               "ids included).", low=1, high=2047),
        "max_concurrent_calls": Field(16, "Calls the service runs at once; more are told "
                                      "to retry (busy).", low=1),
        "handshake_timeout_s": Field(10.0, "Seconds a new connection may take to finish "
                                     "its TLS and HTTP/2 handshake.", low=0.1),
        "idle_timeout_s": Field(900.0, "Seconds a connection without calls stays open.",
                                low=1.0),
        "keepalive_s": Field(60.0, "Seconds between keepalive pings on an open connection.",
                             low=1.0),
        "keepalive_timeout_s": Field(20.0, "Seconds a ping may go unanswered before the "
                                     "connection counts as dropped.", low=1.0),
        "tls_cert": Field("", "PEM certificate chain the service presents (TLS on; needed "
                          "for a non-loopback serving.host). Empty: plaintext."),
        "tls_key": Field("", "PEM private key of serving.tls_cert."),
        "tls_client_ca": Field("", "PEM CA certificates the service requires callers' "
                               "certificates to be signed by (empty: no client "
                               "certificates)."),
        "tls_ca": Field("", "PEM CA certificates the main slice verifies the service with "
                        "(empty: gRPC's bundled roots)."),
        "tls_client_cert": Field("", "PEM certificate chain the main slice presents "
                                 "(with serving.tls_client_ca)."),
        "tls_client_key": Field("", "PEM private key of serving.tls_client_cert."),
        "tls_server_name": Field("", "Name the service's certificate must carry (empty: "
                                 "the host the main slice connects to)."),
    },
    "store": {
        "uri": Field("", "Statistics store: a folder or gs://bucket/prefix "
                     "(empty: <workdir>/store)."),
        "wait_timeout_s": Field(3600.0, "Seconds a slice waits for the other slice's record "
                                "of a step (outcomes, ack) before failing.", low=0.1),
    },
    "checkpoint": {
        "keep": Field(3, "Checkpoints kept per agent.", low=1),
        "async_save": Field(True, "Save checkpoints asynchronously."),
        "keep_period": Field(0, "Also keep every checkpoint whose step is a multiple of this "
                             "(0: only the newest `keep`).", low=0),
    },
    "logging": {
        "every": Field(1, "Write a slice's metrics (metrics.jsonl, TensorBoard, W&B) of "
                       "every this many steps, and of the last one.", low=1),
        "tensorboard": Field(True, "Also write TensorBoard event files."),
        "trajectory_every": Field(10, "Every this many RL steps, from step 0, the main slice "
                                  "writes the step's trajectory page, report/"
                                  "rl_step_<t>.html (t zero-padded): each shown question's K "
                                  "rollouts with R_M and A_M, S's calls with R_S, A_S and "
                                  "the D slots they filled (0: none).", low=0),
        "trajectory_questions": Field(4, "Questions a training step's trajectory page shows.",
                                      low=1),
        "wandb": {
            "enabled": Field(False, "Also log each slice's metrics to Weights & Biases (needs "
                             "`pip install 'mgrpo_jax[wandb]'`): one W&B run per slice, "
                             "grouped by `experiment.run_id`, with the whole config "
                             "(`mgrpo_jax/metrics/wandb_run.py`)."),
            "project": Field("mgrpo_jax", "W&B project of the runs.", allow_empty=False),
            "entity": Field("", "W&B entity (user or team; empty: the account's default)."),
            "mode": Field("online", "online: stream to the W&B server; offline: write the "
                          "runs under `logs/<slice>/wandb/` without network, for `wandb "
                          "sync` later.", choices=("online", "offline")),
        },
    },
}


def iter_fields(spec: dict[str, Any] = SPEC, prefix: str = ""):
  """Yields (dotted_key, Field) for every leaf of `spec`, in declaration order."""
  for name, node in spec.items():
    key = f"{prefix}{name}"
    if isinstance(node, Field):
      yield key, node
    else:
      yield from iter_fields(node, key + ".")
