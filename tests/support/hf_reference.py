"""Runs Hugging Face folders under transformers (in `.venv-ref`) for the tests.

  .venv-ref/bin/python tests/support/hf_reference.py REQUEST.json RESULT.npz
  .venv-ref/bin/python tests/support/hf_reference.py REQUESTS.json

A REQUEST holds {"folder", "ids" [B, T], "attention_mask" [B, T], "positions" [B, T],
"generate_ids" [T0], "new_tokens", "texts", "messages"} and optionally
"trust_remote_code" (default true; false loads the family's own class),
"peft_adapter" (a PEFT adapter folder that `peft` loads onto the folder's model) and
"chat_kwargs" (extra `apply_chat_template` arguments). RESULT holds `logits` (float32
[B, T, V], `AutoModelForCausalLM` in float32, eager attention), `generated` (int
[new_tokens], greedy `generate` with the KV cache), `architecture` (the loaded model's
class name) and in `tokenizer.json` form (one JSON string in `tokenizer`): `encoded`
(the ids of each text, no specials added), `decoded` (each back to text) and `chat`
(`apply_chat_template` ids of `messages` with the generation prompt). REQUESTS is a
list of requests, each with its own "result" path: one process (one torch import)
serves them all.
"""

import json
import sys

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer


def run(request: dict, result_path: str) -> None:
  folder = request["folder"]
  remote = request.get("trust_remote_code", True)
  model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                               trust_remote_code=remote,
                                               attn_implementation="eager")
  architecture = type(model).__name__
  if request.get("peft_adapter"):
    from peft import PeftModel

    model = PeftModel.from_pretrained(model, request["peft_adapter"])
  model.eval()
  tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=remote)
  with torch.no_grad():
    logits = model(input_ids=torch.tensor(request["ids"]),
                   attention_mask=torch.tensor(request["attention_mask"]),
                   position_ids=torch.tensor(request["positions"])).logits
    prompt = torch.tensor([request["generate_ids"]])
    generated = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                               max_new_tokens=request["new_tokens"], do_sample=False,
                               eos_token_id=None, pad_token_id=0)[0, prompt.shape[1]:]
  encoded = [tokenizer.encode(text, add_special_tokens=False) for text in request["texts"]]
  text_results = {
      "encoded": encoded,
      "decoded": [tokenizer.decode(ids) for ids in encoded],
      "chat": list(tokenizer.apply_chat_template(request["messages"], tokenize=True,
                                                 add_generation_prompt=True, return_dict=True,
                                                 **request.get("chat_kwargs", {}))["input_ids"]),
  }
  np.savez(result_path, logits=logits.numpy().astype(np.float32),
           generated=generated.numpy(), architecture=np.array(architecture),
           tokenizer=np.array(json.dumps(text_results)))


def main(request_path: str, result_path: str | None = None) -> None:
  request = json.loads(open(request_path).read())
  if isinstance(request, list):
    for one in request:
      run(one, one["result"])
  else:
    run(request, result_path)


if __name__ == "__main__":
  main(*sys.argv[1:])
