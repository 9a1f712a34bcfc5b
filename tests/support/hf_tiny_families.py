"""Writes tiny random-initialised Hugging Face folders of each supported family (in
`.venv-ref`, with transformers), as a user's downloaded model folder looks.

  .venv-ref/bin/python tests/support/hf_tiny_families.py OUT_DIR

Each `OUT_DIR/<family>/` holds config.json, safetensors (the qwen3 folder in several
shards with an index), generation_config.json, tokenizer.json and the tokenizer config
with the family's chat template (`tests/support/chat_templates/`). The tokenizer is a
byte-level BPE trained here on a few sentences with the family's pre-tokenizer (its
split pattern, as the family's tokenizer.json has it) and special tokens. The
weights are drawn with `initializer_range` 0.2 so that logits spread and greedy tokens
are well separated.
"""

import json
import pathlib
import sys

import tokenizers
import torch
import transformers

TEMPLATES = pathlib.Path(__file__).parent / "chat_templates"
VOCAB = 512
CHATML = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QWEN_TOOLS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]
# The families' pre-tokenizer split patterns (their tokenizer.json): Qwen2/2.5/3 split
# digits one by one, Llama 3 in runs of up to three.
_WORDS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|"
_REST = r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
QWEN_SPLIT = _WORDS + r"\p{N}" + _REST
LLAMA3_SPLIT = _WORDS + r"\p{N}{1,3}" + _REST

# family -> (config class, config fields, split pattern (None: SmolLM2's single digits),
#            special tokens, bos, eos, pad, template, shard bytes)
FAMILIES = {
    "qwen3": (transformers.Qwen3Config, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=32, intermediate_size=128, rope_theta=1e6, rms_norm_eps=1e-6,
        tie_word_embeddings=False, max_position_embeddings=512), QWEN_SPLIT,
        [*CHATML, "<think>", "</think>", *QWEN_TOOLS], None, "<|im_end|>", "<|endoftext|>",
        "qwen3.jinja", 60_000),
    "qwen2_5": (transformers.Qwen2Config, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, rope_theta=1e6, rms_norm_eps=1e-6, tie_word_embeddings=True,
        max_position_embeddings=512), QWEN_SPLIT,
        [*CHATML, *QWEN_TOOLS], None, "<|im_end|>", "<|endoftext|>", "qwen2_5.jinja", None),
    "llama3": (transformers.LlamaConfig, dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128, rms_norm_eps=1e-5, tie_word_embeddings=False,
        max_position_embeddings=512,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 32}), LLAMA3_SPLIT,
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>",
         "<|eot_id|>"], "<|begin_of_text|>", "<|eot_id|>", "<|end_of_text|>", "llama3.jinja",
        None),
    "smollm2": (transformers.LlamaConfig, dict(
        hidden_size=48, num_hidden_layers=2, num_attention_heads=3, num_key_value_heads=1,
        intermediate_size=96, rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
        max_position_embeddings=512), None,
        CHATML, "<|im_start|>", "<|im_end|>", "<|im_end|>", "smollm2.jinja", None),
}
CORPUS = ["Who founded the Velora Trust press in the river city?",
          "Search the pages, visit the page, then answer with the year 1854.",
          "The founder of the press was born in 1821; the city lies on the river.",
          '{"name": "search", "arguments": {"query": "river press founder"}}',
          "I will give the next look-up to the sub-agent. I have what I need to answer."] * 4


def tokenizer_object(split: str | None, specials: list[str]) -> tokenizers.Tokenizer:
  pre = tokenizers.pre_tokenizers
  tok = tokenizers.Tokenizer(tokenizers.models.BPE())
  if split is None:
    tok.pre_tokenizer = pre.Sequence([pre.Digits(individual_digits=True),
                                      pre.ByteLevel(add_prefix_space=False)])
  else:
    tok.pre_tokenizer = pre.Sequence([
        pre.Split(tokenizers.Regex(split), behavior="isolated"),
        pre.ByteLevel(add_prefix_space=False, use_regex=False)])
  tok.decoder = tokenizers.decoders.ByteLevel()
  trainer = tokenizers.trainers.BpeTrainer(
      vocab_size=VOCAB - 16, special_tokens=specials,
      initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
  tok.train_from_iterator(CORPUS, trainer)
  return tok


def write(out: pathlib.Path, family: str) -> None:
  config_class, fields, split, specials, bos, eos, pad, template, shard = FAMILIES[family]
  folder = out / family
  tok = transformers.PreTrainedTokenizerFast(
      tokenizer_object=tokenizer_object(split, specials), bos_token=bos, eos_token=eos,
      pad_token=pad)
  tok.chat_template = (TEMPLATES / template).read_text()
  ids = {name: tok.convert_tokens_to_ids(token) for name, token in
         (("bos_token_id", bos), ("eos_token_id", eos), ("pad_token_id", pad)) if token}
  config = config_class(vocab_size=VOCAB, initializer_range=0.2, **fields, **ids)
  torch.manual_seed(sorted(FAMILIES).index(family))
  model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
  with torch.no_grad():  # norms off their init of ones, so a mis-mapped norm shows
    for name, parameter in model.named_parameters():
      if name.endswith("norm.weight"):
        parameter.add_(0.3 * torch.randn_like(parameter))
  model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
  tok.save_pretrained(folder)
  (folder / "family.json").write_text(json.dumps({"architecture": type(model).__name__}))


def main(out_dir: str) -> None:
  out = pathlib.Path(out_dir)
  for family in FAMILIES:
    write(out, family)


if __name__ == "__main__":
  main(*sys.argv[1:])
