"""Records transformers reference outputs for SmolLM2-135M-Instruct (GGUF, float32).

Run with the reference venv (torch + transformers are tools-only dependencies):

  bash tools/make_reference_venv.sh
  .venv-ref/bin/python tools/record_reference.py

It writes `tests/data/smollm2_reference.json`, which the tests compare against:
  1. tokenizer ids for a fixed set of strings (ASCII, whitespace, digits, CJK, emoji,
     accented text, ChatML specials, agent protocol tags);
  2. the last-position logits of "The capital of France is": the first five, the
     argmax and the top-10 ids and values;
  3. a greedy chat decode of 32 new tokens with EOS stopping disabled, with the
     per-token logprobs (log_softmax of the float32 logits) of the generated tokens;
  4. `apply_chat_template` ids of a 3-message conversation with and without a system
     message.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import pathlib
import platform
import sys

import numpy as np
import tokenizers
import torch
import transformers

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO_ROOT / "tests" / "data" / "smollm2_reference.json"

TOKENIZER_STRINGS = {
    "ascii": "Hello, world! What is 17*23?",
    "ascii_sentence": "The quick brown fox jumps over the lazy dog.",
    "apostrophes": "don't won't it's I'M we've",
    "empty": "",
    "single_space": " ",
    "leading_trailing_spaces": "   leading and trailing   ",
    "tabs": "tabs\there\t\tand\tthere\t",
    "newlines": "line one\nline two\n\nline four\n",
    "only_newlines": "\n\n\n",
    "mixed_whitespace": "mixed \t\n \r\n  whitespace \u00a0nbsp",
    "code": "def f(x):\n    return x ** 2\n",
    "digits": "1234567890",
    "numbers": "pi=3.14159, e=2.71828; -42 +17 1e-5 0x1F 1,000,000",
    "dates": "Call 555-0199 on 2024-11-29 at 09:30.",
    "cjk_chinese": "北京是中国的首都。",
    "cjk_japanese": "日本語のテキストです",
    "korean": "한국어 문장입니다",
    "emoji": "I love 🍕 and 🚀!",
    "emoji_zwj": "👨\u200d👩\u200d👧\u200d👦 family 🙂🙃",
    "accented": "Café déjà vu, naïve façade, Ångström, Straße",
    "greek_cyrillic": "Ελληνικά и русский",
    "chatml": "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
    "chatml_spaces": "text <|im_end|> with spaces <|im_start|> around",
    "chatml_adjacent": "<|im_start|><|im_end|><|endoftext|>",
    "other_control": "<repo_name>mgrpo<file_sep>x.py<filename>",
    "tool_call": '<tool_call>{"name": "search", "arguments": {"query": "capital of France"}}'
                 "</tool_call>",
    "protocol_tags": "<thinking>plan first</thinking>\n<result>Paris</result>",
    "tool_response": "<tool_response>\n[1] Paris is the capital of France.\n</tool_response>",
}

LOGITS_PROMPT = "The capital of France is"
CHAT_DECODE_MESSAGES = [
    {"role": "user", "content": "What is the capital of France? Answer in one sentence."},
]
CHAT_DECODE_NEW_TOKENS = 32
THREE_TURNS = [
    {"role": "user", "content": "Name a prime number."},
    {"role": "assistant", "content": "7 is a prime number."},
    {"role": "user", "content": "And one larger than 100?"},
]
SYSTEM_MESSAGE = {"role": "system", "content": "You are a terse research assistant."}


def default_gguf_path() -> pathlib.Path:
  """Fetches the GGUF with the project's helper, loaded by file (no JAX import)."""
  fetch_py = REPO_ROOT / "mgrpo_jax" / "models" / "weights" / "fetch.py"
  spec = importlib.util.spec_from_file_location("_mgrpo_fetch", fetch_py)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.fetch_smollm2_gguf()


def as_id_list(encoded) -> list[int]:
  """apply_chat_template may return a list or a BatchEncoding depending on version."""
  if hasattr(encoded, "keys"):
    encoded = encoded["input_ids"]
  if hasattr(encoded, "tolist"):
    encoded = encoded.tolist()
  if encoded and isinstance(encoded[0], list):
    (encoded,) = encoded
  return [int(i) for i in encoded]


def record_tokenizer(tok) -> dict:
  out = {}
  for name, text in TOKENIZER_STRINGS.items():
    ids = tok.encode(text, add_special_tokens=False)
    out[name] = {"text": text, "ids": ids,
                 "decoded": tok.decode(ids, skip_special_tokens=False)}
  return out


def record_logits(model, tok) -> dict:
  ids = tok.encode(LOGITS_PROMPT, add_special_tokens=False)
  with torch.no_grad():
    logits = model(torch.tensor([ids])).logits[0, -1].float()
  top = torch.topk(logits, 10)
  return {
      "prompt": LOGITS_PROMPT,
      "ids": ids,
      "first5": logits[:5].tolist(),
      "argmax": int(logits.argmax()),
      "argmax_token": tok.convert_ids_to_tokens(int(logits.argmax())),
      "top10_ids": top.indices.tolist(),
      "top10_values": top.values.tolist(),
  }


def greedy_no_cache(model, prompt_ids: list[int], steps: int) -> tuple[list[int], list[float]]:
  """An independent greedy loop: full forward each step, no KV cache, no EOS stop."""
  ids = list(prompt_ids)
  logprobs = []
  with torch.no_grad():
    for _ in range(steps):
      logits = model(torch.tensor([ids])).logits[0, -1].float()
      next_id = int(logits.argmax())
      logprobs.append(float(torch.log_softmax(logits, -1)[next_id]))
      ids.append(next_id)
  return ids[len(prompt_ids):], logprobs


def record_chat_decode(model, tok) -> dict:
  prompt_ids = as_id_list(tok.apply_chat_template(
      CHAT_DECODE_MESSAGES, add_generation_prompt=True, tokenize=True))
  # Unset EOS on the model's own generation config: an explicit `eos_token_id=None`
  # argument is replaced by the model default, which would stop at the first EOS.
  model.generation_config.eos_token_id = None
  # An explicit all-ones mask: with EOS unset, generate would otherwise infer a mask that
  # hides every prompt token equal to the pad id (2, which is also `<|im_end|>`).
  prompt = torch.tensor([prompt_ids])
  with torch.no_grad():
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                         max_new_tokens=CHAT_DECODE_NEW_TOKENS,
                         do_sample=False, pad_token_id=tok.pad_token_id,
                         return_dict_in_generate=True, output_logits=True)
  generated = out.sequences[0, len(prompt_ids):].tolist()
  if len(generated) != CHAT_DECODE_NEW_TOKENS:
    raise RuntimeError(f"generate stopped early: {len(generated)} tokens {generated}")
  logprobs = [float(torch.log_softmax(step_logits[0].float(), -1)[token])
              for step_logits, token in zip(out.logits, generated, strict=True)]
  check_ids, check_logprobs = greedy_no_cache(model, prompt_ids, CHAT_DECODE_NEW_TOKENS)
  if check_ids != generated:
    raise RuntimeError(f"generate {generated} != no-cache greedy loop {check_ids}")
  max_diff = float(np.max(np.abs(np.array(logprobs) - np.array(check_logprobs))))
  print(f"chat decode: KV-cached generate vs no-cache loop, max logprob diff {max_diff:.2e}")
  eos = tok.eos_token_id
  return {
      "messages": CHAT_DECODE_MESSAGES,
      "add_generation_prompt": True,
      "prompt_ids": prompt_ids,
      "max_new_tokens": CHAT_DECODE_NEW_TOKENS,
      "eos_stopping": False,
      "generated_ids": generated,
      "generated_logprobs": logprobs,
      "first_eos_index": generated.index(eos) if eos in generated else None,
      "generated_text": tok.decode(generated, skip_special_tokens=False),
      "no_cache_max_logprob_diff": max_diff,
  }


def record_chat_templates(tok) -> dict:
  cases = {
      "three_turns_default_system": (THREE_TURNS, True),
      "three_turns_default_system_no_generation_prompt": (THREE_TURNS, False),
      "three_turns_with_system": ([SYSTEM_MESSAGE] + THREE_TURNS, True),
  }
  out = {}
  for name, (messages, gen_prompt) in cases.items():
    text = tok.apply_chat_template(messages, add_generation_prompt=gen_prompt, tokenize=False)
    ids = as_id_list(tok.apply_chat_template(
        messages, add_generation_prompt=gen_prompt, tokenize=True))
    out[name] = {"messages": messages, "add_generation_prompt": gen_prompt,
                 "text": text, "ids": ids}
  return out


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--gguf", type=pathlib.Path, default=None,
                      help="GGUF file (default: fetch SmolLM2-135M-Instruct Q4_1)")
  parser.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
  args = parser.parse_args()
  path = args.gguf or default_gguf_path()
  torch.manual_seed(0)
  tok = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
  model = transformers.AutoModelForCausalLM.from_pretrained(
      str(path.parent), gguf_file=path.name, dtype=torch.float32)
  model.eval()
  reference = {
      "model_file": path.name,
      "versions": {
          "python": platform.python_version(),
          "torch": torch.__version__,
          "transformers": transformers.__version__,
          "tokenizers": tokenizers.__version__,
          "gguf": importlib.metadata.version("gguf"),
          "numpy": np.__version__,
      },
      "special_ids": {"bos": tok.bos_token_id, "eos": tok.eos_token_id,
                      "pad": tok.pad_token_id, "vocab_size": len(tok)},
      "tokenizer": record_tokenizer(tok),
      "logits": record_logits(model, tok),
      "chat_decode": record_chat_decode(model, tok),
      "chat_template": record_chat_templates(tok),
  }
  args.out.parent.mkdir(parents=True, exist_ok=True)
  args.out.write_text(json.dumps(reference, indent=1, ensure_ascii=False) + "\n",
                      encoding="utf-8")
  print(f"wrote {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)


if __name__ == "__main__":
  main()
