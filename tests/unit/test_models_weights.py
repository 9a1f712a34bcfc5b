"""Weight loaders on tiny files written here: HF safetensors folders and GGUF files.

The expected logits come from an independent numpy Llama forward over the same arrays,
so a loader that mis-maps, mis-transposes or fails to un-permute a tensor fails.
"""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
from flax import nnx
from gguf import GGMLQuantizationType, GGUFWriter
from safetensors.numpy import save_file

from mgrpo_jax.models import WeightFileError, get_config, init_model, load_model
from mgrpo_jax.models.weights.gguf import load_gguf
from mgrpo_jax.models.weights.hf_layout import hf_tensors_from_model
from mgrpo_jax.models.weights.safetensors import (
  folder_chat_template,
  load_hf_folder,
  save_hf_folder,
)

forward = nnx.jit(lambda model, ids: model(ids))
IDS = np.array([[3, 17, 250, 9, 44, 0, 128]], np.int32)


def random_hf_tensors(config, seed: int) -> dict[str, np.ndarray]:
  """Random weights in HF layout ([out, in] matrices), written without the project's code."""
  rng = np.random.default_rng(seed)
  d, f, v = config.hidden_size, config.intermediate_size, config.vocab_size
  q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
  w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)  # noqa: E731
  out = {"model.embed_tokens.weight": w(v, d),
         "model.norm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32)}
  if not config.tie_embeddings:
    out["lm_head.weight"] = w(v, d)
  for i in range(config.num_layers):
    p = f"model.layers.{i}."
    out |= {p + "input_layernorm.weight": (1 + 0.1 * rng.standard_normal(d)).astype(np.float32),
            p + "post_attention_layernorm.weight": np.ones(d, np.float32),
            p + "self_attn.q_proj.weight": w(q, d), p + "self_attn.k_proj.weight": w(kv, d),
            p + "self_attn.v_proj.weight": w(kv, d), p + "self_attn.o_proj.weight": w(d, q),
            p + "mlp.gate_proj.weight": w(f, d), p + "mlp.up_proj.weight": w(f, d),
            p + "mlp.down_proj.weight": w(d, f)}
    if config.qkv_bias:
      out |= {p + "self_attn.q_proj.bias": w(q), p + "self_attn.k_proj.bias": w(kv),
              p + "self_attn.v_proj.bias": w(kv)}
    if config.qk_norm:
      h = config.head_dim
      out |= {p + "self_attn.q_norm.weight": (1 + 0.3 * rng.standard_normal(h)).astype(np.float32),
              p + "self_attn.k_norm.weight": (1 + 0.3 * rng.standard_normal(h)).astype(np.float32)}
  return out


def numpy_llama_logits(config, t: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
  """A plain float64 Llama forward (one row) following the HF modeling code."""
  def rms(x, scale):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + config.rms_norm_eps) * scale

  def rope(x, pos):  # x [T, heads, H], HF rotate_half
    half = config.head_dim // 2
    inv = config.rope_theta ** (-np.arange(half) * 2.0 / config.head_dim)
    ang = pos[:, None] * inv[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

  n, k, h = config.num_heads, config.num_kv_heads, config.head_dim
  seq = ids.shape[0]
  pos = np.arange(seq, dtype=np.float64)
  x = t["model.embed_tokens.weight"][ids].astype(np.float64)
  for i in range(config.num_layers):
    p = f"model.layers.{i}."
    lin = lambda y, name: y @ t[p + name + ".weight"].T + t.get(p + name + ".bias", 0.0)  # noqa: B023, E731
    a = rms(x, t[p + "input_layernorm.weight"])
    qh = lin(a, "self_attn.q_proj").reshape(seq, n, h)
    kh = lin(a, "self_attn.k_proj").reshape(seq, k, h)
    if config.qk_norm:  # Qwen3: each head normalized over its h values, before RoPE
      qh, kh = rms(qh, t[p + "self_attn.q_norm.weight"]), rms(kh, t[p + "self_attn.k_norm.weight"])
    qh, kh = rope(qh, pos), rope(kh, pos)
    vh = lin(a, "self_attn.v_proj").reshape(seq, k, h)
    kh, vh = np.repeat(kh, n // k, axis=1), np.repeat(vh, n // k, axis=1)
    scores = np.einsum("tnh,snh->nts", qh, kh) / np.sqrt(h)
    scores = np.where(np.tril(np.ones((seq, seq), bool)), scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    x = x + lin(np.einsum("nts,snh->tnh", probs, vh).reshape(seq, n * h), "self_attn.o_proj")
    m = rms(x, t[p + "post_attention_layernorm.weight"])
    gate = lin(m, "mlp.gate_proj")
    x = x + lin(gate / (1 + np.exp(-gate)) * lin(m, "mlp.up_proj"), "mlp.down_proj")
  x = rms(x, t["model.norm.weight"])
  head = t["model.embed_tokens.weight"] if config.tie_embeddings else t["lm_head.weight"]
  return x @ head.T


def write_hf_folder_by_hand(folder, config, tensors, model_type="llama"):
  folder.mkdir(parents=True, exist_ok=True)
  hf = {"model_type": model_type, "vocab_size": config.vocab_size,
        "hidden_size": config.hidden_size, "num_hidden_layers": config.num_layers,
        "num_attention_heads": config.num_heads, "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "intermediate_size": config.intermediate_size, "rope_theta": config.rope_theta,
        "rms_norm_eps": config.rms_norm_eps, "tie_word_embeddings": config.tie_embeddings,
        "max_position_embeddings": config.max_seq_len, "hidden_act": "silu"}
  (folder / "config.json").write_text(json.dumps(hf))
  names = sorted(tensors)
  save_file({k: tensors[k] for k in names[: len(names) // 2]}, str(folder / "a.safetensors"))
  save_file({k: tensors[k] for k in names[len(names) // 2:]}, str(folder / "b.safetensors"))
  return folder


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
  """llama.cpp convert_hf_to_gguf's q/k row order (for its interleaved-pair RoPE)."""
  return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
      w.shape)


def write_gguf_by_hand(path, config, tensors, *, arch="llama", quantize_embedding=True,
                       feed_forward_length=None):
  writer = GGUFWriter(str(path), arch)
  writer.add_block_count(config.num_layers)
  writer.add_context_length(config.max_seq_len)
  writer.add_embedding_length(config.hidden_size)
  writer.add_feed_forward_length(feed_forward_length or config.intermediate_size)
  writer.add_head_count(config.num_heads)
  writer.add_head_count_kv(config.num_kv_heads)
  writer.add_rope_dimension_count(config.head_dim)
  writer.add_rope_freq_base(config.rope_theta)
  writer.add_layer_norm_rms_eps(config.rms_norm_eps)
  writer.add_vocab_size(config.vocab_size)
  gguf_names = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
                "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
  for name, array in tensors.items():
    if name == "model.embed_tokens.weight":
      if quantize_embedding:
        q = gguf.quants.quantize(array, GGMLQuantizationType.Q8_0)
        writer.add_tensor("token_embd.weight", q, raw_shape=q.shape,
                          raw_dtype=GGMLQuantizationType.Q8_0)
      else:
        writer.add_tensor("token_embd.weight", array)
      continue
    if name in ("model.norm.weight", "lm_head.weight"):
      writer.add_tensor({"model.norm.weight": "output_norm.weight",
                         "lm_head.weight": "output.weight"}[name], array)
      continue
    _, _, layer, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    if arch == "llama" and module in ("self_attn.q_proj", "self_attn.k_proj"):
      heads = config.num_heads if module == "self_attn.q_proj" else config.num_kv_heads
      array = llama_cpp_permute(array, heads)
    writer.add_tensor(f"blk.{layer}.{gguf_names[module]}.{kind}", array)
  writer.write_header_to_file()
  writer.write_kv_data_to_file()
  writer.write_tensors_to_file()
  writer.close()
  return path


@pytest.fixture(scope="module")
def tiny_config():
  return get_config("tiny")


@pytest.fixture(scope="module")
def tiny_tensors(tiny_config):
  return random_hf_tensors(tiny_config, seed=0)


def test_hf_folder_matches_numpy_reference(tmp_path, tiny_config, tiny_tensors):
  folder = write_hf_folder_by_hand(tmp_path / "hf", tiny_config, tiny_tensors)
  model = load_hf_folder(folder)
  assert model.config == tiny_config
  want = numpy_llama_logits(tiny_config, tiny_tensors, IDS[0])
  np.testing.assert_allclose(forward(model, IDS)[0], want, atol=1e-4, rtol=0)


def test_qwen2_folder_with_bias_and_untied_head(tmp_path):
  config = get_config("tiny", qkv_bias=True, tie_embeddings=False, rms_norm_eps=1e-6,
                      rope_theta=1e6)
  tensors = random_hf_tensors(config, seed=1)
  folder = write_hf_folder_by_hand(tmp_path / "qwen", config, tensors, model_type="qwen2")
  model = load_hf_folder(folder, scan_layers=True)
  assert model.config.qkv_bias and not model.config.tie_embeddings
  want = numpy_llama_logits(config, tensors, IDS[0])
  np.testing.assert_allclose(forward(model, IDS)[0], want, atol=1e-4, rtol=0)


def test_qwen3_folder_with_per_head_qk_norm(tmp_path):
  config = get_config("tiny", qk_norm=True, head_dim=32, tie_embeddings=False,
                      rms_norm_eps=1e-6, rope_theta=1e6)
  tensors = random_hf_tensors(config, seed=3)
  folder = write_hf_folder_by_hand(tmp_path / "qwen3", config, tensors, model_type="qwen3")
  for scan in (False, True):
    model = load_hf_folder(folder, scan_layers=scan)
    assert model.config.qk_norm and not model.config.qkv_bias
    want = numpy_llama_logits(config, tensors, IDS[0])
    np.testing.assert_allclose(forward(model, IDS)[0], want, atol=1e-4, rtol=0)
  without_norms = numpy_llama_logits(config.replace(qk_norm=False), tensors, IDS[0])
  assert np.abs(without_norms - want).max() > 0.1  # the norms change the logits
  assert set(hf_tensors_from_model(model)) == set(tensors)
  saved = save_hf_folder(model, tmp_path / "saved")
  assert json.loads((saved / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
  np.testing.assert_allclose(forward(load_model(saved), IDS), forward(model, IDS), atol=1e-5)


@pytest.mark.parametrize("field, value, match", [
    ("use_sliding_window", True, "use_sliding_window.*sliding-window attention"),
    ("mlp_bias", True, "mlp_bias"),
    ("attention_bias", True, "attention_bias: attention biases of the qwen3 type"),
])
def test_unsupported_config_fields_are_named(tmp_path, field, value, match):
  config = get_config("tiny", qk_norm=True)
  folder = write_hf_folder_by_hand(tmp_path / "q", config, random_hf_tensors(config, 0),
                                   model_type="qwen3")
  hf = json.loads((folder / "config.json").read_text())
  (folder / "config.json").write_text(json.dumps({**hf, field: value}))
  with pytest.raises(WeightFileError, match=match):
    load_hf_folder(folder)


def test_a_tensor_the_architecture_lacks_is_named(tmp_path, tiny_config, tiny_tensors):
  """A Llama folder holding a Qwen3 norm (or an o_proj bias) is refused, not dropped;
  old checkpoints' RoPE buffers and a head stored beside tied embeddings are ignored."""
  extra = dict(tiny_tensors, **{"model.layers.0.self_attn.q_norm.weight": np.ones(16, np.float32)})
  folder = write_hf_folder_by_hand(tmp_path / "extra", tiny_config, extra)
  with pytest.raises(WeightFileError, match="'model.layers.0.self_attn.q_norm.weight' has no "
                                            "place in this architecture"):
    load_hf_folder(folder)
  ignored = dict(tiny_tensors, **{
      "model.layers.1.self_attn.rotary_emb.inv_freq": np.ones(8, np.float32),
      "lm_head.weight": np.zeros((tiny_config.vocab_size, tiny_config.hidden_size), np.float32)})
  model = load_hf_folder(write_hf_folder_by_hand(tmp_path / "ignored", tiny_config, ignored))
  np.testing.assert_allclose(forward(model, IDS)[0],
                             numpy_llama_logits(tiny_config, tiny_tensors, IDS[0]), atol=1e-4)


def test_save_and_reload_sharded_folder(tmp_path):
  model = init_model(get_config("tiny", tie_embeddings=False), seed=5)
  folder = save_hf_folder(model, tmp_path / "out", max_shard_bytes=40_000)
  index = json.loads((folder / "model.safetensors.index.json").read_text())
  assert len(set(index["weight_map"].values())) > 2
  reloaded = load_model(folder)
  np.testing.assert_array_equal(forward(reloaded, IDS), forward(model, IDS))
  np.testing.assert_array_equal(hf_tensors_from_model(reloaded)["lm_head.weight"],
                                hf_tensors_from_model(model)["lm_head.weight"])


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_gguf_unpermutes_qk_and_matches_numpy_reference(tmp_path, arch):
  config = get_config("tiny", qkv_bias=arch == "qwen2")
  tensors = random_hf_tensors(config, seed=2)
  path = write_gguf_by_hand(tmp_path / "tiny.gguf", config, tensors, arch=arch)
  model = load_gguf(path)
  assert model.config.rms_norm_eps == pytest.approx(1e-5)   # stored as float32
  assert model.config.replace(rms_norm_eps=1e-5) == config
  dequantized = dict(tensors)
  q8 = gguf.quants.quantize(tensors["model.embed_tokens.weight"], GGMLQuantizationType.Q8_0)
  dequantized["model.embed_tokens.weight"] = gguf.quants.dequantize(
      q8, GGMLQuantizationType.Q8_0).reshape(config.vocab_size, config.hidden_size)
  want = numpy_llama_logits(config, dequantized, IDS[0])
  np.testing.assert_allclose(forward(model, IDS)[0], want, atol=1e-4, rtol=0)
  np.testing.assert_array_equal(hf_tensors_from_model(model)["model.layers.1.self_attn.k_proj"
                                                             ".weight"],
                                tensors["model.layers.1.self_attn.k_proj.weight"])


def test_gguf_without_unpermute_would_differ(tmp_path, tiny_config, tiny_tensors):
  """Guards the test above: the permutation changes the logits, so skipping it would fail."""
  permuted = dict(tiny_tensors)
  for i in range(tiny_config.num_layers):
    name = f"model.layers.{i}.self_attn.q_proj.weight"
    permuted[name] = llama_cpp_permute(tiny_tensors[name], tiny_config.num_heads)
  diff = np.abs(numpy_llama_logits(tiny_config, permuted, IDS[0])
                - numpy_llama_logits(tiny_config, tiny_tensors, IDS[0])).max()
  assert diff > 0.1


def test_missing_files_name_the_path(tmp_path):
  with pytest.raises(WeightFileError, match="missing.gguf: GGUF file not found"):
    load_gguf(tmp_path / "missing.gguf")
  with pytest.raises(WeightFileError, match="nowhere"):
    load_model(tmp_path / "nowhere")
  (tmp_path / "empty").mkdir()
  with pytest.raises(WeightFileError, match="config.json: file not found"):
    load_hf_folder(tmp_path / "empty")


def test_corrupt_gguf_names_the_file(tmp_path, tiny_config, tiny_tensors):
  junk = tmp_path / "junk.gguf"
  junk.write_bytes(np.random.default_rng(0).bytes(4096))
  with pytest.raises(WeightFileError, match="junk.gguf: not a readable GGUF file"):
    load_gguf(junk)
  good = write_gguf_by_hand(tmp_path / "good.gguf", tiny_config, tiny_tensors)
  truncated = tmp_path / "truncated.gguf"
  truncated.write_bytes(good.read_bytes()[: good.stat().st_size * 2 // 3])
  with pytest.raises(WeightFileError, match="truncated.gguf"):
    load_gguf(truncated)


def test_gguf_shape_mismatch_names_the_tensor(tmp_path, tiny_config, tiny_tensors):
  path = write_gguf_by_hand(tmp_path / "bad.gguf", tiny_config, tiny_tensors,
                            feed_forward_length=96)
  with pytest.raises(WeightFileError,
                     match=r"bad.gguf: tensor 'blk.0.ffn_gate.weight' has shape \(128, 64\), "
                           r"but the config expects \(96, 64\)"):
    load_gguf(path)


def test_folder_errors_name_the_tensor_or_file(tmp_path, tiny_config, tiny_tensors):
  partial = {k: v for k, v in tiny_tensors.items() if "layers.1.mlp.up_proj" not in k}
  folder = write_hf_folder_by_hand(tmp_path / "partial", tiny_config, partial)
  with pytest.raises(WeightFileError, match="missing tensor 'model.layers.1.mlp.up_proj.weight'"):
    load_hf_folder(folder)
  extra = dict(tiny_tensors, **{"model.layers.7.mlp.up_proj.weight": np.zeros((2, 2))})
  folder = write_hf_folder_by_hand(tmp_path / "extra", tiny_config, extra)
  with pytest.raises(WeightFileError, match="belongs to layer 7 but the config has 2 layers"):
    load_hf_folder(folder)
  folder = write_hf_folder_by_hand(tmp_path / "corrupt", tiny_config, tiny_tensors)
  (folder / "b.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
  with pytest.raises(WeightFileError, match="b.safetensors: not a readable safetensors file"):
    load_hf_folder(folder)
  (folder / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
  with pytest.raises(WeightFileError, match="model_type 'gpt2' is not supported"):
    load_hf_folder(folder)


def test_a_folders_chat_template_file_wins_over_its_tokenizer_config(tmp_path):
  """transformers saves the template as chat_template.jinja (read first), older folders
  in tokenizer_config.json; a named-template list is refused naming the file."""
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": "old"}))
  assert folder_chat_template(tmp_path) == "old"
  (tmp_path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}")
  assert folder_chat_template(tmp_path) == "{{ messages[0]['content'] }}"
  (tmp_path / "chat_template.jinja").unlink()
  (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": [{}]}))
  with pytest.raises(WeightFileError, match="tokenizer_config.json: chat_template must be"):
    folder_chat_template(tmp_path)
