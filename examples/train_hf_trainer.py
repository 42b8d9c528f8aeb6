"""A Hugging Face ``Trainer`` run that knows nothing of rlclock — run it under ``rlclock apply`` unchanged.

A small Llama-style causal language model, built from its config (nothing is downloaded), trains on random
tokens with the ``Trainer``'s own loop (AdamW, bf16 on a GPU, gradient accumulation if asked):

    python examples/train_hf_trainer.py --steps 60
    rlclock apply -- python examples/train_hf_trainer.py --steps 60      # every optimizer step is a training step

For explicit control from inside the script, rlclock's ``TrainerCallback`` does the same (``docs/integrations.md``).
"""

from __future__ import annotations

import argparse
import tempfile

import torch
import transformers as tf


class RandomTokens(torch.utils.data.Dataset):
    def __init__(self, n: int, seq: int, vocab: int) -> None:
        self.data = torch.randint(0, vocab, (n, seq), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.data[i], "labels": self.data[i]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps (default 60)")
    parser.add_argument("--accumulate", type=int, default=1, help="micro-batches per optimizer step (default 1)")
    args = parser.parse_args()
    gpu = torch.cuda.is_available()
    width, layers, seq, batch = (1024, 8, 1024, 8) if gpu else (64, 2, 32, 4)
    config = tf.LlamaConfig(
        hidden_size=width,
        intermediate_size=width * 11 // 4,
        num_hidden_layers=layers,
        num_attention_heads=max(1, width // 64),
        vocab_size=32000,
        max_position_embeddings=seq,
    )
    model = tf.AutoModelForCausalLM.from_config(config)
    with tempfile.TemporaryDirectory() as out:
        training = tf.TrainingArguments(
            output_dir=out,
            max_steps=args.steps,
            per_device_train_batch_size=batch,
            gradient_accumulation_steps=args.accumulate,
            learning_rate=3e-4,
            bf16=gpu,
            logging_steps=20,
            save_strategy="no",
            report_to=[],
            dataloader_num_workers=0,
        )
        tf.Trainer(
            model=model, args=training, train_dataset=RandomTokens(batch * args.accumulate * args.steps, seq, 32000)
        ).train()


if __name__ == "__main__":
    main()
