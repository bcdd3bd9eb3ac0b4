"""A small GPT (pre-norm blocks, causal attention) and a pool of pinned token batches, for the GPU tests
and the multi-GPU benchmarks (python/tests/test_watch_gpu.py, benchmarks/dp_culprit.py)."""


def build_gpt(torch, d, layers, heads, seq, vocab, batch, pool_size):
    """(model on the CPU, [pinned (batch, seq + 1) token batches]); seeded, the same on every rank."""
    import torch.nn as nn
    import torch.nn.functional as F
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
            x = x + self.proj(F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(vocab, d)
            self.blocks = nn.Sequential(*[Block() for _ in range(layers)])
            self.head = nn.Linear(d, vocab)

        def forward(self, idx, targets):
            logits = self.head(self.blocks(self.tok(idx)))
            return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    g = torch.Generator().manual_seed(1)
    pool = [torch.randint(0, vocab, (batch, seq + 1), generator=g).pin_memory() for _ in range(pool_size)]
    return GPT(), pool
