"""Runs an exported Hugging Face folder under transformers (in `.venv-ref`) for the tests.

  .venv-ref/bin/python tests/support/hf_reference.py REQUEST.json RESULT.npz

REQUEST holds {"folder", "ids" [B, T], "attention_mask" [B, T], "positions" [B, T],
"generate_ids" [T0], "new_tokens", "texts", "messages"}. RESULT holds `logits`
(float32 [B, T, V], `AutoModelForCausalLM` in float32, eager attention), `generated`
(int [new_tokens], greedy `generate` with the KV cache), and in `tokenizer.json` form
(one JSON string in `tokenizer`): `encoded` (the ids of each text, no specials added),
`decoded` (each back to text) and `chat` (`apply_chat_template` ids of `messages` with
the generation prompt).
"""

import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def main(request_path: str, result_path: str) -> None:
  request = json.loads(open(request_path).read())
  folder = request["folder"]
  model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                               trust_remote_code=True,
                                               attn_implementation="eager")
  model.eval()
  tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(request["ids"]),
                   attention_mask=torch.tensor(request["attention_mask"]),
                   position_ids=torch.tensor(request["positions"])).logits
    prompt = torch.tensor([request["generate_ids"]])
    generated = model.generate(prompt, attention_mask=torch.ones_like(prompt),
                               max_new_tokens=request["new_tokens"], do_sample=False,
                               eos_token_id=None, pad_token_id=0)[0, prompt.shape[1]:]
  encoded = [tokenizer.encode(text, add_special_tokens=False) for text in request["texts"]]
  text_results = {
      "encoded": encoded,
      "decoded": [tokenizer.decode(ids) for ids in encoded],
      "chat": list(tokenizer.apply_chat_template(request["messages"], tokenize=True,
                                                 add_generation_prompt=True,
                                                 return_dict=True)["input_ids"]),
  }
  np.savez(result_path, logits=logits.numpy().astype(np.float32),
           generated=generated.numpy(), tokenizer=np.array(json.dumps(text_results)))


if __name__ == "__main__":
  main(*sys.argv[1:])
