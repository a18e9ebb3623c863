"""A model download refused because the hub is off (as in genguard gate's image) fails naming the model: transformers'
own error says only that the files are not cached; a model folder that is not there is named with the option that
mounts it into the gate's container. Another failure gets no such note."""

from __future__ import annotations

import pytest

DOWNLOAD = """
def test_loads_a_hub_model(tmp_path):
    from transformers import AutoConfig
    AutoConfig.from_pretrained("acme/not-here-7b", local_files_only=True, cache_dir=str(tmp_path))

def test_loads_a_folder_that_is_not_here():
    from transformers import AutoConfig
    AutoConfig.from_pretrained("/nonexistent/models/acme-7b")

def test_fails_otherwise():
    raise OSError("a disk error")
"""


def test_a_refused_download_names_the_model_and_the_gates_options(pytester: pytest.Pytester) -> None:
    pytest.importorskip("transformers")
    pytester.makepyfile(test_download=DOWNLOAD)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(failed=3)
    result.stdout.fnmatch_lines(
        [
            "*genguard: a model download, offline*",
            "The test tried to download the model 'acme/not-here-7b' from the Hugging Face Hub*",
        ]
    )
    assert "genguard gate --models DIR" in result.stdout.str() and "--hf-cache DIR" in result.stdout.str()
    # A folder that is not there (outside the project, not mounted) is named with the option that mounts it.
    assert "The test loads the folder '/nonexistent/models/acme-7b', which is not here" in result.stdout.str()
    assert "genguard gate --models /nonexistent/models/acme-7b" in result.stdout.str()
    # Negative control: the third failure has no such note.
    assert result.stdout.str().count("genguard: a model download, offline") == 2
