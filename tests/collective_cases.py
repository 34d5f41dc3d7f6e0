"""Run by tests/test_collectives.py on each rank of an msrun job: a tensor-parallel MLP written with torch's
functional collectives, ported on every rank, against the same MLP unsharded in torch; results to --out."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import mindspore as ms
import torch
import torch.distributed._functional_collectives as funcol
from torch import nn

import aot_ops


class TensorParallelMlp(nn.Module):
    """Megatron's pair: a column-parallel linear (this rank's rows of the first weight), then a row-parallel one
    (this rank's columns of the second) whose partial products are summed over the ranks; then the other
    collectives bridged, each on the whole group."""

    def __init__(self, first: nn.Linear, second: nn.Linear, rank: int, size: int):
        super().__init__()
        hidden = first.out_features // size
        rows = slice(rank * hidden, (rank + 1) * hidden)
        self.up = nn.Linear(first.in_features, hidden)
        self.down = nn.Linear(hidden, second.out_features, bias=False)
        with torch.no_grad():
            self.up.weight.copy_(first.weight[rows])
            self.up.bias.copy_(first.bias[rows])
            self.down.weight.copy_(second.weight[:, rows])
        self.bias = nn.Parameter(second.bias.detach().clone())
        self.group = list(range(size))

    def forward(self, x):
        partial = self.down(torch.relu(self.up(x)))
        y = funcol.all_reduce(partial, "sum", self.group) + self.bias
        mean = funcol.all_reduce(y, "avg", self.group)     # equal on every rank: their mean is y
        largest = funcol.all_reduce(partial, "max", self.group)  # MindSpore's CPU AllReduce sums these
        smallest = funcol.all_reduce(partial, "min", self.group)
        product = funcol.all_reduce(partial, "product", self.group)
        gathered = funcol.all_gather_tensor(partial, 0, self.group)  # every rank's partial product, rank by rank
        from_last = funcol.broadcast(partial, len(self.group) - 1, self.group)
        return y, mean, largest, smallest, product, gathered, from_last


class Scattering(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.group = list(range(size))

    def forward(self, x):
        return funcol.reduce_scatter_tensor(x, "sum", 0, self.group)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    ms.set_context(mode=ms.PYNATIVE_MODE)
    rank, size = aot_ops.torch_process_group()
    torch.manual_seed(0)  # the same whole layers on every rank
    first, second, x = nn.Linear(16, 32), nn.Linear(32, 8), torch.randn(4, 16)
    module = TensorParallelMlp(first, second, rank, size).eval()
    partials = [TensorParallelMlp(first, second, r, size).down(torch.relu(TensorParallelMlp(
        first, second, r, size).up(x))) for r in range(size)]
    whole = second(torch.relu(first(x)))
    each = torch.stack(partials)
    expected = [whole, whole, each.amax(0), each.amin(0), each.prod(0), torch.cat(partials), partials[-1]]
    result = {"rank": rank, "size": size}
    cell = aot_ops.from_torch(module, (x,))
    outputs = cell(ms.Tensor(x.numpy()))
    result["errors"] = [float((torch.from_numpy(o.asnumpy()) - e).abs().max()) for o, e in zip(outputs, expected)]
    result["shapes"] = [list(o.shape) for o in outputs]
    try:  # torch's functional collectives have no gradient: neither has the port (a named error, not a wrong one)
        ms.grad(lambda t: cell(t)[0].sum())(ms.Tensor(x.numpy()))
        result["gradient"] = "computed"
    except RuntimeError as exc:
        result["gradient"] = str(exc)
    ms.set_context(mode=ms.GRAPH_MODE)
    graph_outputs = cell(ms.Tensor(x.numpy()))
    result["graph_errors"] = [float((torch.from_numpy(o.asnumpy()) - e).abs().max())
                              for o, e in zip(graph_outputs, expected)]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    result["expected_shapes"] = [list(e.shape) for e in expected]
    try:
        aot_ops.from_torch(module, (x,), fuse=True)
        result["fused"] = "ported"
    except aot_ops.PortError as exc:
        result["fused"] = str(exc)
    scattering = Scattering(size).eval()
    try:
        aot_ops.from_torch(scattering, (torch.randn(4, 8),))
        result["reduce_scatter"] = "ported"
    except aot_ops.PortError as exc:
        result["reduce_scatter"] = str(exc)
    result.update(tensor_parallel_llama())
    result.update(tensor_parallel_checkpoint(Path(args.out) / "checkpoint"))
    Path(args.out, f"rank{rank}.json").write_text(json.dumps(result))


def tensor_parallel_llama() -> dict:
    """A small transformers Llama split by its own plan (aot_ops.tensor_parallel) and ported on this rank, against
    the whole model in torch: its logits, then three SGD steps of training (losses and the first step's gradients,
    each rank's slice against the same slice of the whole model's)."""
    import copy

    import transformers

    from aot_ops._port.distributed import CollectiveCell, CopyCell, GatherCell, ReduceCell

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    whole = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    expected = whole(input_ids=ids, use_cache=False).logits
    sharded = aot_ops.tensor_parallel(copy.deepcopy(whole))
    cell = aot_ops.from_torch(sharded, (), {"input_ids": ids, "use_cache": False})
    logits = torch.from_numpy(cell(input_ids=ms.Tensor(ids.numpy())).logits.asnumpy())
    kinds = {ReduceCell: "reduce", CopyCell: "copy", GatherCell: "gather", CollectiveCell: "functional"}
    collectives = [kinds[type(c)] for _, c in cell.cells_and_names() if type(c) in kinds]
    result = {"llama_error": float((logits - expected).abs().max() / expected.abs().max()),
              "llama_collectives": collectives,
              "llama_parameters": sum(p.size for p in cell.get_parameters()),
              "llama_whole_parameters": sum(p.numel() for p in whole.parameters())}

    class Loss(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, input_ids):
            return self.model(input_ids=input_ids, labels=input_ids, use_cache=False).loss

    whole_loss, sharded_loss = Loss(copy.deepcopy(whole)).train(), Loss(sharded).train()
    training = aot_ops.from_torch(sharded_loss, (ids,), input_grads=False)
    training.set_train(True)
    params = training.trainable_params()
    grad_fn, optimizer = ms.value_and_grad(training, None, params), ms.nn.SGD(params, learning_rate=0.5)
    torch_optimizer = torch.optim.SGD(whole_loss.parameters(), lr=0.5)
    modules = dict(sharded_loss.named_modules())
    losses, gradient_errors = [], {}
    for step in range(3):
        loss, grads = grad_fn(ms.Tensor(ids.numpy()))
        torch_optimizer.zero_grad()
        torch_loss = whole_loss(ids)
        torch_loss.backward()
        losses.append([float(loss.asnumpy()), float(torch_loss)])
        if step == 0:
            whole_grads = {n: p.grad for n, p in whole_loss.named_parameters()}
            for param, grad in zip(params, grads):
                owner, _, leaf = param.name.rpartition(".")
                theirs = _slice_of(whole_grads[param.name], modules[owner], leaf)
                ours = torch.from_numpy(grad.asnumpy())
                gradient_errors[param.name] = float((ours - theirs).abs().max() / (theirs.abs().max() + 1e-12))
        optimizer(grads)
        torch_optimizer.step()
    result.update(llama_losses=losses, llama_gradient_errors=gradient_errors)

    # greedy generation with the key/value cache, each rank holding its key/value heads
    prompt = ids[:, :5]
    theirs = whole.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False)
    lm = aot_ops.from_torch_lm(aot_ops.tensor_parallel(copy.deepcopy(whole)), batch_size=2, max_length=16)
    ours = aot_ops.generate(lm, ms.Tensor(prompt.numpy()), max_new_tokens=8)
    result.update(llama_generated=ours.asnumpy().tolist(), llama_torch_generated=theirs.tolist(),
                  llama_cache_shapes=sorted({tuple(p.shape) for p in lm.cell.get_parameters() if len(p.shape) == 4}))
    return result


def tensor_parallel_checkpoint(folder: Path) -> dict:
    """A checkpoint folder (saved by the test before the job: a Llama with tied embeddings) loaded split, each rank
    reading its share (the bytes its reads asked for, /proc/self/io's rchar), then ported from it and generating."""
    import transformers

    from aot_ops._port.tensor_parallel import shares

    def read_so_far() -> int:
        return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])

    aot_ops.load_pretrained(folder, tensor_parallel=True)  # the first load imports transformers' model modules
    before = read_so_far()
    model = aot_ops.load_pretrained(folder, tensor_parallel=True)
    read = read_so_far() - before
    share = shares(model)
    whole = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    stored = {t.data_ptr(): (k, t) for k, t in whole.state_dict().items()}.values()  # a tied tensor once, as stored
    expected = sum(t.numel() * t.element_size() * (s[2] - s[1]) // s[3] if (s := share.get(k)) else
                   t.numel() * t.element_size() for k, t in stored)
    replicated = sum(t.numel() * t.element_size() for k, t in stored if k not in share)
    prompt = torch.randint(0, whole.config.vocab_size, (2, 5), generator=torch.Generator().manual_seed(2))
    theirs = whole.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=6, do_sample=False)
    lm = aot_ops.from_pretrained(folder, max_length=16, batch_size=2, fuse=False, tensor_parallel=True)
    ours = aot_ops.generate(lm, ms.Tensor(prompt.numpy()), max_new_tokens=6)
    return {"checkpoint_read": read, "checkpoint_share": expected, "checkpoint_replicated": replicated,
            "checkpoint_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
            "checkpoint_generated": ours.asnumpy().tolist(), "checkpoint_torch_generated": theirs.tolist()}


def _slice_of(whole: torch.Tensor, module: nn.Module, leaf: str) -> torch.Tensor:
    """This rank's part of a whole model's tensor, as aot_ops.tensor_parallel split `module`'s `leaf`."""
    from aot_ops._port.tensor_parallel import (ColumnParallelGathered, ColumnParallelLinear, RowParallelLinear,
                                               VocabParallelEmbedding)

    from mindspore.communication import get_group_size, get_rank

    rank, size = get_rank(), get_group_size()
    if isinstance(module, RowParallelLinear) and leaf == "weight":
        return whole.chunk(size, 1)[rank]
    if isinstance(module, (VocabParallelEmbedding, ColumnParallelLinear, ColumnParallelGathered)):
        return whole.chunk(size, 0)[rank]
    return whole  # replicated: norms, a row-parallel layer's bias


if __name__ == "__main__":
    main()
