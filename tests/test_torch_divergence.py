"""bf.torch.divergence at model level: KL, top-1, perplexity, first layer and first greedy step apart.

The oracles are hand arithmetic (a module whose logits every device computes exactly, and an fp8 design that
must round a weight of 1 + 2^-5 to 1 and so flip the argmax), Python's ``math`` on those logits, torch's own
cross-entropy on the captured logits, and Hugging Face's ``generate`` for the float64 reference's tokens.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import blockfma as bf  # noqa: E402
from helpers import REPO  # noqa: E402

FP8 = dict(model=bf.device("H100").model("e4m3fn", "fp32"), name="fp8 (H100 e4m3)")


def flipper() -> torch.nn.Module:
    """ids -> logits [1 + 2^-5, 1 + 2^-6, 0, 0] at every position, exact in fp16 and every GPU's fp32 sums;
    an e4m3 design keeps 3 fraction bits of the weights: [1, 1 + 2^-6, 0, 0], so its argmax is 1, not 0."""
    net = torch.nn.Sequential(torch.nn.Embedding(4, 2), torch.nn.Linear(2, 4, bias=False)).half()
    with torch.no_grad():
        net[0].weight.fill_(1.0)
        net[1].weight.copy_(torch.tensor([[1 + 2**-5, 0.0], [1.0, 2**-6], [0.0, 0.0], [0.0, 0.0]]))
    return net


def row(div, device, against):
    return next(r for r in div.summary if r["device"] == device and r["against"] == against)


def softmax(z):
    e = [math.exp(v - max(z)) for v in z]
    return [v / sum(e) for v in e]


def test_a_device_that_flips_the_argmax_and_one_that_does_not():
    ids = torch.tensor([[0, 3, 1, 2]])
    div = bf.torch.divergence(flipper(), ids, devices=["H100", bf.torch.emulate(**FP8)], generate=3)
    assert div.outputs["fp8 (H100 e4m3)"]["(output)"].tolist() == [[[1.0, 1 + 2**-6, 0.0, 0.0]] * 4]
    exact = row(div, "H100", "fp64")
    assert (exact["KL"], exact["top-1"], exact["first layer apart"], exact["first step apart"]) == (0.0, 1.0, None, None)
    flip = row(div, "fp8 (H100 e4m3)", "fp64")
    assert (flip["top-1"], flip["first layer apart"], flip["first step apart"]) == (0.0, "1", 1)
    exact_logits, fp8_logits = [1 + 2**-5, 1 + 2**-6, 0.0, 0.0], [1.0, 1 + 2**-6, 0.0, 0.0]
    p, q = softmax(exact_logits), softmax(fp8_logits)  # KL(P_fp64 || P_fp8)
    assert flip["KL"] == pytest.approx(sum(a * math.log(a / b) for a, b in zip(p, q)), rel=1e-12)
    apart = row(div, "fp8 (H100 e4m3)", "H100")  # between devices: bits apart in the Linear, not the Embedding
    assert (apart["top-1"], apart["first layer apart"], apart["first step apart"]) == (0.0, "1", 1)
    assert div.tokens["fp64"].tolist() == [[0, 0, 0]] and div.tokens["fp8 (H100 e4m3)"].tolist() == [[1, 1, 1]]
    for label, logits in (("fp64", exact_logits), ("H100", exact_logits), ("fp8 (H100 e4m3)", fp8_logits)):
        nll = [-math.log(softmax(logits)[i]) for i in (3, 1, 2)]  # position t scores id t+1
        got = row(div, label, "fp64" if label != "fp64" else "-")["perplexity"]
        assert got == pytest.approx(math.exp(sum(nll) / 3), rel=1e-12)
    text = div.text()
    assert text.index("first step apart") < text.index("devices apart (ulps)")


def test_perplexity_against_torch_cross_entropy_and_a_device_against_itself():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16)).half()
    ids = torch.randint(0, 16, (2, 6))
    div = bf.torch.divergence(net, ids, devices=["MI300X", bf.torch.emulate("MI300X", name="again")], generate=2)
    for label in ("fp64", "MI300X"):
        logits = div.outputs[label]["(output)"].double()
        ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 16), ids[:, 1:].reshape(-1))
        assert row(div, label, "fp64" if label != "fp64" else "-")["perplexity"] == pytest.approx(
            math.exp(float(ce)), rel=1e-12)
    same = row(div, "again", "MI300X")
    assert (same["KL"], same["top-1"], same["first layer apart"], same["first step apart"]) == (0.0, 1.0, None, None)


def test_inputs_that_are_not_ids_skip_perplexity_and_say_so():
    net = torch.nn.Sequential(torch.nn.Linear(4, 3)).half()
    div = bf.torch.divergence(net, torch.ones(2, 4, dtype=torch.float16), devices="H100")
    assert row(div, "H100", "fp64")["perplexity"] is None and row(div, "H100", "fp64")["top-1"] == 1.0
    assert "perplexity: not computed, the first input is not a tensor of integer token ids" in div.text()
    assert "first step apart" not in div.text()


@pytest.mark.parametrize("ids, match", [
    (torch.tensor([[1, -1]]), r"inputs=<token id -1>: is outside the vocabulary .*pass ids from 0 to 3"),
    (torch.tensor([[4, 0]]), r"inputs=<token id 4>: is outside the vocabulary \(Sequential's embedding has 4 rows\)"),
])
def test_token_ids_outside_the_vocabulary(ids, match):
    with pytest.raises(ValueError, match=match) as e:
        bf.torch.divergence(flipper(), ids, devices="H100")
    assert "\n" not in str(e.value)


def test_ids_beyond_the_logits_vocabulary_without_an_embedding():
    class OneHot(torch.nn.Module):  # ids -> logits over 3 classes, no nn.Embedding to read a vocabulary from
        def forward(self, ids):
            return torch.nn.functional.one_hot(ids, 5)[..., :3].half()

    with pytest.raises(ValueError, match=r"token id 3>: is outside the vocabulary \(the model's logits have 3 "):
        bf.torch.divergence(OneHot(), torch.tensor([[0, 3]]), devices="H100")


@pytest.mark.parametrize("generate, match", [
    (-1, r"generate=-1: must be an integer from 0 to 4096"),
    (5000, r"generate=5000: must be an integer from 0 to 4096"),
    (2.0, r"generate=2.0: must be an integer"),
    (True, r"generate=True: must be an integer"),
])
def test_generate_must_be_a_bounded_count(generate, match):
    with pytest.raises(ValueError, match=match):
        bf.torch.divergence(flipper(), torch.tensor([[0, 1]]), devices="H100", generate=generate)


def test_generate_needs_ids_alone_and_logits():
    with pytest.raises(ValueError, match=r"generate=2: decodes from token ids alone, and inputs is not one tensor "
                                         r"of integer ids; pass inputs=ids"):
        bf.torch.divergence(torch.nn.Linear(2, 2).half(), torch.ones(1, 2, dtype=torch.float16), "H100", generate=2)
    with pytest.raises(ValueError, match=r"generate=2: decodes from token ids alone"):
        bf.torch.divergence(flipper(), (torch.tensor([[0, 1]]), None), "H100", generate=2)
    pooled = torch.nn.Sequential(torch.nn.Embedding(4, 2), torch.nn.Flatten()).half()
    with pytest.raises(ValueError, match=r"generate=2: needs logits of shape \(1, 3\) \+ \(vocab,\), and the model "
                                         r"returns Tensor \(1, 6\); pass a model that maps ids to logits"):
        bf.torch.divergence(pooled, torch.tensor([[0, 1, 2]]), "H100", generate=2)


# --- Hugging Face transformers: tiny models built from a config (random weights, seeded), no downloads -----
def tiny(kind: str, dtype: torch.dtype):
    tf = pytest.importorskip("transformers", reason="needs Hugging Face transformers (make torch installs it)")
    torch.manual_seed(0)
    common = dict(vocab_size=96, initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if kind == "gpt2":
        config = tf.GPT2Config(n_positions=32, n_embd=32, n_layer=2, n_head=2, **common)
        return tf.GPT2LMHeadModel(config).eval().to(dtype)
    config = tf.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                            num_key_value_heads=1, max_position_embeddings=32, **common)
    return tf.LlamaForCausalLM(config).eval().to(dtype)


@pytest.mark.parametrize("kind, dtype", [("gpt2", torch.float16), ("llama", torch.bfloat16)])
def test_transformers_models_as_they_are(kind, dtype):
    model = tiny(kind, dtype)
    ids = torch.randint(0, 96, (2, 6), generator=torch.Generator().manual_seed(1))
    div = bf.torch.divergence(model, ids, devices=["H100", "MI300X"], generate=4)
    assert [(r["device"], r["against"]) for r in div.summary] == [("fp64", "-"), ("H100", "fp64"),
                                                                  ("MI300X", "fp64"), ("MI300X", "H100")]
    ref = div.outputs["fp64"]["(output)"]  # the ModelOutput's .logits
    assert ref.shape == (2, 6, 96) and ref.dtype == torch.float64 and div.outputs["H100"]["(output)"].dtype == dtype
    for label in ("H100", "MI300X"):  # KL and top-1 against numpy's float64 on the captured logits
        lp, lq = ref.numpy(), div.outputs[label]["(output)"].double().numpy()
        lp, lq = (z - z.max(-1, keepdims=True) for z in (lp, lq))
        lp, lq = (z - np.log(np.exp(z).sum(-1, keepdims=True)) for z in (lp, lq))
        r = row(div, label, "fp64")
        assert r["KL"] == pytest.approx(float((np.exp(lp) * (lp - lq)).sum(-1).mean()), rel=1e-9)
        assert r["top-1"] == float((lp.argmax(-1) == lq.argmax(-1)).mean())
        assert r["first layer apart"] is not None  # low-precision layers are never all within half an ulp
    reference = model.to(torch.float64).generate(ids, max_new_tokens=4, do_sample=False)
    assert torch.equal(div.tokens["fp64"], reference[:, 6:])
    assert div.tokens["H100"].shape == (2, 4)


def test_transformers_refusals():
    model = tiny("gpt2", torch.float16)
    with pytest.raises(ValueError, match=r"generate=40: with 2 input tokens exceeds the model's 32 positions; "
                                         r"pass generate=30"):
        bf.torch.divergence(model, torch.tensor([[1, 2]]), "H100", generate=40)
    with pytest.raises(ValueError, match=r"token id 96>: is outside the vocabulary \(GPT2LMHeadModel's embedding "
                                         r"has 96 rows\); pass ids from 0 to 95"):
        bf.torch.divergence(model, torch.tensor([[1, 96]]), "H100")
    with pytest.raises(ValueError, match=r"generate=3: needs a generation head, and GPT2Model has none"):
        bf.torch.divergence(model.transformer, torch.tensor([[1, 2]]), "H100", generate=3)


@pytest.mark.slow
@pytest.mark.parametrize("checkpoint", [False, True])
def test_example_prints_the_summary(checkpoint, tmp_path):  # 10-15 s each: importing transformers, 4 devices
    """The example's own tiny GPT-2, and the same model saved as a checkpoint folder with a word-level
    tokenizer: the path a downloaded checkpoint takes (from_pretrained, the prompt's tokens)."""
    tf = pytest.importorskip("transformers", reason="needs Hugging Face transformers (make torch installs it)")
    sys.path.insert(0, str(REPO / "examples"))
    try:
        from divergence_transformers import tiny_gpt2
    finally:
        sys.path.remove(str(REPO / "examples"))
    extra = []
    if checkpoint:
        import tokenizers

        tiny_gpt2().save_pretrained(tmp_path)
        words = {w: i for i, w in enumerate("[UNK] the accumulator of a tensor core keeps".split())}
        tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(words, unk_token="[UNK]"))
        tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
        tf.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
        extra = [str(tmp_path)]
    out = subprocess.run([sys.executable, str(REPO / "examples" / "divergence_transformers.py"), *extra,
                          "--generate", "3"], capture_output=True, text=True, timeout=300,
                         env={"PYTHONPATH": str(REPO / "src"), "PATH": "", "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("device ") and "fp8 (H100 e4m3)  fp64" in out.stdout
    seq = r"\[\d+, \d+, \d+\]"  # 3 greedy tokens: one prompt, or the two random sequences
    assert re.search(rf"^ +fp64: \[{seq}\]$" if checkpoint else rf"^ +fp64: \[{seq}, {seq}\]$", out.stdout, re.M)
    assert "first step apart" in out.stdout and "\nlayer " not in out.stdout  # the layers with --layers only


def test_nan_and_infinite_logits():
    """A NaN the reference lacks marks the layer apart (ulps gives NaN, never "within half an ulp"); masked
    logits (-inf) in both give KL exactly 0, a device masking what the reference keeps gives KL = inf."""
    from blockfma.torch.divergence import _first_layer, _kl

    ref = {"a": torch.tensor([1.0, 2.0], dtype=torch.float64), "b": torch.tensor([3.0], dtype=torch.float64)}
    dev = {"a": torch.tensor([1.0, float("nan")], dtype=torch.float16), "b": torch.tensor([3.0], dtype=torch.float16)}
    assert _first_layer({"fp64": ref, "X": dev}, "X", "fp64") == "a"
    masked = torch.tensor([[0.5, float("-inf"), 1.0]])
    assert _kl(masked, masked.half()) == 0.0
    assert _kl(torch.tensor([[0.5, 0.25, 1.0]]), masked) == float("inf")


def test_ops_emulation_does_not_cover_are_listed():
    """A conv1d runs natively under every device: the notes name it, so a reader knows it is not compared."""
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv1d(2, 2, 3)
            self.lin = torch.nn.Linear(6, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.lin(self.conv(x))

    torch.manual_seed(0)
    div = bf.torch.divergence(Net().half(), torch.randn(1, 2, 8).half(), ["H100", "MI300X"])
    assert any(n.startswith("not emulated") and "conv1d x2" in n for n in div.notes), div.notes
    assert "linear" not in " ".join(div.notes)
