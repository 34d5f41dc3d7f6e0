"""Repeated layers traced once (aot_ops/_port/programs/layers_traced_once.py): the layers of an exported graph that are alike become
one shared `invoke_subgraph` region for AOTAutograd's trace, and the regions are taken out again before the
programs are read. Checked: which layers are found alike (a layer whose parameters are frozen is not like the
others), that the graph with regions and the graph put back compute what the exported graph computes, and that a
fused port made through regions trains exactly as torch."""
from __future__ import annotations

import copy
import operator

import pytest
import torch
import transformers
from torch.export import Dim

import aot_ops
from aot_ops._port.trace.export import Inputs, export
from aot_ops._port.trace.layers import is_pure
from aot_ops._port.programs.layers_traced_once import inline_regions, with_repeated_regions

INVOKE = torch.ops.higher_order.invoke_subgraph
CONFIG = dict(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=64)


class LanguageModelLoss(torch.nn.Module):
    """A small Llama's language-modelling loss (layers of one kind; random weights)."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**CONFIG))

    def forward(self, ids):
        return self.model(input_ids=ids, labels=ids, use_cache=False).loss


def ids(length, seed):
    return torch.randint(0, CONFIG["vocab_size"], (2, length), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def exported():
    """The training graph of the model with layer 1 frozen, exported as a fused port exports it."""
    model = LanguageModelLoss().train()
    for p in model.model.model.layers[1].parameters():
        p.requires_grad_(False)
    program = export(model, Inputs((ids(12, 0),)), ({1: Dim("seq", min=2, max=32)},), training=True,
                     rewrite_in_place=True).program
    placeholders = [n for n in program.graph.nodes if n.op == "placeholder"]
    specs = program.graph_signature.input_specs
    trainable = {k for k, p in model.named_parameters() if p.requires_grad}
    needs_grad = [s.target in trainable for s in specs]
    assert len(needs_grad) == len(placeholders)
    return model, program, needs_grad


def test_layers_alike_share_one_region_and_a_frozen_layer_keeps_its_nodes(exported):
    _, program, needs_grad = exported
    regions = with_repeated_regions(program.graph_module, needs_grad)
    calls = [n for n in regions.graph.nodes if n.target is INVOKE]
    # Layers 0, 2 and 3 train all their weights; layer 1 (frozen) differs in what needs a gradient.
    assert len(calls) == 3
    assert {n.args[0].target for n in calls} == {"aot_ops_repeated_0"}
    frozen = [n for n in regions.graph.nodes if n.op == "placeholder" and "layers_1_" in n.name]
    assert frozen and all(u.target is not INVOKE for p in frozen for u in p.users)
    # All four alike when every weight trains; none when there is one layer to compare.
    every = with_repeated_regions(program.graph_module, [True] * len(needs_grad))
    assert len([n for n in every.graph.nodes if n.target is INVOKE]) == 4
    single = _first_layer_only(copy.deepcopy(program.graph_module))
    assert with_repeated_regions(single, [True] * len(needs_grad)) is None


def _first_layer_only(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """The graph with the nn_module_stack of every layer but layer 0 forgotten: no two layers to compare."""
    for node in module.graph.nodes:
        stack = node.meta.get("nn_module_stack") or {}
        if any(".layers." in path and ".layers.0" not in path for path, _ in stack.values()):
            node.meta["nn_module_stack"] = {}
    return module


def test_the_graph_with_regions_and_put_back_computes_what_the_export_computes(exported):
    _, program, needs_grad = exported
    module = program.graph_module
    regions = with_repeated_regions(module, needs_grad)
    values = []
    for node in (n for n in module.graph.nodes if n.op == "placeholder"):
        fake = node.meta["val"]
        shape = [12 if not isinstance(s, int) else s for s in fake.shape]
        values.append(ids(12, 1) if not fake.is_floating_point() else torch.randn(shape, dtype=fake.dtype))
    expected = module(*values)
    torch.testing.assert_close(regions(*values), expected, rtol=0, atol=0)
    inlined = inline_regions(copy.deepcopy(regions))
    assert not [n for n in inlined.graph.nodes if n.target is INVOKE or n.op == "get_attr"]
    assert not [n for n in inlined.graph.nodes if n.target is operator.getitem and n.args[0].target is INVOKE]
    torch.testing.assert_close(inlined(*values), expected, rtol=0, atol=0)


def test_a_fused_port_traced_through_regions_trains_as_torch(exported, monkeypatch):
    """Losses and every gradient equal torch's at two sequence lengths; the trace went through the regions (the
    kept traces are off: a trace read from the build cache would make none)."""
    import mindspore as ms

    import aot_ops._port.programs.fused as fused_module

    model = exported[0]
    reference = copy.deepcopy(model)
    made = []

    def counted(module, needs_grad):
        made.append(with_repeated_regions(module, needs_grad))
        return made[-1]

    monkeypatch.setenv("AOT_OPS_PORT_CACHE", "0")
    monkeypatch.setattr(fused_module, "with_repeated_regions", counted)
    cell = aot_ops.from_torch(model, (ids(12, 0),), dynamic_shapes=({1: Dim("seq", min=2, max=32)},), fuse=True,
                              input_grads=False)
    assert made and made[0] is not None
    # The hooks the trace installs (torch_private.repeated_regions_traced_once) are gone once it ends.
    from aot_ops._core.torch_private import functorch_config
    assert "gen_schema" not in vars(INVOKE) and functorch_config().joint_custom_pass is None
    params = cell.trainable_params()
    step = ms.value_and_grad(cell, None, params)
    named = dict(reference.named_parameters())
    assert {p.name for p in params} == {k for k, p in named.items() if p.requires_grad}
    for length, seed in ((12, 2), (7, 3)):
        x = ids(length, seed)
        loss, grads = step(ms.Tensor(x.numpy()))
        reference.zero_grad()
        expected = reference(x)
        expected.backward()
        assert float(loss.asnumpy()) == pytest.approx(float(expected.detach()), rel=1e-6)
        for p, g in zip(params, grads):
            torch.testing.assert_close(torch.from_numpy(g.asnumpy()), named[p.name].grad, rtol=1e-5, atol=1e-6,
                                       msg=p.name)


def test_a_layer_drawing_random_numbers_is_traced_as_it_is():
    """Attention with a dropout probability draws random numbers (torch's random state would have to be threaded
    through a region); with 0.0, as in the models above, it does not."""
    graph = torch.fx.Graph()
    q, k, v = (graph.placeholder(name) for name in "qkv")
    attention = torch.ops.aten.scaled_dot_product_attention.default
    without = graph.call_function(attention, (q, k, v, None, 0.0))
    default = graph.call_function(attention, (q, k, v))
    dropping = graph.call_function(attention, (q, k, v, None, 0.1))
    by_keyword = graph.call_function(attention, (q, k, v), {"dropout_p": 0.2})
    bernoulli = graph.call_function(torch.ops.aten.bernoulli.p, (q, 0.5))
    assert [is_pure(n) for n in (without, default, dropping, by_keyword, bernoulli)] == [
        True, True, False, False, False]
    # a dropout draws only in training with p > 0 (an evaluation graph keeps its dropouts, read as the identity)
    dropouts = [graph.call_function(torch.ops.aten.dropout.default, (q, p, train))
                for p, train in ((0.1, True), (0.1, False), (0.0, True))]
    assert [is_pure(n) for n in dropouts] == [False, True, True]


def test_a_region_reading_an_earlier_kind_of_region_is_called_on_its_result():
    """Two kinds of alike layers, the first kind's last output read by the second kind's first layer: once the
    first kind's regions are calls, the second kind's region takes the call's result as its input (diffusers'
    AutoencoderKL, whose blocks of two kinds follow each other, failed with a KeyError before)."""
    class Block(torch.nn.Module):
        def __init__(self, width):
            super().__init__()
            self.norm, self.up, self.down = (torch.nn.LayerNorm(width), torch.nn.Linear(width, 2 * width),
                                             torch.nn.Linear(2 * width, width))

        def forward(self, x):
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x)))).tanh() * torch.sigmoid(x) * 0.5

    class Other(Block):
        def forward(self, x):
            return x - self.up(self.norm(x)).relu().sum(-1, keepdim=True) * torch.sigmoid(x).tanh() * 0.25

    class TwoKinds(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.ModuleList(Block(8) for _ in range(3))
            self.second = torch.nn.ModuleList(Other(8) for _ in range(2))

        def forward(self, x):
            for block in [*self.first, *self.second]:  # second.0 reads first.2's output
                x = block(x)
            return x.square().mean()

    torch.manual_seed(3)
    model, x = TwoKinds().train(), torch.randn(4, 8)
    program = export(model, Inputs((x,)), None, training=True, rewrite_in_place=True).program
    needs_grad = [s.kind.name == "PARAMETER" for s in program.graph_signature.input_specs]
    regions = with_repeated_regions(program.graph_module, needs_grad)
    calls = [n for n in regions.graph.nodes if n.target is INVOKE]
    # first.1 and first.2 alike (first.0 reads the input, which needs no gradient), second.0 and second.1
    assert sorted(n.args[1] for n in calls) == ["aot_ops_repeated_0"] * 2 + ["aot_ops_repeated_1"] * 2
    values = [program.state_dict[s.target] if s.target in program.state_dict else x
              for s in program.graph_signature.input_specs]
    torch.testing.assert_close(regions(*values), program.graph_module(*values), rtol=0, atol=0)
