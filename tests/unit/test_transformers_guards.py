"""transformers' modules under trident.jit on the CPU: the guards Dynamo emits for them
(module attributes through `_modules`/`_parameters`, config objects, type dicts and MROs,
decorator closures, the attention-function registry, a KV cache's layers) are translated, so
the paths run natively, and match eager on fresh random inputs (the sweep behind this:
benchmarks/guard_sweep.py, benchmarks/results/latest/guard_sweep.md).

Skipped without transformers (it is not in the `test` extras).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch

import trident

tf = pytest.importorskip("transformers")


def _lm(attn="sdpa"):
    cfg = tf.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                         num_hidden_layers=1, max_position_embeddings=64,
                         attn_implementation=attn)
    torch.manual_seed(0)
    return tf.AutoModelForCausalLM.from_config(cfg).eval()


def _same(got, want):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor) and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want)
        for g, w in zip(got, want):
            _same(g, w)
    elif isinstance(want, dict):
        assert type(got) is type(want) and list(got) == list(want)
        for k in want:
            _same(got[k], want[k])
    elif isinstance(want, tf.Cache):
        assert type(got) is type(want) and len(got.layers) == len(want.layers)
        for g, w in zip(got.layers, want.layers):
            _same((g.keys, g.values), (w.keys, w.values))
    else:
        assert got == want


def _native(f):
    st = trident.stats(f)
    assert not st["eager_paths"] and st["fallback_reason"] is None, st
    return st


def _ids(b, s):
    return torch.randint(0, 64, (b, s))


def test_decoder_layer_closure_is_native_and_equals_eager(h):
    lm = _lm()
    layer, rot = lm.model.layers[0], lm.model.rotary_emb

    def decoder_layer(x, p):
        return layer(x, attention_mask=None, position_embeddings=rot(x, p), position_ids=p)

    f = trident.jit(decoder_layer)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no "runs eagerly"
        for b, s in ((2, 5), (2, 5), (3, 7), (3, 7)):
            x, p = torch.randn(b, s, 32), torch.arange(s).expand(b, s)
            _same(f(x, p), decoder_layer(x, p))
    st = _native(f)
    assert sum(st["hits"]) >= 2


def test_module_attribute_and_config_changes_are_misses(h):
    """Guards on a module's float attribute (`attn.scaling`), a norm's epsilon and a config
    flag read through `_modules` and the config object: changing them after the capture
    gives eager's result, never the old version's."""
    lm = _lm()
    layer = lm.model.layers[0]

    def causal_lm(ids):
        return lm(input_ids=ids, use_cache=False).logits

    f = trident.jit(causal_lm)
    with torch.no_grad():
        ids = _ids(2, 5)
        _same(f(ids), causal_lm(ids))
        layer.self_attn.scaling = 0.5
        ids = _ids(2, 5)
        _same(f(ids), causal_lm(ids))
        layer.input_layernorm.variance_epsilon = 0.5
        ids = _ids(2, 5)
        _same(f(ids), causal_lm(ids))
        lm.config.use_cache = False  # read only when use_cache is None: no change of result
        ids = _ids(2, 5)
        _same(f(ids), causal_lm(ids))
    st = _native(f)
    assert st["versions"] >= 3, st


def test_decode_step_on_a_dynamic_cache_argument_is_native(h):
    """One decode step with a prefilled DynamicCache argument: the cache's layers, lengths
    and tensors are guarded; the cache update (attribute stores on the argument's objects) is
    replayed, so the returned cache holds eager's keys and values."""
    lm = _lm()

    def prefilled(b, s):
        cache = tf.DynamicCache(config=lm.config)
        with torch.no_grad():
            lm(input_ids=_ids(b, s), past_key_values=cache, use_cache=True)
        return cache

    def decode_step(ids, cache):
        return lm(input_ids=ids, past_key_values=cache, use_cache=True)

    f = trident.jit(decode_step)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for b, s in ((2, 4), (2, 4), (2, 6)):
            cache, ids = prefilled(b, s), _ids(b, 1)
            want = decode_step(ids, copy.deepcopy(cache))
            got = f(ids, cache)
            _same(got.logits, want.logits)
            assert got.past_key_values is cache
            _same(cache, want.past_key_values)
    st = _native(f)
    assert sum(st["hits"]) >= 1, st


def test_eager_attention_with_a_padding_mask_is_native(h):
    lm = _lm("eager")

    def causal_lm(ids, mask):
        return lm(input_ids=ids, attention_mask=mask, use_cache=False)

    f = trident.jit(causal_lm)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for pad in (1, 2, 1):
            ids, mask = _ids(2, 6), torch.ones(2, 6, dtype=torch.long)
            mask[0, :pad] = 0
            _same(f(ids, mask), causal_lm(ids, mask))
    _native(f)


def test_a_new_dynamic_cache_returned_runs_that_path_eagerly(h, record_warnings):
    """use_cache=True without a cache returns a new DynamicCache, which Trident does not
    rebuild (only dataclasses are): that path runs eagerly, with one warning and eager's
    result; its guards are native (an eager version, not a remembered key)."""
    lm = _lm()

    def causal_lm(ids):
        return lm(input_ids=ids, use_cache=True)

    f = trident.jit(causal_lm)
    with torch.no_grad(), record_warnings() as rec:
        for _ in range(3):
            ids = _ids(2, 5)
            _same(f(ids), causal_lm(ids))
    warns = h.runtime_warnings(rec)
    assert len(warns) == 1 and "DynamicCache" in str(warns[0].message)
    st = trident.stats(f)
    assert [e["version"] for e in st["eager_paths"]] == [0], st["eager_paths"]
    assert sum(st["hits"]) == 2, st


def test_model_output_argument_items_are_native(h):
    """A function of the model's output object (a ModelOutput: an OrderedDict subclass with
    its own __getitem__): Dynamo reads its items as `dict.__getitem__(out,
    list(dict.keys(out))[i])`, native since the sweep found it refused; a loss present or
    absent changes what `out[0]` is (the loss or the logits), and that is a miss with eager's
    result."""
    lm = _lm()

    def next_token(out):
        return out[0].sum(), out[-1][:, -1].argmax(-1), out["logits"].mean()

    def output(labels: bool):
        ids = _ids(2, 5)
        with torch.no_grad():
            return lm(input_ids=ids, labels=ids if labels else None, use_cache=False)

    f = trident.jit(next_token)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        for labels in (True, True, False, True):
            out = output(labels)
            _same(f(out), next_token(out))
    st = _native(f)
    assert st["versions"] == 2 and sum(st["hits"]) == 2, st
