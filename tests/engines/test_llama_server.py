"""llama.cpp's own ``llama-server`` judged against the real chat model's snapshot (SmolLM2-135M-Instruct), on loopback.

llama-server cannot score a given sequence, so genguard judges its own greedy decoding (regenerated): the snapshot's
prompt ids in, the generated ids and their pre-sampling top logprobs out (``/completion`` with ``n_probs``), the
prompt texts through its ``/tokenize`` and the conversations through its ``/apply-template``. The servers run the GGUF
files of the llama.cpp tests: llama.cpp's converter's F32 file with an f32 KV cache holds the float32 rule; its Q8_0
holds the int8 budget; the bug copies (a rope base edit: regression; a ``default`` pre-tokenizer, another chat
template: stale) are caught, each named, by ``genguard check-server`` and by ``pytest --genguard-server``.

Needs what the llama.cpp tests need, plus the llama-server executable ``.ci/llama-cpp-wheel`` builds beside the wheel
(``GENGUARD_LLAMA_SERVER`` names another); a missing executable is an error of these tests, never a skip.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_server
import pytest
from vllm_server import served_project

from pytest_genguard.core.budget import PRESETS
from pytest_genguard.core.compare import compare
from pytest_genguard.serving import Endpoint, record_server
from pytest_genguard.serving.check import CheckOptions, check_traces


@pytest.fixture(scope="module")
def urls(
    f32_gguf: Path, folder: Path, tmp_path_factory: pytest.TempPathFactory, genguard_engine: Any, edits: Any
) -> Iterator[dict[str, str]]:
    """One llama-server per file, started side by side: the converter's F32 (an f32 KV cache, flash attention off;
    and with flash attention on), its Q8_0 (llama-server's defaults: an f16 cache, flash attention on), and three bug
    copies of the F32 file."""
    work = tmp_path_factory.mktemp("llama-server")

    def copy(name: str, script: str, *args: str) -> Path:  # the run's shared copy (the other files edit it too)
        return edits(f32_gguf, script, *args)

    plain = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    # name -> (GGUF, KV cache type, flash attention: llama-server's default "auto" is on for the CPU)
    files: dict[str, tuple[Path, str, str]] = {
        "f32": (f32_gguf, "f32", "off"),
        "f32_fa": (f32_gguf, "f32", "auto"),
        "q8_0": (genguard_engine("llama_cpp", outtype="q8_0").convert(folder) / "model.gguf", "f16", "auto"),
        "rope": (copy("rope", "gguf_set_metadata", "llama.rope.freq_base", "10000"), "f32", "off"),
        "pre": (copy("pre", "gguf_new_metadata", "--pre-tokenizer", "default"), "f32", "off"),
        "template": (
            copy("template", "gguf_new_metadata", "--chat-template", plain + "{{ '<|im_start|>assistant\n' }}"),
            "f32",
            "off",
        ),
    }
    specs = {name: (gguf, kv, ("--flash-attn", flash)) for name, (gguf, kv, flash) in files.items()}
    with llama_server.side_by_side(work, specs) as running:
        yield running


def check(url: str, reference: Any, **options: Any) -> tuple[int, str]:
    out = io.StringIO()
    code = check_traces(Endpoint(url), [("smollm2.genguard", reference)], out=out, options=CheckOptions(**options))
    return code, out.getvalue()


def test_the_f32_server_holds_the_float32_rule_regenerated(urls: dict[str, str], reference: Any) -> None:
    run = record_server(Endpoint(urls["f32"]), reference)  # the server's API found by asking it (GET /props)
    assert run.mode == "regenerated"
    assert run.info.engine == "llama.cpp" and run.info.model == "f32"
    assert run.trace.environment["tokenizer_check"] == "prompt texts tokenized by the server: same ids"
    comparison = compare(reference, run.trace)
    assert comparison.ok, str(comparison)
    assert [len(p.steps) for p in run.trace.prompts] == [len(p.steps) for p in reference.prompts]
    code, text = check(urls["f32"], reference)
    assert code == 0, text
    assert "regenerated" in text.splitlines()[0]


def test_flash_attention_on_the_cpu_is_outside_the_float32_rule(urls: dict[str, str], reference: Any) -> None:
    # Negative control of the test above: llama-server's default flash attention (its CPU kernel rounds like an f16
    # KV cache: 5e-3 in a top-5 logprob) moves the gaps between a step's logprobs, which the rule judges at float32.
    code, text = check(urls["f32_fa"], reference)
    assert code == 1, text
    assert " - logprob (id " in text


def test_a_rope_base_edit_is_a_regression(urls: dict[str, str], reference: Any) -> None:
    # Negative control of the test above: the same file with llama.rope.freq_base 1e5 -> 1e4.
    code, text = check(urls["rope"], reference)
    assert code == 1, text
    assert "REGRESSION smollm2.genguard" in text


def test_a_default_pre_tokenizer_is_stale_naming_the_prompt(urls: dict[str, str], reference: Any) -> None:
    code, text = check(urls["pre"], reference)
    assert code == 3, text
    assert "the server's tokenizer (pre) differs from the snapshot's: prompt 2" in text


def test_another_embedded_chat_template_is_stale_naming_the_conversation(urls: dict[str, str], reference: Any) -> None:
    code, text = check(urls["template"], reference)
    assert code == 3, text
    assert "the server's chat template (template) renders conversation 0 otherwise" in text


def test_the_q8_0_server_holds_the_int8_budget_and_the_rope_bug_does_not(urls: dict[str, str], reference: Any) -> None:
    code, text = check(urls["q8_0"], reference, budget=PRESETS["int8"])
    assert code in (0, 4), text  # within; on lower bounds over the recorded top-k the proof may be out of reach
    assert "OUTSIDE" not in text
    code, text = check(urls["rope"], reference, budget=PRESETS["int8"])
    assert code == 1, text
    assert "OUTSIDE smollm2.genguard" in text


def test_pytest_genguard_server_judges_llama_server(urls: dict[str, str], reference: Any, tmp_path: Path) -> None:
    run = served_project(tmp_path / "project", reference.to_json())
    first = run("--snapshot-update")
    assert first.returncode == 0, first.stdout + first.stderr
    held = run("--genguard-server", urls["f32"])
    assert held.returncode == 0, held.stdout + held.stderr
    broken = run("--genguard-server", urls["rope"], "-vv")
    assert broken.returncode == 1, broken.stdout
    assert "on the server (--genguard-server " in broken.stdout and "): regression" in broken.stdout


def test_the_engine_reads_the_folder_the_build_script_writes(genguard_engine: Any) -> None:
    import re

    genguard_engine("llama_cpp")  # skips, naming the install command, without the extra

    from pytest_genguard.engines.llama_cpp import RECIPE, build_folder

    script = (Path(__file__).resolve().parents[2] / ".ci" / "llama-cpp-wheel").read_text(encoding="utf-8")
    found = re.search(r"^RECIPE=(\d+)", script, re.MULTILINE)
    assert found is not None and int(found.group(1)) == RECIPE
    assert build_folder().name.endswith(f"-recipe{RECIPE}")
