"""A transformers Llama split over the ranks of a MindSpore job by its own tensor-parallel plan (CPU workers).

    PATH="$PWD/.venv/bin:$PATH" .venv/bin/msrun --worker_num=2 --local_worker_num=2 --master_port=8130 \
        --log_dir=/tmp/tp_logs --join=True examples/tensor_parallel.py
    grep -h "rank" /tmp/tp_logs/worker_*.log

Every rank builds the same model (same seed), keeps its slice of each projection by the model's plan
(`aot_ops.tensor_parallel`: the attention heads and the MLP split, the output and down projections summed over the
ranks by MindSpore's AllReduce, the embedding and the LM head split by vocabulary), ports it with from_torch (fused:
programs between the collectives) and runs it; each rank prints how far its logits are from the whole model's in torch, and the next token of each
sequence. docs/distributed.md.
"""
from __future__ import annotations

import copy

import mindspore as ms
import torch
import transformers

import aot_ops


def main() -> None:
    config = transformers.LlamaConfig(vocab_size=512, hidden_size=128, intermediate_size=344, num_hidden_layers=2,
                                      num_attention_heads=8, num_key_value_heads=4, attn_implementation="eager")
    torch.manual_seed(0)
    whole = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = whole(input_ids=ids, use_cache=False).logits

    ms.set_context(mode=ms.PYNATIVE_MODE)
    sharded = aot_ops.tensor_parallel(copy.deepcopy(whole))  # this rank's slices; MindSpore's communication up
    # fused: programs between the collectives (fuse=False: one aot call per node)
    cell = aot_ops.from_torch(sharded, (), {"input_ids": ids, "use_cache": False}, fuse=True)
    logits = torch.from_numpy(cell(input_ids=ms.Tensor(ids.numpy())).logits.asnumpy())

    from mindspore.communication import get_group_size, get_rank

    held = sum(p.numel() for p in sharded.parameters()) / sum(p.numel() for p in whole.parameters())
    error = float((logits - expected).abs().max() / expected.abs().max())
    print(f"rank {get_rank()}/{get_group_size()}: {held:.1%} of the weights held, logits within {error:.1e} "
          f"(relative) of the whole model's; next tokens {logits[:, -1].argmax(-1).tolist()} "
          f"(torch: {expected[:, -1].argmax(-1).tolist()})", flush=True)


if __name__ == "__main__":
    main()
