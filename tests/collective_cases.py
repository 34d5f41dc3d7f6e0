"""Run by tests/test_collectives.py on each rank of a job, three ways:
- `--torchrun`: under torchrun with gloo, torch's own run of a module written with torch's functional collectives
  (outputs, gradients), saved per rank as the reference;
- (default) under msrun: the same module ported on every rank against that reference, then a transformers Llama
  split by its plan against the whole model, and bad input; results to --out;
- `--failing-rank`: under msrun, rank 1 fails (a checkpoint missing a shard) while rank 0 waits in a collective."""
from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
import torch.distributed._functional_collectives as funcol
from torch import nn


class TensorParallelMlp(nn.Module):
    """Megatron's pair: a column-parallel linear (this rank's rows of the first weight), then a row-parallel one
    (this rank's columns of the second) whose partial products are summed over the ranks; then the other
    differentiable collectives, each on the whole group, of the partial products."""

    def __init__(self, rank: int, size: int):
        super().__init__()
        torch.manual_seed(0)  # the same whole layers on every rank
        first, second = nn.Linear(16, 32), nn.Linear(32, 8)
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
        mean = funcol.all_reduce(partial, "avg", self.group)
        gathered = funcol.all_gather_tensor(partial, 0, self.group)  # every rank's partial product, rank by rank
        scattered = funcol.reduce_scatter_tensor(partial, "sum", 0, self.group)
        exchanged = funcol.all_to_all_single(partial, None, None, self.group)
        from_last = funcol.broadcast(partial, len(self.group) - 1, self.group)
        return y, mean, gathered, scattered, exchanged, from_last


class Reductions(nn.Module):
    """The reductions with no gradient in torch: max, min, product over the ranks (MindSpore's CPU AllReduce sums
    them all: the port gathers and reduces)."""

    def __init__(self, rank: int, size: int):
        super().__init__()
        torch.manual_seed(rank)  # each rank its own weights
        self.linear = nn.Linear(16, 8)
        self.group = list(range(size))

    def forward(self, x):
        h = self.linear(x)
        return tuple(funcol.all_reduce(h, op, self.group) for op in ("max", "min", "product"))


class UnevenExchange(nn.Module):
    def __init__(self, size: int):
        super().__init__()
        self.group = list(range(size))

    def forward(self, x):
        splits = [x.shape[0] - len(self.group) + 1] + [1] * (len(self.group) - 1)
        return funcol.all_to_all_single(x, splits, splits, self.group)


class _SummedInTorch(torch.autograd.Function):
    """Megatron's pattern with a functional collective inside a Function: refused (the Function runs in torch)."""

    @staticmethod
    def forward(ctx, x):
        return funcol.all_reduce(x, "sum", list(range(torch.distributed.get_world_size())))

    @staticmethod
    def backward(ctx, grad):
        return grad


class CollectiveInFunction(nn.Module):
    def forward(self, x):
        return _SummedInTorch.apply(x) * 2


def loss_weights(outputs) -> list[torch.Tensor]:
    """Fixed weights of the outputs in the loss, the same on every rank and in both runs."""
    generator = torch.Generator().manual_seed(7)
    return [torch.randn(o.shape, generator=generator) for o in outputs]


def inputs() -> torch.Tensor:
    return torch.randn(4, 16, generator=torch.Generator().manual_seed(3))


def torch_reference(out: Path) -> None:
    """torch's run under torchrun (gloo): each rank's outputs and gradients of the weighted sum of its outputs."""
    import torch.distributed as dist

    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    module, x = TensorParallelMlp(rank, size), inputs().requires_grad_()
    outputs = module(x)
    sum((o * w).sum() for o, w in zip(outputs, loss_weights(outputs))).backward()
    reductions = Reductions(rank, size)(x.detach())
    try:
        Reductions(rank, size)(x)[0].sum().backward()
        no_gradient = "computed"
    except RuntimeError as exc:
        no_gradient = str(exc)
    def plain(t: torch.Tensor) -> torch.Tensor:  # funcol's results are AsyncCollectiveTensors: their values
        return torch.from_numpy(t.detach().numpy().copy())

    torch.save({"outputs": [plain(o) for o in outputs], "x": plain(x.grad),
                "grads": {n: plain(p.grad) for n, p in module.named_parameters()},
                "reductions": [plain(r) for r in reductions], "no_gradient": no_gradient}, out / f"torch_rank{rank}.pt")
    dist.destroy_process_group()


def ported(out: Path) -> None:
    """The same module ported on this msrun rank, against torch's run of this rank."""
    import mindspore as ms

    import aot_ops

    ms.set_context(mode=ms.PYNATIVE_MODE)
    rank, size = aot_ops.torch_process_group()
    reference = torch.load(out / f"torch_rank{rank}.pt")
    x = inputs()
    result = {"rank": rank, "size": size}
    module = TensorParallelMlp(rank, size).eval()
    weights = [ms.Tensor(w.numpy()) for w in loss_weights(reference["outputs"])]

    class Loss(ms.nn.Cell):
        def __init__(self, cell):
            super().__init__()
            self.cell, self.weights = cell, tuple(weights)

        def construct(self, t):
            loss = 0
            for o, w in zip(self.cell(t), self.weights):
                loss = loss + (o * w).sum()
            return loss

    class FirstSummed(ms.nn.Cell):
        def __init__(self, cell):
            super().__init__()
            self.cell = cell

        def construct(self, t):
            return self.cell(t)[0].sum()

    reductions_cell = aot_ops.from_torch(Reductions(rank, size).eval(), (x,))
    max_summed = FirstSummed(reductions_cell)
    # per node; fused: programs between the collectives; and those programs compiled by AOTInductor
    for port, fuse in (("", False), ("fused_", True), ("compiled_", "compile")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            cell = aot_ops.from_torch(module, (x,), fuse=fuse)
            cell(ms.Tensor(x.numpy()))  # compiled on first use
        result[f"{port}fallbacks"] = [str(w.message) for w in caught if "not compiled" in str(w.message)]
        params = cell.trainable_params()
        names = [p.name for p in params]  # torch's (the Loss cell prefixes them)
        grad_fn = ms.value_and_grad(Loss(cell), 0, params)
        for mode, name in ((ms.PYNATIVE_MODE, "pynative"), (ms.GRAPH_MODE, "graph")):
            ms.set_context(mode=mode)
            outputs = cell(ms.Tensor(x.numpy()))
            _loss, (x_grad, grads) = grad_fn(ms.Tensor(x.numpy()))
            name = port + name
            result[f"{name}_output_errors"] = [_error(o, e) for o, e in zip(outputs, reference["outputs"])]
            result[f"{name}_shapes"] = [[list(o.shape) for o in outputs],
                                        [list(e.shape) for e in reference["outputs"]]]
            result[f"{name}_gradient_errors"] = {n: _error(g, reference["grads"][n]) for n, g in zip(names, grads)}
            result[f"{name}_gradient_errors"]["x"] = _error(x_grad, reference["x"])
            if port:
                continue
            reductions = reductions_cell(ms.Tensor(x.numpy()))
            result[f"{name}_reduction_errors"] = [_error(o, e) for o, e in zip(reductions, reference["reductions"])]
            try:
                ms.grad(max_summed)(ms.Tensor(x.numpy()))
                result[f"{name}_no_gradient"] = "computed"
            except RuntimeError as exc:
                result[f"{name}_no_gradient"] = str(exc)
        result[f"{port}cells"] = sorted({type(c).__name__ for _, c in cell.cells_and_names()
                                         if type(c).__module__.endswith("distributed")})
        result[f"{port}counted"] = _counted(cell)
    ms.set_context(mode=ms.PYNATIVE_MODE)
    # bfloat16 (MindSpore's CPU collectives have no bfloat16 kernel: they carry it as float32), against torch's
    # float32 run within bfloat16's rounding
    narrow = aot_ops.from_torch(TensorParallelMlp(rank, size).to(torch.bfloat16).eval(), (x.bfloat16(),))
    result["bfloat16_errors"] = [_error(o.astype(ms.float32), e) for o, e in
                                 zip(narrow(ms.Tensor(x.numpy()).astype(ms.bfloat16)), reference["outputs"])]
    result["torch_no_gradient"] = reference["no_gradient"]
    for name, attempt in (("uneven", lambda: aot_ops.from_torch(UnevenExchange(size), (torch.randn(4, 8),))),
                          ("in_function", lambda: aot_ops.from_torch(CollectiveInFunction(), (torch.randn(4, 8),)))):
        try:
            attempt()
            result[name] = "ported"
        except aot_ops.PortError as exc:
            result[name] = str(exc)
    result.update(split_mlp_in_graph_mode())
    result.update(tensor_parallel_llama())
    result.update(tensor_parallel_lora())
    result.update(tensor_parallel_checkpoint(out / "checkpoint"))
    result.update(bad_input(out))
    (out / f"rank{rank}.json").write_text(json.dumps(result))


def _error(ours, theirs: torch.Tensor) -> float:
    ours = torch.from_numpy(ours.asnumpy())
    return float((ours - theirs).abs().max() / (theirs.abs().max() + 1e-12)) if ours.shape == theirs.shape else 1e9


def bad_input(out: Path) -> dict:
    """What cannot split, named on every rank before any collective: a rank count that is not the job's, a
    checkpoint missing one of its shards."""
    import transformers

    import aot_ops

    result = {}
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                                      num_attention_heads=4, num_key_value_heads=2)
    for name, attempt in (
            ("wrong_size", lambda: aot_ops.tensor_parallel(transformers.LlamaForCausalLM(config), size=4)),
            ("missing_shard", lambda: aot_ops.load_pretrained(out / "missing_shard", tensor_parallel=True))):
        try:
            attempt()
            result[name] = "loaded"
        except aot_ops.PortError as exc:
            result[name] = str(exc)
    return result


def failing_rank(out: Path) -> None:
    """Rank 1 fails before its first collective (a checkpoint missing a shard); rank 0 runs the ported MLP, whose
    all-reduce waits for rank 1 until msrun ends the job."""
    import mindspore as ms

    import aot_ops

    rank, size = aot_ops.torch_process_group()
    if rank == 1:
        aot_ops.load_pretrained(out / "missing_shard", tensor_parallel=True)
    cell = aot_ops.from_torch(TensorParallelMlp(rank, size).eval(), (inputs(),))
    outputs = cell(ms.Tensor(inputs().numpy()))
    (out / f"finished{rank}").write_text(f"the collectives returned without rank 1: {outputs[0].asnumpy()}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--torchrun", action="store_true")
    parser.add_argument("--failing-rank", action="store_true")
    args = parser.parse_args()
    if args.torchrun:
        torch_reference(args.out)
    elif args.failing_rank:
        failing_rank(args.out)
    else:
        ported(args.out)


def split_mlp_in_graph_mode() -> dict:
    """An MLP split by a plan of the user's (colwise then rowwise), its gradients in GRAPH_MODE: each rank's
    gradient of its slices, and of the input, against the whole MLP's in torch (the regions' Megatron gradients
    compiled into MindSpore's graph)."""
    import copy

    import mindspore as ms

    import aot_ops

    torch.manual_seed(0)
    whole = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    x = inputs().requires_grad_()
    whole(x).square().sum().backward()
    split = aot_ops.tensor_parallel(copy.deepcopy(whole), plan={"0": "colwise", "2": "rowwise"})

    class Loss(nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, t):
            return self.model(t).square().sum()

    cell = aot_ops.from_torch(Loss(split), (x.detach(),))
    params = cell.trainable_params()
    names = [p.name for p in params]
    ms.set_context(mode=ms.GRAPH_MODE)
    try:
        loss, (x_grad, grads) = ms.value_and_grad(cell, 0, params)(ms.Tensor(x.detach().numpy()))
    finally:
        ms.set_context(mode=ms.PYNATIVE_MODE)
    from mindspore.communication import get_rank

    rank, expected = get_rank(), {"x": x.grad}
    for name, param in whole.named_parameters():
        dim = {"0.weight": 0, "0.bias": 0, "2.weight": 1}.get(name)
        expected["model." + name] = param.grad if dim is None else param.grad.chunk(2, dim)[rank]
    errors = {n: _error(g, expected[n]) for n, g in zip(names, grads)}
    errors["x"] = _error(x_grad, expected["x"])
    return {"graph_split_mlp_loss": [float(loss.asnumpy()), float(whole(x).square().sum())],
            "graph_split_mlp_errors": errors}


def tensor_parallel_llama() -> dict:
    """A small transformers Llama split by its own plan (aot_ops.tensor_parallel) and ported on this rank, against
    the whole model in torch: its logits, then three SGD steps of training (losses and the first step's gradients,
    each rank's slice against the same slice of the whole model's)."""
    import copy

    import mindspore as ms
    import transformers

    import aot_ops

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    whole = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(1))
    expected = whole(input_ids=ids, use_cache=False).logits
    sharded = aot_ops.tensor_parallel(copy.deepcopy(whole))
    cell = aot_ops.from_torch(sharded, (), {"input_ids": ids, "use_cache": False})
    logits = torch.from_numpy(cell(input_ids=ms.Tensor(ids.numpy())).logits.asnumpy())
    result = {"llama_error": float((logits - expected).abs().max() / expected.abs().max()),
              "llama_collectives": _collectives(cell),
              "llama_parameters": sum(p.size for p in cell.get_parameters()),
              "llama_whole_parameters": sum(p.numel() for p in whole.parameters())}

    whole_loss, sharded_loss = LmLoss(copy.deepcopy(whole)).train(), LmLoss(sharded).train()
    # fused: programs between the collectives, each with its backward program
    training = aot_ops.from_torch(sharded_loss, (ids,), input_grads=False, fuse=True)
    result["llama_fused_counted"] = _counted(training)
    losses, gradient_errors = _trained_beside_whole(training, sharded_loss, whole_loss, ids)
    result.update(llama_losses=losses, llama_gradient_errors=gradient_errors)
    # the trained shards gathered into the whole model's state_dict, which torch loads
    state = training.torch_state_dict()
    result["llama_gathered_error"] = _gathered_error(state, LmLoss(copy.deepcopy(whole)), whole_loss)
    shard = training.torch_state_dict(gather=False)
    result["llama_shard_fraction"] = sum(t.numel() for t in shard.values()) / sum(t.numel() for t in state.values())

    # greedy generation with the key/value cache, each rank holding its key/value heads
    prompt = ids[:, :5]
    theirs = whole.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=8, do_sample=False)
    lm = aot_ops.from_torch_lm(aot_ops.tensor_parallel(copy.deepcopy(whole)), batch_size=2, max_length=16,
                               fuse=True)
    ours = aot_ops.generate(lm, ms.Tensor(prompt.numpy()), max_new_tokens=8)
    result.update(llama_generated=ours.asnumpy().tolist(), llama_torch_generated=theirs.tolist(),
                  llama_cache_assigned=Path(lm.cell.source_file).read_text().count("self.assign("),
                  llama_cache_shapes=sorted({tuple(p.shape) for p in lm.cell.get_parameters() if len(p.shape) == 4}))
    return result


def tensor_parallel_lora() -> dict:
    """LoRA (peft) on every projection of a small Llama, then the model split by its plan: the adapters split to
    meet their base layers. Three SGD steps of the adapters, fused, against the whole peft model in torch; the
    gathered state_dict loaded by the whole peft model."""
    import copy

    import peft
    import transformers

    import aot_ops

    config = transformers.LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, attn_implementation="eager")
    torch.manual_seed(0)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    whole = peft.get_peft_model(transformers.LlamaForCausalLM(config),
                                peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():  # B is zeros when peft makes it: A's first gradient would be zeros too
        for name, param in whole.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    ids = torch.randint(0, 96, (2, 12), generator=torch.Generator().manual_seed(4))

    whole_loss = LmLoss(copy.deepcopy(whole)).train()
    split_loss = LmLoss(aot_ops.tensor_parallel(copy.deepcopy(whole))).train()
    cell = aot_ops.from_torch(split_loss, (ids,), input_grads=False, fuse=True)
    result = {"lora_collectives": _collectives(cell)}
    losses, gradient_errors = _trained_beside_whole(cell, split_loss, whole_loss, ids)
    result.update(lora_losses=losses, lora_gradient_errors=gradient_errors,
                  lora_gathered_error=_gathered_error(cell.torch_state_dict(), LmLoss(copy.deepcopy(whole)),
                                                      whole_loss))
    return result


def tensor_parallel_checkpoint(folder: Path) -> dict:
    """A checkpoint folder (saved by the test before the job: a Llama with tied embeddings) loaded split, each rank
    reading its share (the bytes its reads asked for, /proc/self/io's rchar), then ported from it and generating."""
    import mindspore as ms
    import transformers

    import aot_ops
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
    lm = aot_ops.from_pretrained(folder, max_length=16, batch_size=2, tensor_parallel=True)  # fused
    ours = aot_ops.generate(lm, ms.Tensor(prompt.numpy()), max_new_tokens=6)
    # (without a backward the copies are their inputs: none is left)
    return {"checkpoint_collectives": _collectives(lm.cell), "checkpoint_read": read, "checkpoint_share": expected,
            "checkpoint_replicated": replicated,
            "checkpoint_bytes": sum(p.stat().st_size for p in folder.glob("*.safetensors")),
            "checkpoint_generated": ours.asnumpy().tolist(), "checkpoint_torch_generated": theirs.tolist()}


class LmLoss(nn.Module):
    """A causal LM's loss on its own ids (the labels the ids), what the training cases differentiate."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        return self.model(input_ids=input_ids, labels=input_ids, use_cache=False).loss


def _collectives(cell) -> list[str]:
    """The cell's collectives in order: a tensor-parallel region by its name ("reduce", "copy", "gather"), another
    by its cell's class."""
    from aot_ops._port.distributed import CopyCell, GatherCell, ReduceCell

    kinds = {ReduceCell: "reduce", CopyCell: "copy", GatherCell: "gather"}
    return [kinds.get(type(c), type(c).__name__) for _, c in cell.cells_and_names()
            if type(c).__module__ == ReduceCell.__module__]


def _counted(cell) -> str:
    """The generated file's line counting what the cell runs (operators, programs, collectives)."""
    return next(line for line in Path(cell.source_file).read_text().splitlines() if "Bridged operators" in line)


def _trained_beside_whole(cell, split_loss: nn.Module, whole_loss: nn.Module, ids: torch.Tensor,
                          steps: int = 3) -> tuple[list, dict]:
    """`steps` SGD steps (lr 0.5) of the split port `cell` (of `split_loss`) on this rank and of the whole model in
    torch: each step's [port's, torch's] loss, and after the first step each trainable parameter's gradient against
    this rank's slice of the whole model's (largest difference over the largest value)."""
    import mindspore as ms

    cell.set_train(True)
    params = cell.trainable_params()
    grad_fn, optimizer = ms.value_and_grad(cell, None, params), ms.nn.SGD(params, learning_rate=0.5)
    torch_optimizer = torch.optim.SGD([p for p in whole_loss.parameters() if p.requires_grad], lr=0.5)
    modules = dict(split_loss.named_modules())
    losses, gradient_errors = [], {}
    for step in range(steps):
        loss, grads = grad_fn(ms.Tensor(ids.numpy()))
        torch_optimizer.zero_grad()
        torch_loss = whole_loss(ids)
        torch_loss.backward()
        losses.append([float(loss.asnumpy()), float(torch_loss)])
        if step == 0:
            whole_grads = {n: p.grad for n, p in whole_loss.named_parameters() if p.requires_grad}
            for param, grad in zip(params, grads):
                owner, _, leaf = param.name.rpartition(".")
                theirs = _slice_of(whole_grads[param.name], modules[owner], leaf)
                ours = torch.from_numpy(grad.asnumpy())
                gradient_errors[param.name] = float((ours - theirs).abs().max() / (theirs.abs().max() + 1e-12))
        optimizer(grads)
        torch_optimizer.step()
    return losses, gradient_errors


def _gathered_error(state: dict, fresh: nn.Module, trained: nn.Module) -> float:
    """A gathered state_dict loaded (strictly: every key, every whole shape) by a fresh copy of the whole model,
    against the whole model trained in torch: the largest relative difference over its tensors."""
    fresh.load_state_dict(state)
    expected = trained.state_dict()
    return max(float((v - expected[k]).abs().max() / expected[k].abs().max()) for k, v in fresh.state_dict().items())


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
