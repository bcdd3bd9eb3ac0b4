"""The tiny model and token batches the framework callbacks train with, on a GPU: the callbacks' test
(python/tests/test_callbacks_gpu.py) and the budget's steady-state run (benchmarks/framework_budget.py)."""


def dataset(torch, n, vocab, seq):
    """n samples of `seq` random tokens, seeded: [{"input_ids": tensor}]."""
    g = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(0, vocab, (seq,), generator=g)} for _ in range(n)]


def tiny_lm(torch, vocab):
    """An embedding and an MLP over a `vocab`-token vocabulary: a step of few, small kernels."""

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, 128)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(128, 512), torch.nn.GELU(), torch.nn.Linear(512, vocab))

        def forward(self, input_ids):
            return self.mlp(self.emb(input_ids))

    return Tiny()


def lightning_module(pl, torch, vocab):
    """tiny_lm as a LightningModule: next-token cross-entropy, AdamW."""

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_lm(torch, vocab)

        def training_step(self, batch, batch_idx):
            ids = batch["input_ids"]
            logits = self.net(ids[:, :-1])
            return torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

        def validation_step(self, batch, batch_idx):
            return self.training_step(batch, batch_idx)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    return Module()
