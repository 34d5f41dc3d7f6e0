"""The port never changes the user's module, not even while it traces. What a port changes to trace a module (its
training flag, forward with the fixed keyword values, a stack of layers cut to two and its configuration's count,
torch.export's own swap of parameters for fake tensors) lands on a structural copy sharing the module's tensors
(aot_ops/_port/trace/module_copy.py). Checked from a second thread that samples the module while the ports run."""
from __future__ import annotations

import threading

import torch
import transformers

import aot_ops
from aot_ops._port.lm.kv_cache import port_lm


def snapshot(model: torch.nn.Module) -> tuple:
    """What another user of the module sees of it."""
    return (tuple(m.training for m in model.modules()), "forward" in vars(model), len(model.model.layers),
            model.config.num_hidden_layers,
            tuple((name, type(p).__name__, p.data_ptr()) for name, p in model.named_parameters()),
            tuple((name, type(b).__name__, b.data_ptr()) for name, b in model.named_buffers()))


def test_another_thread_sees_the_module_as_it_was_while_it_is_ported():
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=50, max_position_embeddings=64)).train()
    before = snapshot(model)
    seen, stop = set(), threading.Event()

    def sample():
        while not stop.is_set():
            seen.add(snapshot(model))

    watcher = threading.Thread(target=sample)
    watcher.start()
    try:
        ids = torch.randint(0, 50, (1, 6), generator=torch.Generator().manual_seed(1))
        # training and evaluation graphs, a fixed keyword value; generation with the stack exported as two
        cell = aot_ops.from_torch(model, (), {"input_ids": ids, "use_cache": False})
        lm = port_lm(model, batch_size=1, max_length=16, fuse=False, jit=True, share_weights=False,
                     export_two_layers=True)
    finally:
        stop.set()
        watcher.join()
    assert seen == {before}
    assert snapshot(model) == before
    # the ports are of the module as it is: in training mode, and with all three layers
    assert cell.training and lm.cell.training is False
    assert {k for k in lm.cell.parameters_dict() if k.startswith("key_cache_")} == {f"key_cache_{k}" for k in range(3)}
