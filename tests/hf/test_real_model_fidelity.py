"""The fidelity presets on each real family the project has, one bug list for all (no family in the rules): every
correct copy holds the preset of its precision, relative to genguard's own conversion of the same weights
(`calibrate`), and every bug of the list is outside it, or under that precision's floor (the copy's own rounding is
larger than the bug) and then a regression by the float32 rule. Under the fixed limits (measured on tiny models) every
correct copy failed.

The families: SmolLM2-135M-Instruct (Llama: every layer global, plain RMS norms) and Gemma 3 270M (5 of every 6
layers a 512-token sliding window, the rest global with their own rope base; (1 + w) RMS norms; 262,144 tokens). A bug
is said once, in the family's own terms: "the global layers' rope base / 10" is every layer's on SmolLM2 and the
global layers' on Gemma; "a norm scale" scales the norm's effective weight, (1 + w) on Gemma. A bug that has nothing
to act on in a family (SmolLM2 has no bias, no norm offset and no window) is not made for it, and
`test_each_family_has_what_its_bug_list_says` holds that. Each family's reference reaches past its sliding window, where
the positional bugs live (Gemma: three short prompts, and one of 808 tokens recorded apart: a batch pads to its
longest prompt). Needs the models (README's set-up; .ci/run installs them and checks they load, so these never skip
there)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import real_model_support as rm
import torch
from run_shared import once_per_run

import pytest_genguard as gg
from pytest_genguard.core.budget import PRESETS, FidelityReport, traces_report, worst_status
from pytest_genguard.core.verdict import Verdict
from pytest_genguard.hf.fidelity import judged_logits
from pytest_genguard.hf.reference_copies import reference_copy, round_to_nearest
from pytest_genguard.hf.teacher import forced_logits

PRECISIONS = ("bf16", "int8", "int4")  # fp16 is the bf16 story at 100x less error, and 4x slower on a CPU
GEMMA3_SHORT = ("The capital of France is", "def fibonacci(n):", "The history of the Roman Empire")
GEMMA3_LONG = (
    "Remember this: the password is 'blue heron'.\n"
    + " ".join(f"Line {i}: nothing to note here." for i in range(1, 81))
    + "\nThe password is '"
)


@dataclass(frozen=True)
class Family:
    """A real family as its bug list needs it: where its float32 folder is, its reference prompts (groups recorded
    apart), the layer a local bug edits (a middle one), and what it has for the bugs to act on."""

    name: str
    folder: Callable[[], Path]
    groups: tuple[tuple[Any, ...], ...]
    steps: int
    layer: int
    precisions: tuple[str, ...]
    """What its calibration measures: the presets its cases are judged by."""
    norm_offset: float
    """What a norm adds to its weight (Gemma's (1 + w): 1)."""
    window: int | None


FAMILIES = {
    "smollm2": Family("smollm2", gg.smollm2_folder, (tuple(rm.PROMPTS),), rm.MAX_NEW_TOKENS, 10, PRECISIONS, 0.0, None),
    "gemma3": Family("gemma3", gg.gemma3_folder, (GEMMA3_SHORT, (GEMMA3_LONG,)), 16, 9, ("bf16", "int8"), 1.0, 512),
}


@dataclass
class Subject:
    family: Family
    model: Any
    tokenizer: Any
    references: list[gg.GenerationTrace]


@pytest.fixture(scope="module")
def subjects(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Subject]:
    """Each family's subject, made when a test first asks for it and kept for the module (pytest would make an
    indirectly parametrized module fixture again for every parameter set: a model load per test)."""
    return {}


@pytest.fixture
def subject(
    request: pytest.FixtureRequest, subjects: dict[str, Subject], tmp_path_factory: pytest.TempPathFactory
) -> Subject:
    """The family's float32 model and its references with their calibration: made once per run, shared by
    pytest-xdist workers (a file under their common temporary folder, written under a lock)."""
    family = FAMILIES[request.param]
    if family.name in subjects:
        return subjects[family.name]
    folder = rm.installed_or_skip(family.folder)
    torch.set_num_threads(1)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)

    def reference(group: tuple[Any, ...]) -> gg.GenerationTrace:
        def make() -> str:
            trace = gg.record(model, tokenizer, list(group), max_new_tokens=family.steps, top_k=rm.TOP_K)
            return gg.calibrate(model, tokenizer, trace, family.precisions).to_json()

        # (the run's own folder: without xdist the basetemp's parent holds every earlier run's: a stale one was read)
        name = f"{family.name}-reference-{family.groups.index(group)}.json"
        return gg.GenerationTrace.from_json(once_per_run(tmp_path_factory, name, make))

    subjects[family.name] = Subject(family, model, tokenizer, [reference(group) for group in family.groups])
    return subjects[family.name]


# ---- the copies and the bugs, each made from the float32 model (and its folder, where a config changes)


def norm_of(model: Any, family: Family) -> Any:
    return model.model.layers[family.layer].post_attention_layernorm


def norm_scaled(factor: float, dtype: torch.dtype = torch.bfloat16) -> Callable[[Subject], Any]:
    """One post-attention norm's effective scale (weight + the family's offset) times `factor`, in `dtype`."""

    @torch.no_grad()
    def make(s: Subject) -> Any:
        out = copy.deepcopy(s.model)
        norm_of(out, s.family).weight.mul_(factor).add_((factor - 1.0) * s.family.norm_offset)
        return out.to(dtype)

    return make


@torch.no_grad()
def offset_dropped(s: Subject) -> Any:
    """Every additive term of one layer dropped, in bf16: its linear layers' biases and its norms' offset (a converter
    that forgets Gemma's (1 + w) on the norms Gemma 3 added, q_norm and k_norm, drops it from those)."""
    out = copy.deepcopy(s.model)
    layer = out.model.layers[s.family.layer]
    changed = 0
    for module in layer.modules():
        if isinstance(module, torch.nn.Linear) and module.bias is not None:
            module.bias.zero_()
            changed += 1
        elif type(module).__name__.endswith("RMSNorm"):
            module.weight.sub_(s.family.norm_offset)  # (offset + w) -> w
            changed += 1
    assert changed, f"{s.family.name}: layer {s.family.layer} has no bias and no norm to drop an offset from"
    return out.to(torch.bfloat16)


def reloaded(edit: Callable[[Any], None], dtype: torch.dtype = torch.bfloat16) -> Callable[[Subject], Any]:
    """The family's folder loaded with its config edited by `edit` (rope, window and epsilon live in the config)."""

    def make(s: Subject) -> Any:
        from transformers import AutoConfig, AutoModelForCausalLM

        folder = s.family.folder()
        config = AutoConfig.from_pretrained(folder)
        edit(config)
        return AutoModelForCausalLM.from_pretrained(folder, config=config, dtype=dtype).eval()

    return make


def eps_1e_2(config: Any) -> None:
    config.rms_norm_eps = 1e-2


def global_rope_by_10(config: Any) -> None:
    """The rope base of the layers that attend over the whole context, divided by 10: 5.x Gemma's per layer type,
    a single base elsewhere (and 4.x Gemma's `rope_theta` is its global layers')."""
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, dict) and isinstance(params.get("full_attention"), dict):
        params["full_attention"]["rope_theta"] /= 10
    elif isinstance(params, dict) and "rope_theta" in params:
        params["rope_theta"] /= 10
    else:
        config.rope_theta /= 10


def window_halved(config: Any) -> None:
    config.sliding_window //= 2


@torch.no_grad()
def down_proj_int4_per_tensor(s: Subject) -> Any:
    """int8, but one layer's down_proj in int4 with one scale for the whole tensor (a layer the converter missed)."""
    out = reference_copy(s.model, "int8")
    weight = s.model.model.layers[s.family.layer].mlp.down_proj.weight
    codes, scale = round_to_nearest(weight.reshape(1, -1), 4, None)
    out.model.layers[s.family.layer].mlp.down_proj.weight.copy_((codes * scale).reshape(weight.shape))
    return out


def dynamic_int8(s: Subject) -> Any:
    return torch.ao.quantization.quantize_dynamic(copy.deepcopy(s.model), {torch.nn.Linear}, dtype=torch.qint8)


def torchao_int8(s: Subject) -> Any:
    from torchao.quantization import Int8WeightOnlyConfig
    from transformers import AutoModelForCausalLM, TorchAoConfig

    config = TorchAoConfig(Int8WeightOnlyConfig())
    return AutoModelForCausalLM.from_pretrained(s.family.folder(), quantization_config=config, dtype=torch.float32)


def quanto_int8(s: Subject) -> Any:
    from transformers import AutoModelForCausalLM, QuantoConfig

    config = QuantoConfig(weights="int8")
    return AutoModelForCausalLM.from_pretrained(s.family.folder(), quantization_config=config, dtype=torch.float32)


@dataclass(frozen=True)
class Case:
    name: str
    preset: str
    make: Callable[[Subject], Any]
    caught: dict[str, str]
    """family -> "no" (a correct copy: within its preset), "preset" (outside it) or "float32" (at or under the
    precision's floor, where its preset proves nothing either way: its float32 copy is a regression by the float32
    rule); a family it is not made for is absent."""
    package: str | None = None
    float32: Callable[[Subject], Any] | None = None
    """The bug in float32, for a family where the preset cannot see it."""


BOTH = ("smollm2", "gemma3")
CAUGHT = dict.fromkeys(BOTH, "preset")
# Correct copies: on Gemma only torchao's, since the others are genguard's own conversions there (1.00x by
# construction: optimum-quanto's int8 is round-to-nearest per channel, as on SmolLM2) and would cost 20 s for nothing.
CASES = [
    Case("bf16 cast", "bf16", lambda s: copy.deepcopy(s.model).to(torch.bfloat16), {"smollm2": "no"}),
    Case("torchao int8 weight-only", "int8", torchao_int8, dict.fromkeys(BOTH, "no"), "torchao"),
    Case("optimum-quanto int8", "int8", quanto_int8, {"smollm2": "no"}, "optimum.quanto"),
    Case("round-to-nearest int4 groups of 32", "int4", lambda s: reference_copy(s.model, "int4"), {"smollm2": "no"}),
    # the bug list, the same for every family
    Case(
        "bf16 with one post-attention norm x1.05",
        "bf16",
        norm_scaled(1.05),
        {"smollm2": "preset", "gemma3": "float32"},
        float32=norm_scaled(1.05, torch.float32),
    ),
    Case("bf16 with one post-attention norm x1.25", "bf16", norm_scaled(1.25), CAUGHT),
    Case("bf16 with rms eps -> 1e-2", "bf16", reloaded(eps_1e_2), CAUGHT),
    Case("bf16 with the global layers' rope base / 10", "bf16", reloaded(global_rope_by_10), CAUGHT),
    Case("bf16 with one layer's biases and norm offsets dropped", "bf16", offset_dropped, {"gemma3": "preset"}),
    Case("bf16 with the sliding window halved", "bf16", reloaded(window_halved), {"gemma3": "preset"}),
    Case("int8 with one down_proj int4 per tensor", "int8", down_proj_int4_per_tensor, CAUGHT),
    Case("torch quantize_dynamic int8 (per tensor)", "int8", dynamic_int8, CAUGHT),
]
# family first: the module-scoped model is loaded once per family and worker
PAIRS = [pytest.param(f, case, id=f"{f}-{case.name}") for f in BOTH for case in CASES if f in case.caught]


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize(("subject", "case"), PAIRS, indirect=["subject"])
def test_each_copy_is_judged_by_the_preset_of_its_precision(subject: Subject, case: Case) -> None:
    if case.package is not None:
        pytest.importorskip(case.package, reason=f"{case.name} needs {case.package}: pip install -e '.[quant]'")
    caught = case.caught[subject.family.name]
    if caught == "float32":  # at or under the floor of its precision, which cannot prove it either way
        assert case.float32 is not None
        float32 = case.float32(subject)
        for reference in subject.references:
            comparison = gg.verify(float32, subject.tokenizer, reference)
            assert comparison.verdict is Verdict.REGRESSION, f"{case.name} in float32: {comparison}"
        return
    candidate = case.make(subject)
    config = subject.model.config
    exact, bounded = [], []
    for reference in subject.references:
        # fidelity() without and with the reference model, from one teacher-forced pass of the candidate (a bf16 pass
        # of SmolLM2 costs 23 s on this CPU; fidelity() is forced_logits, then judged_logits)
        forced = forced_logits(candidate, subject.tokenizer, reference)
        report = judged_logits(forced, subject.tokenizer, reference, budget=case.preset, config=config)
        assert report.exact is False  # no reference model: the KLD is the bound from the trace's top-5 ...
        # (the long probe is left out: it is judged in tests/hf/test_long_probe.py and tests/engines, and here it
        # would read 2,048 tokens through both models for every case)
        one = judged_logits(
            forced, subject.tokenizer, reference, budget=case.preset, reference_model=subject.model, config=config
        )
        assert "relative to the reference model's own" in str(one)  # ... and with it, exact
        exact.append(one)
        bounded.append(report)
        # The fixed limits of the tiny models: every correct copy of these models failed them (issue 38).
        fixed = FidelityReport(one.steps, PRESETS[case.preset].calibrated(None))
        assert "fixed limits" in str(fixed)
        if caught == "no":
            assert not fixed.holds, str(fixed)
    status = "outside" if caught == "preset" else "within"
    assert worst_status([r.status for r in exact]) == status, "\n\n".join(map(str, exact))
    # From the stored traces alone, like for like: the candidate's bounds over the reference's top-5 against the
    # bounds of the model's own conversion measured the same way (calibrate() stores both).
    assert worst_status([r.status for r in bounded]) == status, "\n\n".join(map(str, bounded))


@pytest.mark.parametrize("subject", list(FAMILIES), indirect=True)
def test_each_family_has_what_its_bug_list_says(subject: Subject) -> None:
    """The bug list's premises, held against the loaded model: the offset its norms add, its biases, its window
    (a bug not made for a family has nothing to act on there)."""
    from pytest_genguard.hf.long_probe import window_and_context

    family, model = subject.family, subject.model
    norm = norm_of(model, family)
    with torch.no_grad():
        ones = torch.ones(1, model.config.hidden_size)
        epsilon = getattr(norm, "variance_epsilon", None) or norm.eps
        scale = norm(ones).reshape(-1) * (1 + epsilon) ** 0.5
    assert torch.allclose(scale - norm.weight, torch.full_like(scale, family.norm_offset), atol=1e-5)
    biases = [name for name, _ in model.named_parameters() if name.endswith(".bias")]
    assert biases == []  # neither family has one: "a dropped bias" drops Gemma's norm offsets
    assert window_and_context(model.config)[0] == family.window
    applies = {case.name for case in CASES if family.name in case.caught}
    assert ("bf16 with the sliding window halved" in applies) is (family.window is not None)
    assert ("bf16 with one layer's biases and norm offsets dropped" in applies) is (family.norm_offset != 0)


@pytest.mark.parametrize("subject", ["smollm2"], indirect=True)
def test_the_calibration_travels_with_the_trace_and_judges_traces(subject: Subject) -> None:
    """A server or GGUF check has no reference model: the stored figures set its limits. A bf16 copy's own trace
    holds the bf16 budget against the float32 reference trace; the eps bug's trace is outside it."""
    import json

    (reference,) = subject.references
    again = gg.GenerationTrace.from_json(reference.to_json())
    assert again.calibration == reference.calibration
    assert set(json.loads(reference.to_json())["calibration"]) >= {"bf16.kld_mean", "int8.kld_p99", "int4.kld_mean"}

    def trace_of(candidate: Any) -> gg.GenerationTrace:
        return gg.record(candidate, subject.tokenizer, rm.PROMPTS, max_new_tokens=rm.MAX_NEW_TOKENS, top_k=rm.TOP_K)

    good = traces_report(reference, trace_of(copy.deepcopy(subject.model).to(torch.bfloat16)), PRESETS["bf16"])
    assert good.holds, str(good)
    bad = traces_report(reference, trace_of(reloaded(eps_1e_2)(subject)), PRESETS["bf16"])
    assert not bad.holds, str(bad)
