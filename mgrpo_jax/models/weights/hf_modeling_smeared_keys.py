"""transformers modeling of `mgrpo_llama`: a Llama whose keys are smeared (remote code).

An export of a model with `ModelConfig.smeared_keys` copies this file into the folder as
`modeling_mgrpo.py`; its `config.json` names the classes in `auto_map`, so

  AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

loads it. It runs under transformers and torch only (never imported by mgrpo_jax) and
is written against transformers 5's `LlamaAttention`.

Smeared keys (Olsson et al. 2022), as in `mgrpo_jax.models.layers.smear_keys`: after
RoPE and the cache update, the keys of all S slots [B, K, S, H] become
k'_s = a k_s + (1 - a) R(k_{s-1}), where a = sigmoid(key_smear) per kv head and R rotates
by one position (consecutive real tokens are one position apart), which equals mixing
the raw keys before RoPE. A slot whose previous slot holds no real token keeps a k_s.
The real slots are those the last query may attend to (the attention mask's last row).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.models.llama import modeling_llama


class MgrpoLlamaConfig(LlamaConfig):
  """LlamaConfig of a smeared-key model."""

  model_type = "mgrpo_llama"


def _rope_theta(config: LlamaConfig) -> float:
  parameters = getattr(config, "rope_parameters", None) or {}
  return float(parameters.get("rope_theta", getattr(config, "rope_theta", 10000.0)))


def _key_valid(attention_mask: torch.Tensor | None, batch: int, slots: int,
               device: torch.device) -> torch.Tensor:
  """bool [B, S]: the slots the last query attends to (all when there is no mask)."""
  if attention_mask is None:
    return torch.ones(batch, slots, dtype=torch.bool, device=device)
  last = attention_mask[:, 0, -1, :slots]
  return last if last.dtype == torch.bool else last == 0


def smear_keys(k: torch.Tensor, valid: torch.Tensor, logit: torch.Tensor,
               inv_freq: torch.Tensor) -> torch.Tensor:
  """k [B, K, S, H] (RoPE applied), valid bool [B, S], logit [K], inv_freq [H/2] ->
  the smeared keys [B, K, S, H] in k's dtype."""
  k32 = k.float()
  prev = nn.functional.pad(k32, (0, 0, 1, 0))[:, :, :-1]
  prev_valid = nn.functional.pad(valid, (1, 0))[:, :-1] & valid
  cos, sin = torch.cos(inv_freq), torch.sin(inv_freq)
  p1, p2 = prev.chunk(2, dim=-1)
  prev = torch.cat([p1 * cos - p2 * sin, p2 * cos + p1 * sin], dim=-1)
  prev = prev * prev_valid[:, None, :, None]
  a = torch.sigmoid(logit.float())[None, :, None, None]
  return (a * k32 + (1.0 - a) * prev).to(k.dtype)


class SmearedKeyAttention(modeling_llama.LlamaAttention):
  """LlamaAttention with the `key_smear` logits [K] of one layer."""

  def __init__(self, config: LlamaConfig, layer_idx: int):
    super().__init__(config, layer_idx)
    self.key_smear = nn.Parameter(torch.zeros(config.num_key_value_heads))
    self.rope_theta = _rope_theta(config)

  def _inv_freq(self, device: torch.device) -> torch.Tensor:
    """RoPE's inverse frequencies [H/2] (computed here: transformers leaves buffers of
    remote modules uninitialized when it loads on the meta device)."""
    h = self.head_dim
    exponents = torch.arange(0, h, 2, dtype=torch.float64, device=device) / h
    return (1.0 / self.rope_theta ** exponents).float()

  def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None,
              **kwargs):
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
    cos, sin = position_embeddings
    query_states, key_states = modeling_llama.apply_rotary_pos_emb(query_states, key_states,
                                                                   cos, sin)
    if cache is not None:
      key_states, value_states = cache.update(key_states, value_states, self.layer_idx,
                                              kwargs=kwargs)
    valid = _key_valid(attention_mask, key_states.shape[0], key_states.shape[2],
                       key_states.device)
    key_states = smear_keys(key_states, valid, self.key_smear, self._inv_freq(key_states.device))
    attention = modeling_llama.ALL_ATTENTION_FUNCTIONS.get_interface(
        self.config._attn_implementation, modeling_llama.eager_attention_forward)
    attn_output, attn_weights = attention(
        self, query_states, key_states, value_states, attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout, scaling=self.scaling,
        **kwargs)
    attn_output = attn_output.reshape(*input_shape, -1).contiguous()
    return self.o_proj(attn_output), attn_weights


class MgrpoLlamaForCausalLM(LlamaForCausalLM):
  """LlamaForCausalLM whose attention layers smear their keys."""

  config_class = MgrpoLlamaConfig

  def __init__(self, config: MgrpoLlamaConfig):
    super().__init__(config)
    for i, layer in enumerate(self.model.layers):
      layer.self_attn = SmearedKeyAttention(config, i)
    self.post_init()
