#!/usr/bin/env python3
"""Writes a random Llama- or Mixtral-architecture checkpoint in Hugging Face's layout.

The directory gets config.json (LlamaForCausalLM fields; with --experts E, MixtralForCausalLM's)
and either model.safetensors or, with --shards N > 1, model-0000i-of-0000N.safetensors plus
model.safetensors.index.json. Tensor names are those LlamaForCausalLM writes, or with --experts
those MixtralForCausalLM writes: each layer's MLP replaced by a router
(block_sparse_moe.gate.weight [E, hidden]) and E experts (block_sparse_moe.experts.{j}.w1/w3
[intermediate, hidden], w2 [hidden, intermediate]), of which each token uses
--experts-per-token. The output is a function of the options and --seed only: each
tensor's values come from a generator seeded by the seed and the tensor's name, so the same
seed gives the same weights whatever the sharding.

    scripts/make-checkpoint.py --out /tmp/llama --size-mib 256 --dtype bf16
    scripts/make-checkpoint.py --out /tmp/tiny --hidden 64 --layers 2 --heads 4 --kv-heads 2 \
        --intermediate 160 --vocab 97 --dtype f16 --shards 3
    scripts/make-checkpoint.py --out /tmp/moe --size-mib 1024 --experts 16 --experts-per-token 2

With --adapter-out DIR it also (or, without --out, only) writes a random LoRA adapter for that
shape in PEFT's layout: adapter_config.json and adapter_model.safetensors holding
base_model.model.model.layers.{i}.self_attn.{q,v}_proj.lora_{A,B}.weight. B is random rather
than PEFT's initial zeros, so the adapter changes the model as a trained one does:

    scripts/make-checkpoint.py --adapter-out /tmp/tiny-lora --hidden 64 --layers 2 --heads 4 \
        --kv-heads 2 --intermediate 160 --vocab 97 --rank 8 --alpha 16 --targets q_proj,v_proj \
        --adapter-seed 1

Python standard library only (numpy is not a dependency of phos). Values are made from random
bytes by forcing each element's sign-and-exponent byte into a narrow range: matrices get
magnitudes between 2^-11 and 2^-3, RMSNorm weights between 0.5 and 2. That is fast enough for
multi-GiB checkpoints and never yields an infinity, a NaN or a subnormal.
"""

import argparse
import json
import os
import random
import struct
import sys

DTYPES = {
    # name: (safetensors dtype, bytes per element, torch_dtype in config.json)
    "f32": ("F32", 4, "float32"),
    "f16": ("F16", 2, "float16"),
    "bf16": ("BF16", 2, "bfloat16"),
}

CHUNK_BYTES = 16 << 20  # bytes generated at a time, so a large tensor never sits whole in memory


def sign_exponent_table(dtype, norm):
    """Maps a random byte to the element's most significant byte (sign and exponent bits)."""
    table = bytearray(256)
    for b in range(256):
        sign = 0 if norm else b & 0x80
        if dtype == "f16":
            # binary16 top byte: sign, 5 exponent bits, 2 fraction bits.
            exponent = 14 + ((b >> 2) & 1) if norm else 4 + ((b >> 2) & 7)  # 2^-1..2^0 | 2^-11..2^-4
            table[b] = sign | (exponent << 2) | (b & 3)
        else:
            # float32 and bfloat16 top byte: sign and the exponent's upper 7 bits (bias 127).
            upper = 0x3F if norm else 0x3A + (b & 3)  # 2^-1..2^0 | 2^-11..2^-4 with the low exponent bit
            table[b] = sign | upper
    return bytes(table)


def tensor_bytes(seed, name, dtype, elements, norm):
    """Yields the tensor's little-endian bytes in chunks."""
    size = DTYPES[dtype][1]
    table = sign_exponent_table(dtype, norm)
    rng = random.Random(f"{seed}:{name}")
    remaining = elements * size
    chunk = CHUNK_BYTES - CHUNK_BYTES % size
    while remaining > 0:
        n = min(chunk, remaining)
        data = bytearray(rng.randbytes(n))
        data[size - 1 :: size] = data[size - 1 :: size].translate(table)
        remaining -= n
        yield data


def feed_forward_tensors(a, p):
    """A layer's MLP (LlamaMLP) or, with --experts, its sparse mixture of experts (Mixtral's)."""
    h, inter = a.hidden, a.intermediate
    if not a.experts:
        return [
            (p + "mlp.gate_proj.weight", [inter, h], False),
            (p + "mlp.up_proj.weight", [inter, h], False),
            (p + "mlp.down_proj.weight", [h, inter], False),
        ]
    block = p + "block_sparse_moe."
    tensors = [(block + "gate.weight", [a.experts, h], False)]
    for j in range(a.experts):
        tensors += [
            (block + f"experts.{j}.w1.weight", [inter, h], False),
            (block + f"experts.{j}.w2.weight", [h, inter], False),
            (block + f"experts.{j}.w3.weight", [inter, h], False),
        ]
    return tensors


def llama_tensors(a):
    """(name, shape, is_norm) in the order LlamaForCausalLM (MixtralForCausalLM) lists its parameters."""
    head_dim = a.hidden // a.heads
    h, q, kv = a.hidden, a.heads * head_dim, a.kv_heads * head_dim
    tensors = [("model.embed_tokens.weight", [a.vocab, h], False)]
    for i in range(a.layers):
        p = f"model.layers.{i}."
        tensors += [
            (p + "self_attn.q_proj.weight", [q, h], False),
            (p + "self_attn.k_proj.weight", [kv, h], False),
            (p + "self_attn.v_proj.weight", [kv, h], False),
            (p + "self_attn.o_proj.weight", [h, q], False),
        ]
        tensors += feed_forward_tensors(a, p)
        tensors += [
            (p + "input_layernorm.weight", [h], True),
            (p + "post_attention_layernorm.weight", [h], True),
        ]
    tensors.append(("model.norm.weight", [h], True))
    if not a.tie_word_embeddings:
        tensors.append(("lm_head.weight", [a.vocab, h], False))
    return tensors


def elements(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def intermediate_for(hidden):
    """Llama's MLP width: about 8/3 of hidden, rounded up to a multiple of 64."""
    return (hidden * 8 // 3 + 63) // 64 * 64


def choose_shape(a):
    """Sets hidden, layers (and unset intermediate, heads, kv-heads) for about --size-mib MiB."""
    target = a.size_mib << 20
    size = DTYPES[a.dtype][1]
    embeddings = 1 if a.tie_word_embeddings else 2
    choice = None
    for hidden in (256, 512, 1024, 2048, 4096, 8192):
        heads = a.heads or max(1, hidden // 64)
        kv_heads = a.kv_heads or max(1, heads // 4)
        inter = a.intermediate or intermediate_for(hidden)
        head_dim = hidden // heads
        # Attention, the MLP or the router and every expert, and the two norms.
        mlp = 3 * hidden * inter if not a.experts else a.experts * (3 * hidden * inter + hidden)
        per_layer = (2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + mlp + 2 * hidden) * size
        embed = embeddings * a.vocab * hidden * size
        layers = max(1, round((target - embed) / per_layer))
        # The widest model that still has a few layers and spends at most half its bytes on
        # embeddings; the narrowest when none does.
        if choice is None or (layers >= 4 and embed <= target // 2):
            choice = (hidden, layers, heads, kv_heads, inter)
    a.hidden, a.layers, a.heads, a.kv_heads, a.intermediate = choice


def write_safetensors(path, entries, a, seed=None):
    """Writes one .safetensors file holding `entries` ((name, shape, is_norm) triples)."""
    size = DTYPES[a.dtype][1]
    header = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape, _ in entries:
        n = elements(shape) * size
        header[name] = {"dtype": DTYPES[a.dtype][0], "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data area starts 8-byte aligned, as safetensors writes it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for name, shape, norm in entries:
            for chunk in tensor_bytes(a.seed if seed is None else seed, name, a.dtype, elements(shape), norm):
                f.write(chunk)
    return offset


def split_into_shards(tensors, shards, size):
    """Consecutive groups of tensors of about equal bytes; never an empty shard."""
    total = sum(elements(s) for _, s, _ in tensors) * size
    groups, current, current_bytes = [], [], 0
    for i, t in enumerate(tensors):
        current.append(t)
        current_bytes += elements(t[1]) * size
        left_tensors, left_groups = len(tensors) - i - 1, shards - len(groups) - 1
        if left_groups > 0 and (current_bytes >= total / shards or left_tensors == left_groups):
            groups.append(current)
            current, current_bytes = [], 0
    groups.append(current)
    return groups


def write_config(out, a):
    config = {
        "architectures": ["MixtralForCausalLM" if a.experts else "LlamaForCausalLM"],
        "model_type": "mixtral" if a.experts else "llama",
        "hidden_act": "silu",
        "hidden_size": a.hidden,
        "intermediate_size": a.intermediate,
        "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads,
        "num_key_value_heads": a.kv_heads,
        "head_dim": a.hidden // a.heads,
        "vocab_size": a.vocab,
        "rms_norm_eps": a.rms_norm_eps,
        "rope_theta": a.rope_theta,
        "max_position_embeddings": a.max_position_embeddings,
        "tie_word_embeddings": a.tie_word_embeddings,
        "torch_dtype": DTYPES[a.dtype][2],
    }
    if a.experts:
        config["num_local_experts"] = a.experts
        config["num_experts_per_tok"] = a.experts_per_token
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


LORA_TARGETS = ("q_proj", "v_proj")


def lora_tensors(a):
    """(name, shape, is_norm) of a PEFT LoRA adapter: A [r, hidden] and B [out, r] per target and layer."""
    head_dim = a.hidden // a.heads
    width = {"q_proj": a.heads * head_dim, "v_proj": a.kv_heads * head_dim}
    tensors = []
    for i in range(a.layers):
        for target in LORA_TARGETS:
            if target not in a.targets:
                continue
            p = f"base_model.model.model.layers.{i}.self_attn.{target}."
            tensors += [(p + "lora_A.weight", [a.rank, a.hidden], False), (p + "lora_B.weight", [width[target], a.rank], False)]
    return tensors


def write_adapter(out, a):
    """adapter_config.json with the fields PEFT writes for a plain LoRA, and adapter_model.safetensors."""
    os.makedirs(out, exist_ok=True)
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": a.out or "",
        "r": a.rank,
        "lora_alpha": a.alpha,
        "lora_dropout": 0.0,
        "target_modules": a.targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_dora": False,
        "use_rslora": False,
        "modules_to_save": None,
        "layers_to_transform": None,
        "rank_pattern": {},
        "alpha_pattern": {},
        "inference_mode": True,
    }
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    total = write_safetensors(os.path.join(out, "adapter_model.safetensors"), lora_tensors(a), a, a.adapter_seed)
    print(f"{out}: LoRA r {a.rank}, alpha {a.alpha:g}, {','.join(a.targets)}, {a.dtype}, {total} bytes")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", help="checkpoint directory to write (created if missing)")
    p.add_argument("--hidden", type=int, help="hidden_size (default 256)")
    p.add_argument("--layers", type=int, help="num_hidden_layers (default 2)")
    p.add_argument("--heads", type=int, help="num_attention_heads (default hidden / 64)")
    p.add_argument("--kv-heads", type=int, help="num_key_value_heads (default heads / 4, at least 1)")
    p.add_argument("--intermediate", type=int, help="intermediate_size (default about 8/3 hidden)")
    p.add_argument("--vocab", type=int, default=32000, help="vocab_size (default 32000)")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="f32")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shards", type=int, default=1, help="number of .safetensors files (default 1)")
    p.add_argument("--size-mib", type=int, help="choose hidden and layers for about this many MiB")
    p.add_argument("--rms-norm-eps", type=float, default=1e-5)
    p.add_argument("--rope-theta", type=float, default=10000.0)
    p.add_argument("--max-position-embeddings", type=int, default=2048)
    p.add_argument("--tie-word-embeddings", action="store_true", help="no lm_head.weight: logits use the embeddings")
    p.add_argument("--experts", type=int, help="num_local_experts: a Mixtral checkpoint with this many experts per layer")
    p.add_argument("--experts-per-token", type=int, help="num_experts_per_tok (default 2, at most --experts)")
    p.add_argument("--adapter-out", help="also write a random LoRA adapter for the shape to this directory")
    p.add_argument("--rank", type=int, default=8, help="the adapter's r (default 8)")
    p.add_argument("--alpha", type=float, default=16.0, help="the adapter's lora_alpha (default 16)")
    p.add_argument("--targets", default="q_proj,v_proj", help="comma-separated target_modules: q_proj, v_proj")
    p.add_argument("--adapter-seed", type=int, default=1, help="seed of the adapter's values (default 1)")
    a = p.parse_args(argv)
    if a.out is None and a.adapter_out is None:
        p.error("give --out, --adapter-out or both")
    a.targets = a.targets.split(",")
    if not a.targets or any(t not in LORA_TARGETS for t in a.targets):
        p.error(f"--targets takes a comma-separated subset of {','.join(LORA_TARGETS)}")
    if a.rank <= 0:
        p.error("--rank must be positive")
    if a.experts is None:
        if a.experts_per_token is not None:
            p.error("--experts-per-token needs --experts")
    else:
        if a.experts <= 0:
            p.error("--experts must be positive")
        a.experts_per_token = a.experts_per_token or min(2, a.experts)
        if not 0 < a.experts_per_token <= a.experts:
            p.error(f"--experts-per-token must be in [1, --experts {a.experts}]")
    if a.size_mib is not None:
        if a.hidden is not None or a.layers is not None:
            p.error("--size-mib chooses --hidden and --layers; give either it or them")
        if a.size_mib <= 0:
            p.error("--size-mib must be positive")
        choose_shape(a)
    a.hidden = a.hidden or 256
    a.layers = a.layers or 2
    a.heads = a.heads or max(1, a.hidden // 64)
    a.kv_heads = a.kv_heads or max(1, a.heads // 4)
    a.intermediate = a.intermediate or intermediate_for(a.hidden)
    for name in ("hidden", "layers", "heads", "kv_heads", "intermediate", "vocab", "shards"):
        if getattr(a, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if a.hidden % a.heads != 0:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.heads % a.kv_heads != 0:
        p.error(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    return a


def main(argv):
    a = parse_args(argv)
    if a.adapter_out is not None:
        write_adapter(a.adapter_out, a)
    if a.out is None:
        return
    tensors = llama_tensors(a)
    if a.shards > len(tensors):
        sys.exit(f"make-checkpoint: --shards {a.shards} exceeds the {len(tensors)} tensors")
    os.makedirs(a.out, exist_ok=True)
    write_config(a.out, a)
    size = DTYPES[a.dtype][1]
    if a.shards == 1:
        total = write_safetensors(os.path.join(a.out, "model.safetensors"), tensors, a)
    else:
        weight_map, total = {}, 0
        for i, group in enumerate(split_into_shards(tensors, a.shards, size)):
            shard = f"model-{i + 1:05d}-of-{a.shards:05d}.safetensors"
            total += write_safetensors(os.path.join(a.out, shard), group, a)
            weight_map.update({name: shard for name, _, _ in group})
        with open(os.path.join(a.out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
            f.write("\n")
    experts = f", {a.experts} experts ({a.experts_per_token} per token)" if a.experts else ""
    print(
        f"{a.out}: hidden {a.hidden}, layers {a.layers}, heads {a.heads}/{a.kv_heads}, "
        f"intermediate {a.intermediate}{experts}, vocab {a.vocab}, {a.dtype}, {total / (1 << 20):.1f} MiB "
        f"in {a.shards} file(s)"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
